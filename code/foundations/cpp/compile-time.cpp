// listing: run
// listing: stdout=crc ok: cbf43926\n.*runtime ok
// listing: reject=OVERFLOW error=overflow in constant expression
// listing: reject=CONSTEVAL_RUNTIME error=is not a constant expression
// listing: reject=CONSTINIT_DYNAMIC error=constinit
// 编译期计算：constexpr 函数既能在编译期也能在运行期求值；常量求值中的未定义行为是编译错误；
// consteval 只能在编译期调用；constinit 保证静态变量在编译期初始化。三个 reject 各演示一种被拒绝的写法。
#include <array>
#include <cassert>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <string_view>
#include <type_traits>
#include <vector>

// --8<-- [start:table]
// CRC-32（IEEE 802.3，反射多项式 0xEDB88320）的 256 项查找表在编译期生成，运行时只读。
constexpr std::array<std::uint32_t, 256> make_crc_table() {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
        std::uint32_t c = i;
        for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        t[i] = c;
    }
    return t;
}
constexpr auto kCrcTable = make_crc_table();  // constexpr 变量：初始化必须是常量表达式

constexpr std::uint32_t crc32(std::string_view s) {
    std::uint32_t c = 0xFFFFFFFFu;
    for (unsigned char ch : s) c = kCrcTable[(c ^ ch) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}
static_assert(crc32("123456789") == 0xCBF43926u);  // CRC-32 的标准校验值，编译期就验证了
// --8<-- [end:table]

// --8<-- [start:ub]
constexpr int square(int x) { return x * x; }
static_assert(square(46340) == 2147395600);  // 46340² 还在 int 范围内
#ifdef OVERFLOW
static_assert(square(46341) > 0);            // 有符号溢出是未定义行为：常量求值必须诊断，编译失败
#endif

// C++20：constexpr 函数里可以用 new/delete 和 std::vector，只要分配在求值结束前释放（瞬时分配）
constexpr int sum_of_first(int n) {
    std::vector<int> v(n);
    std::iota(v.begin(), v.end(), 1);
    return std::accumulate(v.begin(), v.end(), 0);
}
static_assert(sum_of_first(100) == 5050);
// --8<-- [end:ub]

// --8<-- [start:consteval]
consteval int tile_bytes(int rows, int cols, int elem) { return rows * cols * elem; }  // 只能在编译期调用
constexpr int kTile = tile_bytes(128, 64, 2);  // 128 × 64 的 FP16 分块：16 KiB
static_assert(kTile == 16384);

int runtime_rows(int r) {
#ifdef CONSTEVAL_RUNTIME
    return tile_bytes(r, 64, 2);               // r 是运行期的值：consteval 调用不是常量表达式，编译失败
#else
    return r * 64 * 2;
#endif
}

constexpr const char* where() {
    return std::is_constant_evaluated() ? "compile time" : "run time";  // 同一个函数，两种求值环境
}
// --8<-- [end:consteval]

// --8<-- [start:constinit]
int dynamic_value() { return 42; }           // 不是 constexpr：只能在运行期求值
constinit int table_size = 1 << 10;          // 保证静态初始化：没有初始化顺序问题
#ifdef CONSTINIT_DYNAMIC
constinit int bad = dynamic_value();         // 需要动态初始化：constinit 拒绝它，编译失败
#endif
// --8<-- [end:constinit]

int main(int argc, char**) {
    std::printf("crc ok: %08x\n", crc32("123456789"));
    // 同一个 constexpr 函数在运行期也能用，参数来自运行期
    volatile int n = 10 + argc - 1;
    assert(square(n) == 100 && sum_of_first(n) == 55 && runtime_rows(n) == 1280);
    constexpr const char* ct = where();
    assert(std::string_view(ct) == "compile time" && std::string_view(where()) == "run time");
    table_size *= 2;                          // constinit 不是 const：之后可以修改
    assert(table_size == 2048);
    std::puts("runtime ok");
    return 0;
}
