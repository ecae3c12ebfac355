// listing: stdout=primary\npartial<T, T>\npartial<T, U\*>\nfull<int, int>\nvector<bool> packs bits
// listing: reject=REJECT_SFINAE error=no matching function for call to .halve\(double\).
// listing: reject=REJECT_CONCEPT error=no matching function for call to .scale\(int, int\).(.|\n)*constraints not satisfied
// listing: reject=REJECT_STATIC_ASSERT error=static assertion failed: only unsigned types
// listing: reject=REJECT_DELETED error=use of deleted function .void only_double\(int\).
// listing: reject=REJECT_AMBIGUOUS error=ambiguous template instantiation for .struct Pair<int\*, int\*>.
// listing: reject=REJECT_PHASE_ONE error=there are no arguments to .undeclared_helper. that depend on a template parameter
// 模板特化与偏特化的匹配结果，以及让模板拒绝一个类型的三种手段。
// 每个 REJECT_* 宏打开一处错误用法，测试会分别加 -D 编译并检查 g++ 的报错。
#include <concepts>
#include <cstdio>
#include <string_view>
#include <type_traits>
#include <vector>

// --8<-- [start:specialization]
template <typename T, typename U>  // 主模板
struct Pair { static constexpr const char* name = "primary"; };

template <typename T>              // 偏特化：两个参数相同
struct Pair<T, T> { static constexpr const char* name = "partial<T, T>"; };

template <typename T, typename U>  // 偏特化：第二个参数是指针
struct Pair<T, U*> { static constexpr const char* name = "partial<T, U*>"; };

template <>                        // 全特化：一组具体参数
struct Pair<int, int> { static constexpr const char* name = "full<int, int>"; };
// --8<-- [end:specialization]

// --8<-- [start:reject]
// 手段一：SFINAE。条件为假时 enable_if_t 没有 type，替换失败，这个重载从候选集中消失。
template <typename T, std::enable_if_t<std::is_integral_v<T>, int> = 0>
T halve(T x) { return x / 2; }

// 手段二：C++20 概念。约束不满足的模板同样不进入候选集，报错会指出哪条约束为假。
template <std::floating_point T>
T scale(T x, T s) { return x * s; }

// 手段三：static_assert。模板照常被选中，实例化函数体时才报错，不影响重载决议。
template <typename T>
T only_unsigned(T x) {
    static_assert(std::is_unsigned_v<T>, "only unsigned types");
    return x;
}

// 手段四：把不想要的重载声明为删除。它参与重载决议，被选中就报错（挡住隐式转换很好用）。
void only_double(double) {}
void only_double(int) = delete;
// --8<-- [end:reject]

// SFINAE 的用途不只是报错：两个互斥的重载按类型分派。
template <typename T, std::enable_if_t<std::is_integral_v<T>, int> = 0>
const char* kind(T) { return "integral"; }
template <typename T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
const char* kind(T) { return "floating"; }

// --8<-- [start:two-phase]
template <typename T>
void never_instantiated(T x) {
    x.no_such_member();   // 依赖于 T：第二阶段（实例化时）才检查；这个模板从未实例化，所以不报错
#ifdef REJECT_PHASE_ONE
    undeclared_helper();  // 不依赖于 T：第一阶段（读到定义时）就查找，找不到立即报错
#endif
}
// --8<-- [end:two-phase]

int main() {
    std::puts(Pair<float, double>::name);  // primary
    std::puts(Pair<float, float>::name);   // partial<T, T>
    std::puts(Pair<float, int*>::name);    // partial<T, U*>
    std::puts(Pair<int, int>::name);       // full<int, int>：全特化优先于任何偏特化
#ifdef REJECT_AMBIGUOUS
    std::puts(Pair<int*, int*>::name);     // 两个偏特化都匹配，且谁也不比谁更特化：歧义
#endif
    // 标准库里最有名的特化：vector<bool> 按位存储，operator[] 返回代理对象而不是 bool&。
    static_assert(!std::is_same_v<std::vector<bool>::reference, bool&>);
    static_assert(std::is_same_v<std::vector<char>::reference, char&>);
    std::puts("vector<bool> packs bits");

    if (std::string_view(kind(1)) != "integral" || std::string_view(kind(1.0)) != "floating") return 1;
    if (halve(10) != 5 || scale(2.0f, 0.5f) != 1.0f || only_unsigned(7u) != 7u) return 1;
#ifdef REJECT_SFINAE
    halve(1.5);           // 没有任何 halve 接受 double
#endif
#ifdef REJECT_CONCEPT
    scale(2, 3);          // int 不满足 std::floating_point
#endif
    only_double(1.0);
#ifdef REJECT_DELETED
    only_double(1);       // 精确匹配的是被删除的 int 版本，而不是转换成 double
#endif
#ifdef REJECT_STATIC_ASSERT
    only_unsigned(-1);    // 选中了模板，实例化函数体时 static_assert 失败
#endif
    return 0;
}
