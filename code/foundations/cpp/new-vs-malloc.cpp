// listing: stdout=new: 1 operator new, 1 ctor\nmalloc: 0 ctor\nnew\[3\]: 3 ctors, cookie 8 bytes\nplacement new: 0 operator new
// new 表达式 = operator new（取内存）+ 构造函数；malloc 只给字节。
// 本文件替换了全局的 operator new/delete，用计数器观察每一步；替换版照 libstdc++ 的写法，失败时循环调用 new_handler。
#include <cassert>
#include <cstdio>
#include <cstdlib>
#include <new>

// --8<-- [start:operator-new]
static int g_news = 0, g_deletes = 0;
static std::size_t g_last_size = 0;

void* operator new(std::size_t n) {
    ++g_news;
    g_last_size = n;
    if (n == 0) n = 1;                       // malloc(0) 的结果由实现决定，先避开
    for (;;) {
        if (void* p = std::malloc(n)) return p;
        std::new_handler h = std::get_new_handler();
        if (h == nullptr) throw std::bad_alloc();
        h();                                 // 处理函数可以释放储备内存后返回，让循环重试
    }
}
void* operator new[](std::size_t n) { return ::operator new(n); }
// noinline：否则 g++ -O2 内联后把 free 与 operator new 配对，误报 -Wmismatched-new-delete
[[gnu::noinline]] void operator delete(void* p) noexcept { ++g_deletes; std::free(p); }
void operator delete[](void* p) noexcept { ::operator delete(p); }
void operator delete(void* p, std::size_t) noexcept { ::operator delete(p); }
void operator delete[](void* p, std::size_t) noexcept { ::operator delete(p); }
// --8<-- [end:operator-new]

struct Tensor {
    static inline int ctors = 0, dtors = 0;
    float* data;
    Tensor() : data(static_cast<float*>(std::malloc(16 * sizeof(float)))) { ++ctors; }
    ~Tensor() { std::free(data); ++dtors; }
};

int main() {
    // 1. new 表达式：一次 operator new，一次构造；delete：一次析构，一次 operator delete。
    int news = g_news, deletes = g_deletes;
    Tensor* t = new Tensor;
    assert(g_news == news + 1 && g_last_size == sizeof(Tensor) && Tensor::ctors == 1);
    delete t;
    assert(g_deletes == deletes + 1 && Tensor::dtors == 1);
    std::printf("new: %d operator new, %d ctor\n", g_news - news, Tensor::ctors);

    // 2. malloc 只给字节：不调用构造函数，也不经过 operator new。
    news = g_news;
    void* raw = std::malloc(sizeof(Tensor));
    assert(g_news == news && Tensor::ctors == 1);
    std::free(raw);
    std::printf("malloc: %d ctor\n", Tensor::ctors - 1);

    // 3. new[]：有非平凡析构函数时，Itanium C++ ABI 在数组前多要一个“cookie”记录元素个数，
    //    delete[] 靠它知道要析构几个。平凡析构的类型没有 cookie。
    Tensor* arr = new Tensor[3];
    std::size_t cookie = g_last_size - 3 * sizeof(Tensor);
    assert(Tensor::ctors == 4 && cookie == sizeof(std::size_t));
    delete[] arr;
    assert(Tensor::dtors == 4);
    int* ints = new int[3];
    assert(g_last_size == 3 * sizeof(int));  // 没有 cookie
    delete[] ints;
    std::printf("new[3]: %d ctors, cookie %zu bytes\n", Tensor::ctors - 1, cookie);

    // 4. placement new：在已有的内存上只做构造，不分配；析构要显式调用，内存由原主人释放。
    news = g_news;
    alignas(Tensor) unsigned char buf[sizeof(Tensor)];
    Tensor* p = new (buf) Tensor;
    assert(static_cast<void*>(p) == buf && Tensor::ctors == 5);
    p->~Tensor();
    assert(Tensor::dtors == 5);
    std::printf("placement new: %d operator new\n", g_news - news);

    return 0;
}
