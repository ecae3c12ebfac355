// 矩阵转置（transpose）的 CUDA C++ 版本：朴素版本，以及经共享内存 32×32 分块中转的版本
// （不补齐 / 每行补 1 个字 / XOR 重排三种排布）。与实验 notebooks/operator/transpose-lab.ipynb 对应。
// 自带正确性检查：转置只搬运数据、不做运算，结果必须与主机端转置逐位相等。
//
// 编译与运行（参数是行数和列数）：
//   nvcc -O3 -arch=sm_90 -o transpose code/operator/transpose.cu && ./transpose 2049 1023
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

// --8<-- [start:naive]
// 朴素转置：in 是 rows×cols（行主序），out 是 cols×rows。threadIdx.x 沿 in 的列方向，
// 所以读 in 是合并的（一个 warp 读一行里连续的 128 字节）；写 out 时相邻线程的地址
// 相差 rows 个 float，一个 warp 的 32 次写落在 32 个不同的 32 字节扇区里。
__global__ void transpose_naive(const float* __restrict__ in, float* __restrict__ out, int rows, int cols) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const int r = blockIdx.y * blockDim.y + threadIdx.y;
  if (r < rows && c < cols) out[static_cast<int64_t>(c) * rows + r] = in[static_cast<int64_t>(r) * cols + c];
}
// --8<-- [end:naive]

// --8<-- [start:tiled]
constexpr int kTile = 32;      // 分块边长 = warp 大小 = 共享内存 bank 数
constexpr int kBlockRows = 8;  // 每块 32×8 个线程，每个线程搬 kTile / kBlockRows = 4 个元素

enum class Layout { kPlain, kPadded, kSwizzled };

// 分块内第 (r, c) 个元素在共享内存里的下标（以 4 字节的字计）。bank = 下标 mod 32。
template <Layout L>
__device__ __forceinline__ int smem_index(int r, int c) {
  if constexpr (L == Layout::kPadded) return r * (kTile + 1) + c;  // 每行 33 个字：按列读时 bank 依次错开
  if constexpr (L == Layout::kSwizzled) return r * kTile + (c ^ r);  // 行内按 r 异或重排，不多占空间
  return r * kTile + c;                                              // 按列读时 32 个线程全在同一个 bank
}

// 一个块负责 in 的一个 32×32 分块：合并地按行读进共享内存，同步，再按列从共享内存取出，
// 合并地按行写到 out 的对应分块。全局内存的读和写都是合并的，转置发生在片上。
template <Layout L>
__global__ void __launch_bounds__(kTile * kBlockRows) transpose_tiled(const float* __restrict__ in,
                                                                     float* __restrict__ out, int rows, int cols) {
  __shared__ float tile[kTile * (kTile + 1)];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int c = blockIdx.x * kTile + tx;
#pragma unroll
  for (int k = 0; k < kTile; k += kBlockRows) {
    const int r = blockIdx.y * kTile + ty + k;
    if (r < rows && c < cols) tile[smem_index<L>(ty + k, tx)] = in[static_cast<int64_t>(r) * cols + c];
  }
  __syncthreads();
  const int r_out = blockIdx.x * kTile + ty;  // out 的行号 = in 的列号
  const int c_out = blockIdx.y * kTile + tx;  // out 的列号 = in 的行号
#pragma unroll
  for (int k = 0; k < kTile; k += kBlockRows) {
    if (r_out + k < cols && c_out < rows) {
      out[static_cast<int64_t>(r_out + k) * rows + c_out] = tile[smem_index<L>(tx, ty + k)];
    }
  }
}
// --8<-- [end:tiled]

template <typename Launch>
int64_t run_and_count_mismatches(const char* name, Launch launch, const std::vector<float>& expected, float* dout,
                                 std::vector<float>& host) {
  const size_t bytes = expected.size() * sizeof(float);
  CHECK(cudaMemset(dout, 0xFF, bytes));  // 先写满 NaN：漏写的元素会被检查出来
  launch();
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(host.data(), dout, bytes, cudaMemcpyDeviceToHost));
  int64_t wrong = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (!(host[i] == expected[i])) ++wrong;  // 转置不做运算：要求逐位相等，容差为 0
  }
  std::printf("  %-18s mismatches=%lld\n", name, static_cast<long long>(wrong));
  return wrong;
}

int main(int argc, char** argv) {
  // 默认形状的两边都不是 32 的倍数，用来检验分块边界。
  const int rows = argc > 2 ? std::atoi(argv[1]) : 2049;
  const int cols = argc > 2 ? std::atoi(argv[2]) : 1023;
  const size_t count = static_cast<size_t>(rows) * cols;
  std::vector<float> hin(count), expected(count), host(count);
  uint32_t state = 7u;  // 线性同余发生器：可复现的输入
  for (size_t i = 0; i < count; ++i) {
    state = state * 1664525u + 1013904223u;
    hin[i] = static_cast<float>(state >> 8) / 16777216.0f;
  }
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) expected[static_cast<size_t>(c) * rows + r] = hin[static_cast<size_t>(r) * cols + c];

  float *din, *dout;
  CHECK(cudaMalloc(&din, count * sizeof(float)));
  CHECK(cudaMalloc(&dout, count * sizeof(float)));
  CHECK(cudaMemcpy(din, hin.data(), count * sizeof(float), cudaMemcpyHostToDevice));

  const dim3 naive_block(32, 8), naive_grid((cols + 31) / 32, (rows + 7) / 8);
  const dim3 tiled_block(kTile, kBlockRows), tiled_grid((cols + kTile - 1) / kTile, (rows + kTile - 1) / kTile);
  std::printf("transpose %d x %d\n", rows, cols);
  int64_t wrong = 0;
  wrong += run_and_count_mismatches(
      "naive", [&] { transpose_naive<<<naive_grid, naive_block>>>(din, dout, rows, cols); }, expected, dout, host);
  wrong += run_and_count_mismatches(
      "tiled", [&] { transpose_tiled<Layout::kPlain><<<tiled_grid, tiled_block>>>(din, dout, rows, cols); },
      expected, dout, host);
  wrong += run_and_count_mismatches(
      "tiled+padding", [&] { transpose_tiled<Layout::kPadded><<<tiled_grid, tiled_block>>>(din, dout, rows, cols); },
      expected, dout, host);
  wrong += run_and_count_mismatches(
      "tiled+xor-swizzle",
      [&] { transpose_tiled<Layout::kSwizzled><<<tiled_grid, tiled_block>>>(din, dout, rows, cols); }, expected,
      dout, host);
  std::printf("%s\n", wrong == 0 ? "PASS" : "FAIL");
  CHECK(cudaFree(din));
  CHECK(cudaFree(dout));
  return wrong == 0 ? 0 : 1;
}
