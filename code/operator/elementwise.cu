// 逐元素（elementwise）与广播（broadcast）kernel 的 CUDA C++ 版本，对应页面 docs/operator/elementwise.md：
//   1. add_mul：融合的 out = a + b * c，网格跨步循环 + 16 字节向量化访存（float4），地址不对齐时退回标量；
//   2. broadcast_add：通用广播加法，合并连续维度、用乘法代替除法（fast divmod）计算下标；
//   3. add_bias_rows：行广播（加偏置）的特化版本，广播的那一行在寄存器里复用，沿连续维向量化。
// 自带正确性检查：每个结果都与主机端的同一运算逐位比较（容差 0，理由见各处注释）。
//
// 编译与运行：
//   nvcc -O3 -arch=sm_90 -o elementwise code/operator/elementwise.cu && ./elementwise
#include <algorithm>
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

// --8<-- [start:fused]
// out = a + b * c，一个 kernel 完成：每个元素读 12 字节、写 4 字节。fmaf 只舍入一次，
// 主机端用 std::fma 得到同样的结果，所以检查可以要求逐位相等。
// kVec = true 时按 float4 读写（一条 16 字节的访存指令搬 4 个元素），要求四个指针都按 16 字节对齐。
template <bool kVec>
__global__ void add_mul(const float* __restrict__ a, const float* __restrict__ b, const float* __restrict__ c,
                        float* __restrict__ out, int64_t n) {
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;  // 网格跨步：网格大小与 n 无关
  int64_t tail = 0;
  if constexpr (kVec) {
    const auto* a4 = reinterpret_cast<const float4*>(a);
    const auto* b4 = reinterpret_cast<const float4*>(b);
    const auto* c4 = reinterpret_cast<const float4*>(c);
    auto* o4 = reinterpret_cast<float4*>(out);
    for (int64_t i = start; i < n / 4; i += stride) {
      const float4 x = a4[i], y = b4[i], z = c4[i];
      o4[i] = make_float4(fmaf(y.x, z.x, x.x), fmaf(y.y, z.y, x.y), fmaf(y.z, z.z, x.z), fmaf(y.w, z.w, x.w));
    }
    tail = n / 4 * 4;  // 末尾不足 4 个的元素走下面的标量循环
  }
  for (int64_t i = tail + start; i < n; i += stride) out[i] = fmaf(b[i], c[i], a[i]);
}
// --8<-- [end:fused]

// --8<-- [start:divmod]
// 除以一个运行时才知道、但整个 kernel 不变的除数 d：在主机上预先算好魔数 m 和移位 s，
// 设备上用一次 32 位乘法取高位、一次加法、一次移位代替整数除法（GPU 没有整数除法指令，
// 编译器会把 n / d 展开成几十条指令）。对 n < 2^31、1 ≤ d < 2^31 成立。
struct FastDivmod {
  uint32_t divisor = 1, multiplier = 1, shift = 0;

  FastDivmod() = default;
  explicit FastDivmod(uint32_t d) : divisor(d) {
    while ((uint64_t{1} << shift) < d) ++shift;  // s = ⌈log2 d⌉
    multiplier = static_cast<uint32_t>((uint64_t{1} << 32) * ((uint64_t{1} << shift) - d) / d + 1);
  }
  __host__ __device__ void divmod(uint32_t n, uint32_t& q, uint32_t& r) const {
#ifdef __CUDA_ARCH__
    const uint32_t hi = __umulhi(n, multiplier);
#else
    const uint32_t hi = static_cast<uint32_t>((static_cast<uint64_t>(n) * multiplier) >> 32);
#endif
    q = (hi + n) >> shift;  // = ⌊n · (2^32 + m) / 2^(32+s)⌋ = ⌊n / d⌋
    r = n - q * divisor;
  }
};
// --8<-- [end:divmod]

// --8<-- [start:broadcast]
constexpr int kMaxDims = 4;

// 合并之后的广播计划：维度从最内层（下标 0）往外排；步长以元素计，广播维的步长为 0。
struct BroadcastPlan {
  int ndim = 0;
  FastDivmod size[kMaxDims];
  uint32_t stride_a[kMaxDims] = {}, stride_b[kMaxDims] = {};
};

// out（连续存放）的第 i 个元素 = a[off_a] + b[off_b]：把 i 逐维拆成坐标，坐标乘各自的步长。
// 循环上界是编译期常数并完全展开，计划里的数组留在参数区/寄存器里，不会落到本地内存。
__global__ void broadcast_add(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ out,
                              uint32_t n, BroadcastPlan plan) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    uint32_t rest = i, off_a = 0, off_b = 0;
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {
      if (d < plan.ndim) {
        uint32_t q, r;
        plan.size[d].divmod(rest, q, r);
        off_a += r * plan.stride_a[d];
        off_b += r * plan.stride_b[d];
        rest = q;
      }
    }
    out[i] = a[off_a] + b[off_b];
  }
}

// 主机端：去掉长度为 1 的维，再从内往外合并相邻维。外层维 j 能并进当前维的条件是：
// 对每个操作数都有 stride[j] == 当前维的步长 × 当前维的长度（两维在内存里首尾相接；
// 两个都是广播维时 0 == 0 × 长度，同样可以合并）。输出连续，条件自动成立。
BroadcastPlan make_plan(const std::vector<int64_t>& shape, const std::vector<int64_t>& sa,
                        const std::vector<int64_t>& sb) {
  struct Dim { int64_t size, sa, sb; };
  std::vector<Dim> dims;  // 最内层在前
  for (int j = static_cast<int>(shape.size()) - 1; j >= 0; --j) {
    if (shape[j] == 1) continue;
    if (!dims.empty() && sa[j] == dims.back().sa * dims.back().size && sb[j] == dims.back().sb * dims.back().size) {
      dims.back().size *= shape[j];
    } else {
      dims.push_back({shape[j], sa[j], sb[j]});
    }
  }
  if (dims.size() > kMaxDims) {
    std::fprintf(stderr, "more than %d dimensions remain after collapsing\n", kMaxDims);
    std::exit(2);
  }
  BroadcastPlan plan;
  plan.ndim = static_cast<int>(dims.size());
  for (int d = 0; d < plan.ndim; ++d) {
    plan.size[d] = FastDivmod(static_cast<uint32_t>(dims[d].size));
    plan.stride_a[d] = static_cast<uint32_t>(dims[d].sa);
    plan.stride_b[d] = static_cast<uint32_t>(dims[d].sb);
  }
  return plan;
}
// --8<-- [end:broadcast]

// --8<-- [start:rows]
// 行广播 out[r][:] = x[r][:] + bias[:] 的特化：x 为 rows × cols，cols 是 4 的倍数，指针按 16 字节对齐。
// 每个线程负责一段 4 列：bias 只读一次、留在寄存器里，然后沿行向下走；同一 warp 的 32 个线程
// 读一行里连续的 512 字节，读写都合并且向量化，也不需要任何整数除法。
__global__ void add_bias_rows(const float4* __restrict__ x, const float4* __restrict__ bias, float4* __restrict__ out,
                              int rows, int cols4) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= cols4) return;
  const float4 bj = bias[j];
  for (int r = blockIdx.y; r < rows; r += gridDim.y) {
    const int64_t k = static_cast<int64_t>(r) * cols4 + j;
    const float4 v = x[k];
    out[k] = make_float4(v.x + bj.x, v.y + bj.y, v.z + bj.z, v.w + bj.w);
  }
}
// --8<-- [end:rows]

namespace {

uint32_t g_state = 99u;  // 线性同余发生器：可复现的输入
std::vector<float> random_vector(size_t n) {
  std::vector<float> v(n);
  for (float& x : v) {
    g_state = g_state * 1664525u + 1013904223u;
    x = static_cast<float>(g_state >> 8) / 16777216.0f - 0.5f;
  }
  return v;
}

float* to_device(const std::vector<float>& h) {
  float* d;
  CHECK(cudaMalloc(&d, h.size() * sizeof(float)));
  CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
  return d;
}

int64_t compare(const char* name, const float* dout, const std::vector<float>& expected) {
  std::vector<float> got(expected.size());
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(got.data(), dout, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
  int64_t wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(got[i] == expected[i])) ++wrong;
  }
  std::printf("  %-34s n=%zu mismatches=%lld\n", name, got.size(), static_cast<long long>(wrong));
  return wrong;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

int main() {
  int64_t wrong = 0;
  int device = 0, sms = 0;
  CHECK(cudaGetDevice(&device));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));

  // 0. 魔数除法在主机上先对照普通除法检查一批 (n, d)，包括 2 的幂和边界值。
  for (uint32_t d : {1u, 2u, 3u, 7u, 32u, 33u, 1000u, 3500u, 65537u, 1u << 30, (1u << 31) - 1}) {
    const FastDivmod fd(d);
    for (uint32_t n : {0u, 1u, d - 1, d, d + 1, 123456789u, (1u << 31) - 1}) {
      if (n >= (1u << 31)) continue;  // 只对 n < 2^31 成立
      uint32_t q, r;
      fd.divmod(n, q, r);
      if (q != n / d || r != n % d) {
        std::printf("  FastDivmod wrong for n=%u d=%u\n", n, d);
        ++wrong;
      }
    }
  }

  // 1. 融合的 a + b * c：对齐时走 float4，指针各偏移 1 个元素（4 字节，不再 16 字节对齐）时走标量。
  {
    const int64_t n = (int64_t{1} << 22) + 3;
    const auto ha = random_vector(n), hb = random_vector(n), hc = random_vector(n);
    std::vector<float> expected(n);
    for (int64_t i = 0; i < n; ++i) expected[i] = std::fma(hb[i], hc[i], ha[i]);
    float *a = to_device(ha), *b = to_device(hb), *c = to_device(hc), *out;
    CHECK(cudaMalloc(&out, n * sizeof(float)));
    const int blocks = sms * 8, threads = 256;
    CHECK(cudaMemset(out, 0xFF, n * sizeof(float)));  // 先写满 NaN：漏写的元素会被检查出来
    if (aligned16(a) && aligned16(b) && aligned16(c) && aligned16(out)) {
      add_mul<true><<<blocks, threads>>>(a, b, c, out, n);
    } else {
      add_mul<false><<<blocks, threads>>>(a, b, c, out, n);
    }
    CHECK(cudaGetLastError());
    wrong += compare("add_mul (float4)", out, expected);

    CHECK(cudaMemset(out, 0xFF, n * sizeof(float)));
    const bool vec = aligned16(a + 1) && aligned16(b + 1) && aligned16(c + 1) && aligned16(out + 1);
    if (vec) add_mul<true><<<blocks, threads>>>(a + 1, b + 1, c + 1, out + 1, n - 1);
    else add_mul<false><<<blocks, threads>>>(a + 1, b + 1, c + 1, out + 1, n - 1);
    CHECK(cudaGetLastError());
    std::vector<float> shifted(expected.begin() + 1, expected.end());
    wrong += compare(vec ? "add_mul, offset by 4 B (float4)" : "add_mul, offset by 4 B (scalar)", out + 1, shifted);
    for (float* p : {a, b, c, out}) CHECK(cudaFree(p));
  }

  // 2. 通用广播：单次 IEEE 加法在主机与设备上舍入相同，要求逐位相等。
  struct Case {
    const char* name;
    std::vector<int64_t> shape, sa, sb;  // 输出形状与两个操作数的步长（最外层在前，广播维为 0）
  };
  const std::vector<Case> cases = {
      // x[N,C,H,W] * 每通道的 s[1,C,1,1]：H、W 两维对两个操作数都首尾相接，合并成一维。
      {"x[4,6,50,70] + s[1,6,1,1]", {4, 6, 50, 70}, {6 * 3500, 3500, 70, 1}, {0, 1, 0, 0}},
      // 外积式广播 a[64,1,1027] + b[1,37,1027]：任何两维都不能合并。
      {"a[64,1,1027] + b[1,37,1027]", {64, 37, 1027}, {1027, 0, 1}, {0, 1027, 1}},
  };
  for (const Case& cs : cases) {
    int64_t n = 1, extent_a = 1, extent_b = 1;
    for (size_t j = 0; j < cs.shape.size(); ++j) {
      n *= cs.shape[j];
      extent_a += (cs.shape[j] - 1) * cs.sa[j];
      extent_b += (cs.shape[j] - 1) * cs.sb[j];
    }
    const auto ha = random_vector(extent_a), hb = random_vector(extent_b);
    std::vector<float> expected(n);
    for (int64_t i = 0; i < n; ++i) {  // 主机参考：普通的整除与取余
      int64_t rest = i, oa = 0, ob = 0;
      for (int j = static_cast<int>(cs.shape.size()) - 1; j >= 0; --j) {
        oa += rest % cs.shape[j] * cs.sa[j];
        ob += rest % cs.shape[j] * cs.sb[j];
        rest /= cs.shape[j];
      }
      expected[i] = ha[oa] + hb[ob];
    }
    const BroadcastPlan plan = make_plan(cs.shape, cs.sa, cs.sb);
    std::printf("  %s: %zu dims -> %d after collapsing (innermost first:", cs.name, cs.shape.size(), plan.ndim);
    for (int d = 0; d < plan.ndim; ++d) std::printf(" %u", plan.size[d].divisor);
    std::printf(")\n");
    float *a = to_device(ha), *b = to_device(hb), *out;
    CHECK(cudaMalloc(&out, n * sizeof(float)));
    CHECK(cudaMemset(out, 0xFF, n * sizeof(float)));
    broadcast_add<<<sms * 8, 256>>>(a, b, out, static_cast<uint32_t>(n), plan);
    CHECK(cudaGetLastError());
    wrong += compare(cs.name, out, expected);
    for (float* p : {a, b, out}) CHECK(cudaFree(p));
  }

  // 3. 行广播的特化版本。
  {
    const int rows = 1000, cols = 1028;
    const auto hx = random_vector(static_cast<size_t>(rows) * cols), hbias = random_vector(cols);
    std::vector<float> expected(hx.size());
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < cols; ++j) expected[static_cast<size_t>(r) * cols + j] = hx[static_cast<size_t>(r) * cols + j] + hbias[j];
    float *x = to_device(hx), *bias = to_device(hbias), *out;
    CHECK(cudaMalloc(&out, hx.size() * sizeof(float)));
    CHECK(cudaMemset(out, 0xFF, hx.size() * sizeof(float)));
    const int cols4 = cols / 4, threads = 128;
    const dim3 grid((cols4 + threads - 1) / threads, std::min(rows, sms * 4));
    add_bias_rows<<<grid, threads>>>(reinterpret_cast<const float4*>(x), reinterpret_cast<const float4*>(bias),
                                     reinterpret_cast<float4*>(out), rows, cols4);
    CHECK(cudaGetLastError());
    wrong += compare("add_bias_rows x[1000,1028] + b[1028]", out, expected);
    for (float* p : {x, bias, out}) CHECK(cudaFree(p));
  }

  std::printf("%s\n", wrong == 0 ? "PASS" : "FAIL");
  return wrong == 0 ? 0 : 1;
}
