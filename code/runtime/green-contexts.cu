// 绿色上下文（green contexts）：用驱动 API 把设备的 SM 切成两个互不重叠的分区，每个分区建一个绿色上下文
// 和一条流，往两条流里同时发同一个 kernel。每个块用内联 PTX 读自己所在 SM 的编号（%smid）并记下来。
// 检查：每个 kernel 用到的不同 SM 数不超过它分区的 SM 数，两个分区用到的 SM 没有交集；同一个 kernel
// 在主上下文里启动时可以铺满整张卡（只打印）。需要 CUDA 12.5+ 的驱动（cuGreenCtxStreamCreate）。
// 驱动 API 的函数经 cudaGetDriverEntryPointByVersion 取得，所以不必链接 -lcuda。见 docs/runtime/advanced-apis.md。
//
// 编译与运行：
//   nvcc -O3 -arch=sm_90 -o green-contexts code/runtime/green-contexts.cu && ./green-contexts
#include <cstdio>
#include <cstdlib>
#include <set>
#include <vector>

#include <cuda.h>
#include <cudaTypedefs.h>  // PFN_<函数>_v<引入它的 CUDA 版本>
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

#define CU_CHECK(call)                                                           \
  do {                                                                           \
    CUresult res_ = (call);                                                      \
    if (res_ != CUDA_SUCCESS) {                                                  \
      std::fprintf(stderr, "%s:%d: CUresult %d\n", __FILE__, __LINE__, (int)res_); \
      std::exit(2);                                                              \
    }                                                                            \
  } while (0)

// 按版本取驱动 API 的入口：PFN 类型名里的 _vNNNNN 就是要请求的版本
template <class Pfn>
static Pfn driver(const char* name, unsigned version) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found;
  CHECK(cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess || fn == nullptr) {
    std::fprintf(stderr, "%s: not provided by this driver\n", name);
    std::exit(2);
  }
  return reinterpret_cast<Pfn>(fn);
}

// --8<-- [start:kernel]
__device__ unsigned sm_id() {  // 当前线程所在 SM 的编号
  unsigned id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

__global__ void where(unsigned* smid_of_block, long long spin) {
  if (threadIdx.x == 0) smid_of_block[blockIdx.x] = sm_id();
  long long t0 = clock64();
  while (clock64() - t0 < spin) {}  // 让块停留一会儿，迫使调度器把块铺到分区的所有 SM 上
}
// --8<-- [end:kernel]

static std::set<unsigned> used_sms(const unsigned* d, int blocks) {
  std::vector<unsigned> h(blocks);
  CHECK(cudaMemcpy(h.data(), d, blocks * sizeof(unsigned), cudaMemcpyDeviceToHost));
  return std::set<unsigned>(h.begin(), h.end());
}

int main() {
  CHECK(cudaSetDevice(0));
  CHECK(cudaFree(nullptr));  // 先激活主上下文：绿色上下文会保留（retain）它
  auto cuDeviceGet = driver<PFN_cuDeviceGet_v2000>("cuDeviceGet", 2000);
  auto cuDeviceGetDevResource = driver<PFN_cuDeviceGetDevResource_v12040>("cuDeviceGetDevResource", 12040);
  auto cuDevSmResourceSplitByCount =
      driver<PFN_cuDevSmResourceSplitByCount_v12040>("cuDevSmResourceSplitByCount", 12040);
  auto cuDevResourceGenerateDesc = driver<PFN_cuDevResourceGenerateDesc_v12040>("cuDevResourceGenerateDesc", 12040);
  auto cuGreenCtxCreate = driver<PFN_cuGreenCtxCreate_v12040>("cuGreenCtxCreate", 12040);
  auto cuGreenCtxStreamCreate = driver<PFN_cuGreenCtxStreamCreate_v12050>("cuGreenCtxStreamCreate", 12050);
  auto cuGreenCtxGetDevResource = driver<PFN_cuGreenCtxGetDevResource_v12040>("cuGreenCtxGetDevResource", 12040);
  auto cuGreenCtxDestroy = driver<PFN_cuGreenCtxDestroy_v12040>("cuGreenCtxDestroy", 12040);
  CUdevice dev;
  CU_CHECK(cuDeviceGet(&dev, 0));

  // --8<-- [start:split]
  CUdevResource all;  // 整张卡的 SM 资源
  CU_CHECK(cuDeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM));
  std::printf("device: %u SMs, min partition %u, co-scheduled alignment %u\n", all.sm.smCount,
              all.sm.minSmPartitionSize, all.sm.smCoscheduledAlignment);

  unsigned groups = 2;  // 要两个分区，每个至少 16 个 SM（驱动按粒度向上取整）
  unsigned min_sms = all.sm.minSmPartitionSize > 16 ? all.sm.minSmPartitionSize : 16;
  CUdevResource part[2], rest;
  CU_CHECK(cuDevSmResourceSplitByCount(part, &groups, &all, &rest, 0, min_sms));
  if (groups != 2) { std::printf("FAIL: got %u groups\n", groups); return 1; }

  CUgreenCtx green[2];
  CUstream stream[2];
  for (int g = 0; g < 2; ++g) {
    CUdevResourceDesc desc;
    CU_CHECK(cuDevResourceGenerateDesc(&desc, &part[g], 1));  // 一个分区 → 一个描述符
    CU_CHECK(cuGreenCtxCreate(&green[g], desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
    CU_CHECK(cuGreenCtxStreamCreate(&stream[g], green[g], CU_STREAM_NON_BLOCKING, 0));
  }
  // --8<-- [end:split]

  const int blocks = 8 * static_cast<int>(all.sm.smCount);
  const long long spin = 200000;  // 约 0.1 ms 的时钟周期
  unsigned* smids[3];
  for (auto& p : smids) CHECK(cudaMalloc(&p, blocks * sizeof(unsigned)));

  // --8<-- [start:launch]
  for (int g = 0; g < 2; ++g)  // 运行时 API 的 kernel 发进绿色上下文的流，就跑在那个分区上
    where<<<blocks, 128, 0, reinterpret_cast<cudaStream_t>(stream[g])>>>(smids[g], spin);
  CHECK(cudaGetLastError());
  for (int g = 0; g < 2; ++g) CHECK(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream[g])));
  // --8<-- [end:launch]
  where<<<blocks, 128>>>(smids[2], spin);  // 对照：主上下文，不分区
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());

  std::set<unsigned> used[3];
  for (int g = 0; g < 3; ++g) used[g] = used_sms(smids[g], blocks);
  bool ok = true;
  for (int g = 0; g < 2; ++g) {
    CUdevResource got;  // 绿色上下文实际拿到的 SM 数
    CU_CHECK(cuGreenCtxGetDevResource(green[g], &got, CU_DEV_RESOURCE_TYPE_SM));
    std::printf("partition %d: %u SMs provisioned, kernel ran on %zu distinct SMs\n", g, got.sm.smCount,
                used[g].size());
    ok = ok && used[g].size() <= got.sm.smCount;
  }
  for (unsigned id : used[0]) ok = ok && used[1].count(id) == 0;  // 两个分区的 SM 不相交
  std::printf("remaining SMs not in either partition: %u; unpartitioned kernel ran on %zu distinct SMs\n",
              rest.sm.smCount, used[2].size());

  for (int g = 0; g < 2; ++g) {
    CHECK(cudaStreamDestroy(reinterpret_cast<cudaStream_t>(stream[g])));
    CU_CHECK(cuGreenCtxDestroy(green[g]));
  }
  for (auto p : smids) CHECK(cudaFree(p));
  if (!ok) { std::printf("FAIL: a kernel left its partition\n"); return 1; }
  std::printf("PASS\n");
  return 0;
}
