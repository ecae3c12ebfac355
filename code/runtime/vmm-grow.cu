// 虚拟内存管理（virtual memory management，VMM）API：先保留一大段虚拟地址（cuMemAddressReserve），
// 再按分配粒度创建物理内存块（cuMemCreate）、映射到这段地址里（cuMemMap）并授予访问权限（cuMemSetAccess）。
// 缓冲区要变大时，只需在第一块后面紧接着映射第二块：指针不变，旧数据不拷贝。
// 检查：增长后仍从同一个指针一次读出两块，第一块写下的数据还在，新的一块可读可写。
// 驱动 API 经 cudaGetDriverEntryPointByVersion 取得（不链接 -lcuda）。见 docs/runtime/advanced-apis.md。
//
// 编译与运行：
//   nvcc -O3 -arch=sm_90 -o vmm-grow code/runtime/vmm-grow.cu && ./vmm-grow
#include <cstdio>
#include <cstdlib>
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

__global__ void fill(unsigned* p, size_t begin, size_t end) {  // p[i] = i，i ∈ [begin, end)
  for (size_t i = begin + blockIdx.x * blockDim.x + threadIdx.x; i < end; i += size_t(gridDim.x) * blockDim.x)
    p[i] = static_cast<unsigned>(i);
}

int main() {
  CHECK(cudaSetDevice(0));
  CHECK(cudaFree(nullptr));  // 运行时初始化，主上下文成为当前上下文，驱动 API 直接用它
  auto cuDeviceGet = driver<PFN_cuDeviceGet_v2000>("cuDeviceGet", 2000);
  auto cuMemGetAllocationGranularity =
      driver<PFN_cuMemGetAllocationGranularity_v10020>("cuMemGetAllocationGranularity", 10020);
  auto cuMemAddressReserve = driver<PFN_cuMemAddressReserve_v10020>("cuMemAddressReserve", 10020);
  auto cuMemAddressFree = driver<PFN_cuMemAddressFree_v10020>("cuMemAddressFree", 10020);
  auto cuMemCreate = driver<PFN_cuMemCreate_v10020>("cuMemCreate", 10020);
  auto cuMemRelease = driver<PFN_cuMemRelease_v10020>("cuMemRelease", 10020);
  auto cuMemMap = driver<PFN_cuMemMap_v10020>("cuMemMap", 10020);
  auto cuMemUnmap = driver<PFN_cuMemUnmap_v10020>("cuMemUnmap", 10020);
  auto cuMemSetAccess = driver<PFN_cuMemSetAccess_v10020>("cuMemSetAccess", 10020);
  CUdevice dev;
  CU_CHECK(cuDeviceGet(&dev, 0));

  // --8<-- [start:reserve]
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;          // 设备上的普通物理内存
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  size_t chunk = 0;                                   // 映射与分配的最小单位（H100/H200 上通常 2 MiB）
  CU_CHECK(cuMemGetAllocationGranularity(&chunk, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));

  const size_t capacity = 64 * chunk;                 // 只保留虚拟地址，不占物理内存
  CUdeviceptr base = 0;
  CU_CHECK(cuMemAddressReserve(&base, capacity, 0, 0, 0));

  CUmemAccessDesc rw = {};
  rw.location = prop.location;
  rw.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  auto map_chunk = [&](size_t offset) {               // 在 base + offset 处映射一块新的物理内存
    CUmemGenericAllocationHandle h;
    CU_CHECK(cuMemCreate(&h, chunk, &prop, 0));
    CU_CHECK(cuMemMap(base + offset, chunk, 0, h, 0));
    CU_CHECK(cuMemSetAccess(base + offset, chunk, &rw, 1));  // 映射之后还要授权，否则访问即出错
    CU_CHECK(cuMemRelease(h));                        // 映射持有引用：解除映射时物理内存才真正释放
  };
  // --8<-- [end:reserve]

  // --8<-- [start:grow]
  map_chunk(0);                                       // 大小 = 1 块
  unsigned* p = reinterpret_cast<unsigned*>(base);
  const size_t per_chunk = chunk / sizeof(unsigned);
  fill<<<256, 256>>>(p, 0, per_chunk);
  CHECK(cudaGetLastError());

  map_chunk(chunk);                                   // 原地增长到 2 块：紧接着第一块映射，指针不变
  fill<<<256, 256>>>(p, per_chunk, 2 * per_chunk);    // 只写新的一块
  CHECK(cudaGetLastError());
  // --8<-- [end:grow]

  std::vector<unsigned> h(2 * per_chunk);
  CHECK(cudaMemcpy(h.data(), p, 2 * chunk, cudaMemcpyDeviceToHost));  // 跨两块一次读出
  std::printf("granularity %zu KiB, reserved %zu MiB at 0x%llx, mapped 2 chunks\n", chunk >> 10, capacity >> 20,
              (unsigned long long)base);
  for (size_t i = 0; i < h.size(); ++i)
    if (h[i] != static_cast<unsigned>(i)) {
      std::printf("FAIL: element %zu = %u after growing (expected %zu)\n", i, h[i], i);
      return 1;
    }

  CHECK(cudaDeviceSynchronize());
  for (size_t off = 0; off < 2 * chunk; off += chunk)  // 逐个解除映射；句柄已释放，物理内存随之归还
    CU_CHECK(cuMemUnmap(base + off, chunk));
  CU_CHECK(cuMemAddressFree(base, capacity));
  std::printf("PASS\n");
  return 0;
}
