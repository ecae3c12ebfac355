// 两个线程池，接口相同：submit(f) 返回 std::future，run_pending_task() 在调用线程上执行一个待办任务，
// wait(fut) 在等待期间帮忙执行任务。
//   SingleQueuePool：所有线程共用一个加锁的 FIFO 队列（基线）。
//   WorkStealingPool：每个工作线程一个双端队列（deque），自己从尾部取（LIFO），空了去别人的头部偷（FIFO）。
// 由 thread-pool.cpp（ASan + UBSan）、thread-pool-tsan.cpp（ThreadSanitizer）与 thread-pool-bench.cpp 使用。
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <stop_token>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

// --8<-- [start:task]
// 只能移动的、类型擦除的可调用对象。std::function 要求可拷贝，装不下 std::packaged_task；
// C++23 的 std::move_only_function 就是为此而设的（GCC 12 只在 -std=c++23 下提供）。
class Task {
    struct Base {
        virtual ~Base() = default;
        virtual void run() = 0;
    };
    template <typename F>
    struct Impl final : Base {
        F f;
        explicit Impl(F&& fn) : f(std::move(fn)) {}
        void run() override { f(); }
    };
    std::unique_ptr<Base> impl_;

public:
    Task() = default;
    template <typename F>
    explicit Task(F f) : impl_(std::make_unique<Impl<F>>(std::move(f))) {}
    void operator()() { impl_->run(); }
};

// 统计一个线程上任务嵌套执行的最大深度：帮忙等待时，一个任务在自己的栈帧里执行另一个任务。
struct Nesting {
    inline static thread_local int depth = 0;
    inline static std::atomic<int> max_depth{0};
    static void run(Task& t) {
        int d = ++depth;
        int m = max_depth.load(std::memory_order_relaxed);
        while (d > m && !max_depth.compare_exchange_weak(m, d, std::memory_order_relaxed)) {
        }
        t();
        --depth;
    }
};

// submit 的公共部分：把 f 包进 packaged_task，任务的返回值或异常经由 future 交给等待者。
template <typename F, typename Enqueue>
auto package(F f, Enqueue&& enqueue) -> std::future<std::invoke_result_t<F&>> {
    using R = std::invoke_result_t<F&>;
    std::packaged_task<R()> pt(std::move(f));
    std::future<R> fut = pt.get_future();
    enqueue(Task(std::move(pt)));
    return fut;
}

// 等待一个 future；没就绪时在本线程上执行别的待办任务，而不是阻塞。
// 任务等待自己派生的子任务时必须这样等：否则所有工作线程都可能阻塞在 get() 上，
// 子任务却排在队列里没人执行，线程池死锁。
template <typename Pool, typename R>
R help_wait(Pool& pool, std::future<R>& fut) {
    while (fut.wait_for(std::chrono::seconds(0)) != std::future_status::ready)
        if (!pool.run_pending_task()) std::this_thread::yield();
    return fut.get();
}
// --8<-- [end:task]

// --8<-- [start:single]
class SingleQueuePool {
public:
    explicit SingleQueuePool(unsigned n) {
        for (unsigned i = 0; i < n; ++i)
            threads_.emplace_back([this](std::stop_token st) { loop(st); });
    }
    ~SingleQueuePool() {
        for (auto& t : threads_) t.request_stop();  // 先全部请求停止，再逐个 join（jthread 的析构）
    }

    template <typename F>
    auto submit(F f) {
        return package(std::move(f), [this](Task t) {
            bool wake;
            {
                std::lock_guard<std::mutex> lk(mu_);
                q_.push_back(std::move(t));
                wake = sleepers_ > 0;  // 没有线程在睡就不通知，省掉 notify 的开销（与 WorkStealingPool 相同）
            }
            if (wake) cv_.notify_one();
        });
    }

    bool run_pending_task() {
        Task t;
        {
            std::lock_guard<std::mutex> lk(mu_);
            if (q_.empty()) return false;
            t = std::move(q_.front());
            q_.pop_front();
        }
        Nesting::run(t);
        return true;
    }

    template <typename R>
    R wait(std::future<R>& fut) { return help_wait(*this, fut); }

private:
    void loop(std::stop_token st) {
        while (!st.stop_requested()) {
            Task t;
            {
                std::unique_lock<std::mutex> lk(mu_);
                ++sleepers_;
                // condition_variable_any 的这个重载在 request_stop() 时也会醒来，返回 false
                bool has_work = cv_.wait(lk, st, [&] { return !q_.empty(); });
                --sleepers_;
                if (!has_work) return;
                t = std::move(q_.front());
                q_.pop_front();
            }
            Nesting::run(t);
        }
    }

    std::mutex mu_;
    std::condition_variable_any cv_;
    std::deque<Task> q_;
    int sleepers_ = 0;                   // 由 mu_ 保护
    std::vector<std::jthread> threads_;  // 最后声明：最先析构，线程先停下，队列才销毁
};
// --8<-- [end:single]

// --8<-- [start:stealing]
class WorkStealingPool {
public:
    explicit WorkStealingPool(unsigned n) {
        for (unsigned i = 0; i < n; ++i) queues_.push_back(std::make_unique<WorkerQueue>());
        for (unsigned i = 0; i < n; ++i)
            threads_.emplace_back([this, i](std::stop_token st) { loop(st, i); });
    }
    ~WorkStealingPool() {
        for (auto& t : threads_) t.request_stop();
    }

    // 工作线程提交的任务进自己的队列尾部；外部线程提交的进全局队列。
    template <typename F>
    auto submit(F f) {
        return package(std::move(f), [this](Task t) {
            WorkerQueue& q = (tl_pool_ == this) ? *queues_[tl_index_] : global_;
            {
                std::lock_guard<std::mutex> lk(q.mu);
                q.tasks.push_back(std::move(t));
            }
            pending_.fetch_add(1);         // seq_cst：与 loop() 里 sleepers_ 的写读构成 Dekker 式配对
            if (sleepers_.load() > 0) {    // 没有人睡着就不碰全局锁
                { std::lock_guard<std::mutex> lk(sleep_mu_); }  // 与正在入睡的线程排个先后，避免丢失唤醒
                sleep_cv_.notify_one();
            }
        });
    }

    // 取任务的顺序：自己队列的尾部（最新的、缓存里还热的）→ 全局队列 → 别人队列的头部（最老的、通常最大的）。
    bool run_pending_task() {
        Task t;
        bool mine = tl_pool_ == this;
        if (!(mine && take(*queues_[tl_index_], t, /*back=*/true)) && !take(global_, t, false) && !steal(t, mine))
            return false;
        pending_.fetch_sub(1, std::memory_order_relaxed);
        Nesting::run(t);
        return true;
    }

    template <typename R>
    R wait(std::future<R>& fut) { return help_wait(*this, fut); }

    long steals() const { return steals_.load(std::memory_order_relaxed); }

private:
    struct alignas(64) WorkerQueue {  // 各占一个缓存行，避免相邻的锁伪共享
        std::mutex mu;
        std::deque<Task> tasks;
    };

    static bool take(WorkerQueue& q, Task& out, bool back) {
        std::lock_guard<std::mutex> lk(q.mu);
        if (q.tasks.empty()) return false;
        if (back) {
            out = std::move(q.tasks.back());
            q.tasks.pop_back();
        } else {
            out = std::move(q.tasks.front());
            q.tasks.pop_front();
        }
        return true;
    }

    bool steal(Task& out, bool mine) {
        const std::size_t n = queues_.size(), start = mine ? tl_index_ + 1 : 0;
        for (std::size_t k = 0; k < n; ++k) {
            std::size_t victim = (start + k) % n;
            if (mine && victim == tl_index_) continue;
            if (take(*queues_[victim], out, /*back=*/false)) {
                steals_.fetch_add(1, std::memory_order_relaxed);
                return true;
            }
        }
        return false;
    }

    void loop(std::stop_token st, unsigned index) {
        tl_pool_ = this;
        tl_index_ = index;
        while (!st.stop_requested()) {
            if (run_pending_task()) continue;
            std::unique_lock<std::mutex> lk(sleep_mu_);
            sleepers_.fetch_add(1);  // 先登记“我要睡了”，再检查有没有活：submit 那边先加 pending_ 再看 sleepers_
            sleep_cv_.wait(lk, st, [&] { return pending_.load() > 0; });
            sleepers_.fetch_sub(1);
        }
        tl_pool_ = nullptr;
    }

    std::vector<std::unique_ptr<WorkerQueue>> queues_;
    WorkerQueue global_;
    std::atomic<long> pending_{0};   // 已入队、尚未被取走的任务数（只用来决定睡不睡）
    std::atomic<int> sleepers_{0};
    std::atomic<long> steals_{0};
    std::mutex sleep_mu_;
    std::condition_variable_any sleep_cv_;
    inline static thread_local WorkStealingPool* tl_pool_ = nullptr;  // 当前线程属于哪个池、第几号
    inline static thread_local unsigned tl_index_ = 0;
    std::vector<std::jthread> threads_;  // 最后声明：最先析构
};
// --8<-- [end:stealing]

// --8<-- [start:algorithms]
// 任务派生任务：把区间一分为二，左半交给线程池，右半自己做，然后帮忙等左半。
template <typename Pool>
long long parallel_sum(Pool& pool, const long long* first, const long long* last, std::ptrdiff_t grain) {
    if (last - first <= grain) {
        long long s = 0;
        for (const long long* p = first; p != last; ++p) s += *p;
        return s;
    }
    const long long* mid = first + (last - first) / 2;
    auto left = pool.submit([&pool, first, mid, grain] { return parallel_sum(pool, first, mid, grain); });
    long long right = parallel_sum(pool, mid, last, grain);
    return pool.wait(left) + right;
}

// 快速排序：三路划分后，小于主元的一段交给线程池，大于主元的一段自己排。
template <typename Pool, typename It>
void parallel_quicksort(Pool& pool, It first, It last, std::ptrdiff_t cutoff) {
    if (last - first <= cutoff) {
        std::sort(first, last);
        return;
    }
    auto a = *first, b = *(first + (last - first) / 2), c = *(last - 1);
    auto pivot = std::max(std::min(a, b), std::min(std::max(a, b), c));  // 三数取中
    It lt = std::partition(first, last, [&](const auto& x) { return x < pivot; });
    It gt = std::partition(lt, last, [&](const auto& x) { return !(pivot < x); });  // [lt, gt) 都等于主元
    auto left = pool.submit([&pool, first, lt, cutoff] { parallel_quicksort(pool, first, lt, cutoff); });
    parallel_quicksort(pool, gt, last, cutoff);
    pool.wait(left);
}
// --8<-- [end:algorithms]
