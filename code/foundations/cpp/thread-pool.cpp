// listing: run
// listing: stdout=sum ok: stealing == single == serial == 2000001000000\nsort ok: 200000 keys, equal to std::sort\nexception ok: future.get\(\) rethrew "bad task"\nblocking wait: child still queued after 50 ms; helping wait: child ran, result 42\nhelping depth, 512 tasks on 1 worker: single-queue 257, work-stealing 10
// 两个线程池上的并行求和与并行快速排序，结果必须与串行完全相同；任务里抛出的异常经 future 传回；
// 只有一个工作线程时，阻塞地等待子任务会卡住，帮忙执行任务的等待则不会。
#include "thread-pool.hpp"

#include <cassert>
#include <cstdio>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

template <typename Pool>
long long sum_on(unsigned workers, const std::vector<long long>& v) {
    Pool pool(workers);
    return parallel_sum(pool, v.data(), v.data() + v.size(), 4096);
}

void sums() {
    std::vector<long long> v(2'000'000);
    std::iota(v.begin(), v.end(), 1);
    const long long serial = std::accumulate(v.begin(), v.end(), 0LL);
    const long long single = sum_on<SingleQueuePool>(2, v), stealing = sum_on<WorkStealingPool>(2, v);
    assert(serial == 2'000'000LL * 2'000'001LL / 2);
    assert(single == serial && stealing == serial);
    std::printf("sum ok: stealing == single == serial == %lld\n", serial);
}

// --8<-- [start:sort]
void sorts() {
    std::mt19937 rng(20261124);
    std::vector<int> keys(200'000);
    for (int& k : keys) k = static_cast<int>(rng() % 50'000);  // 有大量重复键：三路划分才不会退化
    std::vector<int> expected = keys;
    std::sort(expected.begin(), expected.end());

    std::vector<int> a = keys, b = keys;
    {
        WorkStealingPool pool(2);
        parallel_quicksort(pool, a.begin(), a.end(), 2048);
    }
    {
        SingleQueuePool pool(2);
        parallel_quicksort(pool, b.begin(), b.end(), 2048);
    }
    assert(a == expected && b == expected);
    std::printf("sort ok: %zu keys, equal to std::sort\n", keys.size());
}
// --8<-- [end:sort]

void exceptions() {
    WorkStealingPool pool(2);
    auto fut = pool.submit([]() -> int { throw std::runtime_error("bad task"); });
    try {
        (void)fut.get();
        assert(false);
    } catch (const std::runtime_error& e) {
        assert(std::string(e.what()) == "bad task");
        std::printf("exception ok: future.get() rethrew \"%s\"\n", e.what());
    }
}

// --8<-- [start:deadlock]
// 只有一个工作线程。父任务派生一个子任务（进了这个工作线程自己的队列），然后：
//   1. 阻塞地等 50 ms：唯一的工作线程正被父任务占着，子任务不可能运行，必然超时；
//      如果这里写的是 get()，线程池就永远卡住了。
//   2. 帮忙地等（help_wait）：在等待循环里从队列取出子任务自己执行，立即得到结果。
void waiting_for_a_child() {
    WorkStealingPool pool(1);
    auto parent = pool.submit([&pool] {
        auto child = pool.submit([] { return 42; });
        bool blocked = child.wait_for(std::chrono::milliseconds(50)) == std::future_status::timeout;
        int value = pool.wait(child);
        return std::make_pair(blocked, value);
    });
    auto [blocked, value] = parent.get();  // 主线程不是工作线程，不帮忙，也不会偷走子任务
    assert(blocked && value == 42);
    std::printf("blocking wait: child still queued after 50 ms; helping wait: child ran, result %d\n", value);
}
// --8<-- [end:deadlock]

// --8<-- [start:nesting]
// 帮忙等待时，任务在等待者的栈帧里嵌套执行。一个工作线程、512 个叶子的求和（由它自己派生全部任务）：
//   单一 FIFO 队列：等待最新的子任务时取到的是最老、最大的任务，它又派生、又等待，嵌套层层加深；
//   自己的 deque 取尾部（LIFO）：取到的正是要等的那个子任务，嵌套深度等于递归深度 log2(512) + 1。
template <typename Pool>
int helping_depth(const std::vector<long long>& v) {
    Nesting::max_depth = 0;
    Pool pool(1);
    auto root = pool.submit([&] { return parallel_sum(pool, v.data(), v.data() + v.size(), 1); });
    long long s = root.get();  // 主线程不帮忙：所有任务都由那一个工作线程执行，过程是确定的
    assert(s == 512LL * 513 / 2);
    return Nesting::max_depth.load();
}

void nesting() {
    std::vector<long long> v(512);
    std::iota(v.begin(), v.end(), 1);
    int fifo = helping_depth<SingleQueuePool>(v), lifo = helping_depth<WorkStealingPool>(v);
    assert(fifo == 512 / 2 + 1 && lifo == 9 + 1);
    std::printf("helping depth, 512 tasks on 1 worker: single-queue %d, work-stealing %d\n", fifo, lifo);
}
// --8<-- [end:nesting]

int main() {
    sums();
    sorts();
    exceptions();
    waiting_for_a_child();
    nesting();
    return 0;
}
