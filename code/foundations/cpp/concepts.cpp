// listing: stdout=tensorish: Buffer yes, std::vector<float> yes, NoData no, WrongSize no\npick: int -> signed_integral, unsigned -> integral, double -> floating_point\nmember: Matrix<float>::norm\(\) = 5, Matrix<int> has no norm\(\)\ncount via requires-branch: 6 \(has size\(\)\), 6 \(counted\)
// listing: reject=REJECT_NO_DATA error=no matching function for call to .l1_norm\(NoData\).(.|\n)*the required expression .t.data\(\). is invalid
// listing: reject=REJECT_WRONG_SIZE error=no matching function for call to .l1_norm\(WrongSize\).(.|\n)*.t.size\(\). does not satisfy return-type-requirement
// listing: reject=REJECT_MEMBER error=no matching function for call to .Matrix<int>::norm\(\).(.|\n)*constraints not satisfied
// C++20 概念（concept）：把“一个类型要支持哪些表达式”写成有名字的谓词，放进模板签名。
// 不满足时报错直接指出是哪一条要求不成立；多个重载的约束之间还能比较“谁更严格”。
#include <cassert>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdio>
#include <iterator>
#include <list>
#include <string>
#include <type_traits>
#include <vector>

// --8<-- [start:concept]
// 一个“像一维张量”的类型：有 data() 返回指向 float 的指针、size() 正好返回 std::size_t。
template <typename T>
concept Tensorish = requires(const T& t) {
    { t.data() } -> std::convertible_to<const float*>;  // 复合要求：表达式合法，且结果满足一个概念
    { t.size() } -> std::same_as<std::size_t>;
    typename T::value_type;                             // 类型要求
    requires std::is_floating_point_v<typename T::value_type>;  // 嵌套要求：一个编译期布尔条件
};

float l1_norm(const Tensorish auto& t) {  // 简写函数模板：等价于 template <Tensorish T> float l1_norm(const T&)
    float s = 0;
    for (std::size_t i = 0; i < t.size(); ++i) s += std::fabs(t.data()[i]);
    return s;
}

struct Buffer {
    using value_type = float;
    float v[3] = {1, -2, 3};
    const float* data() const { return v; }
    std::size_t size() const { return 3; }
};
struct NoData {
    using value_type = float;
    std::size_t size() const { return 0; }
};
struct WrongSize {  // size() 返回 int：概念只看语法，差一个类型也不行
    using value_type = float;
    const float* data() const { return nullptr; }
    int size() const { return 0; }
};
// --8<-- [end:concept]

// --8<-- [start:subsumption]
// 约束的偏序：signed_integral 的定义是 integral<T> && is_signed_v<T>，它“包含”（subsume）integral，
// 所以两个重载都可行时选更严格的那个。这只对用概念写的约束成立，两个手写的 enable_if 之间无法比较。
template <std::integral T>
const char* pick(T) { return "integral"; }
template <std::signed_integral T>
const char* pick(T) { return "signed_integral"; }
template <std::floating_point T>
const char* pick(T) { return "floating_point"; }
// --8<-- [end:subsumption]

// --8<-- [start:member]
// 类模板的成员函数也可以带约束：只有元素是浮点数时 Matrix<T> 才有 norm()。
template <typename T>
struct Matrix {
    std::vector<T> a;
    T norm() const requires std::floating_point<T> {
        T s = 0;
        for (T x : a) s += x * x;
        return std::sqrt(s);
    }
};

template <typename M>
concept HasNorm = requires(const M& m) { m.norm(); };

// requires 表达式也能直接当编译期布尔值用：有 size() 就用它，没有就逐个数
template <typename R>
std::size_t count(const R& r) {
    if constexpr (requires { r.size(); }) return r.size();
    else return static_cast<std::size_t>(std::distance(std::begin(r), std::end(r)));
}
// --8<-- [end:member]

int main() {
    static_assert(Tensorish<Buffer> && Tensorish<std::vector<float>>);
    static_assert(!Tensorish<NoData> && !Tensorish<WrongSize> && !Tensorish<std::vector<int>>);
    assert(l1_norm(Buffer{}) == 6.0f);
    assert(l1_norm(std::vector<float>{1, 2}) == 3.0f);
#ifdef REJECT_NO_DATA
    l1_norm(NoData{});
#endif
#ifdef REJECT_WRONG_SIZE
    l1_norm(WrongSize{});
#endif
    std::printf("tensorish: Buffer yes, std::vector<float> yes, NoData no, WrongSize no\n");

    assert(std::string(pick(1)) == "signed_integral" && std::string(pick(1u)) == "integral");
    assert(std::string(pick(1.0)) == "floating_point");
    std::printf("pick: int -> %s, unsigned -> %s, double -> %s\n", pick(1), pick(1u), pick(1.0));

    Matrix<float> mf{{3, 4}};
    Matrix<int> mi{{3, 4}};  // 可以实例化；只是没有 norm()
    static_assert(HasNorm<Matrix<float>> && !HasNorm<Matrix<int>>);
#ifdef REJECT_MEMBER
    mi.norm();
#endif
    assert(mf.norm() == 5.0f && mi.a.size() == 2);
    std::printf("member: Matrix<float>::norm() = %g, Matrix<int> has no norm()\n", static_cast<double>(mf.norm()));

    std::vector<int> v{1, 2, 3, 4, 5, 6};
    std::list<int> l{1, 2, 3, 4, 5, 6};
    int arr[6] = {};
    assert(count(v) == 6 && count(l) == 6 && count(arr) == 6);
    std::printf("count via requires-branch: %zu (has size()), %zu (counted)\n", count(v), count(arr));
    return 0;
}
