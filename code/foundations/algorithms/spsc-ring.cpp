// listing: run
// listing: stdout=spsc ring ok: 1000000 items in order, checksum [0-9]+
// 单生产者单消费者（SPSC）环形缓冲区：容量取 2 的幂，head 只由消费者写、tail 只由生产者写，
// 用 acquire/release 发布数据，不需要锁。压力测试：100 万个递增整数必须按序、不丢不重地到达。
// tests/test_foundations_os.py 还在 ThreadSanitizer 下运行它（无报告即无数据竞争）。
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <thread>
#include <vector>

// --8<-- [start:ring]
template <class T>
class SpscRing {
public:
    explicit SpscRing(size_t capacity_pow2) : buf_(capacity_pow2), mask_(capacity_pow2 - 1) {}

    bool try_push(const T& v) {                                   // 只由生产者线程调用
        size_t tail = tail_.load(std::memory_order_relaxed);
        if (tail - head_.load(std::memory_order_acquire) == buf_.size()) return false;  // 满
        buf_[tail & mask_] = v;
        tail_.store(tail + 1, std::memory_order_release);         // 发布：先写数据，再推进 tail
        return true;
    }

    bool try_pop(T& out) {                                        // 只由消费者线程调用
        size_t head = head_.load(std::memory_order_relaxed);
        if (head == tail_.load(std::memory_order_acquire)) return false;  // 空；acquire 保证看到数据
        out = buf_[head & mask_];
        head_.store(head + 1, std::memory_order_release);         // 归还槽位给生产者
        return true;
    }

private:
    std::vector<T> buf_;
    size_t mask_;
    alignas(64) std::atomic<size_t> head_{0};                     // 两个索引放在不同缓存行，避免伪共享
    alignas(64) std::atomic<size_t> tail_{0};
};
// --8<-- [end:ring]

int main() {
    constexpr uint64_t N = 1000000;
    SpscRing<uint64_t> ring(1024);
    std::thread producer([&] {
        for (uint64_t i = 0; i < N; i++)
            while (!ring.try_push(i)) std::this_thread::yield();
    });
    uint64_t expected = 0, checksum = 0;
    while (expected < N) {
        uint64_t v;
        if (!ring.try_pop(v)) { std::this_thread::yield(); continue; }
        if (v != expected) { std::printf("out of order: got %llu, expected %llu\n", (unsigned long long)v, (unsigned long long)expected); return 1; }
        checksum += v;
        expected++;
    }
    producer.join();
    std::printf("spsc ring ok: %llu items in order, checksum %llu\n", (unsigned long long)N, (unsigned long long)checksum);
    return checksum == N * (N - 1) / 2 ? 0 : 1;
}
