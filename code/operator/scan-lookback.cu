// 单遍前缀和（single-pass scan）：解耦回看（decoupled look-back，Merrill & Garland 2016）。
// 与之对照的是三遍的“先归约再扫描”（reduce-then-scan）和 CUB 的 cub::DeviceScan::InclusiveSum。
// 配套页面 docs/operator/scan.md，实验 notebooks/operator/scan-lab.ipynb。
// 自带正确性检查：uint32 的包含式扫描（inclusive scan，按 2^32 取模，所以与顺序无关、可以逐位比较），
// 三种实现都与主机端的串行扫描逐位相等；长度默认 2^24 + 12345，不是分块大小的整数倍。
// 各实现的耗时与有效带宽（按最少搬运 8n 字节计）只打印，不作断言。
//
// 编译与运行（参数是元素个数）：
//   nvcc -O3 -arch=sm_90 -o scan-lookback code/operator/scan-lookback.cu && ./scan-lookback 16789561
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include <cub/device/device_scan.cuh>
#include <cuda/atomic>
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

constexpr int kThreads = 256;                // 每块线程数：8 个 warp
constexpr int kItems = 16;                   // 每个线程负责的连续元素个数（线程粗化）
constexpr int kTile = kThreads * kItems;     // 每块处理的元素个数：4096
constexpr unsigned kFull = 0xffffffffu;      // warp 内 32 个 lane 全部参与

// --8<-- [start:block]
// 共享内存下标补齐：每 32 个字插 1 个空位。线程 t 读自己的第 j 个元素时地址是 t*16 + j，
// 不补齐时一个 warp 只落在 2 个 bank 上（16 路冲突）；补齐后 32 个 lane 落在 32 个不同 bank。
__device__ __forceinline__ int padded(int i) { return i + i / 32; }

// 块内扫描（PMPP §11.5 的三阶段粗化扫描）：
//   1. 每个线程对自己连续的 kItems 个元素做串行扫描（工作量 kItems - 1，没有同步）；
//   2. 对 kThreads 个线程总和做块内扫描：warp 内用 shuffle 做 Kogge-Stone（5 步），
//      warp 之间再扫描 8 个 warp 总和；
//   3. 每个线程把“前面所有线程的总和”加到自己的 kItems 个结果上。
// 返回本块所有元素之和；v 变成块内的包含式前缀和。
__device__ uint32_t block_scan(uint32_t (&v)[kItems]) {
  __shared__ uint32_t warp_sums[kThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int j = 1; j < kItems; ++j) v[j] += v[j - 1];  // 阶段 1：串行扫描
  uint32_t x = v[kItems - 1];                         // 本线程的总和
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {                   // 阶段 2：warp 内 Kogge-Stone
    const uint32_t y = __shfl_up_sync(kFull, x, d);
    if (lane >= d) x += y;
  }
  if (lane == 31) warp_sums[warp] = x;
  __syncthreads();
  if (warp == 0) {  // 8 个 warp 总和的扫描：只用前 8 个 lane
    uint32_t w = lane < kThreads / 32 ? warp_sums[lane] : 0u;
#pragma unroll
    for (int d = 1; d < kThreads / 32; d *= 2) {
      const uint32_t y = __shfl_up_sync(kFull, w, d);
      if (lane >= d) w += y;
    }
    if (lane < kThreads / 32) warp_sums[lane] = w;
  }
  __syncthreads();
  const uint32_t before = (warp > 0 ? warp_sums[warp - 1] : 0u) + x - v[kItems - 1];  // 前面所有线程之和
#pragma unroll
  for (int j = 0; j < kItems; ++j) v[j] += before;  // 阶段 3
  const uint32_t total = warp_sums[kThreads / 32 - 1];
  __syncthreads();  // warp_sums 还会被下一次调用改写
  return total;
}

// 按条带（striped）顺序合并地读入一块、经共享内存转成每线程连续（blocked）的 kItems 个元素。
__device__ void load_tile(const uint32_t* in, int64_t base, int64_t n, uint32_t* smem, uint32_t (&v)[kItems]) {
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const int i = j * kThreads + threadIdx.x;  // 相邻线程读相邻地址：合并访问
    smem[padded(i)] = base + i < n ? in[base + i] : 0u;
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kItems; ++j) v[j] = smem[padded(threadIdx.x * kItems + j)];
  __syncthreads();
}

__device__ void store_tile(uint32_t* out, int64_t base, int64_t n, uint32_t* smem, const uint32_t (&v)[kItems]) {
#pragma unroll
  for (int j = 0; j < kItems; ++j) smem[padded(threadIdx.x * kItems + j)] = v[j];
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const int i = j * kThreads + threadIdx.x;
    if (base + i < n) out[base + i] = smem[padded(i)];
  }
}
// --8<-- [end:block]

// --8<-- [start:lookback]
// 每块一个状态字：高 32 位是标志，低 32 位是值。标志与值在同一个 64 位字里一次写入、一次读出，
// 读到的标志必然配着它自己的值，所以用 relaxed 的原子读写就够了，不需要额外的内存栅栏。
enum : uint32_t { kInvalid = 0, kAggregate = 1, kPrefix = 2 };  // X：未就绪  A：只有本块之和  P：含前缀之和
using Status = cuda::atomic_ref<unsigned long long, cuda::thread_scope_device>;

__device__ __forceinline__ void publish(unsigned long long* status, int tile, uint32_t flag, uint32_t value) {
  Status(status[tile]).store((static_cast<unsigned long long>(flag) << 32) | value, cuda::std::memory_order_relaxed);
}

// 由 warp 0 调用：向前回看，返回 tile 之前所有元素之和（排他前缀）。一次看 32 个前驱，
// lane k 看 tile-1-k。窗口里还有 X 就继续等；否则找最近的 P：它和它之后（更近）的各块之和
// 就是答案；窗口里全是 A 就把 32 个值都加上，窗口再往前挪 32 块。
__device__ uint32_t look_back(unsigned long long* status, int tile) {
  const int lane = threadIdx.x % 32;
  uint32_t prefix = 0;
  for (int top = tile - 1;; top -= 32) {
    const int pred = top - lane;
    unsigned long long word;
    do {  // 自旋：块 pred 还没发布任何东西
      word = pred >= 0 ? Status(status[pred]).load(cuda::std::memory_order_relaxed)
                       : static_cast<unsigned long long>(kPrefix) << 32;  // 块 0 之前：当作前缀 0
    } while (__any_sync(kFull, static_cast<uint32_t>(word >> 32) == kInvalid));
    const uint32_t flag = static_cast<uint32_t>(word >> 32), value = static_cast<uint32_t>(word);
    const unsigned p_lanes = __ballot_sync(kFull, flag == kPrefix);
    if (p_lanes) {
      const int stop = __ffs(p_lanes) - 1;  // 最近的一个 P
      return prefix + __reduce_add_sync(kFull, lane <= stop ? value : 0u);
    }
    prefix += __reduce_add_sync(kFull, value);  // 32 个 A：全部加上，继续往前
  }
}

__global__ void __launch_bounds__(kThreads) scan_single_pass(const uint32_t* __restrict__ in, uint32_t* __restrict__ out,
                                                             int64_t n, unsigned long long* status,
                                                             unsigned* tile_counter) {
  __shared__ uint32_t smem[kTile + kTile / 32];
  __shared__ int tile_s;
  __shared__ uint32_t prefix_s;
  // 动态块号：按“开始执行”的先后领号。块 t 只等待号码更小的块，而它们都已经开始执行，
  // 所以一定能做完；若直接用 blockIdx.x，等待者可能占着 SM，被等的块却还没被调度，形成死锁。
  if (threadIdx.x == 0) tile_s = static_cast<int>(atomicAdd(tile_counter, 1u));
  __syncthreads();
  const int tile = tile_s;
  const int64_t base = static_cast<int64_t>(tile) * kTile;

  uint32_t v[kItems];
  load_tile(in, base, n, smem, v);
  const uint32_t aggregate = block_scan(v);
  if (threadIdx.x < 32) {
    uint32_t prefix = 0;
    if (tile == 0) {
      if (threadIdx.x == 0) publish(status, 0, kPrefix, aggregate);
    } else {
      if (threadIdx.x == 0) publish(status, tile, kAggregate, aggregate);  // 先发布本块之和，让后继不必等
      prefix = look_back(status, tile);
      if (threadIdx.x == 0) publish(status, tile, kPrefix, prefix + aggregate);
    }
    if (threadIdx.x == 0) prefix_s = prefix;
  }
  __syncthreads();
  const uint32_t prefix = prefix_s;
#pragma unroll
  for (int j = 0; j < kItems; ++j) v[j] += prefix;
  store_tile(out, base, n, smem, v);
}
// --8<-- [end:lookback]

// --8<-- [start:reduce-then-scan]
// 三遍法：第 1 遍每块只求和（读 n）；第 2 遍用 1 个块扫描各块之和（很小）；
// 第 3 遍每块重新读入自己的元素、做块内扫描、加上前面各块之和再写出（读 n、写 n）。共 3n 次访存。
__global__ void __launch_bounds__(kThreads) tile_sums(const uint32_t* __restrict__ in, int64_t n, uint32_t* sums) {
  __shared__ uint32_t smem[kTile + kTile / 32];
  uint32_t v[kItems];
  load_tile(in, static_cast<int64_t>(blockIdx.x) * kTile, n, smem, v);
  const uint32_t total = block_scan(v);
  if (threadIdx.x == 0) sums[blockIdx.x] = total;
}

// 单块扫描任意多个块之和：一次 kTile 个，把上一段的总和带进下一段；结果是排他前缀。
__global__ void __launch_bounds__(kThreads) scan_sums(uint32_t* sums, int count) {
  __shared__ uint32_t smem[kTile + kTile / 32];
  uint32_t carry = 0;
  for (int64_t base = 0; base < count; base += kTile) {
    uint32_t v[kItems], raw[kItems];
    load_tile(sums, base, count, smem, v);
#pragma unroll
    for (int j = 0; j < kItems; ++j) raw[j] = v[j];
    const uint32_t total = block_scan(v);
#pragma unroll
    for (int j = 0; j < kItems; ++j) v[j] += carry - raw[j];  // 包含式 → 排他式
    store_tile(sums, base, count, smem, v);
    __syncthreads();
    carry += total;
  }
}

__global__ void __launch_bounds__(kThreads) scan_tiles(const uint32_t* __restrict__ in, uint32_t* __restrict__ out,
                                                       int64_t n, const uint32_t* __restrict__ prefixes) {
  __shared__ uint32_t smem[kTile + kTile / 32];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kTile;
  uint32_t v[kItems];
  load_tile(in, base, n, smem, v);
  block_scan(v);
  const uint32_t prefix = prefixes[blockIdx.x];
#pragma unroll
  for (int j = 0; j < kItems; ++j) v[j] += prefix;
  store_tile(out, base, n, smem, v);
}
// --8<-- [end:reduce-then-scan]

template <typename F>
float time_ms(F&& run, int reps) {
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  run();  // 预热
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

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : (int64_t{1} << 24) + 12345;
  const int tiles = static_cast<int>((n + kTile - 1) / kTile);
  std::vector<uint32_t> h_in(n), expected(n), got(n);
  uint32_t state = 12345u, running = 0;
  for (int64_t i = 0; i < n; ++i) {  // 线性同余发生器：可复现的输入
    state = state * 1664525u + 1013904223u;
    h_in[i] = state >> 7;
    running += h_in[i];  // 按 2^32 取模：与加法顺序无关
    expected[i] = running;
  }

  uint32_t *d_in, *d_out, *d_sums;
  unsigned long long* d_status;
  unsigned* d_counter;
  CHECK(cudaMalloc(&d_in, n * sizeof(uint32_t)));
  CHECK(cudaMalloc(&d_out, n * sizeof(uint32_t)));
  CHECK(cudaMalloc(&d_sums, tiles * sizeof(uint32_t)));
  CHECK(cudaMalloc(&d_status, tiles * sizeof(unsigned long long)));
  CHECK(cudaMalloc(&d_counter, sizeof(unsigned)));
  CHECK(cudaMemcpy(d_in, h_in.data(), n * sizeof(uint32_t), cudaMemcpyHostToDevice));
  size_t cub_bytes = 0;
  CHECK(cub::DeviceScan::InclusiveSum(nullptr, cub_bytes, d_in, d_out, n));
  void* d_cub = nullptr;
  CHECK(cudaMalloc(&d_cub, cub_bytes));

  auto single_pass = [&] {
    CHECK(cudaMemsetAsync(d_status, 0, tiles * sizeof(unsigned long long)));  // 全部置为 X
    CHECK(cudaMemsetAsync(d_counter, 0, sizeof(unsigned)));
    scan_single_pass<<<tiles, kThreads>>>(d_in, d_out, n, d_status, d_counter);
  };
  auto reduce_then_scan = [&] {
    tile_sums<<<tiles, kThreads>>>(d_in, n, d_sums);
    scan_sums<<<1, kThreads>>>(d_sums, tiles);
    scan_tiles<<<tiles, kThreads>>>(d_in, d_out, n, d_sums);
  };
  auto cub_scan = [&] { CHECK(cub::DeviceScan::InclusiveSum(d_cub, cub_bytes, d_in, d_out, n)); };

  struct Variant {
    const char* name;
    int passes_over_data;  // 读写整个数组的次数：单遍 2n、三遍 3n
    std::function<void()> run;
  };
  bool ok = true;
  std::printf("inclusive scan of n=%lld uint32 (%d tiles of %d)\n", static_cast<long long>(n), tiles, kTile);
  for (const auto& [name, passes, run] : {Variant{"single-pass look-back", 2, single_pass},
                                           Variant{"reduce-then-scan", 3, reduce_then_scan},
                                           Variant{"cub::DeviceScan", 2, cub_scan}}) {
    for (int rep = 0; rep < 3; ++rep) {  // 重复几次：回看的时序每次不同，结果必须每次都对
      CHECK(cudaMemset(d_out, 0xFF, n * sizeof(uint32_t)));  // 先写满无效值：漏写会被发现
      run();
      CHECK(cudaGetLastError());
      CHECK(cudaMemcpy(got.data(), d_out, n * sizeof(uint32_t), cudaMemcpyDeviceToHost));
      int64_t bad = -1;
      for (int64_t i = 0; i < n && bad < 0; ++i)
        if (got[i] != expected[i]) bad = i;
      if (bad >= 0) {
        std::printf("  %-22s MISMATCH at %lld: got %u, expected %u\n", name, static_cast<long long>(bad), got[bad],
                    expected[bad]);
        ok = false;
        break;
      }
    }
    const float ms = time_ms(run, 20);
    std::printf("  %-22s %8.1f us  %7.0f GB/s (8n bytes; moves %dn x 4 bytes)\n", name, ms * 1e3f,
                8.0 * n / (ms * 1e6), passes);
  }
  std::printf("%s\n", ok ? "PASS" : "FAIL");
  CHECK(cudaFree(d_in));
  CHECK(cudaFree(d_out));
  CHECK(cudaFree(d_sums));
  CHECK(cudaFree(d_status));
  CHECK(cudaFree(d_counter));
  CHECK(cudaFree(d_cub));
  return ok ? 0 : 1;
}
