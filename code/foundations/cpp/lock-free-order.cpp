// listing: expect-sanitizer=thread
// listing: stdout=mpsc ok: 2 producers x 5000 nodes, consumer sum 50005000
// 无锁栈的内存序：push 的 CAS 为什么要 release，pop 读栈顶为什么要 acquire。
// 多生产者、单消费者（MPSC）：只有一个线程弹栈，而且弹出的节点不会再被压回，所以没有 ABA，
// 消费者也可以立即 delete 节点（生产者从不读节点的内容）。剩下的唯一问题是内存序。
// 默认编译：两端都用 relaxed。CAS 仍然原子，栈的结构也不会坏，但生产者对节点 value/next 的普通写
// 与消费者的读之间没有 happens-before，ThreadSanitizer 报告数据竞争（故意留下的错误）。
// 加 -DFIXED：push 成功时 release、pop 读栈顶时 acquire，TSan 无报告。
#include <atomic>
#include <cassert>
#include <cstdio>
#include <thread>

#ifdef FIXED
constexpr std::memory_order kPublish = std::memory_order_release;
constexpr std::memory_order kConsume = std::memory_order_acquire;
#else
constexpr std::memory_order kPublish = std::memory_order_relaxed;  // 错误：节点内容没有随指针一起发布
constexpr std::memory_order kConsume = std::memory_order_relaxed;
#endif

// --8<-- [start:mpsc]
struct Node {
    long value;
    Node* next;
};

std::atomic<Node*> head{nullptr};

void push(long v) {
    Node* n = new Node{v, head.load(std::memory_order_relaxed)};  // (1) 普通写：value、next
    // (2) 发布：release 保证 (1) 不会被排到这次成功的 CAS 之后；失败时什么也没发布，relaxed 即可
    while (!head.compare_exchange_weak(n->next, n, kPublish, std::memory_order_relaxed)) {
    }
}

// 只有一个消费者调用。
Node* pop() {
    Node* h = head.load(kConsume);  // (3) acquire：与写入这个值的 release CAS 同步
    // 失败时 h 被更新为新的栈顶，马上要读它的 next，所以失败序也要 acquire
    while (h != nullptr && !head.compare_exchange_weak(h, h->next, kConsume, kConsume)) {
    }
    return h;  // (4) 调用者读 h->value：由 (1) happens-before (4) 保证读到完整的值
}
// --8<-- [end:mpsc]

int main() {
    constexpr long kPer = 5000;
    auto producer = [](long base) {
        for (long i = 1; i <= kPer; ++i) push(base + i);
    };
    std::thread p1(producer, 0), p2(producer, kPer);
    long sum = 0, got = 0;
    while (got < 2 * kPer) {
        if (Node* n = pop()) {
            sum += n->value;
            delete n;  // 单消费者：没有别的线程会再读 n
            ++got;
        }
    }
    p1.join();
    p2.join();
    assert(head.load() == nullptr && sum == 2 * kPer * (2 * kPer + 1) / 2);
    std::printf("mpsc ok: 2 producers x %ld nodes, consumer sum %ld\n", kPer, sum);
    return 0;
}
