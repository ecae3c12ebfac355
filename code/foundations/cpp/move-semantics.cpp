// listing: run
// listing: stdout=forwarding ok\n.*elision ok.*\n.*moved-from ok
// listing: reject=PESSIMIZING error=moving a local object in a return statement prevents copy elision
// 值类别、std::move/std::forward、复制消除与被移动后的对象：每一条都用 static_assert 或计数断言。
#include <cassert>
#include <cstdio>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

// --8<-- [start:categories]
// decltype((表达式)) 按值类别给出类型：左值 → T&，将亡值 → T&&，纯右值 → T。
template <class T> constexpr const char* category = "prvalue";
template <class T> constexpr const char* category<T&> = "lvalue";
template <class T> constexpr const char* category<T&&> = "xvalue";
#define CATEGORY(e) category<decltype((e))>

int global = 0;
int make_int() { return 1; }
int& ref_to_global() { return global; }

void categories() {
    int x = 0;
    int&& r = std::move(x);
    static_assert(CATEGORY(x) == std::string_view("lvalue"));             // 有名字的变量
    static_assert(CATEGORY(r) == std::string_view("lvalue"));             // 右值引用类型的变量，本身也是左值
    static_assert(CATEGORY(std::move(x)) == std::string_view("xvalue"));  // 返回 T&& 的函数调用
    static_assert(CATEGORY(make_int()) == std::string_view("prvalue"));   // 返回非引用类型的函数调用
    static_assert(CATEGORY(ref_to_global()) == std::string_view("lvalue"));
    static_assert(CATEGORY(42) == std::string_view("prvalue"));
    static_assert(CATEGORY(std::string("a").size()) == std::string_view("prvalue"));
    (void)r;
}
// --8<-- [end:categories]

// --8<-- [start:deduction]
template <class T> void by_value(T) {}
template <class T> constexpr bool deduces_ref(T&&) { return std::is_lvalue_reference_v<T>; }

void deduction() {
    const int ci = 0;
    const int& cr = ci;
    auto a = cr;             // auto 按值：丢掉引用和顶层 const
    decltype(auto) b = cr;   // decltype(auto)：保留声明的类型
    auto&& c = ci;           // 转发引用绑定左值：推导为 const int&
    auto&& d = 1;            // 绑定右值：推导为 int&&
    static_assert(std::is_same_v<decltype(a), int>);
    static_assert(std::is_same_v<decltype(b), const int&>);
    static_assert(std::is_same_v<decltype(c), const int&>);
    static_assert(std::is_same_v<decltype(d), int&&>);
    static_assert(std::is_same_v<decltype(ci), const int>);   // decltype(名字)：声明的类型
    static_assert(std::is_same_v<decltype((ci)), const int&>); // decltype((名字))：左值表达式，加 &
    // T&& 遇到左值时 T 推导为 U&，再按引用折叠 U& && → U&；遇到右值时 T 推导为 U。
    static_assert(deduces_ref(ci) && !deduces_ref(1));
    (void)b; (void)c; (void)d;
}
// --8<-- [end:deduction]

// --8<-- [start:counter]
struct Tracked {
    static inline int copies = 0, moves = 0;
    std::vector<int> data;
    explicit Tracked(int n = 0) : data(n) {}
    Tracked(const Tracked& o) : data(o.data) { ++copies; }
    Tracked(Tracked&& o) noexcept : data(std::move(o.data)) { ++moves; }
    Tracked& operator=(const Tracked& o) { data = o.data; ++copies; return *this; }
    Tracked& operator=(Tracked&& o) noexcept { data = std::move(o.data); ++moves; return *this; }
    static void reset() { copies = moves = 0; }
};
// --8<-- [end:counter]

// --8<-- [start:forwarding]
struct Sink {
    Tracked kept;
    template <class T> void take(T&& t) { kept = std::forward<T>(t); }  // 保持实参的值类别
    template <class T> void take_wrong(T&& t) { kept = t; }              // t 是左值：总是拷贝
};

template <class T, class... Args> T make(Args&&... args) {  // make_unique 式的完美转发工厂
    return T(std::forward<Args>(args)...);
}

void forwarding() {
    Sink s;
    Tracked t(8);
    Tracked::reset();
    s.take(t);                       // 左值 → 拷贝赋值
    s.take(Tracked(8));              // 右值 → 移动赋值
    assert(Tracked::copies == 1 && Tracked::moves == 1);
    Tracked::reset();
    s.take_wrong(Tracked(8));        // 忘了 forward：右值也被拷贝
    assert(Tracked::copies == 1 && Tracked::moves == 0);
    Tracked::reset();
    const Tracked ct(8);
    s.take(std::move(ct));           // const 对象上的 std::move 得到 const Tracked&&，只能匹配拷贝
    assert(Tracked::copies == 1 && Tracked::moves == 0);
    Tracked::reset();
    Tracked made = make<Tracked>(Tracked(4));  // 实参被移动一次进入 made（返回的纯右值直接初始化 made）
    assert(Tracked::copies == 0 && Tracked::moves == 1 && made.data.size() == 4);
    std::puts("forwarding ok");
}
// --8<-- [end:forwarding]

// --8<-- [start:elision]
struct Pinned {  // 既不能拷贝也不能移动
    int v;
    explicit Pinned(int x) : v(x) {}
    Pinned(const Pinned&) = delete;
    Pinned(Pinned&&) = delete;
};
Pinned make_pinned(int x) { return Pinned(x); }  // C++17：纯右值直接在调用者的存储里构造，不需要拷贝或移动

Tracked named_return() {
    Tracked local(16);
    return local;  // NRVO：允许但不保证消除；不消除时也是移动（局部变量在 return 中按右值对待）
}

#ifdef PESSIMIZING
Tracked pessimizing() {
    Tracked local(16);
    return std::move(local);  // 表达式不再是局部变量的名字，NRVO 不再适用，必然多一次移动
}
#endif

void elision() {
    Pinned p = make_pinned(7);
    assert(p.v == 7);
    Tracked::reset();
    Tracked t = named_return();
    assert(Tracked::copies == 0 && Tracked::moves <= 1);  // GCC 与 Clang 在这里实际做了 NRVO：0 次
    assert(t.data.size() == 16);
    std::printf("elision ok (named return: %d moves)\n", Tracked::moves);
}
// --8<-- [end:elision]

// --8<-- [start:moved-from]
// libstdc++（GCC）的布局：vector 是三个指针，移动它就是拷三个指针再把源置空，与元素个数无关；
// string 是 32 字节，其中 16 字节的内部缓冲区放得下 15 个字符，短字符串的“移动”其实是拷贝这些字节。
static_assert(sizeof(std::vector<int>) == 3 * sizeof(void*));
static_assert(sizeof(std::string) == 32);

void moved_from() {
    assert(std::string().capacity() == 15);
    std::vector<int> v{1, 2, 3};
    std::vector<int> w = std::move(v);
    assert(v.empty() && w.size() == 3);  // vector 的移动构造保证源对象变空
    std::string s(100, 'x');             // 超过短字符串缓冲区，数据在堆上
    std::string u = std::move(s);
    s = "reused";                        // 被移动后的 string “有效但未指定”：可以赋值、析构、调用无前置条件的成员
    assert(s == "reused" && u.size() == 100);
    std::puts("moved-from ok");
}
// --8<-- [end:moved-from]

int main() {
    categories();
    deduction();
    forwarding();
    elision();
    moved_from();
    return 0;
}
