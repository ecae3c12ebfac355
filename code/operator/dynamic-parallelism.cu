// nvcc-flags: -rdc=true -lcudadevrt
//
// 动态并行（CUDA dynamic parallelism，CDP2）：kernel 在设备端按数据决定再启动多少工作。
// 例子是行长呈幂律分布的 CSR 稀疏矩阵乘向量：父 kernel 一个线程一行，短行自己串行算完；
// 超长的行由该线程在设备端启动一个子网格（fire-and-forget 流），按行长决定子网格的块数；
// 全部子网格结束之后，尾启动（tail launch）的收尾 kernel 才开始，它能看到所有子网格写下的结果。
// 对照是主机端启动的“一个 warp 一行”（CSR vector）kernel 加同一个收尾 kernel。
// 配套页面 docs/operator/spmv.md。
// 自带正确性检查：矩阵与向量的元素都是小整数，所有部分和都是绝对值小于 2^24 的整数，
// float 加法在任何顺序下都精确，所以两种做法的结果必须与主机端逐位相等；子网格启动次数必须等于超长行数。
// 耗时只打印、不作断言。
//
// 编译与运行（必须可重定位设备代码并链接设备运行时库；第一行的 nvcc-flags 供测试与 make gpu-check 读取）：
//   nvcc -O3 -arch=sm_90 -rdc=true -o dynamic-parallelism code/operator/dynamic-parallelism.cu -lcudadevrt
//   ./dynamic-parallelism
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
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

constexpr unsigned kFull = 0xffffffffu;
constexpr int kThreads = 256;
constexpr int kLongRow = 1024;        // 超过这么多非零元的行交给子网格
constexpr int kPerChildBlock = 4096;  // 子网格每块大约负责的非零元个数

__device__ float warp_sum(float v) {
#pragma unroll
  for (int d = 16; d > 0; d /= 2) v += __shfl_down_sync(kFull, v, d);
  return v;
}

__device__ float block_sum(float v) {  // 结果只在线程 0 上有意义
  __shared__ float partial[kThreads / 32];
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  v = threadIdx.x < kThreads / 32 ? partial[threadIdx.x] : 0.0f;
  if (threadIdx.x < 32) v = warp_sum(v);
  return v;
}

// --8<-- [start:child]
// 子网格：一行的非零元由整个网格分摊，每块归约出部分和后原子加到 y[row]（父线程启动前已把它置 0）。
__global__ void __launch_bounds__(kThreads) row_child(const int* __restrict__ cols, const float* __restrict__ vals,
                                                      int len, const float* __restrict__ x, float* y_row) {
  float acc = 0.0f;
  for (int k = blockIdx.x * kThreads + threadIdx.x; k < len; k += gridDim.x * kThreads) acc += vals[k] * x[cols[k]];
  acc = block_sum(acc);
  if (threadIdx.x == 0) atomicAdd(y_row, acc);
}

// 收尾：这里只是把结果乘以 scale。它以尾启动方式排在父网格之后，能看到所有子网格的写入。
__global__ void epilogue(float* y, int rows, float scale) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < rows) y[r] *= scale;
}

// 父网格：一个线程一行。短行在本线程里串行算完；长行启动一个子网格，块数随行长而定。
__global__ void spmv_parent(const int* __restrict__ rowptr, const int* __restrict__ cols,
                            const float* __restrict__ vals, const float* __restrict__ x, float* y, int rows,
                            float scale, unsigned* launches, unsigned* launch_errors) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < rows) {
    const int start = rowptr[r], len = rowptr[r + 1] - start;
    if (len <= kLongRow) {
      float acc = 0.0f;
      for (int k = start; k < start + len; ++k) acc += vals[k] * x[cols[k]];
      y[r] = acc;
    } else {
      y[r] = 0.0f;  // 父线程在启动前的写入对子网格可见
      const int blocks = (len + kPerChildBlock - 1) / kPerChildBlock;
      // fire-and-forget：子网格立即可以开始，与本块的其他启动互不排队；父线程不能、也不需要等它
      row_child<<<blocks, kThreads, 0, cudaStreamFireAndForget>>>(cols + start, vals + start, len, x, y + r);
      if (cudaGetLastError() != cudaSuccess) atomicAdd(launch_errors, 1u);  // 例如待启动队列满了
      atomicAdd(launches, 1u);
    }
  }
  // 尾启动：整个父网格（连同它的全部子网格）结束之后才开始，所以收尾读到的是最终的 y
  if (blockIdx.x == 0 && threadIdx.x == 0)
    epilogue<<<(rows + kThreads - 1) / kThreads, kThreads, 0, cudaStreamTailLaunch>>>(y, rows, scale);
}
// --8<-- [end:child]

// --8<-- [start:host]
// 对照：主机端启动的 CSR vector，一个 warp 一行，lane 之间按 32 的步长分摊一行的非零元。
__global__ void spmv_csr_vector(const int* __restrict__ rowptr, const int* __restrict__ cols,
                                const float* __restrict__ vals, const float* __restrict__ x, float* y, int rows) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  if (warp >= rows) return;  // 整个 warp 一起退出
  float acc = 0.0f;
  for (int k = rowptr[warp] + lane; k < rowptr[warp + 1]; k += 32) acc += vals[k] * x[cols[k]];
  acc = warp_sum(acc);
  if (lane == 0) y[warp] = acc;
}
// --8<-- [end:host]

template <typename F>
float time_ms(F&& run, int reps) {
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  run();
  CHECK(cudaEventRecord(start));
  for (int r = 0; r < reps; ++r) run();
  CHECK(cudaEventRecord(stop));
  CHECK(cudaEventSynchronize(stop));
  float ms = 0.0f;
  CHECK(cudaEventElapsedTime(&ms, start, stop));
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));
  return ms / reps;
}

int main() {
  // 行长服从幂律（Pareto，α = 2.1，最短 2），截断在 300000：少数行极长，绝大多数行很短。
  const int rows = 1 << 16, cols_n = 1 << 20;
  uint32_t s = 7u;
  auto rnd = [&] { return s = s * 1664525u + 1013904223u; };
  std::vector<int> rowptr(rows + 1, 0);
  for (int r = 0; r < rows; ++r) {
    const double u = (rnd() >> 8) / 16777216.0 + 1.0 / 33554432.0;  // (0, 1)
    const int len = static_cast<int>(std::min(300000.0, std::floor(2.0 * std::pow(u, -1.0 / 1.1))));
    rowptr[r + 1] = rowptr[r] + len;
  }
  const int nnz = rowptr[rows];
  std::vector<int> cols(nnz);
  std::vector<float> vals(nnz), x(cols_n), expected(rows);
  const float pick[4] = {-2.0f, -1.0f, 1.0f, 2.0f};
  for (int k = 0; k < nnz; ++k) {
    cols[k] = static_cast<int>(rnd() % cols_n);
    vals[k] = pick[rnd() >> 30];
  }
  for (auto& v : x) v = static_cast<float>(static_cast<int>(rnd() % 5) - 2);  // -2..2
  const float scale = 0.5f;
  int long_rows = 0, longest = 0;
  for (int r = 0; r < rows; ++r) {
    longest = std::max(longest, rowptr[r + 1] - rowptr[r]);
    double acc = 0.0;  // 整数，精确
    for (int k = rowptr[r]; k < rowptr[r + 1]; ++k) acc += static_cast<double>(vals[k]) * x[cols[k]];
    expected[r] = static_cast<float>(acc) * scale;
    long_rows += rowptr[r + 1] - rowptr[r] > kLongRow;
  }

  int *d_rowptr, *d_cols;
  float *d_vals, *d_x, *d_y;
  unsigned* d_counts;
  CHECK(cudaMalloc(&d_rowptr, (rows + 1) * sizeof(int)));
  CHECK(cudaMalloc(&d_cols, nnz * sizeof(int)));
  CHECK(cudaMalloc(&d_vals, nnz * sizeof(float)));
  CHECK(cudaMalloc(&d_x, cols_n * sizeof(float)));
  CHECK(cudaMalloc(&d_y, rows * sizeof(float)));
  CHECK(cudaMalloc(&d_counts, 2 * sizeof(unsigned)));
  CHECK(cudaMemcpy(d_rowptr, rowptr.data(), (rows + 1) * sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_cols, cols.data(), nnz * sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_vals, vals.data(), nnz * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_x, x.data(), cols_n * sizeof(float), cudaMemcpyHostToDevice));
  // 设备端发出、还未完成的启动占用一个固定大小的缓冲区（默认 2048 个）；按最坏情况留够
  CHECK(cudaDeviceSetLimit(cudaLimitDevRuntimePendingLaunchCount, static_cast<size_t>(long_rows) + 64));

  auto dynamic = [&] {
    spmv_parent<<<(rows + kThreads - 1) / kThreads, kThreads>>>(d_rowptr, d_cols, d_vals, d_x, d_y, rows, scale,
                                                                d_counts, d_counts + 1);
  };
  auto host = [&] {
    spmv_csr_vector<<<(rows * 32 + kThreads - 1) / kThreads, kThreads>>>(d_rowptr, d_cols, d_vals, d_x, d_y, rows);
    epilogue<<<(rows + kThreads - 1) / kThreads, kThreads>>>(d_y, rows, scale);
  };

  bool ok = true;
  std::vector<float> got(rows);
  std::printf("CSR SpMV, %d rows, %d nonzeros, longest row %d, %d rows longer than %d\n", rows, nnz, longest,
              long_rows, kLongRow);
  for (int variant = 0; variant < 2; ++variant) {
    CHECK(cudaMemset(d_y, 0xFF, rows * sizeof(float)));  // NaN：漏写会被发现
    CHECK(cudaMemset(d_counts, 0, 2 * sizeof(unsigned)));
    variant == 0 ? dynamic() : host();
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    unsigned counts[2];
    CHECK(cudaMemcpy(counts, d_counts, sizeof(counts), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(got.data(), d_y, rows * sizeof(float), cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int r = 0; r < rows; ++r) bad += !(got[r] == expected[r]);
    const bool launches_ok = variant == 1 || (counts[0] == static_cast<unsigned>(long_rows) && counts[1] == 0);
    ok = ok && bad == 0 && launches_ok;
    const float ms = time_ms(variant == 0 ? std::function<void()>(dynamic) : std::function<void()>(host), 20);
    std::printf("  %-40s mismatches %d  child launches %u (errors %u)  %8.1f us\n",
                variant == 0 ? "device-side launches + tail launch" : "host-launched CSR vector + epilogue", bad,
                counts[0], counts[1], ms * 1e3f);
  }
  std::printf("%s\n", ok ? "PASS" : "FAIL");
  CHECK(cudaFree(d_rowptr));
  CHECK(cudaFree(d_cols));
  CHECK(cudaFree(d_vals));
  CHECK(cudaFree(d_x));
  CHECK(cudaFree(d_y));
  CHECK(cudaFree(d_counts));
  return ok ? 0 : 1;
}
