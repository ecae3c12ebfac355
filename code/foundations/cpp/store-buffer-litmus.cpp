// listing: run
// listing: stdout=seq_cst: 0 of [0-9]+ rounds
// listing: flags=-O2
// 存储缓冲（store buffering）试金石：两个线程各写一个变量、再读另一个变量。
//   线程 A: x = 1; r1 = y;      线程 B: y = 1; r2 = x;
// 顺序一致（seq_cst）下 r1 == 0 && r2 == 0 不可能出现：总有一个写排在两个读之前。
// 用 acquire/release（或 relaxed）时它是允许的结果，在 x86 上也真的会出现：写先进入本核的
// 存储缓冲区，读可以越过它先执行（x86-TSO 唯一允许的重排：store→load）。
// 用 -O2 编译：-O0 下每个原子操作都是一次函数调用，写与读之间隔得太远，几乎观测不到重排。
// 程序对两种顺序各跑若干轮，断言 seq_cst 一次也没有出现 (0, 0)；弱顺序出现的次数只打印，不断言。
#include <atomic>
#include <cstdio>
#include <thread>

constexpr int kRounds = 20000;

// --8<-- [start:litmus]
std::atomic<int> x{0}, y{0};
std::atomic<int> round_start{0}, done{0};

template <std::memory_order St, std::memory_order Ld>
int count_both_zero() {
    int both_zero = 0;
    int r1 = 0, r2 = 0;
    std::thread b([&] {
        for (int i = 1; i <= kRounds; ++i) {
            while (round_start.load(std::memory_order_acquire) != i) {}  // 等 A 开始第 i 轮
            y.store(1, St);
            r2 = x.load(Ld);
            done.store(i, std::memory_order_release);
        }
    });
    for (int i = 1; i <= kRounds; ++i) {
        x.store(0, std::memory_order_relaxed);
        y.store(0, std::memory_order_relaxed);
        round_start.store(i, std::memory_order_release);  // 放行 B（同时发布上面的清零）
        x.store(1, St);
        r1 = y.load(Ld);
        while (done.load(std::memory_order_acquire) != i) {}  // 等 B 读完，r2 对本线程可见
        both_zero += (r1 == 0 && r2 == 0);
    }
    b.join();
    round_start.store(0);
    done.store(0);
    return both_zero;
}
// --8<-- [end:litmus]

int main() {
    int weak = count_both_zero<std::memory_order_release, std::memory_order_acquire>();
    int strong = count_both_zero<std::memory_order_seq_cst, std::memory_order_seq_cst>();
    std::printf("acquire/release: %d of %d rounds saw r1 == r2 == 0\n", weak, kRounds);
    std::printf("seq_cst: %d of %d rounds saw r1 == r2 == 0\n", strong, kRounds);
    return strong == 0 ? 0 : 1;
}
