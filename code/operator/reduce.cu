// 求和归约（sum reduction）的 CUDA C++ 版本：warp shuffle 做块内归约，网格级用两遍（two-pass）
// 或原子加（atomicAdd）收尾。与实验 notebooks/operator/reduce-lab.ipynb 的最后几级对应。
// 自带正确性检查：与主机端 double 精度的和比较，容差由求和树的深度推出（见下面的 tolerance）。
//
// 编译与运行：
//   nvcc -O3 -arch=sm_90 -o reduce code/operator/reduce.cu && ./reduce 16777219
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

constexpr int kThreads = 256;  // 每块线程数：32 的倍数，8 个 warp

// --8<-- [start:warp]
// warp 内归约：每步让 lane i 读 lane i+offset 的寄存器，5 步后 lane 0 持有 32 个值的和。
// 不经过共享内存，也不需要 __syncthreads()；掩码 0xffffffff 表示 32 个 lane 都参与。
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}

// 块内归约：先各 warp 自己归约，再由 warp 0 归约各 warp 的结果。只有线程 0 的返回值有意义。
__device__ float block_sum(float v) {
  __shared__ float warp_totals[kThreads / 32];
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  v = warp_sum(v);
  if (lane == 0) warp_totals[warp] = v;
  __syncthreads();
  if (warp == 0) v = warp_sum(lane < kThreads / 32 ? warp_totals[lane] : 0.0f);
  return v;
}
// --8<-- [end:warp]

// --8<-- [start:kernel]
// 每个线程以网格跨步（grid-stride）方式累加自己负责的元素：主体用 16 字节的 float4 加载
// （要求 x 按 16 字节对齐，cudaMalloc 的地址满足），末尾不足 4 个的元素逐个加。
__device__ float thread_sum(const float* __restrict__ x, int64_t n) {
  const int64_t start = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  const float4* x4 = reinterpret_cast<const float4*>(x);
  float acc = 0.0f;
  for (int64_t i = start; i < n / 4; i += stride) {
    const float4 v = x4[i];
    acc += (v.x + v.y) + (v.z + v.w);
  }
  for (int64_t i = n / 4 * 4 + start; i < n; i += stride) acc += x[i];
  return acc;
}

// 第一遍：每个块写出一个部分和。第二遍用同一个 kernel、1 个块把部分和加起来。
// 求和顺序只由 n 与网格大小决定，所以结果逐次运行逐位相同（确定性）。
__global__ void __launch_bounds__(kThreads) reduce_two_pass(const float* __restrict__ x, int64_t n,
                                                            float* __restrict__ out) {
  const float total = block_sum(thread_sum(x, n));
  if (threadIdx.x == 0) out[blockIdx.x] = total;
}

// 单遍：每个块把部分和原子加到 *out（调用前清零）。各块到达的先后不定，
// 浮点加法不满足结合律，所以结果可能逐次运行不同（非确定性）。
__global__ void __launch_bounds__(kThreads) reduce_atomic(const float* __restrict__ x, int64_t n,
                                                          float* __restrict__ out) {
  const float total = block_sum(thread_sum(x, n));
  if (threadIdx.x == 0) atomicAdd(out, total);
}
// --8<-- [end:kernel]

// |计算值 − 精确和| ≤ γ_d · Σ|x_i|，γ_d = d·u / (1 − d·u)，u = 2^-24，d 是求和树上最长的一条加法链。
double tolerance(int64_t depth, double abs_sum) {
  const double u = std::ldexp(1.0, -24);
  return depth * u / (1.0 - depth * u) * abs_sum;
}

int main(int argc, char** argv) {
  // 默认长度不是 4 的倍数，也不是块大小的倍数，用来检验 float4 主体之后的尾部处理。
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : (int64_t{1} << 24) + 3;
  std::vector<float> hx(n);
  uint32_t state = 2024u;  // 线性同余发生器：可复现的输入，取值在 [-0.5, 0.5)
  double exact = 0.0, abs_sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    state = state * 1664525u + 1013904223u;
    hx[i] = static_cast<float>(state >> 8) / 16777216.0f - 0.5f;
    exact += hx[i];  // double 累加的误差比 float 小约 2^29 倍，可当作精确值
    abs_sum += std::fabs(hx[i]);
  }

  int device = 0, sms = 0, per_sm = 0;
  CHECK(cudaGetDevice(&device));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, reduce_two_pass, kThreads, 0));
  // 常驻网格：刚好让每个 SM 放满，再多的块只会排队；元素很少时块数随 n 减少。
  const int64_t wanted = (n / 4 + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(int64_t{sms} * per_sm, wanted)));

  float *dx, *dpartial, *dout;
  CHECK(cudaMalloc(&dx, n * sizeof(float)));
  CHECK(cudaMalloc(&dpartial, blocks * sizeof(float)));
  CHECK(cudaMalloc(&dout, 2 * sizeof(float)));
  CHECK(cudaMemcpy(dx, hx.data(), n * sizeof(float), cudaMemcpyHostToDevice));

  // 两遍：运行两次，检查逐位相同。
  float two_pass[2];
  for (float& result : two_pass) {
    CHECK(cudaMemset(dout, 0xFF, 2 * sizeof(float)));  // 先写满 NaN：漏写会被检查出来
    reduce_two_pass<<<blocks, kThreads>>>(dx, n, dpartial);
    reduce_two_pass<<<1, kThreads>>>(dpartial, blocks, dout);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(&result, dout, sizeof(float), cudaMemcpyDeviceToHost));
  }
  // 原子加：运行两次，只报告是否逐位相同（不同是合法的）。
  float atomic[2];
  for (float& result : atomic) {
    CHECK(cudaMemset(dout, 0, sizeof(float)));
    reduce_atomic<<<blocks, kThreads>>>(dx, n, dout);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(&result, dout, sizeof(float), cudaMemcpyDeviceToHost));
  }

  // 求和树深度：每线程的 float4 循环次数 + 每个 float4 内的 2 级 + 尾部 1 级 + 块内 10 级（两次 warp_sum），
  // 两遍法再加第二遍（它同样是 thread_sum + block_sum：至多 ⌈blocks/256⌉ + 3 + 10 级），
  // 原子加再加 blocks 次串行的原子加。
  const int64_t iters = (n / 4 + int64_t{blocks} * kThreads - 1) / (int64_t{blocks} * kThreads);
  const int64_t depth_block = iters + 3 + 10;
  const double tol_two_pass = tolerance(depth_block + (blocks + kThreads - 1) / kThreads + 13, abs_sum);
  const double tol_atomic = tolerance(depth_block + blocks, abs_sum);
  const double err_two = std::fabs(two_pass[0] - exact);
  const double err_atomic = std::max(std::fabs(atomic[0] - exact), std::fabs(atomic[1] - exact));
  const bool deterministic = std::memcmp(&two_pass[0], &two_pass[1], sizeof(float)) == 0;
  const bool ok = err_two <= tol_two_pass && err_atomic <= tol_atomic && deterministic;

  std::printf("reduce n=%lld blocks=%d threads=%d exact=%.6f\n", static_cast<long long>(n), blocks, kThreads, exact);
  std::printf("  two-pass  %.6f  |err|=%.3e  tol=%.3e  repeat bitwise equal: %s\n", two_pass[0], err_two,
              tol_two_pass, deterministic ? "yes" : "NO");
  std::printf("  atomicAdd %.6f / %.6f  |err|=%.3e  tol=%.3e  repeat bitwise equal: %s\n", atomic[0], atomic[1],
              err_atomic, tol_atomic, std::memcmp(&atomic[0], &atomic[1], sizeof(float)) == 0 ? "yes" : "no");
  std::printf("%s\n", ok ? "PASS" : "FAIL");
  CHECK(cudaFree(dx));
  CHECK(cudaFree(dpartial));
  CHECK(cudaFree(dout));
  return ok ? 0 : 1;
}
