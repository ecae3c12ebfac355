// listing: run
// listing: stdout=naive: CAS succeeded on a recycled head; stack \[99\], node C lost\ntagged: CAS failed \(tag 3 != 6\), retry popped A; stack \[2\]\nstress ok: 2 threads x 20000 push/pop, 64 nodes conserved\natomic<shared_ptr> stack ok: lock_free=0
// 无锁栈（Treiber stack）的 ABA 问题，用一个确定的交错在单线程里逐步重现，再用带版本号的栈顶修正。
// 节点放在一个固定的数组里、用下标互相链接，弹出的节点回到空闲表被重新使用：无锁结构里常见的
// “类型稳定内存”（type-stable memory），它解决了释放后访问，却正是 ABA 发生的条件。
#include <atomic>
#include <cassert>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

// --8<-- [start:stack]
constexpr std::uint32_t kNil = 0xffffffffu;

struct Node {
    std::atomic<std::uint32_t> next{kNil};  // 必须是原子的：落后的 pop 可能在别人改写它时读它
    int value = 0;
};

// 栈顶是一个 64 位字：低 32 位是节点下标，高 32 位是版本号（tag）。tagged=false 时版本号恒为 0，
// 这就是只比较指针的朴素栈。
class IndexStack {
public:
    IndexStack(Node* nodes, bool tagged) : nodes_(nodes), tagged_(tagged) {}

    static std::uint32_t index(std::uint64_t h) { return static_cast<std::uint32_t>(h); }
    static std::uint32_t tag(std::uint64_t h) { return static_cast<std::uint32_t>(h >> 32); }
    std::uint64_t pack(std::uint32_t i, std::uint64_t old) const {
        std::uint64_t t = tagged_ ? tag(old) + 1u : 0u;  // 每次成功修改，版本号加一
        return (t << 32) | i;
    }

    void push(std::uint32_t i) {
        std::uint64_t old = head_.load(std::memory_order_relaxed);
        do {
            nodes_[i].next.store(index(old), std::memory_order_relaxed);
            // release：节点的 value 与 next 先写好，再发布；读到这个栈顶的 acquire 一定看得见它们
        } while (!head_.compare_exchange_weak(old, pack(i, old), std::memory_order_release,
                                              std::memory_order_relaxed));
    }

    // pop 拆成两步，演示时可以在两步之间插入“另一个线程”的操作。
    struct Attempt {
        std::uint64_t seen;        // 读到的栈顶（下标 + 版本号）
        std::uint32_t next;        // 当时栈顶节点的 next
    };
    bool begin_pop(Attempt& a) const {
        a.seen = head_.load(std::memory_order_acquire);
        if (index(a.seen) == kNil) return false;
        a.next = nodes_[index(a.seen)].next.load(std::memory_order_relaxed);
        return true;
    }
    // CAS 只在栈顶这个 64 位字与 a.seen 完全相同时成功；失败时 a.seen 被更新为当前值。
    bool finish_pop(Attempt& a) {
        return head_.compare_exchange_strong(a.seen, pack(a.next, a.seen), std::memory_order_acquire,
                                             std::memory_order_acquire);
    }

    std::uint32_t pop() {
        Attempt a;
        for (;;) {
            if (!begin_pop(a)) return kNil;
            if (finish_pop(a)) return index(a.seen);
        }
    }

    std::uint64_t head() const { return head_.load(); }

private:
    Node* nodes_;
    bool tagged_;
    std::atomic<std::uint64_t> head_{kNil};
};
// --8<-- [end:stack]

std::vector<int> contents(const IndexStack& s, const Node* nodes) {
    std::vector<int> out;
    for (std::uint32_t i = IndexStack::index(s.head()); i != kNil; i = nodes[i].next.load())
        out.push_back(nodes[i].value);
    return out;
}

// --8<-- [start:aba]
// 节点 A、B、C 的下标是 0、1、2，值与下标相同，初始栈为 A → B → C。
// 线程 1 开始 pop：读到栈顶 A 与 A.next = B，还没来得及 CAS 就被换下 CPU。
// 线程 2：弹出 A、弹出 B、把 A 压回（A 的内存被重新使用），B 被它拿去另作他用（改值、断开 next）。
// 线程 1 回来执行 CAS(栈顶 == A ? 改为 B)。
void aba_demo(bool tagged) {
    Node nodes[3];
    for (int i = 0; i < 3; ++i) nodes[i].value = i;
    IndexStack s(nodes, tagged);
    s.push(2);
    s.push(1);
    s.push(0);

    IndexStack::Attempt t1;
    bool ok = s.begin_pop(t1);                    // 线程 1：seen = A，next = B
    assert(ok && IndexStack::index(t1.seen) == 0 && t1.next == 1);

    std::uint32_t a = s.pop(), b = s.pop();       // 线程 2：弹出 A、B
    assert(a == 0 && b == 1);
    nodes[a].value = 3;
    s.push(a);                                    // 线程 2：A 被重新使用并压回，栈为 A → C
    nodes[b].value = 99;                          // 线程 2：B 归它所有了
    nodes[b].next.store(kNil);

    if (!tagged) {
        bool cas = s.finish_pop(t1);              // 线程 1：栈顶下标仍是 A，CAS 成功
        assert(cas);
        std::vector<int> left = contents(s, nodes);
        assert(left.size() == 1 && left[0] == 99);  // 栈顶成了线程 2 手里的 B，C 丢了
        std::printf("naive: CAS succeeded on a recycled head; stack [%d], node C lost\n", left[0]);
    } else {
        std::uint32_t stale_tag = IndexStack::tag(t1.seen);
        bool cas = s.finish_pop(t1);              // 版本号已从 3 变成 6（三次压栈、两次弹出、一次压栈）：CAS 失败，t1.seen 更新
        assert(!cas);
        std::uint32_t now_tag = IndexStack::tag(t1.seen);
        bool again = s.begin_pop(t1) && s.finish_pop(t1);  // 重试：读到新的 A 与 A.next = C
        assert(again && IndexStack::index(t1.seen) == 0 && nodes[0].value == 3);
        std::vector<int> left = contents(s, nodes);
        assert(left.size() == 1 && left[0] == 2);
        std::printf("tagged: CAS failed (tag %u != %u), retry popped A; stack [%d]\n", stale_tag, now_tag, left[0]);
    }
}
// --8<-- [end:aba]

// --8<-- [start:stress]
// 两个线程在同一对栈上反复“从空闲表取一个节点、写值、压栈、再弹出一个、放回空闲表”。
// 两个栈都带版本号；结束时每个节点必须恰好出现一次（在数据栈或空闲表里），数据栈里的值之和
// 必须等于所有还在栈里的节点写入的值之和。
void stress() {
    constexpr int kNodes = 64, kIters = 20000;
    std::vector<Node> nodes(kNodes);
    IndexStack free_list(nodes.data(), true), data(nodes.data(), true);
    for (std::uint32_t i = 0; i < kNodes; ++i) free_list.push(i);

    auto worker = [&](int id) {
        for (int k = 0; k < kIters; ++k) {
            std::uint32_t n = free_list.pop();
            if (n != kNil) {
                nodes[n].value = id * 1000000 + k;  // 普通写：由 push 的 release 发布
                data.push(n);
            }
            std::uint32_t m = data.pop();
            if (m != kNil) {
                assert(nodes[m].value >= 0);    // 由 pop 的 acquire 保证读到完整的值
                free_list.push(m);
            }
        }
    };
    std::thread t1(worker, 1), t2(worker, 2);
    t1.join();
    t2.join();

    std::vector<int> seen(kNodes, 0);
    for (auto* st : {&free_list, &data})
        for (std::uint32_t i = IndexStack::index(st->head()); i != kNil; i = nodes[i].next.load()) ++seen[i];
    for (int c : seen) assert(c == 1);
    std::printf("stress ok: 2 threads x %d push/pop, %d nodes conserved\n", kIters, kNodes);
}
// --8<-- [end:stress]

// --8<-- [start:shared-ptr]
// 引用计数解决回收：节点被 shared_ptr 持有，最后一个读者放手时才释放，也就不会被重用，ABA 随之消失。
// C++20 的 std::atomic<std::shared_ptr<T>> 让这种栈可以直接写出来；但 libstdc++ 用控制块指针里的
// 一个锁位实现它，is_lock_free() 为假，它是“正确的并发栈”，不是无锁栈。
template <typename T>
class SharedPtrStack {
    struct N {
        T value;
        std::shared_ptr<N> next;
    };
    std::atomic<std::shared_ptr<N>> head_;

public:
    void push(T v) {
        auto n = std::make_shared<N>(N{std::move(v), head_.load()});
        while (!head_.compare_exchange_weak(n->next, n)) {
        }
    }
    bool pop(T& out) {
        auto old = head_.load();
        while (old && !head_.compare_exchange_weak(old, old->next)) {
        }
        if (!old) return false;
        out = std::move(old->value);
        return true;
    }
    bool lock_free() const { return head_.is_lock_free(); }
};

void shared_ptr_stack() {
    SharedPtrStack<long> s;
    constexpr long kPer = 5000;
    std::atomic<long> popped_sum{0};
    auto worker = [&](long base) {
        for (long i = 1; i <= kPer; ++i) s.push(base + i);
        long v;
        for (long i = 0; i < kPer; ++i)
            if (s.pop(v)) popped_sum.fetch_add(v, std::memory_order_relaxed);
    };
    std::thread a(worker, 0), b(worker, kPer);
    a.join();
    b.join();
    long v, rest = 0;
    while (s.pop(v)) rest += v;
    assert(popped_sum.load() + rest == 2 * kPer * (2 * kPer + 1) / 2);  // 1..10000 各出现一次
    std::printf("atomic<shared_ptr> stack ok: lock_free=%d\n", static_cast<int>(s.lock_free()));
}
// --8<-- [end:shared-ptr]

int main() {
    aba_demo(false);
    aba_demo(true);
    stress();
    shared_ptr_stack();
    return 0;
}
