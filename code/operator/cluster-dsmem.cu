// nvcc-arch: sm_90
// 线程块簇（thread block cluster）与分布式共享内存（distributed shared memory, DSMEM）：
// 一行太长、一个线程块算不完时，让一个簇里的 8 个块各算一段，再由 0 号块通过 DSMEM 直接读其余
// 7 个块共享内存里的部分和——一次启动完成，部分和不经过全局内存。旁边是两遍法（two-pass）：
// 第一遍每块把部分和写进全局内存，第二遍再读回来相加。两者的加法顺序完全相同，所以结果逐位相等。
// 需要计算能力 9.0（Hopper）；见 docs/operator/cluster-barrier.md。
//
// 编译与运行（第一行的 `// nvcc-arch:` 告诉测试与 make gpu-check 只为 sm_90 编译）：
//   nvcc -O3 -arch=sm_90 -o cluster-dsmem code/operator/cluster-dsmem.cu && ./cluster-dsmem
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cooperative_groups.h>
#include <cuda_runtime.h>

namespace cg = cooperative_groups;

#define CHECK(call)                                                              \
  do {                                                                           \
    cudaError_t err_ = (call);                                                   \
    if (err_ != cudaSuccess) {                                                   \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__,                    \
                   cudaGetErrorString(err_));                                    \
      std::exit(2);                                                              \
    }                                                                            \
  } while (0)

constexpr int kThreads = 256;  // 每块 8 个 warp
constexpr int kCluster = 8;    // 每个簇 8 个块：可移植的最大簇大小

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}

// 块内归约（warp shuffle 两级），只有线程 0 的返回值有意义。
__device__ float block_sum(float v) {
  __shared__ float warp_totals[kThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_sum(v);
  if (lane == 0) warp_totals[warp] = v;
  __syncthreads();
  if (warp == 0) v = warp_sum(lane < kThreads / 32 ? warp_totals[lane] : 0.0f);
  return v;
}

// 第 part 段（共 parts 段）的和：每个线程以 float4 跨步累加。要求 n 是 4 * parts 的倍数。
__device__ float slice_sum(const float* __restrict__ row, int n, int part, int parts) {
  const int len4 = n / 4 / parts;
  const float4* p = reinterpret_cast<const float4*>(row) + static_cast<int64_t>(part) * len4;
  float acc = 0.0f;
  for (int i = threadIdx.x; i < len4; i += kThreads) {
    const float4 v = p[i];
    acc += (v.x + v.y) + (v.z + v.w);
  }
  return block_sum(acc);
}

// --8<-- [start:cluster]
// 网格 (kCluster, rows)，簇形状 (kCluster, 1, 1)：一个簇负责一行，簇里第 r 个块负责第 r 段。
__global__ void __launch_bounds__(kThreads) row_sum_cluster(const float* __restrict__ x, int n,
                                                            float* __restrict__ out) {
  __shared__ float partial;  // 本块的部分和：簇内其他块可以通过 DSMEM 读它
  cg::cluster_group cluster = cg::this_cluster();
  const unsigned rank = cluster.block_rank();
  const float* row = x + static_cast<int64_t>(blockIdx.y) * n;

  const float mine = slice_sum(row, n, static_cast<int>(rank), static_cast<int>(cluster.num_blocks()));
  if (threadIdx.x == 0) partial = mine;
  cluster.sync();  // 簇级屏障：所有块的 partial 都写好，并对整个簇可见

  if (rank == 0 && threadIdx.x < 32) {
    // map_shared_rank 把“第 lane 号块里的 partial”映射成一个可以直接解引用的地址（DSMEM）
    float v = threadIdx.x < cluster.num_blocks() ? *cluster.map_shared_rank(&partial, threadIdx.x) : 0.0f;
    v = warp_sum(v);
    if (threadIdx.x == 0) out[blockIdx.y] = v;
  }
  cluster.sync();  // 0 号块读完之前，其他块不能退出：退出的块的共享内存会被收回
}
// --8<-- [end:cluster]

// --8<-- [start:two-pass]
// 两遍法的第一遍：网格 (kCluster, rows)，每块把部分和写进全局内存 partials[row][part]。
__global__ void __launch_bounds__(kThreads) row_sum_partials(const float* __restrict__ x, int n,
                                                             float* __restrict__ partials) {
  const float* row = x + static_cast<int64_t>(blockIdx.y) * n;
  const float mine = slice_sum(row, n, blockIdx.x, gridDim.x);
  if (threadIdx.x == 0) partials[blockIdx.y * gridDim.x + blockIdx.x] = mine;
}

// 第二遍：每行一个 warp，把 parts 个部分和按同样的顺序加起来（与簇版本逐位相同）。
__global__ void row_sum_finish(const float* __restrict__ partials, int parts, int rows, float* __restrict__ out) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  float v = lane < parts ? partials[row * parts + lane] : 0.0f;
  v = warp_sum(v);
  if (lane == 0) out[row] = v;
}
// --8<-- [end:two-pass]

void launch_cluster(const float* x, int n, int rows, float* out) {
  // --8<-- [start:launch]
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(kCluster, rows, 1);
  config.blockDim = dim3(kThreads, 1, 1);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;  // 运行时指定簇形状（也可以在 kernel 上写 __cluster_dims__）
  attr[0].val.clusterDim.x = kCluster;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  config.attrs = attr;
  config.numAttrs = 1;
  CHECK(cudaLaunchKernelEx(&config, row_sum_cluster, x, n, out));
  // --8<-- [end:launch]
}

void launch_two_pass(const float* x, int n, int rows, float* partials, float* out) {
  row_sum_partials<<<dim3(kCluster, rows), kThreads>>>(x, n, partials);
  row_sum_finish<<<(rows + 7) / 8, 256>>>(partials, kCluster, rows, out);
}

int main(int argc, char** argv) {
  const int rows = argc > 1 ? std::atoi(argv[1]) : 512;
  const int n = argc > 2 ? std::atoi(argv[2]) : 1 << 16;  // 每行 65536 个 float，每块 8192 个
  if (n % (4 * kCluster) != 0 || rows < 1 || rows > 65535) {  // rows 是 gridDim.y，上限 65535
    std::fprintf(stderr, "n must be a multiple of %d and 1 <= rows <= 65535\n", 4 * kCluster);
    return 2;
  }
  int device = 0, major = 0;
  CHECK(cudaGetDevice(&device));
  CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (major < 9) {
    std::printf("thread block clusters need compute capability 9.0; this GPU is %d.x\n", major);
    return 1;
  }

  // 可复现的输入：[-0.5, 0.5) 上的均匀数；主机端用 double 求每行的和与绝对值和。
  const size_t count = static_cast<size_t>(rows) * n;
  std::vector<float> hx(count);
  uint32_t state = 12345u;
  for (float& v : hx) {
    state = state * 1664525u + 1013904223u;
    v = static_cast<float>(state >> 8) / 16777216.0f - 0.5f;
  }
  std::vector<double> exact(rows, 0.0), abs_sum(rows, 0.0);
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < n; ++i) {
      exact[r] += hx[static_cast<size_t>(r) * n + i];
      abs_sum[r] += std::fabs(hx[static_cast<size_t>(r) * n + i]);
    }

  float *dx, *dpartials, *dout_cluster, *dout_two;
  CHECK(cudaMalloc(&dx, count * sizeof(float)));
  CHECK(cudaMalloc(&dpartials, static_cast<size_t>(rows) * kCluster * sizeof(float)));
  CHECK(cudaMalloc(&dout_cluster, rows * sizeof(float)));
  CHECK(cudaMalloc(&dout_two, rows * sizeof(float)));
  CHECK(cudaMemcpy(dx, hx.data(), count * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dout_cluster, 0xFF, rows * sizeof(float)));  // NaN：漏写的行会被查出来
  CHECK(cudaMemset(dout_two, 0xFF, rows * sizeof(float)));

  // 整块 GPU 上最多能同时驻留几个这样的簇（cudaOccupancyMaxActiveClusters 按整卡计；簇要求 8 个块同时落在同一个 GPC 上）
  {
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(kCluster, rows, 1);
    config.blockDim = dim3(kThreads, 1, 1);
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = kCluster;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    config.attrs = attr;
    config.numAttrs = 1;
    int clusters = 0;
    CHECK(cudaOccupancyMaxActiveClusters(&clusters, row_sum_cluster, &config));
    std::printf("cluster of %d blocks x %d threads: at most %d clusters resident at once\n", kCluster, kThreads,
                clusters);
  }

  launch_cluster(dx, n, rows, dout_cluster);
  launch_two_pass(dx, n, rows, dpartials, dout_two);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<float> got_cluster(rows), got_two(rows);
  CHECK(cudaMemcpy(got_cluster.data(), dout_cluster, rows * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(got_two.data(), dout_two, rows * sizeof(float), cudaMemcpyDeviceToHost));

  // 容差：求和树最长的加法链 d = 每线程 float4 次数 + 2（float4 内）+ 10（块内两级 warp 归约）+ 5（簇内），
  // |误差| <= γ_d Σ|x|，γ_d = d u / (1 - d u)，u = 2^-24。
  const int iters = (n / 4 / kCluster + kThreads - 1) / kThreads;
  const double u = std::ldexp(1.0, -24), d = iters + 2 + 10 + 5;
  bool ok = true;
  double worst = 0.0;
  for (int r = 0; r < rows; ++r) {
    const double tol = d * u / (1 - d * u) * abs_sum[r];
    const double err = std::fabs(got_cluster[r] - exact[r]);
    worst = std::max(worst, err / tol);
    if (!(err <= tol)) ok = false;
    if (std::memcmp(&got_cluster[r], &got_two[r], sizeof(float)) != 0) ok = false;  // 同一顺序：逐位相等
  }
  std::printf("row sums of %d x %d floats: worst |err| / tol = %.3f; cluster == two-pass bitwise: %s\n", rows, n,
              worst, ok ? "yes" : "NO");

  // 计时（只打印，不作断言）：各 20 次取平均。
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  const double bytes = static_cast<double>(count) * sizeof(float);
  for (int variant = 0; variant < 2; ++variant) {
    for (int rep = 0; rep < 3; ++rep)  // 预热
      variant == 0 ? launch_cluster(dx, n, rows, dout_cluster) : launch_two_pass(dx, n, rows, dpartials, dout_two);
    CHECK(cudaEventRecord(start));
    for (int rep = 0; rep < 20; ++rep)
      variant == 0 ? launch_cluster(dx, n, rows, dout_cluster) : launch_two_pass(dx, n, rows, dpartials, dout_two);
    CHECK(cudaEventRecord(stop));
    CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    const double us = ms * 1e3 / 20;
    std::printf("  %-28s %8.1f us  %7.1f GB/s\n", variant == 0 ? "cluster + DSMEM (1 launch)" : "two-pass (2 launches)",
                us, bytes / us / 1e3);
  }
  CHECK(cudaGetLastError());
  CHECK(cudaFree(dx));
  CHECK(cudaFree(dpartials));
  CHECK(cudaFree(dout_cluster));
  CHECK(cudaFree(dout_two));
  std::printf("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
