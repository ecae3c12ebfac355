// listing: expect-sanitizer=address
// listing: stdout=by value 1, by reference 2\nmutable counter 3, original 0\ngeneric: 3 and 3.5\ncallback result 42
// listing: reject=REJECT_IMPLICIT_THIS error=implicit capture of .this. via .\[=\]. is deprecated
// lambda 就是一个编译器生成的类（闭包类型）加上它的一个对象。
// 默认编译：按引用捕获的局部变量已经出了作用域，回调再去读它，AddressSanitizer 报告 stack-use-after-scope。
// 加 -DFIXED：按值捕获，回调自带一份副本。
#include <cassert>
#include <cstdio>
#include <functional>
#include <memory>
#include <type_traits>
#include <utility>

// --8<-- [start:closure]
int closure_demo() {
    int x = 1;
    auto by_value = [x] { return x; };   // 闭包对象里有一个 int 成员，创建时拷贝
    auto by_ref = [&x] { return x; };    // 保存的是对 x 的引用
    x = 2;
    std::printf("by value %d, by reference %d\n", by_value(), by_ref());
    static_assert(sizeof(by_value) == sizeof(int));  // 按值捕获的变量就是数据成员

    auto empty = [] { return 7; };
    static_assert(std::is_empty_v<decltype(empty)>); // 不捕获：空类，可转成普通函数指针
    int (*fp)() = empty;
    assert(fp() == 7);

    // operator() 默认是 const 的，要改按值捕获的副本必须加 mutable
    int counter = 0;
    auto next = [counter]() mutable { return ++counter; };
    next();
    next();
    std::printf("mutable counter %d, original %d\n", next(), counter);

    // 初始化捕获（C++14）：把只能移动的对象搬进闭包
    auto owned = std::make_unique<int>(5);
    auto f = [p = std::move(owned)] { return *p; };
    assert(!owned && f() == 5);
    static_assert(!std::is_copy_constructible_v<decltype(f)>);  // 闭包因此也只能移动

    // 泛型 lambda：参数写 auto，operator() 是成员函数模板，每种实参类型实例化一次
    auto add = [](auto a, auto b) { return a + b; };
    std::printf("generic: %d and %.1f\n", add(1, 2), add(1.5, 2.0));
    return 0;
}
// --8<-- [end:closure]

// --8<-- [start:this]
struct Model {
    int layers = 4;
    auto make_counter() {
#ifdef REJECT_IMPLICIT_THIS
        return [=] { return layers; };        // C++20 起弃用：[=] 隐式捕获的是 this 指针，不是 layers 的副本
#else
        return [self = *this] { return self.layers; };  // 要副本就明说；要指针就写 [this]
#endif
    }
};
// --8<-- [end:this]

// --8<-- [start:dangling]
int run_callback() {
    std::function<int()> cb;
    {
        int answer = 42;
#ifndef FIXED
        cb = [&answer] { return answer; };    // 引用指向一个即将消亡的局部变量
#else
        cb = [answer] { return answer; };     // 按值捕获：闭包自带副本
#endif
    }                                         // answer 的生存期到此结束
    return cb();                              // 默认编译：读一个已出作用域的栈变量
}
// --8<-- [end:dangling]

int main() {
    closure_demo();
    assert(Model{}.make_counter()() == 4);
    std::printf("callback result %d\n", run_callback());
    return 0;
}
