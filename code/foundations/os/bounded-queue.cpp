// listing: run
// listing: stdout=bounded queue ok: 3 producers x 20000 items, 2 consumers, [1-9][0-9]* forced wake-ups
// 多生产者、多消费者使用 bounded-queue.hpp 中的有界队列；另有一个线程不停地无故唤醒所有等待者，
// 模拟虚假唤醒（spurious wake-up）。谓词循环保证结果仍然正确：每个元素恰好被取走一次，
// 同一生产者的元素在同一消费者处保持先后顺序，队列长度从不超过容量。
#include "bounded-queue.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

constexpr int kProducers = 3;
constexpr int kItems = 20000;
constexpr int kConsumers = 2;
constexpr std::size_t kCapacity = 8;

int main() {
    // --8<-- [start:main]
    BoundedQueue<int> q(kCapacity);
    std::vector<std::vector<int>> got(kConsumers);  // 每个消费者只写自己的那一份，无需加锁

    std::vector<std::thread> consumers;
    for (int c = 0; c < kConsumers; ++c)
        consumers.emplace_back([&q, &mine = got[c]] {
            while (auto v = q.pop()) mine.push_back(*v);
        });

    std::atomic<bool> stop{false};
    std::atomic<long> forced{0};
    std::thread noise([&] {  // 不改任何状态，只唤醒：等待者醒来发现谓词仍为假，会继续睡
        do {
            q.spurious_wakeup();
            forced.fetch_add(1, std::memory_order_relaxed);
            std::this_thread::sleep_for(std::chrono::microseconds(50));
        } while (!stop.load());
    });

    std::vector<std::thread> producers;
    for (int p = 0; p < kProducers; ++p)
        producers.emplace_back([&q, p] {
            for (int i = 0; i < kItems; ++i) {
                bool ok = q.push(p * kItems + i);
                assert(ok);
                (void)ok;
            }
        });
    for (auto& t : producers) t.join();
    q.close();
    for (auto& t : consumers) t.join();
    stop = true;
    noise.join();
    // --8<-- [end:main]

    // 每个元素恰好出现一次
    std::vector<int> all;
    for (const auto& v : got) all.insert(all.end(), v.begin(), v.end());
    std::sort(all.begin(), all.end());
    assert(static_cast<int>(all.size()) == kProducers * kItems);
    for (int i = 0; i < kProducers * kItems; ++i) assert(all[i] == i);

    // 队列是先进先出：同一生产者的元素在任一消费者看来都是递增的
    for (const auto& v : got) {
        int last[kProducers];
        std::fill(last, last + kProducers, -1);
        for (int x : v) {
            int p = x / kItems;
            assert(x > last[p]);
            last[p] = x;
        }
    }

    // 关闭之后：push 失败，pop 立刻返回空
    assert(!q.push(-1));
    assert(!q.pop().has_value());
    assert(q.size() == 0);

    std::printf("bounded queue ok: %d producers x %d items, %d consumers, %ld forced wake-ups\n",
                kProducers, kItems, kConsumers, forced.load());
    return 0;
}
