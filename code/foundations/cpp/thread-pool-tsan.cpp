// listing: expect-sanitizer=thread
// listing: stdout=flags ok: 128 of 128 set by two tasks\ntsan ok: sum 500500 and sort of 20000 keys on both pools
// 标准容器的线程安全保证，在线程池上检验。[container.requirements.dataraces]：并发地修改同一容器里
// *不同*元素的内容不构成数据竞争，唯一的例外是 std::vector<bool>：它把 64 个元素压进一个字，
// 写一个元素是对整个字的读-改-写。
// 默认编译：两个任务在两个工作线程上分别写偶数和奇数下标的 vector<bool>，TSan 报告数据竞争（故意的）。
// 加 -DFIXED：换成 vector<char>，每个元素是独立的内存位置。此时整个程序（包括两个线程池、
// 任务派生任务的求和与快速排序）在 TSan 下没有任何报告，这就是线程池本身无数据竞争的证据。
#include "thread-pool.hpp"

#include <cassert>
#include <cstdio>
#include <latch>
#include <numeric>
#include <random>
#include <vector>

// --8<-- [start:flags]
#ifdef FIXED
using Flags = std::vector<char>;
#else
using Flags = std::vector<bool>;  // 相邻元素共用一个字：不同元素也会竞争
#endif

void mark_in_parallel() {
    WorkStealingPool pool(2);
    Flags seen(128);
    std::latch both(2);  // 两个任务都开始后才写：保证它们在两个线程上同时运行
    auto mark = [&](int parity) {
        both.arrive_and_wait();
        for (int i = parity; i < 128; i += 2) seen[i] = true;
    };
    auto even = pool.submit([&] { mark(0); });
    auto odd = pool.submit([&] { mark(1); });
    even.get();
    odd.get();
    int set = 0;
    for (int i = 0; i < 128; ++i) set += seen[i] ? 1 : 0;
    assert(set == 128);
    std::printf("flags ok: %d of 128 set by two tasks\n", set);
}
// --8<-- [end:flags]

template <typename Pool>
void algorithms_under_tsan(long long& sum, std::vector<int>& keys) {
    Pool pool(2);
    std::vector<long long> v(1000);
    std::iota(v.begin(), v.end(), 1);
    sum = parallel_sum(pool, v.data(), v.data() + v.size(), 16);
    parallel_quicksort(pool, keys.begin(), keys.end(), 64);
}

int main() {
    mark_in_parallel();
    std::mt19937 rng(7);
    std::vector<int> keys(20000);
    for (int& k : keys) k = static_cast<int>(rng() % 1000);
    std::vector<int> a = keys, b = keys, expected = keys;
    std::sort(expected.begin(), expected.end());
    long long s1 = 0, s2 = 0;
    algorithms_under_tsan<WorkStealingPool>(s1, a);
    algorithms_under_tsan<SingleQueuePool>(s2, b);
    assert(s1 == 500500 && s2 == 500500 && a == expected && b == expected);
    std::printf("tsan ok: sum %lld and sort of %zu keys on both pools\n", s1, keys.size());
    return 0;
}
