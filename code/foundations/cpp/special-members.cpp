// listing: stdout=rule of zero: moved\nuser-declared destructor: copied\nnoexcept move: vector moved 4\nthrowing move: vector copied 4
// 特殊成员函数何时被隐式声明、何时被抑制，以及它们对性能的直接影响。
#include <cassert>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

// 记录自己被拷贝还是被移动的成员
struct Probe {
    static inline int copies = 0, moves = 0;
    Probe() = default;
    Probe(const Probe&) { ++copies; }
    Probe(Probe&&) noexcept { ++moves; }
    Probe& operator=(const Probe&) { ++copies; return *this; }
    Probe& operator=(Probe&&) noexcept { ++moves; return *this; }
};

// --8<-- [start:suppression]
struct Zero { Probe p; };                      // 零法则：什么都不写，六个特殊成员全部隐式生成
struct WithDtor { Probe p; ~WithDtor() {} };   // 只写了析构函数：移动操作不再隐式声明
struct MoveOnly { std::unique_ptr<int> p; };   // 成员不可拷贝：隐式拷贝构造被定义为删除
struct UserCtor { explicit UserCtor(int) {} }; // 写了任何构造函数：默认构造不再隐式声明
struct UserMove {                              // 写了移动构造：拷贝操作被定义为删除
    UserMove() = default;
    UserMove(UserMove&&) = default;
};

static_assert(std::is_nothrow_move_constructible_v<Zero>);
static_assert(std::is_move_constructible_v<WithDtor>);       // 仍然“可移动”……
static_assert(!std::is_trivially_copyable_v<WithDtor>);      // ……但实际走的是拷贝构造（见 main）
static_assert(!std::is_copy_constructible_v<MoveOnly> && std::is_move_constructible_v<MoveOnly>);
static_assert(!std::is_default_constructible_v<UserCtor>);
static_assert(!std::is_copy_constructible_v<UserMove> && !std::is_copy_assignable_v<UserMove>);
static_assert(!std::is_move_assignable_v<UserMove>);         // 移动赋值也不会隐式声明
// --8<-- [end:suppression]

// --8<-- [start:rule-of-five]
// 五法则：类直接管理一块资源时，析构、拷贝构造、拷贝赋值、移动构造、移动赋值要一起写。
class Buffer {
public:
    explicit Buffer(std::size_t n) : size_(n), data_(new float[n]()) {}
    ~Buffer() { delete[] data_; }
    Buffer(const Buffer& o) : size_(o.size_), data_(new float[o.size_]) {      // 深拷贝
        std::memcpy(data_, o.data_, size_ * sizeof(float));
    }
    Buffer(Buffer&& o) noexcept                                                 // 偷走指针
        : size_(std::exchange(o.size_, 0)), data_(std::exchange(o.data_, nullptr)) {}
    Buffer& operator=(Buffer o) noexcept {  // 按值传参再交换：一份代码同时实现拷贝赋值与移动赋值
        std::swap(size_, o.size_);
        std::swap(data_, o.data_);
        return *this;                       // 旧资源随参数 o 一起析构；自赋值也安全
    }
    std::size_t size() const { return size_; }
    const float* data() const { return data_; }

private:
    std::size_t size_;
    float* data_;
};
// --8<-- [end:rule-of-five]

// 移动构造没有 noexcept：vector 扩容时为了强异常保证，宁可拷贝（std::move_if_noexcept）
struct RiskyMove {
    Probe p;
    RiskyMove() = default;
    RiskyMove(const RiskyMove&) = default;
    RiskyMove(RiskyMove&& o) : p(std::move(o.p)) {}
};

template <typename T>
std::pair<int, int> count_on_regrow() {
    std::vector<T> v(4);
    v.shrink_to_fit();
    Probe::copies = Probe::moves = 0;
    v.emplace_back();                       // 容量已满：重新分配并搬运原有的 4 个元素
    return {Probe::copies, Probe::moves};
}

int main() {
    Zero z1;
    Probe::copies = Probe::moves = 0;
    Zero z2 = std::move(z1);
    assert(Probe::moves == 1 && Probe::copies == 0);
    std::puts("rule of zero: moved");

    WithDtor w1;
    Probe::copies = Probe::moves = 0;
    WithDtor w2 = std::move(w1);            // 没有移动构造：右值绑定到 const WithDtor&，发生拷贝
    assert(Probe::copies == 1 && Probe::moves == 0);
    std::puts("user-declared destructor: copied");

    Buffer a(1024);
    Buffer b = a;                           // 拷贝构造：新的一块内存
    assert(b.data() != a.data() && b.size() == 1024);
    Buffer c = std::move(a);                // 移动构造：指针转移，源对象被掏空
    assert(a.data() == nullptr && a.size() == 0 && c.size() == 1024);
    b = c;                                  // 拷贝赋值（参数拷贝一份再交换）
    c = Buffer(8);                          // 移动赋值
    b = b;                                  // 自赋值
    assert(b.size() == 1024 && c.size() == 8);

    auto [zc, zm] = count_on_regrow<Zero>();
    assert(zc == 0 && zm == 4);
    std::printf("noexcept move: vector moved %d\n", zm);
    auto [rc, rm] = count_on_regrow<RiskyMove>();
    assert(rc == 4 && rm == 0);
    std::printf("throwing move: vector copied %d\n", rc);
    (void)z2;
    (void)w2;
    return 0;
}
