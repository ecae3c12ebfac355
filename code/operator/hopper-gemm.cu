// nvcc-arch: sm_90a
// Hopper 上手写的 bf16 GEMM：C = A·Bᵀ（A 为 M×K、B 为 N×K，都按行存放，即两个操作数都沿 K 连续，
// 和 nn.Linear 的 x·Wᵀ 一样），fp32 累加，bf16 输出。五级阶梯，每一级只多一样 Hopper 的机制：
//   1 tma-wgmma      ：TMA 把 A、B 的分块搬进共享内存（128B swizzle），一个 warpgroup 用 wgmma.mma_async
//                      直接从共享内存读操作数；只有一级缓冲：搬完、算完，再搬下一块。
//   2 pipelined      ：同一个 kernel，4 级环形缓冲：线程 0 提前发出后面 4 块的 TMA，每级一个 mbarrier
//                      （事务计数）告诉消费者“这一级到齐了”。
//   3 warp-specialized：三个 warpgroup 分工：一个生产者只发 TMA（setmaxnreg 把寄存器让出去），两个消费者
//                      只做 wgmma（各算 64×256）；每级一对满/空屏障，生产者与消费者互不等待整块同步。
//   4 persistent     ：同一个分工的 kernel，每个 SM 只常驻一个线程块，按分组顺序循环领取输出块：
//                      生产者在消费者写回上一块时已经开始搬下一块，分组顺序让同时在算的块共享 L2 里的 A、B。
//   5 overlapped     ：同上，消费者让一组 wgmma 留在 Tensor Core 上排队（wait_group 1 而不是 0）。
// wgmma、setmaxnreg 只在 sm_90a（带 a 的“架构专用”目标）上可用，所以本文件只为 sm_90a 编译。
// 见 docs/operator/hopper-gemm.md。自检的 main 与一个朴素的 fp32 参考 kernel 逐元素比较：
// 整数输入时逐位相等，随机输入时误差在按 K 推出的上界内。
//
// 编译与运行：
//   nvcc -O3 -arch=sm_90a -o hopper-gemm code/operator/hopper-gemm.cu && ./hopper-gemm [--time 8192]
// 作为共享库给 Python 调用（bench/hopper_gemm.py 用它与 cuBLAS 在同一进程里对照）：
//   nvcc -O3 -arch=sm_90a -Xcompiler -fPIC -shared -DHOPPER_GEMM_LIBRARY -o libhopper_gemm.so code/operator/hopper-gemm.cu
#include <cuda.h>  // CUtensorMap 与 cuTensorMapEncodeTiled 的类型
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#define CHECK(call)                                                              \
  do {                                                                           \
    cudaError_t err_ = (call);                                                   \
    if (err_ != cudaSuccess) {                                                   \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__,                    \
                   cudaGetErrorString(err_));                                    \
      std::exit(2);                                                              \
    }                                                                            \
  } while (0)

using bf16 = __nv_bfloat16;
constexpr int BK = 64;  // 沿 K 一块 64 个 bf16 = 128 字节：正好是 128B swizzle 的一行

// --8<-- [start:ptx]
// ---- mbarrier：共享内存里的 64 位屏障，记“到达的线程数”和“还没落地的字节数”（事务计数）
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
// 到达并声明本阶段还要等 bytes 个字节（TMA 落地时会把它们减掉）
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
// 等到奇偶为 parity 的那个阶段完成（到达数与事务计数都归零）
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}\n" ::"r"(smem_addr(bar)), "r"(parity) : "memory");
}

// ---- TMA：一个线程发出整块二维拷贝，完成时在 bar 上减掉落地的字节数
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar, int x, int y) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];"
      ::"r"(smem_addr(dst)), "l"(map), "r"(smem_addr(bar)), "r"(x), "r"(y) : "memory");
}

// ---- wgmma 的共享内存矩阵描述符：沿 K 连续、128B swizzle 的分块（每行 128 字节，8 行 1024 字节一组）
//   位 0–13：起始地址 >> 4；16–29：前导维字节偏移 >> 4（K 方向连续且 swizzle 时不用，填 1）；
//   32–45：跨步字节偏移 >> 4（相邻两组 8 行之间 1024 字节）；62–63：swizzle 模式（1 = 128B）。
__device__ __forceinline__ uint64_t smem_desc(const bf16* tile) {
  const uint64_t addr = smem_addr(tile);
  return ((addr & 0x3FFFF) >> 4) | (uint64_t{1} << 16) | (uint64_t{1024 >> 4} << 32) | (uint64_t{1} << 62);
}
// nvcc -arch=sm_90a 生成 sm_90a 的机器码，另外附一份 compute_90 的 PTX（给以后的 GPU 即时编译）；wgmma 与
// setmaxnreg 只在 sm_90a 上存在，所以它们只在 __CUDA_ARCH_FEAT_SM90_ALL 下展开，另一份里换成 __trap()。
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SM90A(...) __VA_ARGS__
#else
#define SM90A(...) __trap()
#endif
__device__ __forceinline__ void wgmma_fence() { SM90A(asm volatile("wgmma.fence.sync.aligned;" ::: "memory")); }
__device__ __forceinline__ void wgmma_commit() { SM90A(asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory")); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { SM90A(asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory")); }
// 寄存器重新分配：整个 warpgroup 一起把每线程寄存器上限调低（生产者）或调高（消费者）
template <int R>
__device__ __forceinline__ void regs_dec() { SM90A(asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(R))); }
template <int R>
__device__ __forceinline__ void regs_inc() { SM90A(asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(R))); }

// wgmma.mma_async m64nNk16：一个 warpgroup（128 个线程）算 64×N 的输出块，A、B 都从共享内存读；
// 累加器在每个线程的 N/2 个 fp32 寄存器里。谓词 p 恒为真：累加到 d 上（每块开始前把 d 清零）。
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
  SM90A(asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b)));
}

__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t desc_a, uint64_t desc_b) {
  SM90A(asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
      "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b)));
}
// --8<-- [end:ptx]

// wgmma 累加器的布局（与 mma.sync m16n8 的 C 片段相同，沿 N 重复）：warpgroup 里第 t 个线程，
// warp w = t/32、lane l 持有行 16w + l/4 与 16w + l/4 + 8、列 8j + 2(l%4) 与 +1（j = 0..N/8-1）。
template <int N>
__device__ __forceinline__ void store_tile(const float (&d)[N / 2], bf16* C, int ldc, int row0, int col0) {
  const int t = threadIdx.x % 128, w = t / 32, l = t % 32;
  const int r = row0 + 16 * w + l / 4;
#pragma unroll
  for (int j = 0; j < N / 8; ++j) {
    const int c = col0 + 8 * j + 2 * (l % 4);
    *reinterpret_cast<__nv_bfloat162*>(C + static_cast<int64_t>(r) * ldc + c) = __floats2bfloat162_rn(d[4 * j], d[4 * j + 1]);
    *reinterpret_cast<__nv_bfloat162*>(C + static_cast<int64_t>(r + 8) * ldc + c) =
        __floats2bfloat162_rn(d[4 * j + 2], d[4 * j + 3]);
  }
}

// 动态共享内存的起点按 1024 字节对齐（128B swizzle 要求分块起点 1024 对齐）
__device__ __forceinline__ uint8_t* aligned_smem() {
  extern __shared__ uint8_t smem_raw[];
  return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
}

// --8<-- [start:pipelined]
// 第 1、2 级：一个 warpgroup 算 128×128 的输出块（两个 m64n128k16，各管 64 行）。
// STAGES = 1 是第 1 级（搬一块、等、算一块）；STAGES = 4 是第 2 级（线程 0 提前 STAGES 块发出 TMA）。
template <int STAGES>
__global__ void __launch_bounds__(128) gemm_pipelined(const __grid_constant__ CUtensorMap map_a,
                                                      const __grid_constant__ CUtensorMap map_b, bf16* C,
                                                      int M, int N, int K) {
  constexpr int BM = 128, BN = 128;
  uint8_t* smem = aligned_smem();
  bf16* sa = reinterpret_cast<bf16*>(smem);                   // [STAGES][BM][BK]
  bf16* sb = sa + STAGES * BM * BK;                            // [STAGES][BN][BK]
  uint64_t* full = reinterpret_cast<uint64_t*>(sb + STAGES * BN * BK);
  const int tm = blockIdx.y, tn = blockIdx.x, ktiles = K / BK;
  constexpr uint32_t kBytes = (BM + BN) * BK * sizeof(bf16);
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) mbar_init(&full[s], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  auto issue = [&](int kt) {  // 只由线程 0 调用：把第 kt 块 A、B 搬进第 kt % STAGES 级
    const int s = kt % STAGES;
    mbar_expect_tx(&full[s], kBytes);
    tma_load_2d(sa + s * BM * BK, &map_a, &full[s], kt * BK, tm * BM);
    tma_load_2d(sb + s * BN * BK, &map_b, &full[s], kt * BK, tn * BN);
  };
  if (threadIdx.x == 0)
    for (int kt = 0; kt < min(STAGES, ktiles); ++kt) issue(kt);
  float acc[2][64];
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[h][i] = 0.0f;
  for (int kt = 0; kt < ktiles; ++kt) {
    const int s = kt % STAGES;
    mbar_wait(&full[s], (kt / STAGES) & 1);  // 第 s 级第 kt/STAGES 次装满
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk)  // 一块 BK = 64 分 4 步，每步 k16：描述符起点沿 K 前进 32 字节
#pragma unroll
      for (int h = 0; h < 2; ++h)
        wgmma_m64n128k16(acc[h], smem_desc(sa + s * BM * BK + h * 64 * BK + kk * 16), smem_desc(sb + s * BN * BK + kk * 16));
    wgmma_commit();
    wgmma_wait<0>();
    __syncthreads();  // 所有 warp 都读完第 s 级，才能往里装第 kt + STAGES 块
    if (threadIdx.x == 0 && kt + STAGES < ktiles) issue(kt + STAGES);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) store_tile<128>(acc[h], C, N, tm * BM + h * 64, tn * BN);
}
// --8<-- [end:pipelined]

// --8<-- [start:specialized]
// 第 3、4 级：384 个线程 = 生产者 warpgroup 0 + 消费者 warpgroup 1、2；输出块 128×256，每个消费者算 64×256。
// PERSISTENT = false：每个输出块一个线程块（第 3 级）；true：网格 = SM 数，块按分组顺序循环领取（第 4 级）。
// OVERLAP = true（第 5 级）：消费者发出第 kt 块的 wgmma 后不等它做完，只等第 kt-1 块的（wait_group 1），
// 再释放第 kt-1 块所在的一级，于是 Tensor Core 上总有一组 wgmma 在排队。
constexpr int WS_BM = 128, WS_BN = 256, WS_STAGES = 4, WS_CONSUMERS = 2, GROUP_M = 16;

__device__ __forceinline__ void tile_coords(int tile, int tiles_m, int tiles_n, bool grouped, int& tm, int& tn) {
  if (!grouped) {  // 按行优先：相邻的块沿 N 走，同时在算的块共享 A 的同一行块
    tm = tile / tiles_n;
    tn = tile % tiles_n;
    return;
  }
  // 分组顺序：GROUP_M 个行块为一组，组内先沿 M 走再沿 N 走，同一时刻在算的块读的 A、B 都更少
  const int per_group = GROUP_M * tiles_n, group = tile / per_group;
  const int first_m = group * GROUP_M, rows = min(tiles_m - first_m, GROUP_M);
  tm = first_m + (tile % per_group) % rows;
  tn = (tile % per_group) / rows;
}

template <bool PERSISTENT, bool OVERLAP>
__global__ void __launch_bounds__(128 * (1 + WS_CONSUMERS), 1)
    gemm_specialized(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b, bf16* C,
                     int M, int N, int K) {
  constexpr int BM = WS_BM, BN = WS_BN, STAGES = WS_STAGES;
  uint8_t* smem = aligned_smem();
  bf16* sa = reinterpret_cast<bf16*>(smem);  // [STAGES][BM][BK]：消费者 c 读其中第 64c 行起的 64 行
  bf16* sb = sa + STAGES * BM * BK;           // [STAGES][BN][BK]
  uint64_t* full = reinterpret_cast<uint64_t*>(sb + STAGES * BN * BK);
  uint64_t* empty = full + STAGES;
  const int tiles_m = M / BM, tiles_n = N / BN, tiles = tiles_m * tiles_n, ktiles = K / BK;
  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], 1);                     // 生产者的一次 expect_tx 到达 + TMA 的字节
      mbar_init(&empty[s], WS_CONSUMERS * 128);  // 两个消费者的全部线程都读完
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const int first = PERSISTENT ? blockIdx.x : blockIdx.y * gridDim.x + blockIdx.x;
  const int step = PERSISTENT ? gridDim.x : tiles;
  if (wg == 0) {  // 生产者：只有一个线程干活，寄存器让给消费者
    regs_dec<24>();
    if (threadIdx.x == 0) {
      int s = 0;
      uint32_t phase = 0;
      for (int tile = first; tile < tiles; tile += step) {
        int tm, tn;
        tile_coords(tile, tiles_m, tiles_n, PERSISTENT, tm, tn);
        for (int kt = 0; kt < ktiles; ++kt) {
          mbar_wait(&empty[s], phase ^ 1);  // 新屏障的“上一阶段”算作已完成：头 STAGES 次不等
          mbar_expect_tx(&full[s], (BM + BN) * BK * sizeof(bf16));
          tma_load_2d(sa + s * BM * BK, &map_a, &full[s], kt * BK, tm * BM);
          tma_load_2d(sb + s * BN * BK, &map_b, &full[s], kt * BK, tn * BN);
          if (++s == STAGES) s = 0, phase ^= 1;
        }
      }
    }
  } else {  // 消费者 c = wg - 1：算输出块的第 64c 行起的 64×256
    regs_inc<240>();
    const int c = wg - 1;
    int s = 0;
    uint32_t phase = 0;
    float acc[BN / 2];
    for (int tile = first; tile < tiles; tile += step) {
      int tm, tn;
      tile_coords(tile, tiles_m, tiles_n, PERSISTENT, tm, tn);
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
      for (int kt = 0; kt < ktiles; ++kt) {
        mbar_wait(&full[s], phase);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk)
          wgmma_m64n256k16(acc, smem_desc(sa + s * BM * BK + c * 64 * BK + kk * 16), smem_desc(sb + s * BN * BK + kk * 16));
        wgmma_commit();
        if (OVERLAP) {
          wgmma_wait<1>();  // 上一块的 wgmma 做完了（这一块的还在算）：释放上一块的那一级
          if (kt > 0) mbar_arrive(&empty[s == 0 ? STAGES - 1 : s - 1]);
        } else {
          wgmma_wait<0>();
          mbar_arrive(&empty[s]);  // 这一级读完了：生产者可以往里装下一块
        }
        if (++s == STAGES) s = 0, phase ^= 1;
      }
      if (OVERLAP) {  // 最后一块：等它做完，再释放它的那一级
        wgmma_wait<0>();
        mbar_arrive(&empty[s == 0 ? STAGES - 1 : s - 1]);
      }
      store_tile<BN>(acc, C, N, tm * BM + c * 64, tn * BN);  // 写回时生产者已在搬下一块
    }
  }
}
// --8<-- [end:specialized]

// ---- 参考：每个线程一个输出元素，fp32 累加（朴素，但不会错）
__global__ void gemm_reference(const bf16* A, const bf16* B, float* C, int M, int N, int K) {
  const int i = blockIdx.y * blockDim.y + threadIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= M || j >= N) return;
  float s = 0.0f;
  for (int k = 0; k < K; ++k) s += __bfloat162float(A[static_cast<int64_t>(i) * K + k]) * __bfloat162float(B[static_cast<int64_t>(j) * K + k]);
  C[static_cast<int64_t>(i) * N + j] = s;
}

// ---- 主机端：张量描述符（驱动 API 的 cuTensorMapEncodeTiled，经运行时取得入口，不必链接 -lcuda）
// --8<-- [start:host]
static CUtensorMap make_map(const bf16* base, int rows, int cols, int box_rows) {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
  if (encode == nullptr) {
    cudaDriverEntryPointQueryResult found;
    CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", reinterpret_cast<void**>(&encode), 12000,
                                           cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess) {
      std::fprintf(stderr, "cuTensorMapEncodeTiled not found in the driver\n");
      std::exit(2);
    }
  }
  CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};  // 最内维在前：K，再行
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * sizeof(bf16)};               // 行与行之间的字节数
  const cuuint32_t box[2] = {BK, static_cast<cuuint32_t>(box_rows)};                          // 一次搬 BK × box_rows
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<bf16*>(base), dims, strides, box,
                            elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled failed: %d\n", static_cast<int>(r));
    std::exit(2);
  }
  return map;
}

constexpr int kRungs = 5;
static const char* kRungNames[kRungs] = {"tma-wgmma", "pipelined", "warp-specialized", "persistent", "overlapped"};

// 每级 kernel 的配置，以及一个 SM 上能同时驻留几个它的线程块（受共享内存与寄存器限制）
struct Config {
  const void* kernel;
  int threads;
  size_t smem;
};
static Config config(int rung) {
  const size_t ws = WS_STAGES * (WS_BM + WS_BN) * BK * sizeof(bf16) + 2 * WS_STAGES * 8 + 1024;
  switch (rung) {
    case 0: return {reinterpret_cast<const void*>(gemm_pipelined<1>), 128, 1 * (128 + 128) * BK * sizeof(bf16) + 8 + 1024};
    case 1: return {reinterpret_cast<const void*>(gemm_pipelined<4>), 128, 4 * (128 + 128) * BK * sizeof(bf16) + 32 + 1024};
    case 2: return {reinterpret_cast<const void*>(gemm_specialized<false, false>), 128 * (1 + WS_CONSUMERS), ws};
    case 3: return {reinterpret_cast<const void*>(gemm_specialized<true, false>), 128 * (1 + WS_CONSUMERS), ws};
    default: return {reinterpret_cast<const void*>(gemm_specialized<true, true>), 128 * (1 + WS_CONSUMERS), ws};
  }
}
static int blocks_per_sm(int rung) {
  const Config cfg = config(rung);
  CHECK(cudaFuncSetAttribute(cfg.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(cfg.smem)));
  int blocks = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, cfg.kernel, cfg.threads, cfg.smem));
  return blocks;
}

// 第 rung 级（0..4）算 C = A·Bᵀ；返回 0，或在形状不被这一级支持时返回 1。
static int launch(int rung, const bf16* A, const bf16* B, bf16* C, int M, int N, int K, cudaStream_t stream) {
  static int sms = 0;
  if (sms == 0) CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int bm = 128, bn = rung <= 1 ? 128 : WS_BN;
  if (K % BK != 0 || M % bm != 0 || N % bn != 0) return 1;
  const CUtensorMap ma = make_map(A, M, K, bm), mb = make_map(B, N, K, bn);
  const Config cfg = config(rung);
  CHECK(cudaFuncSetAttribute(cfg.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(cfg.smem)));
  const int tiles = (M / bm) * (N / bn);
  const dim3 grid = rung == 3 || rung == 4 ? dim3(std::min(sms, tiles)) : dim3(N / bn, M / bm);
  switch (rung) {
    case 0: gemm_pipelined<1><<<grid, cfg.threads, cfg.smem, stream>>>(ma, mb, C, M, N, K); break;
    case 1: gemm_pipelined<4><<<grid, cfg.threads, cfg.smem, stream>>>(ma, mb, C, M, N, K); break;
    case 2: gemm_specialized<false, false><<<grid, cfg.threads, cfg.smem, stream>>>(ma, mb, C, M, N, K); break;
    case 3: gemm_specialized<true, false><<<grid, cfg.threads, cfg.smem, stream>>>(ma, mb, C, M, N, K); break;
    default: gemm_specialized<true, true><<<grid, cfg.threads, cfg.smem, stream>>>(ma, mb, C, M, N, K); break;
  }
  CHECK(cudaGetLastError());
  return 0;
}
// --8<-- [end:host]

#ifdef HOPPER_GEMM_LIBRARY
extern "C" int hopper_gemm_rungs() { return kRungs; }
extern "C" const char* hopper_gemm_rung_name(int rung) { return rung >= 0 && rung < kRungs ? kRungNames[rung] : nullptr; }
extern "C" int hopper_gemm_blocks_per_sm(int rung) { return rung >= 0 && rung < kRungs ? blocks_per_sm(rung) : 0; }
extern "C" int hopper_gemm(int rung, const void* A, const void* B, void* C, int M, int N, int K, void* stream) {
  if (rung < 0 || rung >= kRungs) return 2;
  return launch(rung, static_cast<const bf16*>(A), static_cast<const bf16*>(B), static_cast<bf16*>(C), M, N, K,
                static_cast<cudaStream_t>(stream));
}
#else
// 检查一级：与 fp32 参考逐元素比较。exact 为真时输入是小整数，fp32 累加没有舍入，结果必须逐位相等；
// 否则容差 = K·2⁻²³·Σ|a||b|（K 项 fp32 累加的舍入上界 K·2⁻²⁴·Σ，kernel 与参考各一份）+ 2⁻⁸|c|（输出舍入成 bf16）。
static bool check_rung(int rung, int M, int N, int K, bool exact, std::mt19937& rng) {
  std::vector<bf16> ha(static_cast<size_t>(M) * K), hb(static_cast<size_t>(N) * K);
  std::uniform_int_distribution<int> small(-3, 3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& x : ha) x = __float2bfloat16(exact ? static_cast<float>(small(rng)) : normal(rng));
  for (auto& x : hb) x = __float2bfloat16(exact ? static_cast<float>(small(rng)) : normal(rng));
  bf16 *da, *db, *dc;
  float *dref, *dmag;
  CHECK(cudaMalloc(&da, ha.size() * sizeof(bf16)));
  CHECK(cudaMalloc(&db, hb.size() * sizeof(bf16)));
  CHECK(cudaMalloc(&dc, static_cast<size_t>(M) * N * sizeof(bf16)));
  CHECK(cudaMalloc(&dref, static_cast<size_t>(M) * N * sizeof(float)));
  CHECK(cudaMalloc(&dmag, static_cast<size_t>(M) * N * sizeof(float)));
  CHECK(cudaMemcpy(da, ha.data(), ha.size() * sizeof(bf16), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, hb.data(), hb.size() * sizeof(bf16), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dc, 0xFF, static_cast<size_t>(M) * N * sizeof(bf16)));  // NaN：没写到的元素会被查出来
  const dim3 block(16, 16), grid((N + 15) / 16, (M + 15) / 16);
  gemm_reference<<<grid, block>>>(da, db, dref, M, N, K);
  // Σ|a||b|：把 A、B 取绝对值再算一次
  std::vector<bf16> aa(ha), ab(hb);
  for (auto& x : aa) x = __float2bfloat16(std::fabs(__bfloat162float(x)));
  for (auto& x : ab) x = __float2bfloat16(std::fabs(__bfloat162float(x)));
  bf16 *dabs_a, *dabs_b;
  CHECK(cudaMalloc(&dabs_a, aa.size() * sizeof(bf16)));
  CHECK(cudaMalloc(&dabs_b, ab.size() * sizeof(bf16)));
  CHECK(cudaMemcpy(dabs_a, aa.data(), aa.size() * sizeof(bf16), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dabs_b, ab.data(), ab.size() * sizeof(bf16), cudaMemcpyHostToDevice));
  gemm_reference<<<grid, block>>>(dabs_a, dabs_b, dmag, M, N, K);
  if (launch(rung, da, db, dc, M, N, K, nullptr) != 0) {
    std::printf("%-17s %dx%dx%d: shape not supported\n", kRungNames[rung], M, N, K);
    return false;
  }
  CHECK(cudaDeviceSynchronize());
  std::vector<bf16> hc(static_cast<size_t>(M) * N);
  std::vector<float> ref(hc.size()), mag(hc.size());
  CHECK(cudaMemcpy(hc.data(), dc, hc.size() * sizeof(bf16), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(ref.data(), dref, ref.size() * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(mag.data(), dmag, mag.size() * sizeof(float), cudaMemcpyDeviceToHost));
  size_t bad = 0;
  double worst = 0.0;
  for (size_t i = 0; i < hc.size(); ++i) {
    const float got = __bfloat162float(hc[i]);
    const float want = exact ? __bfloat162float(__float2bfloat16(ref[i])) : ref[i];
    const double tol = exact ? 0.0 : K * std::ldexp(1.0, -23) * mag[i] + std::ldexp(1.0, -8) * std::fabs(ref[i]);
    const double err = std::fabs(static_cast<double>(got) - want);
    if (!(err <= tol)) ++bad;  // NaN 也算错
    if (std::isfinite(err) && tol > 0) worst = std::max(worst, err / tol);
  }
  std::printf("%-17s %5dx%5dx%5d %-7s: %zu wrong of %zu%s", kRungNames[rung], M, N, K, exact ? "integer" : "normal",
              bad, hc.size(), exact ? "\n" : "");
  if (!exact) std::printf(" (largest error / bound = %.3f)\n", worst);
  for (void* p : {static_cast<void*>(da), static_cast<void*>(db), static_cast<void*>(dc), static_cast<void*>(dref),
                  static_cast<void*>(dmag), static_cast<void*>(dabs_a), static_cast<void*>(dabs_b)})
    CHECK(cudaFree(p));
  return bad == 0;
}

static void time_rungs(int n) {
  const size_t elems = static_cast<size_t>(n) * n;
  bf16 *a, *b, *c;
  CHECK(cudaMalloc(&a, elems * sizeof(bf16)));
  CHECK(cudaMalloc(&b, elems * sizeof(bf16)));
  CHECK(cudaMalloc(&c, elems * sizeof(bf16)));
  std::vector<bf16> h(elems);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& x : h) x = __float2bfloat16(normal(rng));
  CHECK(cudaMemcpy(a, h.data(), elems * sizeof(bf16), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(b, h.data(), elems * sizeof(bf16), cudaMemcpyHostToDevice));
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  for (int rung = 0; rung < kRungs; ++rung) {
    for (int i = 0; i < 3; ++i) launch(rung, a, b, c, n, n, n, nullptr);  // 预热
    const int reps = 20;
    CHECK(cudaEventRecord(start));
    for (int i = 0; i < reps; ++i) launch(rung, a, b, c, n, n, n, nullptr);
    CHECK(cudaEventRecord(stop));
    CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    ms /= reps;
    std::printf("%-17s n=%d: %.3f ms, %.0f TFLOP/s (%d block(s) of %d threads per SM)\n", kRungNames[rung], n, ms,
                2.0 * n * n * n / ms / 1e9, blocks_per_sm(rung), config(rung).threads);
  }
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  CHECK(cudaFree(c));
}

int main(int argc, char** argv) {
  int dev = 0;
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, dev));
  if (prop.major != 9) {
    std::printf("needs a Hopper GPU (sm_90a); this one is sm_%d%d\n", prop.major, prop.minor);
    return 1;
  }
  std::mt19937 rng(0);
  bool ok = true;
  for (int rung = 0; rung < kRungs; ++rung) {
    ok = check_rung(rung, 512, 768, 640, true, rng) && ok;    // 4×6（128×128）或 4×3（128×256）个输出块，10 块 K
    ok = check_rung(rung, 1024, 1024, 4096, false, rng) && ok;
  }
  if (argc == 3 && std::strcmp(argv[1], "--time") == 0) time_rungs(std::atoi(argv[2]));
  std::printf(ok ? "PASS\n" : "FAIL\n");
  return ok ? 0 : 1;
}
#endif
