// nvcc-arch: sm_90
// 异步屏障（asynchronous barrier，硬件上是共享内存里的 mbarrier）驱动的多级流水线：一个生产者 warp
// 用批量异步拷贝（cp.async.bulk，经 cuda::device::memcpy_async_tx，不需要张量描述符）把 A、B 的分块
// 搬进 STAGES 级环形缓冲区，4 个消费者 warp 做分块矩阵乘。每一级有两个屏障：
//   full[s]  ：生产者的拷贝全部落地（事务计数归零）且所有线程都已到达，消费者才能读第 s 级；
//   empty[s] ：消费者都读完第 s 级，生产者才能往里写下一块。
// 到达（arrive）与等待（wait）是分开的两步：生产者到达 full[s] 后不等，直接去装下一级。
// 同一个矩阵乘也写了一个同步版本（整块一起装、__syncthreads、再算），两者都和 CPU 的结果逐位比较。
// 需要计算能力 9.0（Hopper）；见 docs/operator/cluster-barrier.md。
//
// 编译与运行：
//   nvcc -O3 -arch=sm_90 -o mbarrier-pipeline code/operator/mbarrier-pipeline.cu && ./mbarrier-pipeline
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda/barrier>
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

using barrier = cuda::barrier<cuda::thread_scope_block>;
namespace cde = cuda::device::experimental;

constexpr int BM = 64, BN = 64, BK = 32;  // 每块算 C 的 64×64，沿 K 每次推进 32
constexpr int STAGES = 4;                 // 环形缓冲区的级数
constexpr int CONSUMERS = 128;            // 4 个消费者 warp，每线程算 4×8 个输出
constexpr int THREADS = CONSUMERS + 32;   // 再加 1 个生产者 warp

struct Tiles {  // 动态共享内存：4 级 × (8 KB + 8 KB) = 64 KB，超过静态上限 48 KB
  float a[STAGES][BM][BK];
  float b[STAGES][BK][BN];
};

// 每个消费者线程：C 的第 tr..tr+3 行、第 tc..tc+7 列
__device__ __forceinline__ void mma_tile(const float (*a)[BK], const float (*b)[BN], float (&acc)[4][8], int tr,
                                         int tc) {
#pragma unroll 8
  for (int k = 0; k < BK; ++k) {
    float av[4], bv[8];
#pragma unroll
    for (int i = 0; i < 4; ++i) av[i] = a[tr + i][k];
#pragma unroll
    for (int j = 0; j < 8; ++j) bv[j] = b[k][tc + j];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[i][j] += av[i] * bv[j];
  }
}

__device__ __forceinline__ void store_tile(float* C, int N, int row0, int col0, const float (&acc)[4][8], int tr,
                                           int tc) {
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 8; ++j) C[static_cast<int64_t>(row0 + tr + i) * N + col0 + tc + j] = acc[i][j];
}

#pragma nv_diag_suppress static_var_with_dynamic_init
// --8<-- [start:pipeline]
__global__ void __launch_bounds__(THREADS) gemm_pipelined(const float* __restrict__ A, const float* __restrict__ B,
                                                          float* __restrict__ C, int N, int K) {
  extern __shared__ __align__(128) unsigned char smem[];
  Tiles& t = *reinterpret_cast<Tiles*>(smem);
  __shared__ barrier full[STAGES], empty[STAGES];  // mbarrier 对象就住在共享内存里
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      init(&full[s], THREADS);   // 每个阶段（phase）期待 THREADS 次到达
      init(&empty[s], THREADS);
    }
    cde::fence_proxy_async_shared_cta();  // 让异步代理（拷贝引擎）看到初始化好的屏障
  }
  __syncthreads();

  const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN, tiles = K / BK;
  if (threadIdx.x >= CONSUMERS) {  // ---- 生产者 warp ----
    const int lane = threadIdx.x - CONSUMERS;
    for (int k = 0; k < tiles; ++k) {
      const int s = k % STAGES;
      if (k >= STAGES) empty[s].arrive_and_wait();  // 等消费者放出第 s 级（第一轮缓冲区本来就空）
      int bytes = 0;
      for (int r = lane; r < BM; r += 32) {  // A 块的每一行是全局内存里连续的 128 字节
        cuda::device::memcpy_async_tx(&t.a[s][r][0], A + static_cast<int64_t>(row0 + r) * K + k * BK,
                                      cuda::aligned_size_t<16>(BK * sizeof(float)), full[s]);
        bytes += BK * sizeof(float);
      }
      for (int r = lane; r < BK; r += 32) {  // B 块的每一行是连续的 256 字节
        cuda::device::memcpy_async_tx(&t.b[s][r][0], B + static_cast<int64_t>(k * BK + r) * N + col0,
                                      cuda::aligned_size_t<16>(BN * sizeof(float)), full[s]);
        bytes += BN * sizeof(float);
      }
      // 到达 full[s]，同时把“还要等多少字节”加进事务计数；拷贝每落地一部分就减去相应字节数。
      // 阶段完成 = 到达数凑满 THREADS 且事务计数归零。生产者不等这个阶段，直接去装下一级。
      (void)cuda::device::barrier_arrive_tx(full[s], 1, bytes);
    }
  } else {  // ---- 消费者 warp ----
    const int tr = threadIdx.x / 8 * 4, tc = threadIdx.x % 8 * 8;
    float acc[4][8] = {};
    for (int k = 0; k < tiles; ++k) {
      const int s = k % STAGES;
      full[s].arrive_and_wait();   // 第 s 级的数据到齐
      mma_tile(t.a[s], t.b[s], acc, tr, tc);
      (void)empty[s].arrive();     // 只到达、不等待：告诉生产者第 s 级可以重装了
    }
    store_tile(C, N, row0, col0, acc, tr, tc);
  }
}
// --8<-- [end:pipeline]

// 对照：同一个分块与微块，但只有一级缓冲，128 个线程一起装（float4 读），__syncthreads 后再一起算。
__global__ void __launch_bounds__(CONSUMERS) gemm_sync(const float* __restrict__ A, const float* __restrict__ B,
                                                       float* __restrict__ C, int N, int K) {
  __shared__ __align__(16) float a[BM][BK];
  __shared__ __align__(16) float b[BK][BN];
  const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN, tiles = K / BK;
  const int tr = threadIdx.x / 8 * 4, tc = threadIdx.x % 8 * 8;
  float acc[4][8] = {};
  for (int k = 0; k < tiles; ++k) {
    for (int i = threadIdx.x; i < BM * BK / 4; i += CONSUMERS) {
      const int r = i / (BK / 4), c = i % (BK / 4) * 4;
      *reinterpret_cast<float4*>(&a[r][c]) =
          *reinterpret_cast<const float4*>(A + static_cast<int64_t>(row0 + r) * K + k * BK + c);
    }
    for (int i = threadIdx.x; i < BK * BN / 4; i += CONSUMERS) {
      const int r = i / (BN / 4), c = i % (BN / 4) * 4;
      *reinterpret_cast<float4*>(&b[r][c]) =
          *reinterpret_cast<const float4*>(B + static_cast<int64_t>(k * BK + r) * N + col0 + c);
    }
    __syncthreads();  // 全部装完才能算
    mma_tile(a, b, acc, tr, tc);
    __syncthreads();  // 全部算完才能装下一块
  }
  store_tile(C, N, row0, col0, acc, tr, tc);
}

int main(int argc, char** argv) {
  const int M = argc > 1 ? std::atoi(argv[1]) : 1024;
  const int N = argc > 2 ? std::atoi(argv[2]) : 1024;
  const int K = argc > 3 ? std::atoi(argv[3]) : 1024;
  if (M % BM || N % BN || K % BK || M <= 0 || N <= 0 || K <= 0) {
    std::fprintf(stderr, "M, N, K must be positive multiples of %d, %d, %d\n", BM, BN, BK);
    return 2;
  }
  int device = 0, major = 0;
  CHECK(cudaGetDevice(&device));
  CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (major < 9) {
    std::printf("cp.async.bulk and mbarrier transaction counts need compute capability 9.0; this GPU is %d.x\n",
                major);
    return 1;
  }
  // 输入取 [-4, 3] 内的整数（state >> 29 是 0..7）：K = 1024 时每个乘积与部分和都是绝对值不超过 16K 的整数，float 精确表示，
  // 所以任何求和顺序都给出同一个精确结果，可以与 CPU 逐位比较。
  std::vector<float> hA(static_cast<size_t>(M) * K), hB(static_cast<size_t>(K) * N);
  uint32_t state = 7u;
  auto next = [&state] {
    state = state * 1664525u + 1013904223u;
    return static_cast<float>(static_cast<int>(state >> 29) - 4);
  };
  for (float& v : hA) v = next();
  for (float& v : hB) v = next();
  std::vector<float> ref(static_cast<size_t>(M) * N, 0.0f);
  for (int i = 0; i < M; ++i)
    for (int k = 0; k < K; ++k) {
      const float a = hA[static_cast<size_t>(i) * K + k];
      for (int j = 0; j < N; ++j) ref[static_cast<size_t>(i) * N + j] += a * hB[static_cast<size_t>(k) * N + j];
    }

  float *dA, *dB, *dC;
  const size_t bytesC = static_cast<size_t>(M) * N * sizeof(float);
  CHECK(cudaMalloc(&dA, hA.size() * sizeof(float)));
  CHECK(cudaMalloc(&dB, hB.size() * sizeof(float)));
  CHECK(cudaMalloc(&dC, bytesC));
  CHECK(cudaMemcpy(dA, hA.data(), hA.size() * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dB, hB.data(), hB.size() * sizeof(float), cudaMemcpyHostToDevice));
  const int smem = sizeof(Tiles);
  CHECK(cudaFuncSetAttribute(gemm_pipelined, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const dim3 grid(N / BN, M / BM);

  bool ok = true;
  std::vector<float> got(static_cast<size_t>(M) * N);
  const char* names[2] = {"pipelined (mbarrier, 4 stages)", "synchronous (1 stage)"};
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  for (int variant = 0; variant < 2; ++variant) {
    auto launch = [&] {
      if (variant == 0)
        gemm_pipelined<<<grid, THREADS, smem>>>(dA, dB, dC, N, K);
      else
        gemm_sync<<<grid, CONSUMERS>>>(dA, dB, dC, N, K);
    };
    CHECK(cudaMemset(dC, 0xFF, bytesC));  // 先写满 NaN：漏写会被查出来
    launch();
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(got.data(), dC, bytesC, cudaMemcpyDeviceToHost));
    size_t wrong = 0;
    for (size_t i = 0; i < got.size(); ++i) wrong += got[i] != ref[i];
    ok = ok && wrong == 0;
    for (int rep = 0; rep < 3; ++rep) launch();
    CHECK(cudaEventRecord(start));
    for (int rep = 0; rep < 20; ++rep) launch();
    CHECK(cudaEventRecord(stop));
    CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    const double us = ms * 1e3 / 20;
    std::printf("  %-32s %zu wrong of %zu; %8.1f us  %6.2f TFLOP/s\n", names[variant], wrong, got.size(), us,
                2.0 * M * N * K / us / 1e6);
  }
  CHECK(cudaFree(dA));
  CHECK(cudaFree(dB));
  CHECK(cudaFree(dC));
  std::printf("C = A B with M=%d N=%d K=%d, exact integer inputs: %s\n", M, N, K, ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
