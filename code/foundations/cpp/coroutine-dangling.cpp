// listing: expect-sanitizer=address
// listing: stdout=read 40 chars after the temporary was gone
// 协程最常见的生命周期错误：按引用接收参数的惰性协程。协程帧里保存的只是引用（一个指针），
// 调用表达式结束时临时的 std::string 就析构了，而函数体要到第一次恢复时才开始执行。
// 默认编译：AddressSanitizer 报告 stack-use-after-scope：临时 string 对象本身在调用者的栈上，
// 协程恢复后经引用读它时它的作用域已经结束（它指向的堆缓冲区也已释放）。这是故意留下的错误。
// 加 -DFIXED：参数按值传递，字符串被移动进协程帧，随帧一起活到协程结束。
#include "generator.hpp"

#include <cstdio>
#include <string>

// --8<-- [start:dangling]
#ifdef FIXED
Generator<char> chars(std::string s) {         // 按值：帧里有一份自己的 string
#else
Generator<char> chars(const std::string& s) {  // 按引用：帧里只有一个指向调用者对象的指针
#endif
    for (char c : s) co_yield c;
}

int main() {
    auto g = chars(std::string(40, 'x'));  // 40 个字符超出短字符串优化，数据在堆上
    // 到这里临时字符串已经析构，协程却还一行都没执行（initial_suspend 是 suspend_always）
    int n = 0;
    for (char c : g) n += (c == 'x');      // 第一次恢复才读 s：默认编译下 s 已不存在
    std::printf("read %d chars after the temporary was gone\n", n);
    return n == 40 ? 0 : 1;
}
// --8<-- [end:dangling]
