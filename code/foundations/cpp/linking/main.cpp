#include <cstdio>

#include "vec.h"

#ifdef USE_INTERNAL
int scale_factor();  // 想调用 vec.cpp 里的 static 函数：编译通过，链接时找不到符号
#endif

int main() {
    double a[3] = {1, 2, 3}, b[3] = {4, 5, 6};
    double d = dot(a, b, 3) + square(0.0);
#ifdef USE_INTERNAL
    d += scale_factor();
#endif
    std::printf("dot=%g calls=%d version=%s\n", d, vec_calls, vec_version());
    print_banner();
    return d == 32.0 ? 0 : 1;
}
