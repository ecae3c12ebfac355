#include "vec.h"

#include <cstdio>

#ifndef VEC_VERSION
#define VEC_VERSION "v1"
#endif

int vec_calls = 0;

static int scale_factor() { return 1; }  // 内部链接：符号是局部的（nm 显示小写 t），别的 .o 引用不到

double dot(const double* a, const double* b, int n) {
    ++vec_calls;
    double s = 0;
    for (int i = 0; i < n; ++i) s += a[i] * b[i];
    return s * scale_factor() + 0 * square(1.0);
}

const char* vec_version() { return VEC_VERSION; }

void print_banner() { std::printf("banner: %s\n", vec_version()); }  // 共享库里这次调用也经过 PLT
