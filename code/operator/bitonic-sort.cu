// 双调排序（bitonic sort）的 CUDA C++ 版本：共享内存里的块内排序、跨块的全局步骤、块内合并。
// 与实验 notebooks/operator/bitonic-sort.ipynb 对应。任意长度先补 +inf 到 2 的幂，排完取前 n 个。
// 自带正确性检查：与 std::sort 的结果逐个相等（IEEE 比较，-0 == +0），且位模式的多重集合不变。
//
// 编译与运行（参数是元素个数，缺省时测试一组长度）：
//   nvcc -O3 -arch=sm_90 -o bitonic-sort code/operator/bitonic-sort.cu && ./bitonic-sort 1000003
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
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

// --8<-- [start:kernel]
constexpr int kBlock = 1024;          // 每个线程块在共享内存里排的元素个数（2 的幂）
constexpr int kThreads = kBlock / 2;  // 一个线程负责一个比较器

// 比较器：把 s[i] 与 s[i + j] 按方向排好。只在顺序错时交换，±0 的位模式原样保留。
__device__ __forceinline__ void compare_swap(float* s, int i, int j, bool ascending) {
  const float a = s[i], b = s[i + j];
  if (ascending ? (a > b) : (b > a)) {
    s[i] = b;
    s[i + j] = a;
  }
}

// 阶段 k = 2 … kBlock：每块把 kBlock 个元素读进共享内存排好，再写到 dst。
// 方向看全局下标（(i & k) == 0 为升序），相邻两块一升一降，构成下一阶段的双调序列。
__global__ void __launch_bounds__(kThreads) bitonic_sort_shared(const float* __restrict__ src, float* __restrict__ dst) {
  __shared__ float s[kBlock];
  const int t = threadIdx.x;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kBlock;
  s[t] = src[base + t];
  s[t + kThreads] = src[base + t + kThreads];
  __syncthreads();
  for (int k = 2; k <= kBlock; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      const int i = 2 * j * (t / j) + (t % j);  // 在第 log2(j) 位插入 0
      compare_swap(s, i, j, ((base + i) & k) == 0);
      __syncthreads();
    }
  }
  dst[base + t] = s[t];
  dst[base + t + kThreads] = s[t + kThreads];
}

// 跨块的一步（j >= kBlock）：每个线程一个比较器，直接读写全局内存；每步一次启动。
__global__ void bitonic_merge_global(float* __restrict__ keys, int64_t n, int64_t k, int64_t j) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= n / 2) return;
  const int64_t i = 2 * j * (t / j) + (t % j);
  const float a = keys[i], b = keys[i + j];
  const bool ascending = (i & k) == 0;
  if (ascending ? (a > b) : (b > a)) {
    keys[i] = b;
    keys[i + j] = a;
  }
}

// 阶段 k > kBlock 里剩下的 j = kBlock/2 … 1：都落在一个块内，在共享内存里一次做完。
__global__ void __launch_bounds__(kThreads) bitonic_merge_shared(float* __restrict__ keys, int64_t k) {
  __shared__ float s[kBlock];
  const int t = threadIdx.x;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kBlock;
  s[t] = keys[base + t];
  s[t + kThreads] = keys[base + t + kThreads];
  __syncthreads();
  const bool ascending = (base & k) == 0;  // k > kBlock：整块方向相同
  for (int j = kThreads; j > 0; j >>= 1) {
    const int i = 2 * j * (t / j) + (t % j);
    compare_swap(s, i, j, ascending);
    __syncthreads();
  }
  keys[base + t] = s[t];
  keys[base + t + kThreads] = s[t + kThreads];
}

// 主机端：d_src → d_dst，n 是 2 的幂且 n >= kBlock。
void bitonic_sort(const float* d_src, float* d_dst, int64_t n) {
  const int blocks = static_cast<int>(n / kBlock);
  bitonic_sort_shared<<<blocks, kThreads>>>(d_src, d_dst);
  for (int64_t k = 2 * kBlock; k <= n; k <<= 1) {
    for (int64_t j = k >> 1; j >= kBlock; j >>= 1) {
      bitonic_merge_global<<<static_cast<int>((n / 2 + 255) / 256), 256>>>(d_dst, n, k, j);
    }
    bitonic_merge_shared<<<blocks, kThreads>>>(d_dst, k);
  }
}
// --8<-- [end:kernel]

static uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// 排序一个长度为 n 的数组并检查；返回错误个数。
static int64_t run_case(const char* name, const std::vector<float>& keys) {
  const int64_t n = static_cast<int64_t>(keys.size());
  int64_t padded = kBlock;
  while (padded < n) padded <<= 1;
  std::vector<float> host(padded, std::numeric_limits<float>::infinity());  // 尾部补 +inf
  std::copy(keys.begin(), keys.end(), host.begin());

  float *d_src, *d_dst;
  CHECK(cudaMalloc(&d_src, padded * sizeof(float)));
  CHECK(cudaMalloc(&d_dst, padded * sizeof(float)));
  CHECK(cudaMemcpy(d_src, host.data(), padded * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(d_dst, 0xFF, padded * sizeof(float)));  // 先写满 NaN：漏写的元素会被查出
  bitonic_sort(d_src, d_dst, padded);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<float> out(padded);
  CHECK(cudaMemcpy(out.data(), d_dst, padded * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaFree(d_src));
  CHECK(cudaFree(d_dst));
  out.resize(n);

  std::vector<float> expected(keys);
  std::sort(expected.begin(), expected.end());
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!(out[i] == expected[i])) ++wrong;  // IEEE 比较：-0 == +0；NaN 会被算作错误
  }
  std::vector<uint32_t> got_bits(n), want_bits(n);  // 位模式的多重集合必须不变（-0 不能变成 +0）
  for (int64_t i = 0; i < n; ++i) {
    got_bits[i] = bits_of(out[i]);
    want_bits[i] = bits_of(keys[i]);
  }
  std::sort(got_bits.begin(), got_bits.end());
  std::sort(want_bits.begin(), want_bits.end());
  for (int64_t i = 0; i < n; ++i) {
    if (got_bits[i] != want_bits[i]) ++wrong;
  }
  std::printf("  %-28s n=%-9lld padded=%-9lld mismatches=%lld\n", name, static_cast<long long>(n),
              static_cast<long long>(padded), static_cast<long long>(wrong));
  return wrong;
}

int main(int argc, char** argv) {
  std::vector<int64_t> sizes = {1, 5, 1000, 1024, 4097, 100003, 1 << 20, (1 << 22) + 3};
  if (argc > 1) sizes = {std::atoll(argv[1])};
  const float special[] = {-0.0f, 0.0f, 1.5f, -2.0f, std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity()};
  uint32_t state = 12345u;  // 线性同余发生器：可复现的输入
  auto next = [&state] {
    state = state * 1664525u + 1013904223u;
    return state;
  };
  int64_t wrong = 0;
  std::printf("bitonic sort, block of %d keys in shared memory\n", kBlock);
  for (const int64_t n : sizes) {
    std::vector<float> random_keys(n), repeated_keys(n);
    for (int64_t i = 0; i < n; ++i) {
      random_keys[i] = static_cast<float>(static_cast<int32_t>(next())) / 65536.0f;  // 有正有负
      repeated_keys[i] = special[next() % 6];  // 大量重复、±0、±inf
    }
    wrong += run_case("random", random_keys);
    wrong += run_case("repeated, +-0, +-inf", repeated_keys);
  }
  std::printf("%s\n", wrong == 0 ? "PASS" : "FAIL");
  return wrong == 0 ? 0 : 1;
}
