// listing: run
// listing: stdout=struct layout ok: bad 32 -> good 16 bytes, packed 16, cacheline 64
// 结构体的对齐与填充（x86-64 System V ABI）：每个成员放在自身对齐要求的整数倍偏移上，
// 结构体的对齐取成员中最大的一个，大小向上补到对齐的整数倍。下面每条规则都由 static_assert 在编译期检查。
#include <assert.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>

static_assert(sizeof(long) == 8 && alignof(double) == 8 && alignof(int) == 4 && alignof(short) == 2,
              "本清单按 x86-64 System V ABI（LP64）写");

// --8<-- [start:rules]
// 规则一：成员的偏移是它自身对齐要求的整数倍，不够就在前面插填充
struct S1 {
    int i;   // 偏移 0
    char c;  // 偏移 4
    int j;   // 偏移 8：5、6、7 三个字节是填充
};
static_assert(offsetof(struct S1, c) == 4 && offsetof(struct S1, j) == 8 && sizeof(struct S1) == 12, "S1");

// 规则二：结构体的大小是其对齐（最大成员的对齐）的整数倍，末尾补填充，
// 这样数组里每个元素的每个成员也都对齐
struct S2 {
    int i;
    int j;
    char c;  // 偏移 8，之后 3 个字节的尾部填充
};
static_assert(alignof(struct S2) == 4 && sizeof(struct S2) == 12, "S2");
static_assert(sizeof(struct S2[4]) == 48, "数组元素之间没有额外间隙：尾部填充已经算在 sizeof 里");
// --8<-- [end:rules]

// --8<-- [start:reorder]
// 五个成员共 16 个字节的数据，按这个顺序摆放却另有 16 个字节的填充
struct bad {
    char c;    // 0
    double d;  // 8（1..7 是填充）
    short s;   // 16
    int i;     // 20（18、19 是填充）
    char c2;   // 24，之后补 7 个字节到 8 的倍数
};
static_assert(offsetof(struct bad, d) == 8 && offsetof(struct bad, i) == 20 && sizeof(struct bad) == 32, "bad");

// 按对齐要求从大到小排：一个字节的填充也没有，小了一半
struct good {
    double d;  // 0
    int i;     // 8
    short s;   // 12
    char c;    // 14
    char c2;   // 15
};
static_assert(sizeof(struct good) == 16, "good");
// --8<-- [end:reorder]

// --8<-- [start:packed]
// packed 去掉全部填充：更小，但 d 落在偏移 1，成员访问可能跨缓存行，
// 取 &p.d 得到的是不对齐的 double*，在要求对齐的指令（或别的体系结构）上出错
struct __attribute__((packed)) packed {
    char c;
    double d;
    short s;
    int i;
    char c2;
};
static_assert(sizeof(struct packed) == 16 && offsetof(struct packed, d) == 1, "packed");

// 反过来，alignas 可以把对齐要求调大：每个计数器独占一条 64 字节的缓存行，避免伪共享
struct cacheline_counter {
    alignas(64) long value;
};
static_assert(alignof(struct cacheline_counter) == 64 && sizeof(struct cacheline_counter) == 64, "cacheline");
// --8<-- [end:packed]

int main(void) {
    struct cacheline_counter counters[2];
    // 两个计数器的地址相差 64 字节，并且每个都从缓存行边界开始
    int ok = (char *)&counters[1] - (char *)&counters[0] == 64 && (size_t)&counters[0] % 64 == 0;
    if (!ok) return 1;
    printf("struct layout ok: bad %zu -> good %zu bytes, packed %zu, cacheline %zu\n", sizeof(struct bad),
           sizeof(struct good), sizeof(struct packed), sizeof(struct cacheline_counter));
    return 0;
}
