// listing: expect-sanitizer=thread
// listing: stdout=count 200000
// 最常见的数据竞争：两个线程对同一个普通 int 做 ++。++ 是“读、加一、写回”三步，两个线程交错时
// 一方的写会覆盖另一方，结果通常小于 200000；更根本的是，按标准这是未定义行为，编译器可以假设它不发生。
// 默认编译：ThreadSanitizer 报告 data race。加 -DFIXED：换成 std::atomic<int>，fetch_add 是一条
// 原子的读改写（x86 上是带 lock 前缀的 add/xadd），结果恰为 200000，TSan 无报告。
#include <atomic>
#include <cstdio>
#include <thread>

constexpr int kPerThread = 100000;

#ifdef FIXED
std::atomic<int> counter{0};
void bump() { for (int i = 0; i < kPerThread; ++i) counter.fetch_add(1, std::memory_order_relaxed); }
int value() { return counter.load(); }
#else
int counter = 0;
void bump() { for (int i = 0; i < kPerThread; ++i) ++counter; }  // 数据竞争
int value() { return counter; }
#endif

int main() {
    std::thread a(bump), b(bump);
    a.join();
    b.join();  // join 建立 happens-before：此后读 counter 不再与两个线程竞争
    std::printf("count %d\n", value());
    return 0;
}
