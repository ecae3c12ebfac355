// handbook_ext::softmax 与 handbook_ext::softmax_ 的 CUDA 实现：把 online-softmax.cu 的 kernel 挂到
// PyTorch 调度器的 CUDA 分发键上。schema 由 custom-op-ext.cpp 的 TORCH_LIBRARY 定义，这里只注册实现。
//
// 同一个文件有两种编译方式：
//   1. 作为 PyTorch 扩展的一部分（torch.utils.cpp_extension.load 定义了 TORCH_EXTENSION_NAME）：
//      编译 #ifdef 里的绑定层，在当前 CUDA 流上启动 kernel，注册到 TORCH_LIBRARY_IMPL(handbook_ext, CUDA)。
//   2. 作为独立的 CUDA 程序（tests/test_cuda_sources.py 为 sm_90/sm_80 编译，make gpu-check 运行）：
//      编译末尾的 main，与主机端 double 精度参考比较，打印 PASS。
//   nvcc -O3 -arch=sm_90 -o custom-op-ext code/operator/custom-op-ext.cu && ./custom-op-ext
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>

#include <cuda_runtime.h>

constexpr int kThreads = 256;  // 每块线程数，32 的倍数

// --8<-- [start:kernel]
struct MD {  // 一部分元素的最大值 m 与 d = Σ exp(x - m)
  float m;
  float d;
};

__device__ __forceinline__ MD md_merge(MD a, MD b) {
  const float m = fmaxf(a.m, b.m);
  return {m, a.d * expf(a.m - m) + b.d * expf(b.m - m)};
}

__device__ __forceinline__ MD warp_reduce_md(MD v) {
  for (int offset = 16; offset > 0; offset /= 2) {
    v = md_merge(v, {__shfl_xor_sync(0xffffffffu, v.m, offset), __shfl_xor_sync(0xffffffffu, v.d, offset)});
  }
  return v;
}

// 一个线程块处理一行。x 与 y 可以是同一块内存（原地）：第二遍每个线程在同一位置先读后写，
// 而第一遍的读在块内归约的 __syncthreads() 之前全部完成，所以不加 __restrict__。
__global__ void softmax_rows_kernel(const float* x, float* y, int64_t cols) {
  __shared__ MD partial[32];
  const float* in = x + static_cast<int64_t>(blockIdx.x) * cols;
  float* out = y + static_cast<int64_t>(blockIdx.x) * cols;
  MD acc{-FLT_MAX, 0.0f};
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {  // 线程内递推
    const float v = in[j];
    if (v > acc.m) {
      acc.d = acc.d * expf(acc.m - v) + 1.0f;
      acc.m = v;
    } else {
      acc.d += expf(v - acc.m);
    }
  }
  acc = warp_reduce_md(acc);  // warp 内蝶形归约
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) partial[warp] = acc;
  __syncthreads();
  acc = lane < static_cast<int>(blockDim.x / 32) ? partial[lane] : MD{-FLT_MAX, 0.0f};
  acc = warp_reduce_md(acc);  // 每个 warp 都归约全部 warp 的结果，省一次广播
  const float inv_d = acc.d > 0.0f ? 1.0f / acc.d : 0.0f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) out[j] = expf(in[j] - acc.m) * inv_d;
}
// --8<-- [end:kernel]

#ifdef TORCH_EXTENSION_NAME
// --8<-- [start:register]
#define AT_PER_OPERATOR_HEADERS  // 与下一行一起：误包含整套算子头文件时编译失败（见 .cpp 的说明）
#define TORCH_ASSERT_ONLY_METHOD_OPERATORS
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

namespace {

void launch(const at::Tensor& x, at::Tensor& y) {
  const int64_t cols = x.dim() == 0 ? 1 : x.size(-1);
  const int64_t rows = x.numel() / cols;
  TORCH_CHECK(rows <= 0x7fffffff, "handbook_ext: too many rows for a 1-D grid");
  const c10::cuda::CUDAGuard guard(x.device());  // 在 x 所在的 GPU 上启动
  softmax_rows_kernel<<<static_cast<unsigned>(rows), kThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
      x.const_data_ptr<float>(), y.mutable_data_ptr<float>(), cols);
  C10_CUDA_KERNEL_LAUNCH_CHECK();  // 启动配置错误在这里变成 Python 异常
}

at::Tensor softmax_cuda(const at::Tensor& x) {
  TORCH_CHECK(x.scalar_type() == at::kFloat, "handbook_ext::softmax: expected float32, got ", x.scalar_type());
  const at::Tensor xc = x.contiguous();
  at::Tensor y = at::empty(x.sizes(), x.options());
  if (x.numel() > 0) launch(xc, y);
  return y;
}

void softmax_inplace_cuda(at::Tensor& x) {
  TORCH_CHECK(x.scalar_type() == at::kFloat, "handbook_ext::softmax_: expected float32, got ", x.scalar_type());
  TORCH_CHECK(x.is_contiguous(), "handbook_ext::softmax_: expected a contiguous tensor");
  if (x.numel() > 0) launch(x, x);
}

}  // namespace

TORCH_LIBRARY_IMPL(handbook_ext, CUDA, m) {
  m.impl("softmax", &softmax_cuda);
  m.impl("softmax_", &softmax_inplace_cuda);
}
// --8<-- [end:register]

#else  // 独立程序：自检 kernel
#include <cstdlib>
#include <vector>

#define CHECK(call)                                                                        \
  do {                                                                                     \
    cudaError_t err_ = (call);                                                             \
    if (err_ != cudaSuccess) {                                                             \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(err_));  \
      std::exit(2);                                                                        \
    }                                                                                      \
  } while (0)

int main() {
  struct Case {
    int64_t rows, cols;
    float offset;
    bool in_place;
  };
  const Case cases[] = {{4, 1, 0.0f, false}, {3, 100, 0.0f, false}, {257, 4096, 0.0f, false},
                        {64, 10007, 0.0f, true}, {32, 4096, 1000.0f, false}, {32, 4096, -1000.0f, true}};
  uint32_t state = 12345u;
  int64_t wrong = 0;
  for (const Case& c : cases) {
    const int64_t n = c.rows * c.cols;
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    std::vector<float> hx(n), hy(n);
    for (int64_t i = 0; i < n; ++i) {
      state = state * 1664525u + 1013904223u;
      hx[i] = c.offset + (static_cast<float>(state >> 8) / 16777216.0f - 0.5f) * 16.0f;
    }
    float *dx, *dy;
    CHECK(cudaMalloc(&dx, bytes));
    CHECK(cudaMalloc(&dy, bytes));
    CHECK(cudaMemcpy(dx, hx.data(), bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemset(dy, 0xFF, bytes));  // 先写满 NaN：漏写的元素会被检查出来
    float* target = c.in_place ? dx : dy;
    softmax_rows_kernel<<<static_cast<unsigned>(c.rows), kThreads>>>(dx, target, c.cols);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(hy.data(), target, bytes, cudaMemcpyDeviceToHost));
    CHECK(cudaFree(dx));
    CHECK(cudaFree(dy));
    int64_t bad = 0;
    for (int64_t r = 0; r < c.rows; ++r) {
      double m = -INFINITY, d = 0.0;
      for (int64_t j = 0; j < c.cols; ++j) m = std::fmax(m, static_cast<double>(hx[r * c.cols + j]));
      for (int64_t j = 0; j < c.cols; ++j) d += std::exp(static_cast<double>(hx[r * c.cols + j]) - m);
      for (int64_t j = 0; j < c.cols; ++j) {
        const int64_t i = r * c.cols + j;
        const double ref = std::exp(static_cast<double>(hx[i]) - m) / d;
        // 容差：expf 最大误差 2 ulp，加上倒数、乘法与树形求和，相对 1e-5 加绝对 1e-12
        if (!(std::fabs(hy[i] - ref) <= 1e-5 * ref + 1e-12)) ++bad;  // NaN 也算错
      }
    }
    std::printf("rows=%-4lld cols=%-6lld offset=%-6g in_place=%d mismatches=%lld\n", static_cast<long long>(c.rows),
                static_cast<long long>(c.cols), c.offset, c.in_place ? 1 : 0, static_cast<long long>(bad));
    wrong += bad;
  }
  std::printf("softmax_rows_kernel threads/block=%d %s\n", kThreads, wrong == 0 ? "PASS" : "FAIL");
  return wrong == 0 ? 0 : 1;
}
#endif
