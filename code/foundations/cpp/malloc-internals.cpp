// listing: flags=-fno-sanitize=address
// listing: stdout=new_handler called 2 times, then bad_alloc\nmalloc\(1\) usable 24 bytes\n64 KiB from heap, 1 MiB by mmap\nafter free: 1 MiB from heap\nmallopt: 1 MiB by mmap again
// 观察 glibc malloc（ptmalloc2）的真实行为，所以关掉 AddressSanitizer：它会把 malloc 换成自己的分配器。
// 断言针对 x86-64 上的 glibc（本页用 glibc 2.36 验证）；换了分配器（jemalloc、tcmalloc）就不成立。
#include <cassert>
#include <cstdio>
#include <cstdlib>
#include <malloc.h>  // mallinfo2、mallopt、malloc_usable_size：glibc 扩展
#include <new>
#include <unistd.h>

// --8<-- [start:handler]
static int g_calls = 0;
static void* g_reserve = nullptr;

void release_reserve() {          // operator new 每次取不到内存都会调用它
    ++g_calls;
    if (g_reserve != nullptr) {   // 第一次：交出储备内存后返回，operator new 会重试
        std::free(g_reserve);
        g_reserve = nullptr;
    } else {                      // 第二次：无能为力，卸下自己；operator new 随后抛出 bad_alloc
        std::set_new_handler(nullptr);
    }
}

void demo_new_handler() {
    g_reserve = std::malloc(64 << 10);  // 储备取小于 mmap 阈值的大小，免得它的释放抬高阈值（见下文）
    std::set_new_handler(release_reserve);
    try {
        // 1 PiB：超过 x86-64 四级页表下用户态的 128 TiB 地址空间，malloc 必然返回空指针
        void* huge = ::operator new(std::size_t{1} << 50);
        ::operator delete(huge);
        std::exit(1);
    } catch (const std::bad_alloc&) {
        std::printf("new_handler called %d times, then bad_alloc\n", g_calls);
    }
    assert(g_calls == 2 && g_reserve == nullptr);
}
// --8<-- [end:handler]

// --8<-- [start:mmap]
std::size_t mmapped_blocks() { return mallinfo2().hblks; }  // 当前由 mmap 直接服务的块数
void* volatile g_sink;
void* keep(void* p) { g_sink = p; return p; }  // 让指针“逃逸”，免得 -O2 把成对的 malloc/free 整个删掉

void demo_mmap_threshold() {
    // 块头开销：64 位 glibc 的块至少 32 字节，其中 8 字节是大小字段，所以 malloc(1) 实际可用 24 字节。
    void* tiny = keep(std::malloc(1));
    std::size_t usable = malloc_usable_size(tiny);
    assert(usable == 24);
    std::printf("malloc(1) usable %zu bytes\n", usable);
    std::free(tiny);

    const std::size_t before = mmapped_blocks(), mapped_bytes = mallinfo2().hblkhd;
    void* small = keep(std::malloc(64 << 10));  // 64 KiB < 初始阈值 128 KiB：从堆（brk 扩展的主分配区）切出
    assert(mmapped_blocks() == before);
    void* big = keep(std::malloc(1 << 20));     // 1 MiB ≥ 阈值：单独 mmap 一段
    assert(mmapped_blocks() == before + 1);
    // 映射大小 = 请求 + 8 字节头部，再按页取整：恰好比 1 MiB 多一页
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    assert(mallinfo2().hblkhd - mapped_bytes == (1 << 20) + page);
    std::puts("64 KiB from heap, 1 MiB by mmap");

    // 动态阈值：释放一个大于当前阈值（且不超过 32 MiB 上限）的 mmap 块，阈值上调到该块大小，
    // 于是同样大小的下一次请求改由堆满足，省掉一对 mmap/munmap 系统调用。
    std::free(big);
    void* again = keep(std::malloc(1 << 20));
    assert(mmapped_blocks() == before);
    std::puts("after free: 1 MiB from heap");
    std::free(again);

    // 显式设置阈值会关闭动态调整：此后 1 MiB 总是走 mmap，释放也不再抬高阈值。
    // 阈值只管“空闲链表和堆顶都满足不了”的请求：刚释放的 1 MiB 还留在堆顶，先用 malloc_trim 还给内核。
    int ok = mallopt(M_MMAP_THRESHOLD, 128 * 1024);
    assert(ok == 1);
    malloc_trim(0);
    for (int i = 0; i < 2; ++i) {
        void* p = keep(std::malloc(1 << 20));
        assert(mmapped_blocks() == before + 1);
        std::free(p);
    }
    std::puts("mallopt: 1 MiB by mmap again");
    std::free(small);
}
// --8<-- [end:mmap]

int main() {
    static_assert(sizeof(void*) == 8, "the sizes asserted here are those of a 64-bit glibc");
    demo_new_handler();
    demo_mmap_threshold();
    return 0;
}
