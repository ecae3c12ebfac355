// listing: stdout=crtp: relu 0 2\ntype erasure: 3 callables, sum 13\nif constexpr: int8 saturates to 127\nexplicit instantiation: 9
// 常用的 C++ 惯用法：CRTP（静态多态）、类型擦除、if constexpr 分派、显式实例化。
#include <cassert>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

// --8<-- [start:crtp]
// CRTP（奇异递归模板模式）：基类以派生类为模板参数，编译期就知道该调谁，没有虚表，可以内联。
template <typename Derived>
struct Activation {
    float operator()(float x) const { return static_cast<const Derived&>(*this).apply(x); }
};
struct Relu : Activation<Relu> {
    float apply(float x) const { return x > 0 ? x : 0; }
};

template <typename Act>
float run(const Activation<Act>& act, float x) { return act(x); }  // 每种 Act 实例化一份，调用可内联
// --8<-- [end:crtp]

// --8<-- [start:erasure]
// 类型擦除：对外是一个普通类，对内用虚函数包住任意类型。std::function、std::any 都是这个结构。
class Callable {
    struct Concept {
        virtual ~Concept() = default;
        virtual int call(int) const = 0;
    };
    template <typename F>
    struct Model final : Concept {
        F f;
        explicit Model(F fn) : f(std::move(fn)) {}
        int call(int x) const override { return f(x); }
    };
    std::unique_ptr<Concept> self_;

public:
    template <typename F>
    Callable(F f) : self_(std::make_unique<Model<F>>(std::move(f))) {}  // 任何可调用对象都能放进来
    int operator()(int x) const { return self_->call(x); }
};

int twice(int x) { return 2 * x; }
struct AddN { int n; int operator()(int x) const { return x + n; } };
// --8<-- [end:erasure]

// --8<-- [start:constexpr-if]
// if constexpr：按类型在编译期选分支，没选中的分支不实例化（取代一部分标签分派与 SFINAE）。
template <typename T>
T saturate(long v) {
    if constexpr (std::is_floating_point_v<T>) {
        return static_cast<T>(v);
    } else {
        static_assert(std::is_integral_v<T>, "saturate needs an arithmetic type");
        constexpr long lo = static_cast<long>(std::numeric_limits<T>::min());
        constexpr long hi = static_cast<long>(std::numeric_limits<T>::max());
        return static_cast<T>(v < lo ? lo : (v > hi ? hi : v));
    }
}
// --8<-- [end:constexpr-if]

// --8<-- [start:explicit]
template <typename T>
T square(T x) { return x * x; }
template int square<int>(int);  // 显式实例化定义：即使本文件没有调用，也在这里生成 square<int>
// 其他文件写 extern template int square<int>(int); 就不再各自实例化，直接链接到这一份
// --8<-- [end:explicit]

int main() {
    Relu relu;
    std::printf("crtp: relu %g %g\n", run(relu, -1.0f), run(relu, 2.0f));

    std::vector<Callable> fs;
    fs.emplace_back(twice);
    fs.emplace_back(AddN{3});
    fs.emplace_back([](int x) { return x * x; });
    int sum = 0;
    for (const auto& f : fs) sum += f(2);  // 2*2 + (2+3) + 2*2
    assert(sum == 13);
    std::printf("type erasure: %zu callables, sum %d\n", fs.size(), sum);

    assert(saturate<std::int8_t>(1000) == 127 && saturate<std::int8_t>(-1000) == -128);
    assert(saturate<float>(1000) == 1000.0f);
    std::printf("if constexpr: int8 saturates to %d\n", saturate<std::int8_t>(1000));

    std::printf("explicit instantiation: %d\n", square(3));
    return 0;
}
