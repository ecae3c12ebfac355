// nvcc-arch: sm_90
// 经运行时取得驱动入口点（cudaGetDriverEntryPointByVersion，不链接 -lcuda），再用它们：
//   1. cuCtxSetLimit 调大每线程栈，看 cuMemGetInfo 的空闲显存少了多少（与 栈 × 每 SM 驻留线程数 × SM 数 对照，
//      偏出 0.5～2 倍即 FAIL），并打印三项限制的默认值；
//   2. cuLaunchKernelEx 带“簇维度”启动属性启动一个 kernel，kernel 读回自己所在簇的大小。
// 本机只编译（tests/test_cuda_sources.py），GPU 上由 make gpu-check 运行，两项检查都成立才打印 PASS。
//   nvcc -O3 -arch=sm_90 -o launch_ex code/driver/launch_ex.cu && ./launch_ex
#include <cstdio>
#include <cstdlib>

#include <cooperative_groups.h>
#include <cuda.h>
#include <cudaTypedefs.h>  // PFN_<函数>_v<引入它的 CUDA 版本>
#include <cuda_runtime.h>

#define CHECK_RT(call)                                                               \
  do {                                                                               \
    cudaError_t e_ = (call);                                                         \
    if (e_ != cudaSuccess) {                                                         \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(2);                                                                  \
    }                                                                                \
  } while (0)
#define CHECK_DRV(call)                                                       \
  do {                                                                        \
    CUresult r_ = (call);                                                     \
    if (r_ != CUDA_SUCCESS) {                                                 \
      std::fprintf(stderr, "%s:%d: CUresult %d\n", __FILE__, __LINE__, (int)r_); \
      std::exit(2);                                                           \
    }                                                                         \
  } while (0)

// 每个线程块写下自己所在簇的线程块数：启动属性是否生效，由 kernel 自己报告。
__global__ void cluster_size_probe(unsigned* out) {
  if (threadIdx.x == 0) out[blockIdx.x] = cooperative_groups::this_cluster().num_blocks();
}

// --8<-- [start:entry]
template <class Pfn>
static Pfn driver_entry(const char* name, unsigned cuda_version) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found;
  CHECK_RT(cudaGetDriverEntryPointByVersion(name, &fn, cuda_version, cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess || fn == nullptr) {
    std::fprintf(stderr, "%s: not provided by this driver for CUDA %u\n", name, cuda_version);
    std::exit(2);
  }
  return reinterpret_cast<Pfn>(fn);
}
// --8<-- [end:entry]

int main() {
  CHECK_RT(cudaFree(nullptr));  // 运行时初始化并把主上下文设为当前：驱动 API 直接用它
  auto ctxSetLimit = driver_entry<PFN_cuCtxSetLimit_v3010>("cuCtxSetLimit", 3010);
  auto ctxGetLimit = driver_entry<PFN_cuCtxGetLimit_v3010>("cuCtxGetLimit", 3010);
  auto memGetInfo = driver_entry<PFN_cuMemGetInfo_v3020>("cuMemGetInfo", 3020);
  auto launchEx = driver_entry<PFN_cuLaunchKernelEx_v11060>("cuLaunchKernelEx", 11060);

  // --8<-- [start:limit]
  int sms = 0, threads_per_sm = 0;
  CHECK_RT(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK_RT(cudaDeviceGetAttribute(&threads_per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, 0));
  size_t stack0 = 0, stack1 = 0, free0 = 0, free1 = 0, total = 0;
  CHECK_DRV(ctxGetLimit(&stack0, CU_LIMIT_STACK_SIZE));
  CHECK_DRV(memGetInfo(&free0, &total));
  CHECK_DRV(ctxSetLimit(CU_LIMIT_STACK_SIZE, 16 * 1024));  // 每线程 16 KiB 栈
  CHECK_DRV(ctxGetLimit(&stack1, CU_LIMIT_STACK_SIZE));
  CHECK_DRV(memGetInfo(&free1, &total));
  const double model_mib = double(stack1 - stack0) * threads_per_sm * sms / (1 << 20);
  std::printf("stack %zu -> %zu B/thread; free memory dropped %.1f MiB (model: %.1f MiB)\n",
              stack0, stack1, (double(free0) - double(free1)) / (1 << 20), model_mib);
  // --8<-- [end:limit]
  size_t fifo = 0, heap = 0;  // 另外两块预留的默认大小（参考文档只写了堆的 8 MiB）
  CHECK_DRV(ctxGetLimit(&fifo, CU_LIMIT_PRINTF_FIFO_SIZE));
  CHECK_DRV(ctxGetLimit(&heap, CU_LIMIT_MALLOC_HEAP_SIZE));
  std::printf("defaults: stack %zu B/thread, printf FIFO %zu B, malloc heap %zu B\n", stack0, fifo, heap);

  // --8<-- [start:launch]
  const unsigned blocks = 8, cluster = 2;
  unsigned* d_out = nullptr;
  CHECK_RT(cudaMalloc(&d_out, blocks * sizeof(unsigned)));
  CUfunction f;
  CHECK_RT(cudaGetFuncBySymbol(reinterpret_cast<cudaFunction_t*>(&f),
                               reinterpret_cast<const void*>(cluster_size_probe)));
  CUlaunchAttribute attr[1] = {};
  attr[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;  // 2 个线程块一簇：同一 GPC 上共同调度
  attr[0].value.clusterDim.x = cluster;
  attr[0].value.clusterDim.y = 1;
  attr[0].value.clusterDim.z = 1;
  CUlaunchConfig cfg = {};
  cfg.gridDimX = blocks, cfg.gridDimY = 1, cfg.gridDimZ = 1;
  cfg.blockDimX = 32, cfg.blockDimY = 1, cfg.blockDimZ = 1;
  cfg.hStream = nullptr;  // 默认流
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  void* args[] = {&d_out};
  CHECK_DRV(launchEx(&cfg, f, args, nullptr));
  // --8<-- [end:launch]
  unsigned h_out[blocks];
  CHECK_RT(cudaMemcpy(h_out, d_out, sizeof h_out, cudaMemcpyDeviceToHost));
  CHECK_RT(cudaFree(d_out));
  int wrong = 0;
  for (unsigned b = 0; b < blocks; ++b) wrong += h_out[b] != cluster;
  // 预留随栈线性增长：空闲显存的减少量应与模型同量级（宽松的 0.5–2 倍，容许驱动的取整与延迟预留）
  const double drop_mib = (double(free0) - double(free1)) / (1 << 20);
  const bool stack_ok = stack1 >= 16 * 1024 && drop_mib > 0.5 * model_mib && drop_mib < 2.0 * model_mib;
  const bool ok = wrong == 0 && stack_ok;
  std::printf("%s: %u blocks launched in clusters of %u (%d wrong); stack reservation %s the model\n",
              ok ? "PASS" : "FAIL", blocks, cluster, wrong, stack_ok ? "matches" : "does NOT match");
  return ok ? 0 : 1;
}
