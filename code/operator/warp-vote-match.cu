// warp 级投票、匹配与归约内建函数（warp vote / match / reduce intrinsics）的三个用法：
//   1. 流压缩（stream compaction）：__ballot_sync + __popc 算出每个 lane 的写位置，每个 warp 只做一次原子加；
//   2. 直方图：共享内存私有化 + __match_any_sync 把同一 warp 里落进同一个箱的 lane 聚合成一次原子加；
//   3. __reduce_add_sync / __reduce_max_sync 与 shuffle 蝶形归约的结果相同（整数，逐位相等）。
// 配套页面 docs/operator/histogram.md 与 docs/operator/scan.md，实验 notebooks/operator/histogram-lab.ipynb。
// 自带正确性检查：压缩出的下标集合、两种直方图、warp 归约都与主机端的计算逐个相等；
// 原子操作的次数由主机端按同样的规则数出来并打印，耗时只打印、不作断言。
// 需要计算能力 8.0 以上（__reduce_*_sync）；__match_any_sync 从 7.0 起就有。
//
// 编译与运行（参数是元素个数）：
//   nvcc -O3 -arch=sm_90 -o warp-vote-match code/operator/warp-vote-match.cu && ./warp-vote-match 16777259
#include <algorithm>
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

constexpr unsigned kFull = 0xffffffffu;
constexpr int kThreads = 256;
constexpr int kBins = 256;

// --8<-- [start:compact]
// 把满足 in[i] > threshold 的下标 i 写进 out（顺序：warp 之间不定，warp 内按下标递增），返回个数在 *count。
// 每个 warp 每轮：ballot 得到 32 位的“谁满足”掩码；lane 的写位置 = 掩码里比它编号小的 1 的个数；
// lane 0 用一次 atomicAdd 为整个 warp 预留 popc(掩码) 个位置，再用 shuffle 广播起点。
__global__ void compact_ballot(const int* __restrict__ in, int64_t n, int threshold, int64_t* __restrict__ out,
                               unsigned long long* count) {
  const int lane = threadIdx.x % 32;
  const unsigned lower = (1u << lane) - 1u;  // 编号小于本 lane 的那些位
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  // 循环条件对整个 warp 相同（base 按 warp 对齐），所以 32 个 lane 总是一起调用 _sync 函数
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x - lane; base < n; base += stride) {
    const int64_t i = base + lane;
    const bool keep = i < n && in[i] > threshold;
    const unsigned mask = __ballot_sync(kFull, keep);
    if (mask == 0) continue;  // 整个 warp 一致地跳过
    unsigned long long start = 0;
    if (lane == 0) start = atomicAdd(count, static_cast<unsigned long long>(__popc(mask)));
    start = __shfl_sync(kFull, start, 0);
    if (keep) out[start + __popc(mask & lower)] = i;
  }
}
// --8<-- [end:compact]

// --8<-- [start:histogram]
// 共享内存私有化的直方图：每块一份 kBins 个计数器，块内用共享内存原子加，最后每个箱一次全局原子加。
// AGGREGATE = true 时先在 warp 内聚合：__match_any_sync 返回“与我的箱号相同的 lane”的掩码，
// 组内编号最小的 lane（leader）代表全组做一次 atomicAdd(+popc(掩码))。
template <bool AGGREGATE>
__global__ void histogram_private(const int* __restrict__ bins, int64_t n, unsigned* __restrict__ hist) {
  __shared__ unsigned local[kBins];
  for (int b = threadIdx.x; b < kBins; b += blockDim.x) local[b] = 0;
  __syncthreads();
  const int lane = threadIdx.x % 32;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x - lane; base < n; base += stride) {
    const int64_t i = base + lane;
    const int bin = i < n ? bins[i] : -1;  // 越界的 lane 取 -1：它们彼此匹配成一组，但不计数
    if (AGGREGATE) {
      const unsigned peers = __match_any_sync(kFull, bin);
      const int leader = __ffs(peers) - 1;
      if (bin >= 0 && lane == leader) atomicAdd(&local[bin], static_cast<unsigned>(__popc(peers)));
    } else if (bin >= 0) {
      atomicAdd(&local[bin], 1u);
    }
  }
  __syncthreads();
  for (int b = threadIdx.x; b < kBins; b += blockDim.x)
    if (local[b] != 0) atomicAdd(&hist[b], local[b]);
}
// --8<-- [end:histogram]

// --8<-- [start:reduce]
// 每个 warp 的和与最大值：__reduce_*_sync 一条指令（计算能力 8.0 起，只支持 32 位整数），
// 与 5 步 shuffle 蝶形归约（__shfl_xor_sync，每个 lane 都得到结果）逐位相同。
__global__ void warp_sum_max(const int* __restrict__ in, int64_t n, int* __restrict__ out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int v = i < n ? in[i] : 0;  // n 是 32 的倍数时每个 warp 都是满的；这里补 0 只为越界安全
  const int sum_hw = __reduce_add_sync(kFull, v);
  const int max_hw = __reduce_max_sync(kFull, v);
  int sum_sw = v, max_sw = v;
#pragma unroll
  for (int d = 16; d > 0; d /= 2) {
    sum_sw += __shfl_xor_sync(kFull, sum_sw, d);
    max_sw = max(max_sw, __shfl_xor_sync(kFull, max_sw, d));
  }
  const int64_t warp = i / 32;
  if (threadIdx.x % 32 == 0 && warp * 32 < n) {
    out[4 * warp + 0] = sum_hw;
    out[4 * warp + 1] = sum_sw;
    out[4 * warp + 2] = max_hw;
    out[4 * warp + 3] = max_sw;
  }
}
// --8<-- [end:reduce]

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

struct Lcg {  // 可复现的伪随机数
  uint32_t s;
  uint32_t next() { return s = s * 1664525u + 1013904223u; }
};

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : (int64_t{1} << 24) + 43;  // 不是 32 的倍数：最后一个 warp 不满
  int device = 0, sms = 0;
  CHECK(cudaGetDevice(&device));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int blocks = sms * 8;  // 常驻网格：每个线程网格跨步地处理许多元素
  bool ok = true;

  // 两种输入：均匀分布的箱号（竞争小），以及“成片相同”的箱号（每段 1～64 个相同值、平均 32.5 个，像图像里的平坦区域）。
  std::vector<int> uniform(n), runs(n);
  Lcg rng{2024u};
  for (int64_t i = 0; i < n; ++i) uniform[i] = static_cast<int>(rng.next() >> 24);  // 0..255
  for (int64_t i = 0; i < n;) {
    const int value = static_cast<int>(rng.next() >> 24), len = 1 + static_cast<int>(rng.next() >> 26);  // 1..64
    for (int k = 0; k < len && i < n; ++k) runs[i++] = value;
  }
  int *d_in;
  int64_t* d_idx;
  unsigned long long* d_count;
  unsigned* d_hist;
  int* d_warp;
  const int64_t warps = (n + 31) / 32;
  CHECK(cudaMalloc(&d_in, warps * 32 * sizeof(int)));  // part 3 pads n up to whole warps
  CHECK(cudaMalloc(&d_idx, n * sizeof(int64_t)));
  CHECK(cudaMalloc(&d_count, sizeof(unsigned long long)));
  CHECK(cudaMalloc(&d_hist, kBins * sizeof(unsigned)));
  CHECK(cudaMalloc(&d_warp, 4 * warps * sizeof(int)));

  // 1. 流压缩：保留箱号 > 200 的下标（约 22%），与主机端逐个比较（排序后，因为 warp 之间的顺序不定）。
  CHECK(cudaMemcpy(d_in, uniform.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  const int threshold = 200;
  std::vector<int64_t> expected_idx;
  int64_t warp_atomics = 0;  // 至少有一个 lane 保留元素的 warp 轮次：每轮一次原子加
  for (int64_t i = 0; i < n; ++i)
    if (uniform[i] > threshold) {
      warp_atomics += expected_idx.empty() || expected_idx.back() / 32 != i / 32;
      expected_idx.push_back(i);
    }
  CHECK(cudaMemset(d_count, 0, sizeof(unsigned long long)));
  compact_ballot<<<blocks, kThreads>>>(d_in, n, threshold, d_idx, d_count);
  CHECK(cudaGetLastError());
  unsigned long long kept = 0;
  CHECK(cudaMemcpy(&kept, d_count, sizeof(kept), cudaMemcpyDeviceToHost));
  std::vector<int64_t> got_idx(kept);
  CHECK(cudaMemcpy(got_idx.data(), d_idx, kept * sizeof(int64_t), cudaMemcpyDeviceToHost));
  std::sort(got_idx.begin(), got_idx.end());
  const bool compact_ok = got_idx == expected_idx;
  ok = ok && compact_ok;
  const float compact_ms = time_ms([&] {
    CHECK(cudaMemsetAsync(d_count, 0, sizeof(unsigned long long)));
    compact_ballot<<<blocks, kThreads>>>(d_in, n, threshold, d_idx, d_count);
  }, 20);
  std::printf("compaction: kept %llu of %lld (expected %zu) %s; atomics: %lld warp-level instead of %zu per element; "
              "%.1f us\n", kept, static_cast<long long>(n), expected_idx.size(), compact_ok ? "ok" : "MISMATCH",
              static_cast<long long>(warp_atomics), expected_idx.size(), compact_ms * 1e3f);

  // 2. 直方图：两种输入 × 是否在 warp 内聚合。共享内存原子加的次数在主机端按 warp 数出来。
  for (const auto* input : {&uniform, &runs}) {
    const char* label = input == &uniform ? "uniform" : "runs   ";
    std::vector<unsigned> expected(kBins, 0), got(kBins);
    for (int b : *input) ++expected[b];
    CHECK(cudaMemcpy(d_in, input->data(), n * sizeof(int), cudaMemcpyHostToDevice));
    int64_t aggregated_atomics = 0;  // 每个 warp 每轮：不同箱号的个数
    for (int64_t w = 0; w < warps; ++w) {
      std::vector<int> seen;
      for (int64_t i = 32 * w; i < std::min(n, 32 * w + 32); ++i)
        if (std::find(seen.begin(), seen.end(), (*input)[i]) == seen.end()) seen.push_back((*input)[i]);
      aggregated_atomics += static_cast<int64_t>(seen.size());
    }
    for (int aggregate = 0; aggregate < 2; ++aggregate) {
      auto run = [&] {
        CHECK(cudaMemsetAsync(d_hist, 0, kBins * sizeof(unsigned)));
        if (aggregate) histogram_private<true><<<blocks, kThreads>>>(d_in, n, d_hist);
        else histogram_private<false><<<blocks, kThreads>>>(d_in, n, d_hist);
      };
      run();
      CHECK(cudaGetLastError());
      CHECK(cudaMemcpy(got.data(), d_hist, kBins * sizeof(unsigned), cudaMemcpyDeviceToHost));
      const bool hist_ok = got == expected;
      ok = ok && hist_ok;
      const float ms = time_ms(run, 20);
      std::printf("histogram %s %-22s %s  shared-memory atomics %11lld  %8.1f us\n", label,
                  aggregate ? "match_any aggregated" : "one atomic per element", hist_ok ? "ok" : "MISMATCH",
                  static_cast<long long>(aggregate ? aggregated_atomics : n), ms * 1e3f);
    }
  }

  // 3. warp 归约：硬件 __reduce_*_sync 与 shuffle 蝶形归约、与主机端逐个相等。取有正有负的整数，n 补成 32 的倍数。
  const int64_t m = warps * 32;
  std::vector<int> values(m);
  for (auto& v : values) v = static_cast<int>(rng.next() >> 12) - (1 << 19);
  CHECK(cudaMemcpy(d_in, values.data(), m * sizeof(int), cudaMemcpyHostToDevice));
  warp_sum_max<<<static_cast<int>((m + kThreads - 1) / kThreads), kThreads>>>(d_in, m, d_warp);
  CHECK(cudaGetLastError());
  std::vector<int> per_warp(4 * warps);
  CHECK(cudaMemcpy(per_warp.data(), d_warp, per_warp.size() * sizeof(int), cudaMemcpyDeviceToHost));
  int64_t bad = 0;
  for (int64_t w = 0; w < warps; ++w) {
    int sum = 0, mx = values[32 * w];
    for (int k = 0; k < 32; ++k) {
      sum += values[32 * w + k];
      mx = std::max(mx, values[32 * w + k]);
    }
    const int* r = &per_warp[4 * w];
    bad += !(r[0] == sum && r[1] == sum && r[2] == mx && r[3] == mx);
  }
  ok = ok && bad == 0;
  std::printf("warp reduce: %lld warps, __reduce_add/max_sync == shuffle butterfly == host: %s\n",
              static_cast<long long>(warps), bad == 0 ? "ok" : "MISMATCH");

  std::printf("%s\n", ok ? "PASS" : "FAIL");
  CHECK(cudaFree(d_in));
  CHECK(cudaFree(d_idx));
  CHECK(cudaFree(d_count));
  CHECK(cudaFree(d_hist));
  CHECK(cudaFree(d_warp));
  return ok ? 0 : 1;
}
