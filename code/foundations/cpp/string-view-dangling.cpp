// listing: expect-sanitizer=address
// listing: stdout=prefix cuda:
// string_view 与 span 只是“指针 + 长度”，不拥有数据：它指向的对象先死，视图就悬空。
// 默认编译：用返回临时 std::string 的函数初始化 string_view，临时量在这一行结束时析构，
// 其堆缓冲区（字符串超过 15 个字符，不在对象内部）已释放，再读视图 ASan 报告 heap-use-after-free。
// 加 -DFIXED：先把字符串存进一个具名对象，视图指向活着的对象。
#include <cstdio>
#include <string>
#include <string_view>

std::string device_name() { return "cuda:0 (NVIDIA H200, 141 GB HBM3e)"; }  // 34 个字符，存于堆上

// --8<-- [start:bug]
int main() {
#ifdef FIXED
    std::string owner = device_name();
    std::string_view name = owner;            // 视图指向 owner，owner 活到 main 结束
#else
    std::string_view name = device_name();    // 临时 string 在分号处析构，name 悬空
#endif
    std::string prefix(name.substr(0, 5));     // 未修复时：从已释放的堆内存拷贝
    std::printf("prefix %s\n", prefix.c_str());
    return 0;
}
// --8<-- [end:bug]
