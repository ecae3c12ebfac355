// listing: run
// listing: stdout=softmax_rows: .*PASS
// 自定义 C++ 算子 handbook_ext::softmax 与原地版本 handbook_ext::softmax_（逐行在线 softmax），
// 页面 docs/operator/custom-ops.md 嵌入它，实验 notebooks/operator/custom-op-lab.ipynb 编译并检查它。
//
// 同一个文件有两种编译方式：
//   1. 作为 PyTorch 扩展：torch.utils.cpp_extension.load(..., is_python_module=False) 编译时定义了
//      TORCH_EXTENSION_NAME，于是下面 #ifdef 里的注册代码生效：TORCH_LIBRARY 定义 schema，
//      TORCH_LIBRARY_IMPL 把 CPU kernel 与 Meta kernel（供 FakeTensor 推导形状）挂到调度器上。
//      CUDA 实现在 custom-op-ext.cu，有 GPU 时一起编译进同一个共享库。
//   2. 作为普通程序（tests/test_listings.py 用 g++ -Wall -Wextra -Werror 加 ASan/UBSan 编译）：
//      没有 PyTorch 头文件，只编译 kernel 本身和末尾自检的 main，与 double 精度参考比较后打印 PASS。
// kernel 本身不依赖 PyTorch：绑定层只负责检查输入、分配输出、取指针。
#include <cfloat>
#include <cmath>
#include <cstdint>

// --8<-- [start:kernel]
namespace handbook {

// 对 rows × cols 的行主序矩阵逐行做 softmax，y 可以等于 x（原地）：第二遍在同一位置先读后写。
// 与 online-softmax.cu 每个线程的递推相同：边读边维护 (最大值 m, d = Σ exp(x - m))，
// 只有遇到更大的值才把旧的 d 缩放到新的最大值下，所以每个元素只算一次 exp。
inline void softmax_rows(const float* x, float* y, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x + r * cols;
    float* out = y + r * cols;
    float m = -FLT_MAX, d = 0.0f;
    for (int64_t j = 0; j < cols; ++j) {
      const float v = in[j];
      if (v > m) {
        d = d * std::exp(m - v) + 1.0f;
        m = v;
      } else {
        d += std::exp(v - m);  // v = -inf（被掩码）时贡献 0
      }
    }
    const float inv_d = d > 0.0f ? 1.0f / d : 0.0f;  // 整行 -inf 时输出 0，与 online-softmax.cu 一致
    for (int64_t j = 0; j < cols; ++j) out[j] = std::exp(in[j] - m) * inv_d;
  }
}

}  // namespace handbook
// --8<-- [end:kernel]

#ifdef TORCH_EXTENSION_NAME
// --8<-- [start:includes]
// 只包含用到的头文件：torch/extension.h 会拉进整个 ATen 与 pybind11，编译慢几倍（页面的表格实测）。
// 两个宏一起才让误包含整套 ATen 算子头文件（ATen/Functions.h 等）时直接编译失败、守住编译时间：
// 头文件里的 #error 条件是 AT_PER_OPERATOR_HEADERS && TORCH_ASSERT_ONLY_METHOD_OPERATORS，
// 而 cpp_extension 不定义前者（只有 PyTorch 自己的构建定义它），只写后者什么也不检查。
#define AT_PER_OPERATOR_HEADERS
#define TORCH_ASSERT_ONLY_METHOD_OPERATORS
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>
// --8<-- [end:includes]

// --8<-- [start:register]
namespace {

int64_t last_dim(const at::Tensor& x) { return x.dim() == 0 ? 1 : x.size(-1); }

// CPU kernel：输出是与 x 同形状的连续张量（非连续输入先拷成连续）。
at::Tensor softmax_cpu(const at::Tensor& x) {
  TORCH_CHECK(x.scalar_type() == at::kFloat, "handbook_ext::softmax: expected float32, got ", x.scalar_type());
  const at::Tensor xc = x.contiguous();
  at::Tensor y = at::empty(x.sizes(), x.options());
  const int64_t cols = last_dim(x);
  if (x.numel() > 0) handbook::softmax_rows(xc.const_data_ptr<float>(), y.mutable_data_ptr<float>(), x.numel() / cols, cols);
  return y;
}

// 原地版本：schema 里的 Tensor(a!) 声明它改写 x，返回 ()，不把被改写的张量再返回出去。
void softmax_inplace_cpu(at::Tensor& x) {
  TORCH_CHECK(x.scalar_type() == at::kFloat, "handbook_ext::softmax_: expected float32, got ", x.scalar_type());
  TORCH_CHECK(x.is_contiguous(), "handbook_ext::softmax_: expected a contiguous tensor");
  const int64_t cols = last_dim(x);
  if (x.numel() > 0) handbook::softmax_rows(x.const_data_ptr<float>(), x.mutable_data_ptr<float>(), x.numel() / cols, cols);
}

// Meta kernel：只算输出的元数据（形状、dtype、设备、步长），不碰数据。FakeTensor 与
// torch.compile 的追踪用它推导形状；它必须与真实 kernel 给出的元数据一致（opcheck 会比较）。
at::Tensor softmax_meta(const at::Tensor& x) {
  TORCH_CHECK(x.scalar_type() == at::kFloat, "handbook_ext::softmax: expected float32, got ", x.scalar_type());
  return at::empty(x.sizes(), x.options());
}

void softmax_inplace_meta(at::Tensor& x) {
  TORCH_CHECK(x.scalar_type() == at::kFloat, "handbook_ext::softmax_: expected float32, got ", x.scalar_type());
}

}  // namespace

// 一个命名空间只能有一个 TORCH_LIBRARY：它定义 schema。实现按分发键分别注册。
TORCH_LIBRARY(handbook_ext, m) {
  m.def("softmax(Tensor x) -> Tensor");
  m.def("softmax_(Tensor(a!) x) -> ()");
}

TORCH_LIBRARY_IMPL(handbook_ext, CPU, m) {
  m.impl("softmax", &softmax_cpu);
  m.impl("softmax_", &softmax_inplace_cpu);
}

TORCH_LIBRARY_IMPL(handbook_ext, Meta, m) {
  m.impl("softmax", &softmax_meta);
  m.impl("softmax_", &softmax_inplace_meta);
}
// --8<-- [end:register]

#else  // 普通程序：自检 kernel
#include <cstdio>
#include <vector>

int main() {
  // 形状：1 列、不规则列数、一行很长；再加大偏移（朴素公式会溢出）与部分掩码、整行掩码。
  struct Case {
    int64_t rows, cols;
    float offset;
    bool masked;
  };
  const Case cases[] = {{3, 1, 0.0f, false}, {5, 37, 0.0f, false}, {2, 5000, 0.0f, false},
                        {4, 100, 1000.0f, false}, {4, 100, -1000.0f, false}, {6, 64, 0.0f, true}};
  uint32_t state = 12345u;
  int64_t wrong = 0;
  for (const Case& c : cases) {
    const int64_t n = c.rows * c.cols;
    std::vector<float> x(n), y(n), z(n);
    for (int64_t i = 0; i < n; ++i) {  // 线性同余发生器：[-8, 8) 上可复现的输入
      state = state * 1664525u + 1013904223u;
      x[i] = c.offset + (static_cast<float>(state >> 8) / 16777216.0f - 0.5f) * 16.0f;
      if (c.masked && (i % 3 == 1 || i / c.cols == 0)) x[i] = -INFINITY;  // 第 0 行整行掩码
    }
    handbook::softmax_rows(x.data(), y.data(), c.rows, c.cols);
    z = x;
    handbook::softmax_rows(z.data(), z.data(), c.rows, c.cols);  // 原地
    for (int64_t r = 0; r < c.rows; ++r) {
      double m = -INFINITY, d = 0.0;
      for (int64_t j = 0; j < c.cols; ++j) m = std::fmax(m, static_cast<double>(x[r * c.cols + j]));
      for (int64_t j = 0; j < c.cols; ++j) d += m == -INFINITY ? 0.0 : std::exp(x[r * c.cols + j] - m);
      for (int64_t j = 0; j < c.cols; ++j) {
        const int64_t i = r * c.cols + j;
        const double ref = m == -INFINITY ? 0.0 : std::exp(x[i] - m) / d;
        // 容差：一次 exp、一次乘法与 cols 项的累加，相对 1e-5（约 84 ulp）加绝对 1e-12 足够
        if (!(std::fabs(y[i] - ref) <= 1e-5 * ref + 1e-12) || y[i] != z[i]) ++wrong;  // NaN 也算错
      }
    }
  }
  std::printf("softmax_rows: %zu cases, %lld mismatches %s\n", sizeof(cases) / sizeof(cases[0]),
              static_cast<long long>(wrong), wrong == 0 ? "PASS" : "FAIL");
  return wrong == 0 ? 0 : 1;
}
#endif
