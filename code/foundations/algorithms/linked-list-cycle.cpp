// listing: run
// listing: stdout=cycle ok: 860 lists checked
// Floyd 快慢指针求单链表环的入口与环长。main 对长度 1 到 40、每一种入口位置（以及无环）穷举验证。
#include <cassert>
#include <cstdio>
#include <vector>

// --8<-- [start:floyd]
struct ListNode {
    int val = 0;
    ListNode* next = nullptr;
};

// 返回环的入口，无环时返回 nullptr；时间 O(n)，额外空间 O(1)
ListNode* cycle_entry(ListNode* head) {
    ListNode* slow = head;
    ListNode* fast = head;
    while (fast != nullptr && fast->next != nullptr) {  // 两个条件都要查：fast 一次走两步
        slow = slow->next;
        fast = fast->next->next;
        if (slow == fast) {          // 相遇点一定在环内
            ListNode* p = head;      // a = k*c - b：一个从表头、一个从相遇点同速前进，在入口相遇
            while (p != slow) {
                p = p->next;
                slow = slow->next;
            }
            return p;
        }
    }
    return nullptr;
}

int cycle_length(const ListNode* entry) {
    int len = 1;
    for (const ListNode* p = entry->next; p != entry; p = p->next) ++len;
    return len;
}
// --8<-- [end:floyd]

int main() {
    assert(cycle_entry(nullptr) == nullptr);
    int checked = 0;
    for (int n = 1; n <= 40; ++n) {
        std::vector<ListNode> nodes(n);
        for (int i = 0; i < n; ++i) nodes[i].val = i;
        // entry == n 表示无环；否则最后一个节点指回 nodes[entry]
        for (int entry = 0; entry <= n; ++entry) {
            for (int i = 0; i + 1 < n; ++i) nodes[i].next = &nodes[i + 1];
            nodes[n - 1].next = entry < n ? &nodes[entry] : nullptr;
            ListNode* e = cycle_entry(&nodes[0]);
            if (entry == n) {
                assert(e == nullptr);
            } else {
                assert(e == &nodes[entry]);
                assert(cycle_length(e) == n - entry);
            }
            ++checked;
        }
    }
    std::printf("cycle ok: %d lists checked\n", checked);
    return 0;
}
