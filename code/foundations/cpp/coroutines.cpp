// listing: run
// listing: stdout=fib: 0 1 1 2 3 5 8 13 21 34\nlazy: 0 values computed before the first \+\+, 3 after taking 3\nframes: 3 allocated, 3 freed\nexception from the generator body reached the caller: boom\nscheduler: A1 B1 A2 B2 A3 A4\nlazy task: tree sum 1024; 10000 awaits in a loop, stack grew \d+ bytes
// C++20 协程的三个部件：promise_type（协程与外界的约定）、awaiter（co_await 时挂不挂起、挂起时做什么、
// 恢复后得到什么）与协程帧（编译器为每次调用在堆上分配的状态机对象）。每一段都断言页面上的说法。
#include "generator.hpp"

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <coroutine>
#include <cstdio>
#include <deque>
#include <exception>
#include <iterator>
#include <ranges>
#include <stdexcept>
#include <string>
#include <vector>

// --8<-- [start:fib]
Generator<long> fibonacci(int* computed) {
    long a = 0, b = 1;
    for (;;) {            // 无限序列：只在调用者要下一个值时才算
        ++*computed;
        co_yield a;
        a = std::exchange(b, a + b);
    }
}

void generators() {
    static_assert(std::ranges::input_range<Generator<long>>);  // 可以接在 views 管道里
    int computed = 0;
    std::string out;
    {
        auto fib = fibonacci(&computed);
        for (long x : fib | std::views::take(10)) out += std::to_string(x) + " ";
    }
    out.pop_back();
    assert(out == "0 1 1 2 3 5 8 13 21 34");
    std::printf("fib: %s\n", out.c_str());

    int n = 0;
    auto g = fibonacci(&n);
    int before = n;        // initial_suspend 是 suspend_always：还一个值都没算
    auto it = g.begin();   // 第一次恢复，执行到第一个 co_yield
    ++it;
    ++it;
    assert(before == 0 && n == 3 && *it == 1);
    std::printf("lazy: %d values computed before the first ++, %d after taking 3\n", before, n);
}
// --8<-- [end:fib]

Generator<int> count_to(int n) {
    for (int i = 1; i <= n; ++i) co_yield i;
}

Generator<int> throws_after(int n) {
    for (int i = 0; i < n; ++i) co_yield i;
    throw std::runtime_error("boom");
}

void frames_and_exceptions() {
    std::size_t a0 = FrameStats::allocations, f0 = FrameStats::frees;
    {
        auto g1 = count_to(3);
        auto g2 = count_to(5);
        int s = 0;
        for (int x : g1) s += x;
        auto g3 = count_to(2);  // 从未恢复过：帧也已分配，析构时照样释放
        assert(s == 6);
    }
    std::size_t made = FrameStats::allocations - a0, freed = FrameStats::frees - f0;
    assert(made == 3 && freed == 3 && FrameStats::bytes > 0);
    std::printf("frames: %zu allocated, %zu freed\n", made, freed);

    try {
        int seen = 0;
        for (int x : throws_after(2)) seen += x + 1;
        assert(false);
    } catch (const std::runtime_error& e) {
        std::printf("exception from the generator body reached the caller: %s\n", e.what());
    }
}

// --8<-- [start:scheduler]
// 单线程调度器：co_await Yield{s} 把当前协程的句柄放进就绪队列并挂起，run() 逐个恢复。
struct Scheduler {
    std::deque<std::coroutine_handle<>> ready;
    void run() {
        while (!ready.empty()) {
            auto h = ready.front();
            ready.pop_front();
            h.resume();
        }
    }
};

struct Yield {  // 一个 awaiter 的三个成员
    Scheduler& s;
    bool await_ready() const noexcept { return false; }  // 返回 true 就不挂起，直接 await_resume
    void await_suspend(std::coroutine_handle<> h) { s.ready.push_back(h); }  // 协程已挂起，h 可以交给别人
    void await_resume() const noexcept {}               // 恢复后 co_await 表达式的值（这里没有）
};

struct Detached {  // 立即开始、结束时自行销毁帧的“发射后不管”任务
    struct promise_type {
        Detached get_return_object() { return {}; }
        std::suspend_never initial_suspend() noexcept { return {}; }
        std::suspend_never final_suspend() noexcept { return {}; }
        void return_void() {}
        void unhandled_exception() { std::terminate(); }
    };
};

Detached worker(Scheduler& s, char name, int steps, std::vector<std::string>& log) {
    for (int i = 1; i <= steps; ++i) {
        log.push_back(name + std::to_string(i));
        co_await Yield{s};
    }
}

void scheduling() {
    Scheduler s;
    std::vector<std::string> log;
    worker(s, 'A', 4, log);  // 执行到第一个 co_await 就返回
    worker(s, 'B', 2, log);
    s.run();
    std::string joined;
    for (auto& e : log) joined += e + " ";
    joined.pop_back();
    assert(joined == "A1 B1 A2 B2 A3 A4");
    std::printf("scheduler: %s\n", joined.c_str());
}
// --8<-- [end:scheduler]

// --8<-- [start:lazy]
// 可以 co_await 的惰性任务：co_await child 时把自己登记为 child 的后继（continuation），然后
// 把控制权直接交给 child（await_suspend 返回 child 的句柄）；child 结束时在 final_suspend 里
// 再把控制权直接交回后继。这叫对称转移（symmetric transfer）：是尾调用，不是嵌套的 resume()，
// 所以一个循环里 co_await 一百万个同步完成的任务也不会让栈增长。
template <typename T>
class Lazy {
public:
    struct promise_type {
        T value{};
        std::coroutine_handle<> continuation = std::noop_coroutine();
        Lazy get_return_object() { return Lazy(Handle::from_promise(*this)); }
        std::suspend_always initial_suspend() noexcept { return {}; }
        struct Final {
            bool await_ready() noexcept { return false; }
            std::coroutine_handle<> await_suspend(std::coroutine_handle<promise_type> h) noexcept {
                return h.promise().continuation;  // 结束时转回等待者
            }
            void await_resume() noexcept {}
        };
        Final final_suspend() noexcept { return {}; }
        void return_value(T v) { value = std::move(v); }
        void unhandled_exception() { std::terminate(); }
    };
    using Handle = std::coroutine_handle<promise_type>;

    explicit Lazy(Handle h) : h_(h) {}
    Lazy(Lazy&& o) noexcept : h_(std::exchange(o.h_, {})) {}
    ~Lazy() {
        if (h_) h_.destroy();
    }

    bool await_ready() const noexcept { return false; }
    std::coroutine_handle<> await_suspend(std::coroutine_handle<> awaiting) noexcept {
        h_.promise().continuation = awaiting;
        return h_;  // 转去执行子任务
    }
    T await_resume() { return std::move(h_.promise().value); }

    T sync_get() {  // 从普通函数里启动：恢复一次，它（和它等待的一切）同步跑完
        h_.resume();
        assert(h_.done());
        return std::move(h_.promise().value);
    }

private:
    Handle h_;
};

Lazy<int> tree(int depth) {
    if (depth == 0) co_return 1;
    int left = co_await tree(depth - 1);
    int right = co_await tree(depth - 1);
    co_return left + right;
}

// 记录栈有多深：每次进入 one() 时取当前栈帧的地址，最深与最浅之差就是栈增长了多少字节。
std::uintptr_t g_shallowest = 0, g_deepest = UINTPTR_MAX;
[[gnu::noinline]] void probe_stack() {
    auto sp = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
    g_shallowest = std::max(g_shallowest, sp);
    g_deepest = std::min(g_deepest, sp);
}

Lazy<long> one(long i) {
    probe_stack();
    co_return i;
}

Lazy<long> many(long n) {
    long total = 0;
    for (long i = 0; i < n; ++i) total += co_await one(1);  // 每次都是一次挂起与两次对称转移
    co_return total;
}
// --8<-- [end:lazy]

#ifndef AWAITS
#define AWAITS 10000
#endif

int main() {
    generators();
    frames_and_exceptions();
    scheduling();
    int t = tree(10).sync_get();
    long m = many(AWAITS).sync_get();
    assert(t == 1024 && m == AWAITS);
    // GCC 12 -O2 不带 sanitizer 时对称转移是真正的尾调用，这里是 0；-O0 或开 ASan 时不是，栈随次数线性增长
    // （tests/test_foundations_cpp_concurrency.py 分别编译并断言两种情况）
    std::printf("lazy task: tree sum %d; %ld awaits in a loop, stack grew %lu bytes\n", t, m,
                static_cast<unsigned long>(g_shallowest - g_deepest));
    return 0;
}
