// listing: run
// listing: stdout=^\{"workloads": \[
// 两个线程池的吞吐对比：单一加锁队列（SingleQueuePool）与每线程双端队列加工作窃取（WorkStealingPool）。
// 不带参数时（测试就这样运行）规模很小、每项只测一次，只检查结果正确并输出 JSON；
// thread-pool-bench.py 用 -O2 编译、带 --full 运行，并把输出连同机器信息写成记录。
// 每一项先检查并行结果等于串行结果，再计时；计时取若干次中的中位数。
#include "thread-pool.hpp"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

using Clock = std::chrono::steady_clock;

struct Row {
    std::string workload, pool;
    unsigned workers;
    long tasks;
    double seconds;  // 中位数
    double fastest, slowest;
    long steals;
    int max_nesting;  // 一个线程上任务嵌套执行的最大深度（帮忙等待造成的），取自预热的那一轮
};

template <typename F>
double seconds_of(F&& f) {
    auto t0 = Clock::now();
    f();
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> t) {
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

// --8<-- [start:compare]
// 同一工作负载在两个池上交替运行 reps 轮（机器上的其他负载随时间变化，交替能让两边受到相同的干扰），
// 各取中位数，并记下最快与最慢的样本。run(pool) 自己检查结果与串行相同。
template <typename Run>
void compare(std::vector<Row>& rows, const std::string& workload, unsigned workers, long tasks, int reps, int inner,
             Run run) {
    SingleQueuePool single(workers);
    WorkStealingPool stealing(workers);
    Nesting::max_depth = 0;
    run(single);  // 预热并验证
    int nest_single = Nesting::max_depth.exchange(0);
    run(stealing);
    int nest_stealing = Nesting::max_depth.exchange(0);
    std::vector<double> ts, tw;
    for (int r = 0; r < reps; ++r) {  // 每个样本连续运行 inner 次，记录一次的平均时间
        ts.push_back(seconds_of([&] { for (int k = 0; k < inner; ++k) run(single); }) / inner);
        tw.push_back(seconds_of([&] { for (int k = 0; k < inner; ++k) run(stealing); }) / inner);
    }
    auto [s_lo, s_hi] = std::minmax_element(ts.begin(), ts.end());
    auto [w_lo, w_hi] = std::minmax_element(tw.begin(), tw.end());
    rows.push_back({workload, "single-queue", workers, tasks, median(ts), *s_lo, *s_hi, 0, nest_single});
    rows.push_back({workload, "work-stealing", workers, tasks, median(tw), *w_lo, *w_hi, stealing.steals(), nest_stealing});
}
// --8<-- [end:compare]

int main(int argc, char** argv) {
    const bool full = argc > 1 && std::strcmp(argv[1], "--full") == 0;
    // 求和的叶子数 n/grain 不宜过大：单队列池帮忙等待时嵌套深度约为任务数的一半，
    // 32768 个任务会撑爆 8 MiB 的默认线程栈（见 thread-pool.md）
    const std::size_t n = full ? (1u << 20) : (1u << 14);
    const std::size_t sort_n = full ? 2'000'000 : 20'000;
    const long m = full ? 100'000 : 1'000;
    const int reps = full ? 15 : 1;
    const int inner_sum = full ? 20 : 1;  // 一次求和只有几毫秒：每个样本连续做 20 次
    const std::ptrdiff_t grain = 256;

    std::vector<long long> v(n);
    std::iota(v.begin(), v.end(), 1);
    std::mt19937 rng(1);
    std::vector<int> keys(sort_n);
    for (int& k : keys) k = static_cast<int>(rng());

    const long long expected_sum = std::accumulate(v.begin(), v.end(), 0LL);
    std::vector<int> sorted = keys;
    std::sort(sorted.begin(), sorted.end());

    std::vector<Row> rows;
    for (unsigned w : {1u, 2u}) {
        // 任务派生任务的求和：根任务加派生的 n/grain - 1 个，共 n/grain 个任务
        compare(rows, "fork-join-sum", w, static_cast<long>(n / grain), reps, inner_sum, [&](auto& pool) {
            auto root = pool.submit([&] { return parallel_sum(pool, v.data(), v.data() + v.size(), grain); });
            long long r = root.get();  // 主线程只等待、不帮忙：参与计算的恰好是 w 个工作线程
            assert(r == expected_sum);
            (void)r;
        });
        // 外部线程一次提交 m 个互不相关的小任务再逐个等待：两个池都走一个共享队列
        compare(rows, "flat-external", w, m, reps, 1, [&](auto& pool) {
            std::vector<std::future<long>> fs;
            fs.reserve(m);
            for (long i = 0; i < m; ++i) fs.push_back(pool.submit([i] { return i; }));
            long total = 0;
            for (auto& f : fs) total += f.get();
            assert(total == m * (m - 1) / 2);
            (void)total;
        });
        // 真正有计算量的任务：并行快速排序（每轮排一份新的拷贝，拷贝也计入时间，串行基线同样如此）
        compare(rows, "quicksort", w, 0, reps, 1, [&](auto& pool) {
            std::vector<int> a = keys;
            pool.submit([&] { parallel_quicksort(pool, a.begin(), a.end(), 4096); }).get();
            assert(a == sorted);
        });
    }
    std::vector<double> serial_sum, serial_sort;
    for (int r = 0; r < reps; ++r) {
        volatile long long sink = 0;
        serial_sum.push_back(seconds_of([&] { sink = std::accumulate(v.begin(), v.end(), 0LL); }));
        serial_sort.push_back(seconds_of([&] {
            std::vector<int> a = keys;
            std::sort(a.begin(), a.end());
        }));
        (void)sink;
    }

    std::printf("{\"workloads\": [");
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const Row& r = rows[i];
        std::printf("%s\n  {\"workload\": \"%s\", \"pool\": \"%s\", \"workers\": %u, \"tasks\": %ld, "
                    "\"seconds\": %.6g, \"fastest\": %.6g, \"slowest\": %.6g, \"tasks_per_second\": %.6g, \"steals\": %ld, \"max_nesting\": %d}",
                    i ? "," : "", r.workload.c_str(), r.pool.c_str(), r.workers, r.tasks, r.seconds, r.fastest, r.slowest,
                    r.tasks > 0 ? r.tasks / r.seconds : 0.0, r.steals, r.max_nesting);
    }
    std::printf("\n],\n \"serial\": {\"sum_seconds\": %.6g, \"sort_seconds\": %.6g},\n"
                " \"sizes\": {\"sum_elements\": %zu, \"sum_grain\": %td, \"sum_runs_per_sample\": %d, \"sort_keys\": %zu, \"sort_cutoff\": 4096, \"flat_tasks\": %ld, \"reps\": %d},\n"
                " \"hardware_concurrency\": %u}\n",
                median(serial_sum), median(serial_sort), n, grain, inner_sum, sort_n, m, reps,
                std::thread::hardware_concurrency());
    return 0;
}
