// listing: expect-sanitizer=thread
// listing: stdout=tsan run ok: sum 799980000 over 40000 items
// 同一个有界队列，在 ThreadSanitizer 下检查。
// 默认编译：消费者更新共享的统计量时忘了加锁，TSan 报告数据竞争（这是故意留下的错误）。
// 加 -DFIXED：统计量在自己的互斥锁下更新。此时整个程序（包括队列本身）在 TSan 下没有任何报告，
// 这就是队列无数据竞争的证据。
#include "bounded-queue.hpp"

#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

// --8<-- [start:stats]
struct Stats {
    std::mutex mu;
    long long sum = 0;
    long long count = 0;
};

void record(Stats& s, long long v) {
#ifdef FIXED
    std::lock_guard<std::mutex> lk(s.mu);
#endif
    s.sum += v;  // 默认编译下两个消费者同时执行这两行：读-改-写交错，既是竞争也可能丢更新
    s.count += 1;
}
// --8<-- [end:stats]

int main() {
    constexpr int kProducers = 2, kItems = 20000, kConsumers = 2;
    BoundedQueue<long long> q(4);
    Stats stats;

    std::vector<std::thread> threads;
    for (int c = 0; c < kConsumers; ++c)
        threads.emplace_back([&] {
            while (auto v = q.pop()) record(stats, *v);
        });
    std::vector<std::thread> producers;
    for (int p = 0; p < kProducers; ++p)
        producers.emplace_back([&q, p] {
            for (int i = 0; i < kItems; ++i) q.push(static_cast<long long>(p) * kItems + i);
        });
    for (auto& t : producers) t.join();
    q.close();
    for (auto& t : threads) t.join();

#ifdef FIXED
    const long long n = static_cast<long long>(kProducers) * kItems;
    assert(stats.count == n);
    assert(stats.sum == n * (n - 1) / 2);  // 0 + 1 + ... + (n - 1)
#endif
    std::printf("tsan run ok: sum %lld over %lld items\n", stats.sum, stats.count);
    return 0;
}
