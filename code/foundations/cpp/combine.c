// listing: run
// listing: stdout=combine self-check ok: long \+, 11 rungs, aliasing changes the result
// listing: flags=-O1
// CS:APP 第 5 章的优化阶梯：同一个 combine 循环（把向量的全部元素用 OP 合并进 *dest）逐级改写。
// 元素类型与运算在编译时选（默认 long 与 +）：-DDATA_DOUBLE 选 double，-DOP_MUL 选乘法。
//   combine                   自检：每一级与参照结果比较（整数逐位相等，浮点在误差界内），并演示内存别名
//   combine bench N ROUNDS    先检查每一级的结果，再测每个元素的纳秒数（ROUNDS 个样本取最快）
//   combine bounds ROUNDS     本运算在寄存器里的延迟与倒数吞吐（ns/次），以及当作时钟的整数加法链
// 输出行："clock <ns/周期>"、"rung <名字> <ns/元素>"、"latency <ns>"、"throughput <ns>"。
// code/foundations/cpp/cpe-bench.py 用 -O1 编出四种组合并运行它们，把纳秒换算成周期写进记录。
#define _POSIX_C_SOURCE 199309L  // clock_gettime
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef DATA_DOUBLE
typedef double data_t;
#define DATA_NAME "double"
#define KEEP(x) __asm__ volatile("" : "+x"(x))  // 空的内联汇编：x 在 XMM 寄存器里“被改过”，编译器不能把循环算成闭式
#else
typedef long data_t;
#define DATA_NAME "long"
#define KEEP(x) __asm__ volatile("" : "+r"(x))  // 同上，x 在通用寄存器里；不生成任何指令
#endif
#ifdef OP_MUL
#define OP *
#define IDENT 1
#define OP_NAME "*"
#else
#define OP +
#define IDENT 0
#define OP_NAME "+"
#endif

// --8<-- [start:vec]
typedef struct {
    long len;
    data_t *data;
} vec_rec, *vec_ptr;

// noipa：让编译器把这三个函数当成另一个翻译单元里的函数，既不内联，也不做过程间分析。
// CS:APP 里它们确实在另一个文件里，编译 combine 时编译器看不到函数体。
__attribute__((noipa)) long vec_length(vec_ptr v) { return v->len; }

__attribute__((noipa)) int get_vec_element(vec_ptr v, long i, data_t *dest) {
    if (i < 0 || i >= v->len) return 0;  // 每次取元素都做边界检查
    *dest = v->data[i];
    return 1;
}

__attribute__((noipa)) data_t *get_vec_start(vec_ptr v) { return v->data; }
// --8<-- [end:vec]

// --8<-- [start:naive]
// combine1：每次迭代都调用 vec_length 判断循环条件，经 get_vec_element 取元素，结果累加在 *dest 里
void combine1(vec_ptr v, data_t *dest) {
    *dest = IDENT;
    for (long i = 0; i < vec_length(v); i++) {
        data_t val;
        get_vec_element(v, i, &val);
        *dest = *dest OP val;
    }
}

// combine2：代码移动（code motion），把不随迭代变化的 vec_length 提到循环外
void combine2(vec_ptr v, data_t *dest) {
    long length = vec_length(v);
    *dest = IDENT;
    for (long i = 0; i < length; i++) {
        data_t val;
        get_vec_element(v, i, &val);
        *dest = *dest OP val;
    }
}

// combine3：去掉循环里的过程调用，直接访问数组；但累加仍写在 *dest 里
void combine3(vec_ptr v, data_t *dest) {
    long length = vec_length(v);
    data_t *data = get_vec_start(v);
    *dest = IDENT;
    for (long i = 0; i < length; i++) *dest = *dest OP data[i];
}
// --8<-- [end:naive]

// --8<-- [start:restrict]
// combine3r：与 combine3 相同，只多了 restrict：程序员承诺 dest 与 data 指向的内存不重叠，
// 编译器于是可以把 *dest 留在寄存器里、循环结束后写一次（传入重叠的指针是未定义行为）
void combine3r(vec_ptr v, data_t *restrict dest) {
    long length = vec_length(v);
    const data_t *restrict data = get_vec_start(v);
    *dest = IDENT;
    for (long i = 0; i < length; i++) *dest = *dest OP data[i];
}
// --8<-- [end:restrict]

// --8<-- [start:accumulator]
// combine4：局部变量累加，循环里每个元素只有一次读内存，没有写
void combine4(vec_ptr v, data_t *dest) {
    long length = vec_length(v);
    data_t *data = get_vec_start(v);
    data_t acc = IDENT;
    for (long i = 0; i < length; i++) acc = acc OP data[i];
    *dest = acc;
}
// --8<-- [end:accumulator]

// --8<-- [start:unroll]
// combine5：2×1 循环展开，每次迭代处理两个元素，仍只有一个累加器，运算顺序与 combine4 完全相同
void combine5(vec_ptr v, data_t *dest) {
    long length = vec_length(v), limit = length - 1, i;
    data_t *data = get_vec_start(v);
    data_t acc = IDENT;
    for (i = 0; i < limit; i += 2) acc = (acc OP data[i]) OP data[i + 1];
    for (; i < length; i++) acc = acc OP data[i];  // 收尾：剩下的不足一组的元素
    *dest = acc;
}

// combine6：2×2，两个累加器分别合并偶数位与奇数位的元素，两条依赖链并行
void combine6(vec_ptr v, data_t *dest) {
    long length = vec_length(v), limit = length - 1, i;
    data_t *data = get_vec_start(v);
    data_t acc0 = IDENT, acc1 = IDENT;
    for (i = 0; i < limit; i += 2) {
        acc0 = acc0 OP data[i];
        acc1 = acc1 OP data[i + 1];
    }
    for (; i < length; i++) acc0 = acc0 OP data[i];
    *dest = acc0 OP acc1;
}

// combine7：2×1a，重结合（reassociation）：先合并两个元素，再并进累加器
void combine7(vec_ptr v, data_t *dest) {
    long length = vec_length(v), limit = length - 1, i;
    data_t *data = get_vec_start(v);
    data_t acc = IDENT;
    for (i = 0; i < limit; i += 2) acc = acc OP (data[i] OP data[i + 1]);
    for (; i < length; i++) acc = acc OP data[i];
    *dest = acc;
}
// --8<-- [end:unroll]

// combine4x4：4×4，四个累加器
void combine4x4(vec_ptr v, data_t *dest) {
    long length = vec_length(v), limit = length - 3, i;
    data_t *data = get_vec_start(v);
    data_t a0 = IDENT, a1 = IDENT, a2 = IDENT, a3 = IDENT;
    for (i = 0; i < limit; i += 4) {
        a0 = a0 OP data[i];
        a1 = a1 OP data[i + 1];
        a2 = a2 OP data[i + 2];
        a3 = a3 OP data[i + 3];
    }
    for (; i < length; i++) a0 = a0 OP data[i];
    *dest = (a0 OP a1) OP (a2 OP a3);
}

// --8<-- [start:kxk]
// combine8x8：8×8，八个累加器，八条互不相关的依赖链
void combine8x8(vec_ptr v, data_t *dest) {
    long length = vec_length(v), limit = length - 7, i;
    data_t *d = get_vec_start(v);
    data_t a0 = IDENT, a1 = IDENT, a2 = IDENT, a3 = IDENT, a4 = IDENT, a5 = IDENT, a6 = IDENT, a7 = IDENT;
    for (i = 0; i < limit; i += 8) {
        a0 = a0 OP d[i];
        a1 = a1 OP d[i + 1];
        a2 = a2 OP d[i + 2];
        a3 = a3 OP d[i + 3];
        a4 = a4 OP d[i + 4];
        a5 = a5 OP d[i + 5];
        a6 = a6 OP d[i + 6];
        a7 = a7 OP d[i + 7];
    }
    for (; i < length; i++) a0 = a0 OP d[i];
    *dest = ((a0 OP a1) OP (a2 OP a3)) OP ((a4 OP a5) OP (a6 OP a7));
}

// combine8x1a：8×1a，一个累加器，每次并入八个元素先按树形合并的结果
void combine8x1a(vec_ptr v, data_t *dest) {
    long length = vec_length(v), limit = length - 7, i;
    data_t *d = get_vec_start(v);
    data_t acc = IDENT;
    for (i = 0; i < limit; i += 8)
        acc = acc OP (((d[i] OP d[i + 1]) OP (d[i + 2] OP d[i + 3])) OP ((d[i + 4] OP d[i + 5]) OP (d[i + 6] OP d[i + 7])));
    for (; i < length; i++) acc = acc OP d[i];
    *dest = acc;
}
// --8<-- [end:kxk]

typedef void (*combiner)(vec_ptr, data_t *);
static const struct {
    const char *name;
    combiner f;
    int same_order;  // 1：运算顺序与 combine4 相同，浮点结果也必须逐位相等
} RUNGS[] = {
    {"combine1", combine1, 1},    {"combine2", combine2, 1},     {"combine3", combine3, 1},
    {"combine3r", combine3r, 1},  {"combine4", combine4, 1},     {"combine5", combine5, 1},
    {"combine6", combine6, 0},    {"combine7", combine7, 0},     {"combine4x4", combine4x4, 0},
    {"combine8x8", combine8x8, 0}, {"combine8x1a", combine8x1a, 0},
};
enum { NRUNGS = sizeof RUNGS / sizeof RUNGS[0] };

static unsigned long long rng_state = 0x9E3779B97F4A7C15ull;
static unsigned long long rng(void) {  // xorshift64*：确定性的伪随机数
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}

// 测试数据：整数乘法只用 ±1 与少量 2，保证任何部分积都不溢出（有符号溢出是未定义行为）；
// 浮点加法用 [0, 1) 的数，浮点乘法用 1 附近的数，不会上溢或下溢。
static void fill(data_t *d, long n) {
    for (long i = 0; i < n; i++) {
        double u = (double)(rng() >> 11) / 9007199254740992.0;  // [0, 1)
#if defined(DATA_DOUBLE) && defined(OP_MUL)
        d[i] = 1.0 + (u - 0.5) * 1e-3;
#elif defined(DATA_DOUBLE)
        d[i] = u;
#elif defined(OP_MUL)
        d[i] = (i % 64 == 0 && i / 64 < 60) ? 2 : (u < 0.5 ? -1 : 1);
#else
        d[i] = (long)(u * 2001.0) - 1000;
#endif
    }
}

// 参照：按下标顺序逐个合并，与 combine4 的运算顺序相同
static data_t reference(const data_t *d, long n) {
    data_t acc = IDENT;
    for (long i = 0; i < n; i++) acc = acc OP d[i];
    return acc;
}

#ifdef DATA_DOUBLE
// 重结合只改变浮点舍入：任何求和顺序的误差都不超过 γ(n-1)·Σ|x|，正数连乘的相对误差不超过 γ(n-1)
// （γ(k) = k·u / (1 − k·u)，u = 2^-53，见 Higham 书中的 γ 引理与求和误差分析），两个结果之差不超过两倍
static int close_enough(double got, double ref, const data_t *d, long n) {
    double u = DBL_EPSILON / 2, gamma = (n - 1) * u / (1 - (n - 1) * u), scale = 0;
#ifdef OP_MUL
    (void)d;
    scale = fabs(ref) / (1 - gamma);
#else
    for (long i = 0; i < n; i++) scale += fabs((double)d[i]);
#endif
    return fabs(got - ref) <= 2 * gamma * scale;
}
#endif

// 每一级的结果都与参照比较：整数逐位相等；浮点不改变运算顺序的逐位相等，重结合的在误差界内
static int check_rungs(vec_ptr v) {
    data_t ref = reference(v->data, v->len);
    for (int r = 0; r < NRUNGS; r++) {
        data_t got = 0;
        RUNGS[r].f(v, &got);
#ifdef DATA_DOUBLE
        int ok = RUNGS[r].same_order ? got == ref : close_enough(got, ref, v->data, v->len);
        if (!ok) fprintf(stderr, "%s: %.17g, reference %.17g\n", RUNGS[r].name, got, ref);
#else
        int ok = got == ref;
        if (!ok) fprintf(stderr, "%s: %ld, reference %ld\n", RUNGS[r].name, got, ref);
#endif
        if (!ok) return 0;
    }
    return 1;
}

// --8<-- [start:alias]
// 内存别名：dest 指向向量的最后一个元素时，combine3 每次迭代都改写了它要读的元素，结果与 combine4 不同。
// 编译器不能排除这种调用，所以不敢把 combine3 的 *dest 换成寄存器里的局部变量。
static int aliasing_changes_result(void) {
    data_t a[3] = {2, 3, 7}, b[3] = {2, 3, 7};
    vec_rec va = {3, a}, vb = {3, b};
    data_t s = (data_t)(IDENT OP 2) OP 3;  // 前两个元素合并的结果
    combine3(&va, &a[2]);                  // *dest = IDENT 先把 a[2] 清成 IDENT ……最后一步算的是 s OP s
    combine4(&vb, &b[2]);                  // 循环里只读 b[2] 的原值 7，最后才写回：s OP 7
    return a[2] == (s OP s) && b[2] == (s OP 7) && a[2] != b[2];
}
// --8<-- [end:alias]

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

// --8<-- [start:bounds]
#define STEP(x) \
    x = x OP y; \
    KEEP(x);
#define STEP8(x) STEP(x) STEP(x) STEP(x) STEP(x) STEP(x) STEP(x) STEP(x) STEP(x)

// 一条依赖链：每次运算都要等上一次的结果，所以每次的时间就是这种运算的延迟（latency）
__attribute__((noinline)) static data_t latency_chain(data_t x, data_t y, long n) {
    for (long i = 0; i < n; i += 8) { STEP8(x) }
    return x;
}

// 12 条互不相关的链交错：运算单元一直有活干，每次的平均时间是倒数吞吐（issue time，每隔几个周期能开始一次）。
// 链要足够多：延迟 L、每周期能开始 C 次的运算，至少要 L×C 条链同时在途（例如 3 × 3 = 9）
__attribute__((noinline)) static data_t throughput_chains(data_t y, long n) {
    data_t x0 = y, x1 = y, x2 = y, x3 = y, x4 = y, x5 = y, x6 = y, x7 = y, x8 = y, x9 = y, x10 = y, x11 = y;
    for (long i = n; i > 0; i--) {
        STEP(x0) STEP(x1) STEP(x2) STEP(x3) STEP(x4) STEP(x5) STEP(x6) STEP(x7) STEP(x8) STEP(x9) STEP(x10) STEP(x11)
    }
    return ((x0 OP x1) OP (x2 OP x3)) OP ((x4 OP x5) OP (x6 OP x7)) OP ((x8 OP x9) OP (x10 OP x11));
}

// 时钟：整数加法的延迟在所有 x86-64 核心上都是 1 个周期（Agner Fog 的指令表），
// 所以一条加法依赖链每次加法的纳秒数就是一个周期的纳秒数。
__attribute__((noinline)) static long clock_chain(long x, long y, long n) {
    for (long i = 0; i < n; i += 8) {
        x += y; __asm__ volatile("" : "+r"(x)); x += y; __asm__ volatile("" : "+r"(x));
        x += y; __asm__ volatile("" : "+r"(x)); x += y; __asm__ volatile("" : "+r"(x));
        x += y; __asm__ volatile("" : "+r"(x)); x += y; __asm__ volatile("" : "+r"(x));
        x += y; __asm__ volatile("" : "+r"(x)); x += y; __asm__ volatile("" : "+r"(x));
    }
    return x;
}
// --8<-- [end:bounds]

static volatile long sink_long;  // 让结果“被用到”，编译器不能删掉被测的循环
static volatile double sink_double;

static double clock_ns(int rounds) {  // 一个周期的纳秒数：rounds 个样本里最快的
    const long n = 1 << 20;
    long y = 1;
    KEEP(y);
    double best = 1e30;
    for (int r = 0; r < rounds; r++) {
        double t0 = now_ns();
        sink_long = clock_chain(0, y, n);
        double t = (now_ns() - t0) / n;
        if (t < best) best = t;
    }
    return best;
}

static int bounds(int rounds) {
    const long n = 1 << 20;
    data_t y = 1;  // 乘 1、加 1：数值不溢出也不变成非正规数，延迟与数值无关
    KEEP(y);
    double lat = 1e30, tput = 1e30;
    printf("clock %.6f\n", clock_ns(rounds));
    for (int r = 0; r < rounds; r++) {
        double t0 = now_ns();
        sink_double = (double)latency_chain(1, y, n);
        double t1 = now_ns();
        sink_double = (double)throughput_chains(y, n / 12);
        double t2 = now_ns();
        if ((t1 - t0) / n < lat) lat = (t1 - t0) / n;
        if ((t2 - t1) / (n / 12 * 12) < tput) tput = (t2 - t1) / (n / 12 * 12);
    }
    printf("latency %.6f\nthroughput %.6f\nclock %.6f\n", lat, tput, clock_ns(rounds));
    return 0;
}

static int bench(long n, int rounds) {
    data_t *d = malloc(n * sizeof *d);
    if (!d) return 1;
    fill(d, n);
    vec_rec v = {n, d};
    if (!check_rungs(&v)) return 1;  // 先检查结果，再计时
    long calls = n >= 65536 ? 1 : 65536 / n;  // 每个样本至少处理 65536 个元素，计时器的开销可以忽略
    printf("clock %.6f\n", clock_ns(rounds));
    for (int r = 0; r < NRUNGS; r++) {
        data_t out = 0;
        RUNGS[r].f(&v, &out);  // 预热：数据进缓存，代码进指令缓存
        double best = 1e30;
        for (int s = 0; s < rounds; s++) {
            double t0 = now_ns();
            for (long c = 0; c < calls; c++) RUNGS[r].f(&v, &out);
            double t = (now_ns() - t0) / ((double)calls * n);
            if (t < best) best = t;
        }
        sink_double = (double)out;
        printf("rung %s %.6f\n", RUNGS[r].name, best);
    }
    printf("clock %.6f\n", clock_ns(rounds));
    free(d);
    return 0;
}

static int self_check(void) {
    long n = 1003;  // 不是 8 的倍数：收尾循环也被检查到
    data_t *d = malloc(n * sizeof *d);
    if (!d) return 1;
    fill(d, n);
    vec_rec v = {n, d};
    int ok = check_rungs(&v);
    free(d);
    if (!ok || !aliasing_changes_result()) return 1;
    printf("combine self-check ok: %s %s, %d rungs, aliasing changes the result\n", DATA_NAME, OP_NAME, NRUNGS);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return self_check();
    if (strcmp(argv[1], "bench") == 0 && argc == 4) return bench(atol(argv[2]), atoi(argv[3]));
    if (strcmp(argv[1], "bounds") == 0 && argc == 3) return bounds(atoi(argv[2]));
    fprintf(stderr, "usage: %s [bench N ROUNDS | bounds ROUNDS]\n", argv[0]);
    return 2;
}
