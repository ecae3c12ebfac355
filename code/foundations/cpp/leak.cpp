// listing: expect-sanitizer=leak
// listing: stdout=processed 2 batches, 1 failed
// 两种最常见的泄漏：异常跳过了 delete；shared_ptr 互相持有形成环。
// 默认编译：程序结束时 LeakSanitizer 报告泄漏。加 -DFIXED：用 unique_ptr 与 weak_ptr 改写，没有报告。
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <vector>

struct Batch {
    std::vector<float> data;
    explicit Batch(std::size_t n) : data(n, 1.0f) {}
};

void check(const Batch& b, bool bad) {
    if (bad) throw std::runtime_error("bad batch");  // 模拟中途失败
    (void)b;
}

// --8<-- [start:exception]
#ifndef FIXED
void process(bool bad) {
    Batch* b = new Batch(1024);  // 裸指针：所有权只存在于程序员的脑子里
    check(*b, bad);              // 抛异常时直接跳出函数……
    delete b;                    // ……这一行永远执行不到
}
#else
void process(bool bad) {
    auto b = std::make_unique<Batch>(1024);  // 所有权交给对象
    check(*b, bad);                          // 抛异常时栈展开会调用 ~unique_ptr
}
#endif
// --8<-- [end:exception]

// --8<-- [start:cycle]
struct Node {
    std::shared_ptr<Node> next;
#ifndef FIXED
    std::shared_ptr<Node> prev;  // 反向也是强引用：a、b 互相持有
#else
    std::weak_ptr<Node> prev;    // 反向改成弱引用，打破环
#endif
};

void make_pair_of_nodes() {
    auto a = std::make_shared<Node>();
    auto b = std::make_shared<Node>();
    a->next = b;
    b->prev = a;
}  // 局部的 a、b 析构后，有环时两个强计数都停在 1，谁也不会被释放
// --8<-- [end:cycle]

int main() {
    int failed = 0;
    for (bool bad : {false, true}) {
        try {
            process(bad);
        } catch (const std::runtime_error&) {
            ++failed;
        }
    }
    make_pair_of_nodes();
    std::printf("processed 2 batches, %d failed\n", failed);
    return 0;
}
