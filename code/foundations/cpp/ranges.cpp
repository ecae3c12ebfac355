// listing: stdout=lazy: 0 calls before iterating; filter saw 8 elements, transform ran 3 times -> 4 16 36\nowning: a view over a temporary vector keeps it alive: 2 4 6\ndangling: find on a temporary returns std::ranges::dangling; on a span, an iterator -> 3\nprojection: sorted by age: Bo Al Cy
// listing: reject=REJECT_DANGLING error=no match for .operator\*. \(operand type is .std::ranges::borrowed_iterator_t<std::vector<int> >.\)
// C++20 ranges：视图（view）是惰性的、不拥有数据（owning_view 除外）的管道；算法对右值容器返回
// std::ranges::dangling，把“返回指向临时对象的迭代器”变成编译错误。每一条都由断言或 static_assert 检查。
#include <algorithm>
#include <cassert>
#include <cstdio>
#include <ranges>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

// --8<-- [start:lazy]
void lazy_pipeline() {
    std::vector<int> v(100);
    for (int i = 0; i < 100; ++i) v[i] = i + 1;
    int filtered = 0, transformed = 0;
    auto pipeline = v
        | std::views::filter([&](int x) { ++filtered; return x % 2 == 0; })
        | std::views::transform([&](int x) { ++transformed; return x * x; })
        | std::views::take(3);
    assert(filtered == 0 && transformed == 0);  // 只搭好了管道，一个元素也没碰
    std::string out;
    for (int x : pipeline) out += std::to_string(x) + " ";
    out.pop_back();
    // take(3) 取完第 3 个元素（6）后，循环的 ++ 仍把 filter 推进到下一个偶数 8，
    // 所以谓词看过 1..8 共 8 个元素；transform 只在解引用时运行，恰好 3 次
    assert(out == "4 16 36" && filtered == 8 && transformed == 3);
    std::printf("lazy: 0 calls before iterating; filter saw %d elements, transform ran %d times -> %s\n", filtered,
                transformed, out.c_str());
}
// --8<-- [end:lazy]

std::vector<int> make_vec() { return {1, 2, 3}; }

// --8<-- [start:dangling]
void lifetimes() {
    // 右值容器接进管道时被移动进 owning_view（P2415，GCC 12 已实现），视图拥有它，不会悬空
    auto doubled = make_vec() | std::views::transform([](int x) { return x * 2; });
    static_assert(std::is_same_v<std::ranges::range_value_t<decltype(doubled)>, int>);
    std::string out;
    for (int x : doubled) out += std::to_string(x) + " ";
    out.pop_back();
    assert(out == "2 4 6");
    std::printf("owning: a view over a temporary vector keeps it alive: %s\n", out.c_str());

    // 算法收到右值容器：返回的迭代器会指向已销毁的临时对象，于是返回类型换成 std::ranges::dangling，
    // 它什么操作都不支持，拿它解引用就是编译错误（打开 REJECT_DANGLING 看报错）
    auto it = std::ranges::find(make_vec(), 3);
    static_assert(std::is_same_v<decltype(it), std::ranges::dangling>);
#ifdef REJECT_DANGLING
    int bad = *std::ranges::find(make_vec(), 3);
#endif
    // span、string_view 是借用范围（borrowed_range）：迭代器指向的是别处的数据，临时的 span 销毁无妨
    std::vector<int> data = make_vec();
    auto it2 = std::ranges::find(std::span<const int>(data), 3);
    static_assert(std::ranges::borrowed_range<std::span<const int>>);
    assert(*it2 == 3);
    std::printf("dangling: find on a temporary returns std::ranges::dangling; on a span, an iterator -> %d\n", *it2);
}
// --8<-- [end:dangling]

// --8<-- [start:projection]
struct Person {
    std::string name;
    int age;
};

void projections() {
    std::vector<Person> people{{"Al", 40}, {"Bo", 25}, {"Cy", 51}};
    std::ranges::sort(people, {}, &Person::age);  // 比较器用默认的 less，投影取出 age
    std::string out;
    for (const auto& name : people | std::views::transform(&Person::name)) out += name + " ";
    out.pop_back();
    assert(out == "Bo Al Cy");
    std::printf("projection: sorted by age: %s\n", out.c_str());
}
// --8<-- [end:projection]

int main() {
    lazy_pipeline();
    lifetimes();
    projections();
    return 0;
}
