// listing: std=c++23
// listing: stdout=parse: 42 ok; "4x2" -> bad digit at 1; "" -> empty\nvalue\(\) on an error threw bad_expected_access; value_or gives -1\nchain: "8" -> 16, "x" -> bad digit at 0\nsizeof\(expected<int, Error>\) = 12
// C++23 的 std::expected<T, E>：要么是一个 T，要么是一个错误 E，错误是返回值的一部分而不是异常。
// GCC 12 在 -std=c++23 下提供 <expected>（__cpp_lib_expected == 202202L），但还没有 and_then、
// transform 这些单子式（monadic）成员（P2505，宏值 202211L，之后的版本才有）；这里按宏值选择写法。
#include <cassert>
#include <cstdio>
#include <expected>
#include <string_view>

// --8<-- [start:parse]
struct Error {
    enum Kind { empty, bad_digit } kind;
    int where;  // 出错的位置
};

std::expected<int, Error> parse_int(std::string_view s) {
    if (s.empty()) return std::unexpected(Error{Error::empty, 0});
    int v = 0;
    for (int i = 0; i < static_cast<int>(s.size()); ++i) {
        if (s[i] < '0' || s[i] > '9') return std::unexpected(Error{Error::bad_digit, i});
        v = v * 10 + (s[i] - '0');
    }
    return v;  // 隐式构造一个含值的 expected
}
// --8<-- [end:parse]

// --8<-- [start:chain]
std::expected<int, Error> doubled(std::string_view s) {
#if __cpp_lib_expected >= 202211L
    return parse_int(s).transform([](int v) { return 2 * v; });  // 有值才变换，有错误原样传下去
#else
    auto r = parse_int(s);  // GCC 12：手写同样的分支
    if (!r) return std::unexpected(r.error());
    return 2 * *r;
#endif
}
// --8<-- [end:chain]

int main() {
    auto ok = parse_int("42");
    auto bad = parse_int("4x2");
    auto none = parse_int("");
    assert(ok.has_value() && *ok == 42);
    assert(!bad && bad.error().kind == Error::bad_digit && bad.error().where == 1);
    assert(!none && none.error().kind == Error::empty);
    std::printf("parse: %d ok; \"4x2\" -> bad digit at %d; \"\" -> empty\n", *ok, bad.error().where);

    bool threw = false;
    try {
        (void)bad.value();  // 有错误时 value() 抛出 std::bad_expected_access<Error>；operator* 则是未定义行为
    } catch (const std::bad_expected_access<Error>& e) {
        threw = e.error().where == 1;
    }
    assert(threw && bad.value_or(-1) == -1);
    std::printf("value() on an error threw bad_expected_access; value_or gives %d\n", bad.value_or(-1));

    auto d1 = doubled("8"), d2 = doubled("x");
    assert(d1 && *d1 == 16 && !d2 && d2.error().where == 0);
    std::printf("chain: \"8\" -> %d, \"x\" -> bad digit at %d\n", *d1, d2.error().where);

    // 值与错误共用一块存储（类似 union），另加一个标志：max(4, 8) + 1，对齐到 4 字节
    static_assert(sizeof(std::expected<int, Error>) == 12);
    std::printf("sizeof(expected<int, Error>) = %zu\n", sizeof(std::expected<int, Error>));
    return 0;
}
