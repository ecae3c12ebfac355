// listing: expect-sanitizer=thread
// listing: stdout=payload 42
// 消息传递（message passing）：写线程先写数据、再置标志；读线程看到标志后读数据。
// 默认编译：标志用 memory_order_relaxed 读写，它只保证标志本身的读写是原子的，不在两个线程之间
// 建立 happens-before，于是对 payload 的普通读写构成数据竞争，ThreadSanitizer 报告它。
// 加 -DFIXED：写端 release、读端 acquire，读到 true 的那次 load 与置位的 store 同步（synchronizes-with），
// 之前对 payload 的写对之后的读可见，TSan 不再报告。
#include <atomic>
#include <cstdio>
#include <thread>

#ifdef FIXED
constexpr std::memory_order kStore = std::memory_order_release;
constexpr std::memory_order kLoad = std::memory_order_acquire;
#else
constexpr std::memory_order kStore = std::memory_order_relaxed;  // 错误：只有原子性，没有顺序
constexpr std::memory_order kLoad = std::memory_order_relaxed;
#endif

// --8<-- [start:mp]
int payload = 0;                 // 普通变量：要靠标志的同步关系来保护
std::atomic<bool> ready{false};

void producer() {
    payload = 42;                       // (1) 写数据
    ready.store(true, kStore);          // (2) 置标志：release 保证 (1) 不会被排到 (2) 之后
}

int consumer() {
    while (!ready.load(kLoad)) {        // (3) 等标志：acquire 保证 (4) 不会被排到 (3) 之前
    }
    return payload;                     // (4) 读数据：只有 (2) 与 (3) 同步时才保证读到 42
}
// --8<-- [end:mp]

int main() {
    std::thread t(producer);
    int got = consumer();
    t.join();
    std::printf("payload %d\n", got);
    return 0;
}
