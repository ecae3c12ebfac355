// listing: expect-sanitizer=address
// listing: stdout=pool reuse ok
// 内存池会把释放后使用（use-after-free）藏起来：块还在池的大内存里，对 malloc 和 ASan 来说“仍然有效”。
// memory-pool.hpp 在释放时把块标记为不可访问（poison），于是默认编译下的越界写被 ASan 报告；
// 加 -DFIXED：释放前用完指针、释放后不再碰它，程序干净地运行。
#include "memory-pool.hpp"

#include <cstdio>

struct Request {
    int id;
    char prompt[20];
};

int main() {
    FixedPool pool(sizeof(Request), 16);
    auto* r = static_cast<Request*>(pool.allocate());
    r->id = 7;
#ifdef FIXED
    int id = r->id;  // 先读出需要的字段
    pool.deallocate(r);
#else
    pool.deallocate(r);
    int id = r->id;  // 错误：块已经还给池子，可能马上被下一个请求复用
#endif
    auto* next = static_cast<Request*>(pool.allocate());  // 后进先出：拿到的正是刚释放的那一块
    next->id = 8;
    std::printf("pool reuse ok: old id %d, new id %d, same block %d\n", id, next->id, next == r);
    pool.deallocate(next);
    return 0;
}
