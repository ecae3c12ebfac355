// 一个极小的库：静态库与共享库都由它构建。
#pragma once

double dot(const double* a, const double* b, int n);  // 普通导出函数
const char* vec_version();                            // 可被 LD_PRELOAD 介入的函数
void print_banner();                                  // 库内部调用 vec_version
extern int vec_calls;                                 // 导出的全局数据：共享库里经 GOT 访问

template <typename T>  // 模板：每个用到 square<double> 的 .o 各有一份弱定义，链接器只留一份
T square(T x) { return x * x; }
