// 系统分配内存（system-allocated memory）：在 HMM（x86 + 开源内核模块 + 新内核）或 ATS（Grace Hopper
// 等硬件一致系统）上，GPU 可以直接访问 malloc 得到的普通可分页内存。本程序读
// cudaDevAttrPageableMemoryAccess 与 cudaDevAttrPageableMemoryAccessUsesHostPageTables：
//   为 1 时把 malloc 的数组直接交给 kernel，CPU 再读回核对；
//   为 0 时说明跳过了什么，并演示这类机器上的替代做法：cudaHostRegister 把同一块 malloc 内存锁页并映射，
//   kernel 经 cudaHostGetDevicePointer 得到的指针访问它（零拷贝），同样核对。
// 两种情况都打印 PASS。见 docs/runtime/multi-gpu-memory.md。
//
// 编译与运行：
//   nvcc -O3 -arch=sm_90 -o system-allocated-memory code/runtime/system-allocated-memory.cu && ./system-allocated-memory
#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

#define CHECK(call)                                                                           \
  do {                                                                                        \
    cudaError_t err_ = (call);                                                                \
    if (err_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(err_));      \
      std::exit(2);                                                                           \
    }                                                                                         \
  } while (0)

__global__ void square_plus_one(int* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * x[i] + 1;
}

static bool check(const int* x, int n) {
  for (int i = 0; i < n; ++i)
    if (x[i] != (i % 1000) * (i % 1000) + 1) return false;
  return true;
}

int main() {
  int dev = 0, pageable = 0, host_pt = 0, concurrent = 0, can_register = 0;
  CHECK(cudaSetDevice(dev));
  // --8<-- [start:query]
  CHECK(cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess, dev));
  CHECK(cudaDeviceGetAttribute(&host_pt, cudaDevAttrPageableMemoryAccessUsesHostPageTables, dev));
  CHECK(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, dev));
  CHECK(cudaDeviceGetAttribute(&can_register, cudaDevAttrHostRegisterSupported, dev));
  std::printf("pageableMemoryAccess=%d usesHostPageTables=%d concurrentManagedAccess=%d -> %s\n", pageable,
              host_pt, concurrent, !pageable ? "no system-allocated memory access" : host_pt ? "ATS" : "HMM");
  // --8<-- [end:query]

  const int n = 1 << 22;  // 16 MiB
  int* x = static_cast<int*>(std::malloc(n * sizeof(int)));
  if (!x) return 2;
  for (int i = 0; i < n; ++i) x[i] = i % 1000;

  // --8<-- [start:malloc-kernel]
  if (pageable) {
    // HMM/ATS：普通 malloc 指针直接交给 kernel；首次访问时缺页，驱动按页迁移或远程访问
    square_plus_one<<<(n + 255) / 256, 256>>>(x, n);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    if (!check(x, n)) { std::printf("FAIL: kernel on malloc'd memory\n"); return 1; }
    std::printf("kernel read and wrote %d ints of malloc'd memory directly\n", n);
  } else {
    std::printf("skipped: the device cannot access pageable memory (no HMM/ATS); "
                "using cudaHostRegister on the same malloc'd buffer instead\n");
    if (!can_register) { std::printf("skipped: cudaHostRegister unsupported too\nPASS\n"); std::free(x); return 0; }
    CHECK(cudaHostRegister(x, n * sizeof(int), cudaHostRegisterMapped));  // 锁页并映射进 GPU 地址空间
    int* dx = nullptr;
    CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dx), x, 0));
    square_plus_one<<<(n + 255) / 256, 256>>>(dx, n);  // 每次访存穿过 PCIe，不迁移
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaHostUnregister(x));
    if (!check(x, n)) { std::printf("FAIL: kernel on registered memory\n"); return 1; }
    std::printf("kernel read and wrote %d ints of registered (pinned, mapped) memory\n", n);
  }
  // --8<-- [end:malloc-kernel]
  std::free(x);
  std::printf("PASS\n");
  return 0;
}
