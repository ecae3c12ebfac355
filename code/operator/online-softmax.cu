// 逐行在线 softmax（online softmax）的 CUDA C++ 版本，与实验 notebooks/operator/softmax.ipynb
// 中的 Numba 与 Triton 内核对应。一个线程块负责一行：第一遍边读边维护 (最大值 m, 归一化因子 d)，
// 块内用 warp shuffle 与共享内存合并各线程的 (m, d)；第二遍再读一次输入，写出 exp(x - m) / d。
// 对每一行只读两次、写一次。自带正确性检查：与主机端 double 精度的安全 softmax 比较。
//
// 编译与运行：
//   nvcc -O3 -arch=sm_90 -o online-softmax code/operator/online-softmax.cu && ./online-softmax
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime.h>

#define CHECK(call)                                                              \
  do {                                                                           \
    cudaError_t err_ = (call);                                                   \
    if (err_ != cudaSuccess) {                                                   \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__,                    \
                   cudaGetErrorString(err_));                                    \
      std::exit(2);                                                              \
    }                                                                            \
  } while (0)

constexpr int kThreads = 256;  // 每块线程数，必须是 32 的倍数且不超过 1024

// --8<-- [start:kernel]
// 一个部分结果：这部分元素的最大值 m，以及 d = Σ exp(x_i - m)。
struct MD {
  float m;
  float d;
};

// 合并两个部分结果：先对齐到共同的最大值，再相加。满足交换律与结合律，所以可以按任意树形归约。
// 初值用 -FLT_MAX 而不是 -INFINITY：两个空结果合并时 exp(0) * 0 = 0，不会出现 exp(-inf + inf) = NaN。
__device__ __forceinline__ MD md_merge(MD a, MD b) {
  const float m = fmaxf(a.m, b.m);
  return {m, a.d * expf(a.m - m) + b.d * expf(b.m - m)};
}

// 整个线程块归约 (m, d)，结果广播给块内所有线程。
__device__ MD block_reduce_md(MD v) {
  __shared__ MD partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int offset = 16; offset > 0; offset /= 2) {  // warp 内：寄存器直接交换，蝶形归约
    MD other{__shfl_xor_sync(0xffffffffu, v.m, offset), __shfl_xor_sync(0xffffffffu, v.d, offset)};
    v = md_merge(v, other);
  }
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  // 每个 warp 都把各 warp 的部分结果再归约一遍：省掉一次广播和一次同步。
  v = lane < static_cast<int>(blockDim.x / 32) ? partial[lane] : MD{-FLT_MAX, 0.0f};
  for (int offset = 16; offset > 0; offset /= 2) {
    MD other{__shfl_xor_sync(0xffffffffu, v.m, offset), __shfl_xor_sync(0xffffffffu, v.d, offset)};
    v = md_merge(v, other);
  }
  return v;
}

__global__ void online_softmax(const float* __restrict__ x, float* __restrict__ y, int64_t cols) {
  const float* row_in = x + static_cast<int64_t>(blockIdx.x) * cols;
  float* row_out = y + static_cast<int64_t>(blockIdx.x) * cols;

  // 第一遍：每个线程按块步长扫过本行的一部分，维护自己的 (m, d)。
  // 只有遇到更大的值时才需要把旧的 d 缩放到新的最大值下，因此每个元素只算一次 exp。
  MD acc{-FLT_MAX, 0.0f};
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float v = row_in[j];
    if (v > acc.m) {
      acc.d = acc.d * expf(acc.m - v) + 1.0f;
      acc.m = v;
    } else {
      acc.d += expf(v - acc.m);  // v = -inf（被掩码的位置）时贡献 0
    }
  }
  const MD total = block_reduce_md(acc);

  // 第二遍：再读一次输入，写出归一化的结果。
  // 整行都被掩码（全是 -inf）时 m 停在 -FLT_MAX、d = 0：若取 1/d，第二遍算的是 expf(-inf) * inf = 0 * inf = NaN。
  // 这里与 FlashAttention、PyTorch SDPA 的约定一致，让这种行输出 0；部分掩码的行 d >= 1，不受影响。
  const float inv_d = total.d > 0.0f ? 1.0f / total.d : 0.0f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    row_out[j] = expf(row_in[j] - total.m) * inv_d;
  }
}
// --8<-- [end:kernel]

// 主机端参考：double 精度的安全 softmax（先减最大值）；整行都是 -inf 时按内核的约定输出 0。
static void softmax_reference(const std::vector<float>& x, std::vector<double>& y, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x.data() + r * cols;
    double m = -INFINITY, d = 0.0;
    for (int64_t j = 0; j < cols; ++j) m = std::fmax(m, static_cast<double>(in[j]));
    if (m == -INFINITY) {
      for (int64_t j = 0; j < cols; ++j) y[r * cols + j] = 0.0;
      continue;
    }
    for (int64_t j = 0; j < cols; ++j) d += std::exp(static_cast<double>(in[j]) - m);
    for (int64_t j = 0; j < cols; ++j) y[r * cols + j] = std::exp(static_cast<double>(in[j]) - m) / d;
  }
}

struct Case {
  int64_t rows, cols;
  float offset;       // 加到所有 logit 上的常数：1000 时朴素 softmax 必然溢出
  bool masked;        // 是否把每行约四分之一的位置置为 -inf（模拟注意力掩码）
  int fully_masked;   // 非 0 时，行号除以它余 1 的行整行置为 -inf（变长序列的填充行），期望输出全 0
};

static int64_t run_case(const Case& c, uint32_t* state) {
  const int64_t n = c.rows * c.cols;
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  std::vector<float> hx(n), hy(n);
  std::vector<double> ref(n);
  for (int64_t i = 0; i < n; ++i) {  // 线性同余发生器：[-8, 8) 上可复现的输入
    *state = *state * 1664525u + 1013904223u;
    hx[i] = c.offset + (static_cast<float>(*state >> 8) / 16777216.0f - 0.5f) * 16.0f;
    if (c.masked && (*state >> 30) == 0u && i % c.cols != 0) hx[i] = -INFINITY;  // 每行第一个元素不掩
    if (c.fully_masked != 0 && (i / c.cols) % c.fully_masked == 1) hx[i] = -INFINITY;
  }
  softmax_reference(hx, ref, c.rows, c.cols);

  float *dx, *dy;
  CHECK(cudaMalloc(&dx, bytes));
  CHECK(cudaMalloc(&dy, bytes));
  CHECK(cudaMemcpy(dx, hx.data(), bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dy, 0xFF, bytes));  // 先写满 NaN：漏写的元素会被检查出来
  online_softmax<<<static_cast<unsigned>(c.rows), kThreads>>>(dx, dy, c.cols);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(hy.data(), dy, bytes, cudaMemcpyDeviceToHost));
  CHECK(cudaFree(dx));
  CHECK(cudaFree(dy));

  // 容差：每个输出经过一次 expf（最大误差 2 ulp）、一次倒数和乘法，归一化因子是数千项的树形求和，
  // 相对误差在 1e-6 量级；取相对 1e-5（约 84 个 ulp）加绝对 1e-12 留足余量。
  int64_t wrong = 0;
  double worst = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double err = std::fabs(static_cast<double>(hy[i]) - ref[i]);
    worst = std::fmax(worst, err / (std::fabs(ref[i]) + 1e-30));
    if (!(err <= 1e-5 * std::fabs(ref[i]) + 1e-12)) ++wrong;  // NaN 也算错
  }
  std::printf("rows=%-6lld cols=%-6lld offset=%-6g masked=%d fully_masked=%d  max rel err=%.2e  mismatches=%lld\n",
              static_cast<long long>(c.rows), static_cast<long long>(c.cols), c.offset, c.masked ? 1 : 0,
              c.fully_masked, worst, static_cast<long long>(wrong));
  return wrong;
}

int main() {
  // 列数覆盖：比块小、不是块大小的整数倍、一行放得下寄存器、长行；再加上大偏移、部分掩码与整行掩码。
  const Case cases[] = {
      {4, 1, 0.0f, false, 0},       {3, 100, 0.0f, false, 0},     {257, 4096, 0.0f, false, 0},
      {64, 10007, 0.0f, false, 0},  {8, 262144, 0.0f, false, 0},  {32, 4096, 1000.0f, false, 0},
      {32, 4096, -1000.0f, false, 0}, {32, 3000, 0.0f, true, 0},  {32, 3000, 0.0f, true, 4},
      {4, 1, 0.0f, false, 2},
  };
  uint32_t state = 12345u;
  int64_t wrong = 0;
  for (const Case& c : cases) wrong += run_case(c, &state);
  std::printf("online_softmax threads/block=%d %s\n", kThreads, wrong == 0 ? "PASS" : "FAIL");
  return wrong == 0 ? 0 : 1;
}
