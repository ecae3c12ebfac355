// listing: expect-sanitizer=thread
// listing: stdout=copies ok: use_count back to 1\n.*final value [0-9]+
// shared_ptr 的线程安全分三层：计数是原子的；同一个 shared_ptr 实例不是；被指向的对象更不是。
// 默认编译：一个线程给共享的 shared_ptr 实例赋值，另一个线程同时拷贝它，ThreadSanitizer 报告数据竞争。
// 加 -DFIXED：读写同一个实例时用互斥锁保护，同样的读写在 TSan 下没有报告。
#include <cassert>
#include <cstdio>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

constexpr int kIters = 2000;

// 第一层：每个线程持有自己的 shared_ptr 副本，并发拷贝、析构只改控制块里的原子计数，安全。
void copies_are_fine() {
    auto config = std::make_shared<const int>(42);  // 只读对象，多线程读也安全
    std::vector<std::thread> pool;
    for (int t = 0; t < 4; ++t) {
        pool.emplace_back([local = config] {       // 按值捕获：每个线程一份副本
            for (int i = 0; i < kIters; ++i) {
                std::shared_ptr<const int> tmp = local;  // 原子加一
                assert(*tmp == 42);
            }                                            // 原子减一
        });
    }
    for (auto& th : pool) th.join();
    assert(config.use_count() == 1);  // 线程结束、副本析构后，计数回到 1
    std::puts("copies ok: use_count back to 1");
}

#ifndef FIXED
std::shared_ptr<int> shared_slot = std::make_shared<int>(0);  // 两个线程共用的同一个实例

int writer_and_reader() {
    std::thread writer([] {
        for (int i = 1; i <= kIters; ++i) shared_slot = std::make_shared<int>(i);  // 写：改实例的两个指针
    });
    long sum = 0;
    for (int i = 0; i < kIters; ++i) {
        std::shared_ptr<int> copy = shared_slot;  // 读：与上面的写没有同步，数据竞争
        sum += *copy;
    }
    writer.join();
    return static_cast<int>(sum % 1000) + *shared_slot;
}
#else
// 修复：读写同一个实例时加锁。锁内只做指针拷贝（一次原子加一），对象的使用放在锁外。
// C++20 的 std::atomic<std::shared_ptr<int>> 是标准给出的另一种写法；但 GCC 12 的实现在 load 里
// 用 relaxed 顺序解锁，TSan 会对它报告竞争，所以这里用互斥锁演示。
std::mutex slot_mutex;
std::shared_ptr<int> shared_slot = std::make_shared<int>(0);

std::shared_ptr<int> read_slot() {
    std::lock_guard<std::mutex> lock(slot_mutex);
    return shared_slot;
}

int writer_and_reader() {
    std::thread writer([] {
        for (int i = 1; i <= kIters; ++i) {
            auto fresh = std::make_shared<int>(i);  // 在锁外构造
            std::lock_guard<std::mutex> lock(slot_mutex);
            shared_slot.swap(fresh);                // 锁内只交换两个指针
        }                                           // 旧对象在锁外析构（fresh 离开作用域）
    });
    long sum = 0;
    for (int i = 0; i < kIters; ++i) {
        std::shared_ptr<int> copy = read_slot();  // 拿到自己的副本后，写线程再怎么换也不影响它
        sum += *copy;
    }
    writer.join();
    return static_cast<int>(sum % 1000) + *read_slot();
}
#endif

int main() {
    copies_are_fine();
    std::printf("final value %d\n", writer_and_reader());
    return 0;
}
