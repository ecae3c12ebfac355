// 单精度矩阵乘（SGEMM）C = A·B 的四级阶梯：朴素版、共享内存分块版、寄存器分块版，
// 以及用 WMMA API 调用 Tensor Core 的 TF32 版本。
// 矩阵按行主序（row-major）存放：A 为 M×K，B 为 K×N，C 为 M×N。
// 与页面 docs/operator/gemm.md、实验 notebooks/operator/gemm.ipynb 对应。
//
// 自带正确性检查：输入是可复现的伪随机数，输出先写满 NaN，结果与主机端双精度参考逐元素比较，
// 容差按 K 次 fp32 乘加（TF32 版再加输入舍入）的误差上界给出（见 check() 的注释）。
// 全部通过才打印 PASS 并返回 0。
//
// 编译与运行：
//   nvcc -O3 -arch=sm_90 -o sgemm code/operator/sgemm.cu && ./sgemm
//   ./sgemm --time 4096      # 另外在 4096³ 上为各个 kernel 计时（只在真实 GPU 上有意义）
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cuda_runtime.h>
#include <mma.h>

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
// 第 1 级：每个线程算 C 的一个元素。threadIdx.x 沿列方向，
// 所以一个 warp 的 32 个线程读 B 的同一行里相邻的 32 个数（合并访问），读 A 的同一个数（广播）。
// 每次乘加都要从全局内存取 2 个 float（8 字节），算术强度只有 2 FLOP / 8 B = 0.25 FLOP/B。
__global__ void sgemm_naive(int M, int N, int K, const float* __restrict__ A,
                            const float* __restrict__ B, float* __restrict__ C) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  if (row >= M || col >= N) return;
  float acc = 0.0f;
  for (int k = 0; k < K; ++k) acc += A[row * K + k] * B[k * N + col];
  C[row * N + col] = acc;
}
// --8<-- [end:naive]

// --8<-- [start:smem]
// 第 2 级：一个 T×T 的线程块负责 C 的一个 T×T 子块。沿 K 每走 T 步，块内线程合作把
// A 的 T×T 子块和 B 的 T×T 子块搬进共享内存，同步后每个线程从共享内存读 2T 个数、做 T 次乘加。
// 每个从全局内存读进来的数被块内 T 个线程复用，全局访存量降为朴素版的 1/T。
template <int T>
__global__ void sgemm_smem(int M, int N, int K, const float* __restrict__ A,
                           const float* __restrict__ B, float* __restrict__ C) {
  __shared__ float As[T][T];
  __shared__ float Bs[T][T];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * T + ty;
  const int col = blockIdx.x * T + tx;
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += T) {
    // 越界的位置填 0：0 不改变点积，所以 M、N、K 不必是 T 的倍数。
    As[ty][tx] = (row < M && k0 + tx < K) ? A[row * K + k0 + tx] : 0.0f;
    Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(k0 + ty) * N + col] : 0.0f;
    __syncthreads();  // 子块装满之后才能读
#pragma unroll
    for (int kk = 0; kk < T; ++kk) acc += As[ty][kk] * Bs[kk][tx];
    __syncthreads();  // 所有线程读完之后才能装下一块
  }
  if (row < M && col < N) C[row * N + col] = acc;
}
// --8<-- [end:smem]

// --8<-- [start:regblock]
// 第 3 级：寄存器分块（register blocking）+ 向量化访存 + 共享内存里转置存放 A。
// 线程块算 C 的 BM×BN 子块，256 个线程排成 16×16，每个线程算 TM×TN = 8×8 个元素。
// 每步 kk 从共享内存取 A 的 8 个数和 B 的 8 个数放进寄存器，做 8×8 = 64 次乘加（外积）：
// 共享内存读取与乘加之比从第 2 级的 2:1 降到 16:64 = 1:4。
// 每个线程负责的 8 行（列）分成相隔 BM/2（BN/2）的两组 4 行（列），使一个 warp 的
// 16 字节共享内存读取连续排列、不产生 bank 冲突。
// 要求 M % BM == 0、N % BN == 0、K % BK == 0（主机端检查）；库实现用带谓词的加载处理余数。
template <int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
    sgemm_regblock(int M, int N, int K, const float* __restrict__ A,
                   const float* __restrict__ B, float* __restrict__ C) {
  constexpr int kThreads = (BM / TM) * (BN / TN);
  static_assert(kThreads == 256 && TM == 8 && TN == 8, "the index math below assumes 16x16 threads of 8x8");
  static_assert(BM * BK == 4 * kThreads && BK * BN == 4 * kThreads, "each thread loads one float4 of A and of B");
  __shared__ __align__(16) float As[BK][BM];  // A 的子块转置存放：As[k][m]，按 m 连续，便于向量化读取
  __shared__ __align__(16) float Bs[BK][BN];

  const int tid = threadIdx.x;
  const int tr = tid / (BN / TN);  // 线程在 16×16 网格中的行
  const int tc = tid % (BN / TN);  // 线程在 16×16 网格中的列
  const float* Ablk = A + static_cast<int64_t>(blockIdx.y) * BM * K;
  const float* Bblk = B + static_cast<int64_t>(blockIdx.x) * BN;
  // 搬运分工：A 子块 BM×BK 每行 BK/4 个 float4；B 子块 BK×BN 每行 BN/4 个 float4。
  const int a_row = tid / (BK / 4), a_col = (tid % (BK / 4)) * 4;
  const int b_row = tid / (BN / 4), b_col = (tid % (BN / 4)) * 4;

  float acc[TM][TN] = {};
  float ra[TM], rb[TN];
  for (int k0 = 0; k0 < K; k0 += BK) {
    const float4 a4 = *reinterpret_cast<const float4*>(Ablk + static_cast<int64_t>(a_row) * K + k0 + a_col);
    As[a_col + 0][a_row] = a4.x;  // 转置写入：全局内存按行读（合并），共享内存按列放
    As[a_col + 1][a_row] = a4.y;
    As[a_col + 2][a_row] = a4.z;
    As[a_col + 3][a_row] = a4.w;
    *reinterpret_cast<float4*>(&Bs[b_row][b_col]) =
        *reinterpret_cast<const float4*>(Bblk + static_cast<int64_t>(k0 + b_row) * N + b_col);
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      // 两组各 4 个连续的数，各用一条 16 字节的共享内存读取。
      *reinterpret_cast<float4*>(&ra[0]) = *reinterpret_cast<const float4*>(&As[kk][tr * 4]);
      *reinterpret_cast<float4*>(&ra[4]) = *reinterpret_cast<const float4*>(&As[kk][BM / 2 + tr * 4]);
      *reinterpret_cast<float4*>(&rb[0]) = *reinterpret_cast<const float4*>(&Bs[kk][tc * 4]);
      *reinterpret_cast<float4*>(&rb[4]) = *reinterpret_cast<const float4*>(&Bs[kk][BN / 2 + tc * 4]);
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] += ra[i] * rb[j];  // 外积：8 + 8 个数，64 次乘加
    }
    __syncthreads();
  }
  // 写回：第 i 行对应子块中的行 (i < 4 ? tr*4 + i : BM/2 + tr*4 + i - 4)，列同理，每次写 16 字节。
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int r = blockIdx.y * BM + (i < 4 ? tr * 4 + i : BM / 2 + tr * 4 + (i - 4));
    float* crow = C + static_cast<int64_t>(r) * N + blockIdx.x * BN;
    *reinterpret_cast<float4*>(crow + tc * 4) = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
    *reinterpret_cast<float4*>(crow + BN / 2 + tc * 4) = make_float4(acc[i][4], acc[i][5], acc[i][6], acc[i][7]);
  }
}
// --8<-- [end:regblock]

// --8<-- [start:wmma]
// 第 4 级：Tensor Core，经 WMMA API（warp 级矩阵乘加）。TF32 输入、FP32 累加，片段形状 m16n16k8。
// 一个 warp 负责 C 的 32×32 子块，即 2×2 个 16×16 累加片段；沿 K 每步取 A、B 各两个片段。
// 片段在 32 个线程寄存器里的分布对程序员不透明，只能整体加载、相乘、存回。
// TF32 片段加载后要用 __float_to_tf32 把每个元素舍入到 TF32（10 位尾数）。
// 为突出 API，这里片段直接从全局内存加载，没有经共享内存复用；要求 M、N 是 32 的倍数，K 是 8 的倍数。
namespace wmma = nvcuda::wmma;

__global__ void sgemm_wmma_tf32(int M, int N, int K, const float* __restrict__ A,
                                const float* __restrict__ B, float* __restrict__ C) {
  const int warp_id = (blockIdx.x * blockDim.x + threadIdx.x) / 32;  // 整个 warp 取值相同
  const int wm = warp_id / (N / 32), wn = warp_id % (N / 32);
  if (wm * 32 >= M) return;  // 整个 warp 一起退出，不破坏 warp 级操作
  wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc[2][2];
  wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> a[2];
  wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> b[2];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
  for (int k = 0; k < K; k += 8) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      wmma::load_matrix_sync(a[i], A + static_cast<int64_t>(wm * 32 + i * 16) * K + k, K);
      wmma::load_matrix_sync(b[i], B + static_cast<int64_t>(k) * N + wn * 32 + i * 16, N);
#pragma unroll
      for (int t = 0; t < a[i].num_elements; ++t) a[i].x[t] = wmma::__float_to_tf32(a[i].x[t]);
#pragma unroll
      for (int t = 0; t < b[i].num_elements; ++t) b[i].x[t] = wmma::__float_to_tf32(b[i].x[t]);
    }
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
  }
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(C + static_cast<int64_t>(wm * 32 + i * 16) * N + wn * 32 + j * 16, acc[i][j], N,
                              wmma::mem_row_major);
}
// --8<-- [end:wmma]

constexpr int kTile = 32;
constexpr int kBM = 128, kBN = 128, kBK = 8, kTM = 8, kTN = 8;

enum class Kernel { kNaive, kSmem, kRegblock, kWmmaTf32 };
constexpr Kernel kAll[] = {Kernel::kNaive, Kernel::kSmem, Kernel::kRegblock, Kernel::kWmmaTf32};
const char* name(Kernel k) {
  switch (k) {
    case Kernel::kNaive: return "naive";
    case Kernel::kSmem: return "smem-tiled";
    case Kernel::kRegblock: return "register-blocked";
    case Kernel::kWmmaTf32: return "wmma-tf32";
  }
  return "?";
}

bool supported(Kernel k, int M, int N, int K) {
  if (k == Kernel::kRegblock) return M % kBM == 0 && N % kBN == 0 && K % kBK == 0;
  if (k == Kernel::kWmmaTf32) return M % 32 == 0 && N % 32 == 0 && K % 8 == 0;
  return true;
}

void launch(Kernel k, int M, int N, int K, const float* A, const float* B, float* C) {
  switch (k) {
    case Kernel::kNaive: {
      dim3 block(32, 8), grid((N + 31) / 32, (M + 7) / 8);
      sgemm_naive<<<grid, block>>>(M, N, K, A, B, C);
      break;
    }
    case Kernel::kSmem: {
      dim3 block(kTile, kTile), grid((N + kTile - 1) / kTile, (M + kTile - 1) / kTile);
      sgemm_smem<kTile><<<grid, block>>>(M, N, K, A, B, C);
      break;
    }
    case Kernel::kRegblock: {
      dim3 block((kBM / kTM) * (kBN / kTN)), grid(N / kBN, M / kBM);
      sgemm_regblock<kBM, kBN, kBK, kTM, kTN><<<grid, block>>>(M, N, K, A, B, C);
      break;
    }
    case Kernel::kWmmaTf32: {
      const int warps = (M / 32) * (N / 32);
      sgemm_wmma_tf32<<<(warps + 3) / 4, 128>>>(M, N, K, A, B, C);  // 每块 4 个 warp
      break;
    }
  }
  CHECK(cudaGetLastError());
}

// 可复现的输入：线性同余发生器，取值在 [-1, 1)。
void fill(std::vector<float>& v, uint32_t seed) {
  for (auto& x : v) {
    seed = seed * 1664525u + 1013904223u;
    x = static_cast<float>(seed >> 8) / 8388608.0f - 1.0f;
  }
}

// 与双精度参考逐元素比较。fp32 做 K 次乘加（无论求和顺序、是否融合乘加），误差满足
//   |c - c_ref| <= γ_K · Σ_k |a_ik|·|b_kj|，γ_K = K·u / (1 - K·u)，u = 2^-24（单位舍入）。
// 这里取 K·ε（ε = FLT_EPSILON = 2^-23 = 2u），即在一阶上界之上再留 2 倍余量；
// 双精度参考本身的误差比它小 2^29 倍，可以忽略。
// TF32 版先把 a、b 舍入到 10 位尾数（单位舍入 2^-11），乘积的相对误差不超过约 2·2^-11，
// 于是再加 input_rel = 2^-9（同样留 2 倍余量）。
int64_t check(int M, int N, int K, const std::vector<float>& a, const std::vector<float>& b,
              const std::vector<float>& c, double input_rel) {
  int64_t wrong = 0;
  std::vector<double> ref(N), mag(N);
  for (int i = 0; i < M; ++i) {
    std::fill(ref.begin(), ref.end(), 0.0);
    std::fill(mag.begin(), mag.end(), 0.0);
    for (int k = 0; k < K; ++k) {
      const double aik = a[static_cast<size_t>(i) * K + k];
      const float* brow = &b[static_cast<size_t>(k) * N];
      for (int j = 0; j < N; ++j) {
        ref[j] += aik * brow[j];
        mag[j] += std::fabs(aik * brow[j]);
      }
    }
    for (int j = 0; j < N; ++j) {
      const double got = c[static_cast<size_t>(i) * N + j];
      const double tol = (K * static_cast<double>(FLT_EPSILON) + input_rel) * mag[j];
      if (!(std::fabs(got - ref[j]) <= tol)) ++wrong;  // NaN（漏写的元素）也算错
    }
  }
  return wrong;
}

int main(int argc, char** argv) {
  bool ok = true;
  // 形状里有不是分块大小倍数的，用来检查边界处理；寄存器分块版与 WMMA 版只跑整除的形状。
  const int shapes[][3] = {{257, 129, 65}, {384, 256, 520}, {1024, 1024, 1024}};
  for (const auto& s : shapes) {
    const int M = s[0], N = s[1], K = s[2];
    std::vector<float> ha(static_cast<size_t>(M) * K), hb(static_cast<size_t>(K) * N), hc(static_cast<size_t>(M) * N);
    fill(ha, 12345u);
    fill(hb, 67890u);
    float *da, *db, *dc;
    CHECK(cudaMalloc(&da, ha.size() * sizeof(float)));
    CHECK(cudaMalloc(&db, hb.size() * sizeof(float)));
    CHECK(cudaMalloc(&dc, hc.size() * sizeof(float)));
    CHECK(cudaMemcpy(da, ha.data(), ha.size() * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(db, hb.data(), hb.size() * sizeof(float), cudaMemcpyHostToDevice));
    for (Kernel k : kAll) {
      if (!supported(k, M, N, K)) continue;
      CHECK(cudaMemset(dc, 0xFF, hc.size() * sizeof(float)));  // 先写满 NaN
      launch(k, M, N, K, da, db, dc);
      CHECK(cudaDeviceSynchronize());
      CHECK(cudaMemcpy(hc.data(), dc, hc.size() * sizeof(float), cudaMemcpyDeviceToHost));
      const int64_t wrong = check(M, N, K, ha, hb, hc, k == Kernel::kWmmaTf32 ? 0x1p-9 : 0.0);
      std::printf("%-17s M=%5d N=%5d K=%5d mismatches=%lld %s\n", name(k), M, N, K,
                  static_cast<long long>(wrong), wrong == 0 ? "ok" : "FAIL");
      ok = ok && wrong == 0;
    }
    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    CHECK(cudaFree(dc));
  }

  if (argc > 2 && std::strcmp(argv[1], "--time") == 0) {  // 可选：计时，只打印，不参与判定
    const int n = std::atoi(argv[2]);
    const size_t bytes = static_cast<size_t>(n) * n * sizeof(float);
    float *da, *db, *dc;
    CHECK(cudaMalloc(&da, bytes));
    CHECK(cudaMalloc(&db, bytes));
    CHECK(cudaMalloc(&dc, bytes));
    CHECK(cudaMemset(da, 0, bytes));
    CHECK(cudaMemset(db, 0, bytes));
    cudaEvent_t t0, t1;
    CHECK(cudaEventCreate(&t0));
    CHECK(cudaEventCreate(&t1));
    for (Kernel k : kAll) {
      if (!supported(k, n, n, n)) continue;
      launch(k, n, n, n, da, db, dc);  // 预热
      const int reps = 5;
      CHECK(cudaEventRecord(t0));
      for (int r = 0; r < reps; ++r) launch(k, n, n, n, da, db, dc);
      CHECK(cudaEventRecord(t1));
      CHECK(cudaEventSynchronize(t1));
      float ms = 0.0f;
      CHECK(cudaEventElapsedTime(&ms, t0, t1));
      ms /= reps;
      std::printf("%-17s n=%d  %.3f ms  %.2f TFLOP/s\n", name(k), n, ms, 2.0 * n * n * n / (ms * 1e9));
    }
    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    CHECK(cudaFree(dc));
  }
  std::printf("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
