// listing: expect-sanitizer=address
// listing: stdout=hazard: A retired but kept \(1 pending, 0 freed\) while thread 1 reads it\nthread 1: CAS failed, next pop got 2; A freed once the hazard was cleared\nstress ok: 2 threads x 20000 pops, sum 800020000, every node freed
// 无锁栈的内存回收（memory reclamation）：弹出的节点什么时候才能 delete？
// 用一个确定的交错逐步重现：线程 1 读到栈顶 A，还没读 A->next；线程 2 弹出 A 并立即 delete。
// 默认编译：线程 1 接着读 A->next，AddressSanitizer 报告 heap-use-after-free（故意留下的错误）。
// 加 -DFIXED：风险指针（hazard pointer）。读者先公布“我正在读 A”，再确认 A 仍是栈顶；回收者只 delete
// 没有被任何风险指针指着的节点，A 推迟到线程 1 放手之后才释放。之后两个线程并发压栈弹栈，ASan 无报告。
#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

std::atomic<long> g_freed{0};

struct Node {
    int value;
    Node* next;  // 只在压栈前写一次；节点在被任何人读时都不会被释放，也就不会被重用
    ~Node() { g_freed.fetch_add(1, std::memory_order_relaxed); }
};

// --8<-- [start:hazard]
// 风险指针域：每个参与的线程占一个槽。槽里的指针表示“这个节点我正在读，别释放”。
constexpr int kSlots = 8;
std::atomic<void*> g_hazard[kSlots];
std::atomic<bool> g_slot_used[kSlots];
std::mutex g_orphans_mu;
std::vector<Node*> g_orphans;  // 线程退出时还被别人指着的节点，交给之后的扫描

class Participant {  // 实际代码里是 thread_local 的；这里显式传递，演示时一个线程可以扮演两个
public:
    Participant() {
        for (slot_ = 0; slot_ < kSlots; ++slot_) {
            bool expected = false;
            if (g_slot_used[slot_].compare_exchange_strong(expected, true)) return;
        }
        assert(false && "out of hazard slots");
    }
    ~Participant() {
        clear();
        scan();
        if (!retired_.empty()) {  // 还被别的线程指着：转交全局的孤儿表，由之后的某次扫描释放
            std::lock_guard<std::mutex> lk(g_orphans_mu);
            g_orphans.insert(g_orphans.end(), retired_.begin(), retired_.end());
        }
        g_slot_used[slot_].store(false);
    }
    std::atomic<void*>& hazard() { return g_hazard[slot_]; }
    void clear() { hazard().store(nullptr, std::memory_order_release); }

    // 节点已从栈上摘下、但可能还有读者：先放进待回收表，攒够了再扫描一次全部槽。
    void retire(Node* n) {
        retired_.push_back(n);
        if (retired_.size() >= 2 * kSlots) scan();
    }
    void scan() {
        {
            std::lock_guard<std::mutex> lk(g_orphans_mu);
            retired_.insert(retired_.end(), g_orphans.begin(), g_orphans.end());
            g_orphans.clear();
        }
        std::vector<void*> live;
        for (auto& h : g_hazard)
            if (void* p = h.load(std::memory_order_seq_cst)) live.push_back(p);
        std::sort(live.begin(), live.end());
        auto keep = std::partition(retired_.begin(), retired_.end(), [&](Node* n) {
            return std::binary_search(live.begin(), live.end(), static_cast<void*>(n));
        });
        for (auto it = keep; it != retired_.end(); ++it) delete *it;
        retired_.erase(keep, retired_.end());
    }
    std::size_t pending() const { return retired_.size(); }

private:
    int slot_ = 0;
    std::vector<Node*> retired_;
};
// --8<-- [end:hazard]

// --8<-- [start:stack]
class Stack {
public:
    void push(int v) {
        Node* n = new Node{v, head_.load(std::memory_order_relaxed)};
        while (!head_.compare_exchange_weak(n->next, n, std::memory_order_release, std::memory_order_relaxed)) {
        }
    }

    // 第一步：取得栈顶，并保证它在第二步读 next 时还活着。
    Node* protect_head(Participant& me) {
#ifdef FIXED
        Node* h = head_.load(std::memory_order_relaxed);
        for (;;) {
            me.hazard().store(h, std::memory_order_seq_cst);    // 先公布
            Node* again = head_.load(std::memory_order_seq_cst);  // 再确认它仍是栈顶
            if (again == h) return h;  // 此后回收者的扫描一定看得见这个风险指针
            h = again;
        }
#else
        (void)me;
        return head_.load(std::memory_order_acquire);  // 错误：读到的节点随时可能被别人 delete
#endif
    }

    // 第二步：读 next，CAS 摘下栈顶。失败（栈顶变了）返回 false，调用者从第一步重来。
    bool try_pop(Participant& me, Node* h, int& out) {
        if (h == nullptr) return false;
        Node* next = h->next;  // 默认编译下这里读已释放的内存
        if (!head_.compare_exchange_strong(h, next, std::memory_order_seq_cst)) return false;
        out = h->value;
        me.clear();
#ifdef FIXED
        me.retire(h);  // 可能还有别的读者：推迟释放
#else
        delete h;      // 错误：另一个线程可能刚读到 h、正要读 h->next
#endif
        return true;
    }

    bool pop(Participant& me, int& out) {
        for (;;) {
            Node* h = protect_head(me);
            if (h == nullptr) {
                me.clear();
                return false;
            }
            if (try_pop(me, h, out)) return true;
        }
    }

    ~Stack() {
        for (Node* n = head_.load(); n != nullptr;) {
            Node* next = n->next;
            delete n;
            n = next;
        }
    }

private:
    std::atomic<Node*> head_{nullptr};
};
// --8<-- [end:stack]

// --8<-- [start:interleaving]
void interleaving() {
    Stack s;
    s.push(3);
    s.push(2);
    s.push(1);  // 栈：A(1) → B(2) → C(3)
    Participant t1, t2;

    Node* a = s.protect_head(t1);  // 线程 1：读到栈顶 A，被换下 CPU
    int v = 0;
    bool popped = s.pop(t2, v);    // 线程 2：弹出 A；默认编译下立即 delete A
    assert(popped && v == 1);
#ifdef FIXED
    t2.scan();                     // 即使马上扫描，A 也因线程 1 的风险指针而保留
    assert(t2.pending() == 1 && g_freed.load() == 0);
    std::printf("hazard: A retired but kept (%zu pending, %ld freed) while thread 1 reads it\n", t2.pending(),
                g_freed.load());
#endif
    int w = 0;
    bool got = s.try_pop(t1, a, w);  // 线程 1：读 A->next（默认编译：heap-use-after-free），CAS 失败
    assert(!got);
    got = s.pop(t1, w);              // 线程 1 从头重试，弹出 B
    assert(got && w == 2);
    t2.scan();                       // 线程 1 已清空风险指针：A 这次被释放
    assert(t2.pending() == 0 && g_freed.load() == 1);  // A 被释放；B 在 t1 的待回收表里
    std::printf("thread 1: CAS failed, next pop got %d; A freed once the hazard was cleared\n", w);
}
// --8<-- [end:interleaving]

void stress() {
    constexpr int kPer = 20000;
    Stack s;
    std::atomic<long> sum{0};
    long freed_before = g_freed.load();
    auto worker = [&](int base) {
        Participant me;
        for (int i = 1; i <= kPer; ++i) {
            s.push(base + i);
            int v;
            if (s.pop(me, v)) sum.fetch_add(v, std::memory_order_relaxed);
        }
    };
    {
        std::thread a(worker, 0), b(worker, kPer);
        a.join();
        b.join();
    }
    Participant me;
    int v;
    while (s.pop(me, v)) sum.fetch_add(v);
    me.scan();
    long n = 2L * kPer;
    assert(sum.load() == n * (n + 1) / 2);  // 1..40000 各弹出一次
    assert(g_freed.load() - freed_before == n);
    std::printf("stress ok: 2 threads x %d pops, sum %ld, every node freed\n", kPer, sum.load());
}

int main() {
    interleaving();
    stress();
    return 0;
}
