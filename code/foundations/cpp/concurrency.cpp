// listing: run
// listing: stdout=transfers ok: total 2000\n.*queue ok: sum 5050\n.*async ok\n.*thread_local ok\n.*cas ok: max 9999\n.*stop ok
// C++ 标准库并发工具的一组小例子，每一段都对照一个可以精确断言的结果。
#include <atomic>
#include <cassert>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <future>
#include <mutex>
#include <new>
#include <queue>
#include <stdexcept>
#include <thread>
#include <vector>

// --8<-- [start:scoped-lock]
struct Account {
    std::mutex m;
    long balance = 1000;
};

// 两个线程反向转账（a→b 与 b→a）。若各自先锁转出方、再锁转入方，就可能互相等待而死锁；
// scoped_lock 一次锁住多把锁，内部用 std::lock 的避免死锁算法（锁不上就全部释放再试），顺序无关。
void transfer(Account& from, Account& to, long amount) {
    std::scoped_lock lock(from.m, to.m);
    from.balance -= amount;
    to.balance += amount;
}

void transfers() {
    Account a, b;
    std::thread t1([&] { for (int i = 0; i < 5000; ++i) transfer(a, b, 1); });
    std::thread t2([&] { for (int i = 0; i < 5000; ++i) transfer(b, a, 1); });
    t1.join();
    t2.join();
    assert(a.balance == 1000 && b.balance == 1000);  // 等量反向转账：余额不变，总额守恒
    std::printf("transfers ok: total %ld\n", a.balance + b.balance);
}
// --8<-- [end:scoped-lock]

// --8<-- [start:condvar]
// 条件变量总与一把锁和一个谓词配合：wait(lock, pred) 等价于 while (!pred()) wait(lock)，
// 先查谓词再睡，醒来再查一次，既不会错过已经发生的通知，也能吞掉虚假唤醒。
void queue_sum() {
    std::mutex m;
    std::condition_variable cv;
    std::queue<int> q;
    bool closed = false;
    long sum = 0;
    std::thread consumer([&] {
        std::unique_lock lock(m);  // wait 要在睡眠时解锁、醒来时重新加锁，所以用 unique_lock
        for (;;) {
            cv.wait(lock, [&] { return !q.empty() || closed; });
            if (q.empty()) break;  // closed 且已取空
            sum += q.front();
            q.pop();
        }
    });
    for (int i = 1; i <= 100; ++i) {
        { std::lock_guard lock(m); q.push(i); }
        cv.notify_one();  // 在锁外通知：被唤醒的线程不必立刻再等这把锁
    }
    { std::lock_guard lock(m); closed = true; }
    cv.notify_one();
    consumer.join();
    assert(sum == 5050);
    std::printf("queue ok: sum %ld\n", sum);
}
// --8<-- [end:condvar]

// --8<-- [start:async]
void async_and_promise() {
    // launch::async 保证另起线程；默认策略 async|deferred 可能推迟到 get() 时在调用线程里同步执行。
    std::future<int> f = std::async(std::launch::async, [] { return 6 * 7; });
    std::future<int> lazy = std::async(std::launch::deferred, [] { return 1; });
    assert(lazy.wait_for(std::chrono::seconds(0)) == std::future_status::deferred);  // 还没开始
    assert(f.get() == 42 && lazy.get() == 1);

    // 任务里抛出的异常保存在共享状态中，在 get() 处重新抛出。
    auto bad = std::async(std::launch::async, []() -> int { throw std::runtime_error("boom"); });
    bool caught = false;
    try { bad.get(); } catch (const std::runtime_error&) { caught = true; }
    assert(caught);

    // promise 是共享状态的写端：另一个线程 set_value，持有 future 的线程 get 时阻塞到值就绪。
    std::promise<int> p;
    std::future<int> from_p = p.get_future();
    std::thread setter([&p] { p.set_value(7); });
    assert(from_p.get() == 7);
    setter.join();
    std::puts("async ok");
}
// --8<-- [end:async]

// --8<-- [start:thread-local]
thread_local int calls = 0;  // 每个线程一份，线程启动时初始化，线程结束时销毁

int count_calls(int n) {
    for (int i = 0; i < n; ++i) ++calls;  // 无需同步：没有别的线程能访问这一份
    return calls;
}

void thread_locals() {
    int a = 0, b = 0;
    std::thread t1([&] { a = count_calls(3); });
    std::thread t2([&] { b = count_calls(5); });
    t1.join();
    t2.join();
    assert(a == 3 && b == 5 && calls == 0);  // 主线程的那一份没被动过
    std::puts("thread_local ok");
}
// --8<-- [end:thread-local]

// --8<-- [start:cas]
// 用 compare_exchange 写一个原子的 fetch_max：读当前值，算出新值，只有当值仍等于刚才读到的值时才写入；
// 失败时 expected 被更新为最新值，循环重试。这是所有无锁算法的基本形状。
int fetch_max(std::atomic<int>& target, int value) {
    int expected = target.load(std::memory_order_relaxed);
    while (expected < value &&
           !target.compare_exchange_weak(expected, value, std::memory_order_acq_rel, std::memory_order_relaxed)) {
        // compare_exchange_weak 允许伪失败（LL/SC 架构上），所以总放在循环里
    }
    return expected;
}

void cas_max() {
    std::atomic<int> best{-1};
    std::vector<std::thread> pool;
    for (int t = 0; t < 4; ++t)
        pool.emplace_back([&best, t] { for (int i = t; i < 10000; i += 4) fetch_max(best, i); });
    for (auto& th : pool) th.join();
    assert(best.load() == 9999);
    std::printf("cas ok: max %d\n", best.load());
}
// --8<-- [end:cas]

// --8<-- [start:false-sharing]
// 两个线程各写一个计数器：挨着放时落在同一条 64 字节缓存行里，每次写都让对方核的缓存行失效（伪共享）；
// 按缓存行对齐后各占一行。GCC 在 x86-64 上把 hardware_destructive_interference_size 定为 64。
struct Packed { std::atomic<long> a{0}, b{0}; };
struct Padded { alignas(64) std::atomic<long> a{0}; alignas(64) std::atomic<long> b{0}; };
static_assert(sizeof(Packed) == 16);   // a 与 b 在同一条缓存行
static_assert(sizeof(Padded) == 128);  // 各占一条
// --8<-- [end:false-sharing]

// --8<-- [start:jthread]
void stop_token_demo() {
    std::atomic<long> spins{0};
    {
        std::jthread worker([&spins](std::stop_token st) {
            while (!st.stop_requested()) spins.fetch_add(1, std::memory_order_relaxed);
        });
        while (spins.load() == 0) std::this_thread::yield();
    }  // jthread 析构时先 request_stop() 再 join()；std::thread 未 join 就析构会调用 std::terminate
    long after = spins.load();
    assert(after > 0 && spins.load() == after);  // 线程已结束，计数不再变化
    std::puts("stop ok");
}
// --8<-- [end:jthread]

int main() {
    transfers();
    queue_sum();
    async_and_promise();
    thread_locals();
    cas_max();
    stop_token_demo();
    return 0;
}
