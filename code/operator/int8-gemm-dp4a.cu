// INT8 GEMM 的 CUDA C++ 版本：__dp4a 做 4 路 int8 点积、int32 累加，尾处理用定点乘数加移位
// 把 int32 重新量化（requantization）成 int8，全程没有浮点运算。
//   Y[i][j] = clamp(z_y + round(M_j * (acc[i][j] + bias[j])), -128, 127)，
//   acc[i][j] = sum_k A[i][k] * W[j][k]，M_j = s_a * s_w[j] / s_y = mult[j] / 2^31 / 2^shift[j]。
// 自带正确性检查：int32 累加值与主机端逐位相等，重新量化的结果与主机端同一套整数运算逐位相等，
// 并且与双精度计算的理想值相差不超过 1 个量化级。
//
// 编译与运行（__dp4a 需要 sm_61 及以上）：
//   nvcc -O3 -arch=sm_90 -o int8-gemm-dp4a code/operator/int8-gemm-dp4a.cu && ./int8-gemm-dp4a
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

// --8<-- [start:requant]
// 定点乘法：a * m / 2^31，就近舍入、平局远离 0。m 是 Q31 定点数，取值 [2^30, 2^31)，
// 代表 [0.5, 1) 之间的实数；64 位乘积 |a * m| < 2^62，不会溢出。
__host__ __device__ inline int32_t mul_q31_round(int32_t a, int32_t m) {
  const int64_t p = static_cast<int64_t>(a) * m;
  const int64_t half = int64_t{1} << 30;
  const int64_t q = p >= 0 ? (p + half) >> 31 : -((-p + half) >> 31);
  return static_cast<int32_t>(q);
}

// 除以 2^s，就近舍入、平局远离 0（s 为 0 时原样返回）。
__host__ __device__ inline int32_t shift_right_round(int32_t x, int s) {
  if (s == 0) return x;
  const int64_t v = x;
  const int64_t half = int64_t{1} << (s - 1);
  return static_cast<int32_t>(v >= 0 ? (v + half) >> s : -((-v + half) >> s));
}

// int32 累加值 → int8：加偏置、乘定点乘数、移位、加输出零点、饱和。
__host__ __device__ inline int8_t requantize(int32_t acc, int32_t bias, int32_t mult, int shift,
                                             int32_t out_zero) {
  int32_t v = mul_q31_round(acc + bias, mult);
  v = shift_right_round(v, shift) + out_zero;
  return static_cast<int8_t>(v < -128 ? -128 : (v > 127 ? 127 : v));
}
// --8<-- [end:requant]

// --8<-- [start:kernel]
constexpr int TILE = 16;       // 16×16 个线程，每个线程算一个输出
constexpr int K_WORDS = 16;    // 每轮沿 K 取 16 个 32 位字 = 64 个 int8

// A: M×K，W: N×K（两者都沿 K 连续，K 是 4 的倍数），每 4 个 int8 打包成一个 32 位字交给 __dp4a。
__global__ void gemm_s8_dp4a_requant(const int8_t* __restrict__ A, const int8_t* __restrict__ W,
                                     const int32_t* __restrict__ bias, const int32_t* __restrict__ mult,
                                     const int32_t* __restrict__ shift, int32_t out_zero,
                                     int8_t* __restrict__ Y, int32_t* __restrict__ acc_out,
                                     int M, int N, int K) {
  __shared__ int32_t As[TILE][K_WORDS + 1];  // 多一列：按列读 Ws 时没有 bank 冲突
  __shared__ int32_t Ws[TILE][K_WORDS + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * TILE + ty;  // 输出行（token）
  const int col = blockIdx.x * TILE + tx;  // 输出列（输出通道）
  const int w_row = blockIdx.x * TILE + ty;  // 本线程负责装入的 W 行
  const int k_words = K / 4;

  int32_t acc = 0;
  for (int kw0 = 0; kw0 < k_words; kw0 += K_WORDS) {
    const int kw = kw0 + tx;
    // 每个线程装一个 32 位字（4 个 int8）；越界处填 0，不改变点积
    As[ty][tx] = (row < M && kw < k_words) ? reinterpret_cast<const int32_t*>(A + static_cast<size_t>(row) * K)[kw] : 0;
    Ws[ty][tx] = (w_row < N && kw < k_words) ? reinterpret_cast<const int32_t*>(W + static_cast<size_t>(w_row) * K)[kw] : 0;
    __syncthreads();
#pragma unroll
    for (int w = 0; w < K_WORDS; ++w) {
      acc = __dp4a(As[ty][w], Ws[tx][w], acc);  // 4 个 int8 乘积之和加到 int32 上
    }
    __syncthreads();
  }
  if (row < M && col < N) {
    const size_t idx = static_cast<size_t>(row) * N + col;
    if (acc_out != nullptr) acc_out[idx] = acc;
    Y[idx] = requantize(acc, bias[col], mult[col], shift[col], out_zero);
  }
}
// --8<-- [end:kernel]

// 把实数乘数 0 < M < 1 拆成 Q31 定点数 mult ∈ [2^30, 2^31) 与右移位数 shift：M ≈ mult / 2^31 / 2^shift。
static void quantize_multiplier(double m, int32_t* mult, int* shift) {
  int exp = 0;
  const double frac = std::frexp(m, &exp);  // m = frac * 2^exp，frac ∈ [0.5, 1)
  int64_t q = std::llround(frac * 2147483648.0);
  if (q == (int64_t{1} << 31)) {  // 舍入到了 1.0：改写成 0.5 × 2
    q /= 2;
    ++exp;
  }
  *mult = static_cast<int32_t>(q);
  *shift = -exp;
}

int main() {
  // 尺寸故意不是块大小的倍数；K 是 4 的倍数（__dp4a 一次吃 4 个 int8），但不是 64 的倍数。
  const int M = 203, N = 157, K = 1000;
  std::vector<int8_t> hA(static_cast<size_t>(M) * K), hW(static_cast<size_t>(N) * K);
  uint32_t state = 2024u;  // 线性同余发生器：可复现的输入，覆盖 -128..127
  for (auto& v : hA) { state = state * 1664525u + 1013904223u; v = static_cast<int8_t>(state >> 24); }
  for (auto& v : hW) { state = state * 1664525u + 1013904223u; v = static_cast<int8_t>(state >> 24); }

  // 缩放：激活逐张量 s_a，权重逐输出通道 s_w[j]，输出 s_y 与零点 z_y；偏置以 s_a * s_w[j] 为单位存成 int32
  const double s_a = 0.05, s_y = 1.0;
  const int32_t out_zero = 3;
  std::vector<double> real_mult(N);
  std::vector<int32_t> hbias(N), hmult(N), hshift(N);
  for (int j = 0; j < N; ++j) {
    const double s_w = 0.0005 * (1 + j % 7);
    real_mult[j] = s_a * s_w / s_y;
    int sh = 0;
    quantize_multiplier(real_mult[j], &hmult[j], &sh);
    hshift[j] = sh;
    hbias[j] = (j % 5 - 2) * 1000;
    if (!(sh >= 0 && sh < 31)) { std::printf("multiplier out of range\n"); return 1; }
  }

  int8_t *dA, *dW, *dY;
  int32_t *dbias, *dmult, *dshift, *dacc;
  const size_t out_n = static_cast<size_t>(M) * N;
  CHECK(cudaMalloc(&dA, hA.size()));
  CHECK(cudaMalloc(&dW, hW.size()));
  CHECK(cudaMalloc(&dY, out_n));
  CHECK(cudaMalloc(&dacc, out_n * sizeof(int32_t)));
  CHECK(cudaMalloc(&dbias, N * sizeof(int32_t)));
  CHECK(cudaMalloc(&dmult, N * sizeof(int32_t)));
  CHECK(cudaMalloc(&dshift, N * sizeof(int32_t)));
  CHECK(cudaMemcpy(dA, hA.data(), hA.size(), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dW, hW.data(), hW.size(), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dbias, hbias.data(), N * sizeof(int32_t), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dmult, hmult.data(), N * sizeof(int32_t), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dshift, hshift.data(), N * sizeof(int32_t), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dY, 0x55, out_n));                    // 先写满记号值：漏写的元素会被检查出来
  CHECK(cudaMemset(dacc, 0x55, out_n * sizeof(int32_t)));

  const dim3 block(TILE, TILE), grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
  gemm_s8_dp4a_requant<<<grid, block>>>(dA, dW, dbias, dmult, dshift, out_zero, dY, dacc, M, N, K);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<int8_t> hY(out_n);
  std::vector<int32_t> hacc(out_n);
  CHECK(cudaMemcpy(hY.data(), dY, out_n, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(hacc.data(), dacc, out_n * sizeof(int32_t), cudaMemcpyDeviceToHost));

  int64_t acc_wrong = 0, y_wrong = 0, off_by_more = 0, saturated = 0;
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < N; ++j) {
      int32_t acc = 0;
      for (int k = 0; k < K; ++k) acc += int32_t{hA[static_cast<size_t>(i) * K + k]} * hW[static_cast<size_t>(j) * K + k];
      const size_t idx = static_cast<size_t>(i) * N + j;
      if (hacc[idx] != acc) ++acc_wrong;  // 整数累加：必须逐位相等
      const int8_t y = requantize(acc, hbias[j], hmult[j], hshift[j], out_zero);
      if (hY[idx] != y) ++y_wrong;  // 同一套整数运算：必须逐位相等
      // 与理想的实数重新量化相比，定点乘数的舍入最多让结果差 1 个量化级
      const double ideal = std::clamp(std::nearbyint(out_zero + real_mult[j] * (double(acc) + hbias[j])), -128.0, 127.0);
      if (std::fabs(ideal - y) > 1.0) ++off_by_more;
      if (y == -128 || y == 127) ++saturated;
    }
  }
  const bool pass = acc_wrong == 0 && y_wrong == 0 && off_by_more == 0;
  std::printf("gemm_s8_dp4a_requant M=%d N=%d K=%d acc mismatches=%lld y mismatches=%lld "
              "off-by-more-than-1=%lld saturated=%lld %s\n",
              M, N, K, static_cast<long long>(acc_wrong), static_cast<long long>(y_wrong),
              static_cast<long long>(off_by_more), static_cast<long long>(saturated), pass ? "PASS" : "FAIL");
  CHECK(cudaFree(dA));
  CHECK(cudaFree(dW));
  CHECK(cudaFree(dY));
  CHECK(cudaFree(dacc));
  CHECK(cudaFree(dbias));
  CHECK(cudaFree(dmult));
  CHECK(cudaFree(dshift));
  return pass ? 0 : 1;
}
