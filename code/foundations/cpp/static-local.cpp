// listing: expect-sanitizer=thread
// listing: stdout=Registry constructed 1 time\(s\), 8 threads agree
// C++11 起，函数内 static 变量的初始化是线程安全的（“magic statics”）：编译器插入守卫变量，
// 第一个到达的线程构造对象，其余线程等它完成。默认编译：手写的“检查空指针再 new”惰性初始化，
// ThreadSanitizer 报告数据竞争（还可能构造两次）。加 -DFIXED：改用函数内 static 变量，没有报告。
#include <atomic>
#include <cassert>
#include <cstdio>
#include <thread>
#include <vector>

struct Registry {
    static inline std::atomic<int> constructed{0};
    int kernels = 0;
    Registry() : kernels(128) { ++constructed; }
};

// --8<-- [start:lazy]
#ifndef FIXED
Registry* instance() {
    static Registry* p = nullptr;  // 指针本身是常量初始化的，没有竞争……
    if (p == nullptr) {            // ……竞争在这里：两个线程可能同时看到空指针
        p = new Registry;          // 可能构造两次，另一个对象泄漏
    }
    return p;
}
#else
Registry* instance() {
    static Registry r;             // 第一次执行到这里时构造，编译器保证只构造一次且其他线程会等待
    return &r;
}
#endif
// --8<-- [end:lazy]

int main() {
    std::vector<std::thread> pool;
    std::atomic<int> agree{0};
    for (int t = 0; t < 8; ++t) {
        pool.emplace_back([&agree] {
            if (instance()->kernels == 128) ++agree;
        });
    }
    for (auto& th : pool) th.join();
    assert(agree == 8);
#ifdef FIXED
    assert(Registry::constructed == 1);
#endif
    std::printf("Registry constructed %d time(s), %d threads agree\n", Registry::constructed.load(), agree.load());
    return 0;
}
