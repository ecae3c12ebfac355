// listing: run
// listing: stdout=locality self-check ok: transpose blocked == naive, matmul ijk == jki == kij
// listing: flags=-O1
// CS:APP 第 6 章：同样的运算，访存顺序不同，缓存缺失的次数就不同。
//   locality                          自检：分块转置与朴素转置结果相同，三种循环顺序的矩阵乘结果逐位相同
//   locality transpose N LD B ROUNDS  N×N double 矩阵（行距 LD）的朴素转置与分块转置（块边长 B），每个元素的纳秒数
//   locality matmul N ROUNDS          ijk、jki、kij 三种循环顺序的 N×N 矩阵乘，每次内层迭代的纳秒数
// 输出行："transpose <naive|blocked> <N> <LD> <B> <ns/元素>"、"matmul <顺序> <N> <ns/迭代>"。
#define _POSIX_C_SOURCE 199309L  // clock_gettime
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// --8<-- [start:transpose]
// 行主序的 n×n 矩阵，ld（leading dimension）是相邻两行的间距（以元素计），ld ≥ n；ld > n 的部分是填充。
// 朴素转置：按行读 src（步长 1），按列写 dst（步长 ld）。dst 的一列跨 n 条缓存行，
// 这些行在被写满 8 个 double 之前若已被换出，每条就要从下一级取好几次
void transpose_naive(double *dst, const double *src, long n, long ld) {
    for (long i = 0; i < n; i++)
        for (long j = 0; j < n; j++) dst[j * ld + i] = src[i * ld + j];
}

// 分块转置：一次只转置一个 b×b 的块。块里 src 的 b 条行与 dst 的 b 条行同时留在缓存里，
// 每条取进来的缓存行在被换出之前用满（b = 8 时正好 8 个 double = 64 字节）
void transpose_blocked(double *dst, const double *src, long n, long ld, long b) {
    for (long ii = 0; ii < n; ii += b)
        for (long jj = 0; jj < n; jj += b) {
            long iend = ii + b < n ? ii + b : n, jend = jj + b < n ? jj + b : n;
            for (long i = ii; i < iend; i++)
                for (long j = jj; j < jend; j++) dst[j * ld + i] = src[i * ld + j];
        }
}
// --8<-- [end:transpose]

// --8<-- [start:matmul]
// 三种循环顺序，C = A·B，行主序的 n×n 矩阵，c 事先清零。
// 三者对每个 c[i][j] 都按 k 从小到大累加，所以浮点结果逐位相同（不开 -march=native：
// 乘加被收缩成 FMA 会改变舍入）；只有访存顺序不同。
// ijk：内层循环沿 A 的一行（步长 1）、B 的一列（步长 n）
void matmul_ijk(double *c, const double *a, const double *b, long n) {
    for (long i = 0; i < n; i++)
        for (long j = 0; j < n; j++) {
            double sum = 0.0;
            for (long k = 0; k < n; k++) sum += a[i * n + k] * b[k * n + j];
            c[i * n + j] += sum;
        }
}

// jki：内层循环沿 A 的一列、C 的一列，两个都是步长 n
void matmul_jki(double *c, const double *a, const double *b, long n) {
    for (long j = 0; j < n; j++)
        for (long k = 0; k < n; k++) {
            double r = b[k * n + j];
            for (long i = 0; i < n; i++) c[i * n + j] += a[i * n + k] * r;
        }
}

// kij：内层循环沿 B 的一行、C 的一行，两个都是步长 1
void matmul_kij(double *c, const double *a, const double *b, long n) {
    for (long i = 0; i < n; i++)
        for (long k = 0; k < n; k++) {
            double r = a[i * n + k];
            for (long j = 0; j < n; j++) c[i * n + j] += r * b[k * n + j];
        }
}
// --8<-- [end:matmul]

typedef void (*matmul_fn)(double *, const double *, const double *, long);
static const struct {
    const char *name;
    matmul_fn f;
} ORDERS[] = {{"ijk", matmul_ijk}, {"jki", matmul_jki}, {"kij", matmul_kij}};

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void fill(double *x, long count, unsigned seed) {
    for (long i = 0; i < count; i++) x[i] = (double)((i * 7919 + seed * 104729) % 1000) / 997.0 - 0.5;
}

static int transpose_ok(long n, long ld, long b) {  // 分块转置与朴素转置逐元素相同，并且确实是转置
    double *src = malloc(n * ld * sizeof *src), *d1 = calloc(n * ld, sizeof *d1), *d2 = calloc(n * ld, sizeof *d2);
    if (!src || !d1 || !d2) return 0;
    fill(src, n * ld, 1);
    transpose_naive(d1, src, n, ld);
    transpose_blocked(d2, src, n, ld, b);
    int ok = memcmp(d1, d2, n * ld * sizeof *d1) == 0;
    for (long i = 0; i < n && ok; i++)
        for (long j = 0; j < n; j++) ok &= d1[j * ld + i] == src[i * ld + j];
    free(src);
    free(d1);
    free(d2);
    return ok;
}

static int matmul_ok(long n) {  // 三种顺序的结果逐位相同，并与一个元素的直接计算相同
    double *a = malloc(n * n * sizeof *a), *b = malloc(n * n * sizeof *b), *c[3];
    if (!a || !b) return 0;
    fill(a, n * n, 2);
    fill(b, n * n, 3);
    for (int o = 0; o < 3; o++) {
        c[o] = calloc(n * n, sizeof *c[o]);
        if (!c[o]) return 0;
        ORDERS[o].f(c[o], a, b, n);
    }
    int ok = memcmp(c[0], c[1], n * n * sizeof(double)) == 0 && memcmp(c[0], c[2], n * n * sizeof(double)) == 0;
    double direct = 0.0;  // c[1][2]
    for (long k = 0; k < n; k++) direct += a[1 * n + k] * b[k * n + 2];
    ok &= c[0][1 * n + 2] == direct;
    for (int o = 0; o < 3; o++) free(c[o]);
    free(a);
    free(b);
    return ok;
}

static int bench_transpose(long n, long ld, long b, int rounds) {
    if (ld < n || !transpose_ok(n < 300 ? n : 300, n < 300 ? ld : 300 + (ld - n), b)) return 1;  // 先检查，再计时
    double *src = malloc(n * ld * sizeof *src), *dst = malloc(n * ld * sizeof *dst);
    if (!src || !dst) return 1;
    fill(src, n * ld, 1);
    memset(dst, 0, n * ld * sizeof *dst);  // 先写一遍：计时里不含第一次访问时的缺页
    double best[2] = {1e30, 1e30};
    for (int r = 0; r < rounds; r++)
        for (int v = 0; v < 2; v++) {  // 两种写法交替测：机器的负载变化对两者的影响相近
            double t0 = now_ns();
            if (v == 0) transpose_naive(dst, src, n, ld);
            else transpose_blocked(dst, src, n, ld, b);
            double t = (now_ns() - t0) / ((double)n * n);
            if (t < best[v]) best[v] = t;
        }
    printf("transpose naive %ld %ld %ld %.6f\n", n, ld, b, best[0]);
    printf("transpose blocked %ld %ld %ld %.6f\n", n, ld, b, best[1]);
    free(src);
    free(dst);
    return 0;
}

static int bench_matmul(long n, int rounds) {
    if (!matmul_ok(n < 64 ? n : 64)) return 1;
    double *a = malloc(n * n * sizeof *a), *b = malloc(n * n * sizeof *b), *c = malloc(n * n * sizeof *c);
    if (!a || !b || !c) return 1;
    fill(a, n * n, 2);
    fill(b, n * n, 3);
    double best[3] = {1e30, 1e30, 1e30};
    for (int r = 0; r < rounds; r++)
        for (int o = 0; o < 3; o++) {
            memset(c, 0, n * n * sizeof *c);
            double t0 = now_ns();
            ORDERS[o].f(c, a, b, n);
            double t = (now_ns() - t0) / ((double)n * n * n);
            if (t < best[o]) best[o] = t;
        }
    for (int o = 0; o < 3; o++) printf("matmul %s %ld %.6f\n", ORDERS[o].name, n, best[o]);
    free(a);
    free(b);
    free(c);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        // 100 与 37：块边长不整除 n；ld = n + 8：带填充的行距
        if (!transpose_ok(100, 100, 16) || !transpose_ok(64, 72, 8) || !matmul_ok(37)) return 1;
        printf("locality self-check ok: transpose blocked == naive, matmul ijk == jki == kij\n");
        return 0;
    }
    if (strcmp(argv[1], "transpose") == 0 && argc == 6)
        return bench_transpose(atol(argv[2]), atol(argv[3]), atol(argv[4]), atoi(argv[5]));
    if (strcmp(argv[1], "matmul") == 0 && argc == 4) return bench_matmul(atol(argv[2]), atoi(argv[3]));
    fprintf(stderr, "usage: %s [transpose N LD B ROUNDS | matmul N ROUNDS]\n", argv[0]);
    return 2;
}
