// listing: expect-sanitizer=address
// listing: stdout=first 1, size 5
// vector 扩容时把元素搬到一块新内存并释放旧的：扩容前取得的引用、指针与迭代器全部悬空。
// 默认编译：先取 v[0] 的引用，再 push_back 触发扩容，然后通过旧引用读，AddressSanitizer
// 报告 heap-use-after-free。加 -DFIXED：先 reserve 足够容量（不扩容就不失效），或改存下标。
#include <cstdio>
#include <vector>

// --8<-- [start:bug]
int main() {
    std::vector<int> v{1};  // 容量 1
#ifdef FIXED
    v.reserve(8);           // 之后 5 个元素都放得下：push_back 不重新分配，引用保持有效
#endif
    const int& first = v[0];
    for (int i = 2; i <= 5; ++i) v.push_back(i);  // 未 reserve 时容量 1 → 2 → 4 → 8，旧块被释放
    std::printf("first %d, size %zu\n", first, v.size());  // 未修复时：读已释放的旧块
    return 0;
}
// --8<-- [end:bug]
