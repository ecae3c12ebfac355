// 锁页内存的两个标志：
//   cudaHostAllocPortable      —— 这块锁页内存对所有设备（所有上下文）都算锁页，不只是分配时的当前设备；
//   cudaHostAllocWriteCombined —— CPU 侧按写合并（WC）、不经缓存的方式映射：GPU 经 PCIe 读它时不必窥探
//                                 CPU 缓存，CPU 连续写入在写合并缓冲区里攒成整行再发出；但 CPU 读它的每次
//                                 加载都绕过缓存、直接去内存，极慢。
// 本程序用两种锁页内存各做一遍：CPU 写入 → H2D 拷贝 → 拷回核对，并计 CPU 顺序读一遍的时间（只打印，不作断言：
// 时间与机器有关）。有 ≥2 张卡时再在设备 1 上用 portable 内存做异步拷贝。见 docs/runtime/multi-gpu-memory.md。
//
// 编译与运行：
//   nvcc -O3 -arch=sm_90 -o pinned-flags code/runtime/pinned-flags.cu && ./pinned-flags
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime.h>

#define CHECK(call)                                                                           \
  do {                                                                                        \
    cudaError_t err_ = (call);                                                                \
    if (err_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(err_));      \
      std::exit(2);                                                                           \
    }                                                                                         \
  } while (0)

static double cpu_read_ms(const volatile unsigned* p, size_t n, unsigned long long* sum) {
  auto t0 = std::chrono::steady_clock::now();
  unsigned long long s = 0;
  for (size_t i = 0; i < n; ++i) s += p[i];  // volatile：每个元素真的去读一次
  auto t1 = std::chrono::steady_clock::now();
  *sum = s;
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

int main() {
  int count = 0;
  CHECK(cudaGetDeviceCount(&count));
  CHECK(cudaSetDevice(0));
  const size_t n = 4u << 20;  // 16 MiB：WC 内存上 CPU 每次加载都不经缓存，别太大
  const size_t bytes = n * sizeof(unsigned);
  unsigned long long expect_sum = 0;
  for (size_t i = 0; i < n; ++i) expect_sum += static_cast<unsigned>(i * 2654435761u);

  // --8<-- [start:alloc]
  unsigned *plain = nullptr, *wc = nullptr;
  CHECK(cudaHostAlloc(reinterpret_cast<void**>(&plain), bytes, cudaHostAllocPortable));
  CHECK(cudaHostAlloc(reinterpret_cast<void**>(&wc), bytes, cudaHostAllocPortable | cudaHostAllocWriteCombined));
  // --8<-- [end:alloc]
  unsigned* d = nullptr;
  CHECK(cudaMalloc(&d, bytes));
  std::vector<unsigned> back(n);

  unsigned* bufs[2] = {plain, wc};
  const char* names[2] = {"pinned (default)", "pinned + write-combined"};
  for (int b = 0; b < 2; ++b) {
    unsigned* h = bufs[b];
    for (size_t i = 0; i < n; ++i) h[i] = static_cast<unsigned>(i * 2654435761u);  // CPU 顺序写：WC 擅长
    cudaPointerAttributes a;
    CHECK(cudaPointerGetAttributes(&a, h));
    if (a.type != cudaMemoryTypeHost) { std::printf("FAIL: %s is not host memory\n", names[b]); return 1; }
    CHECK(cudaMemset(d, 0, bytes));
    CHECK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));  // GPU 经 DMA 读主机内存：两种都快
    CHECK(cudaMemcpy(back.data(), d, bytes, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; ++i)
      if (back[i] != h[i]) { std::printf("FAIL: H2D copy from %s\n", names[b]); return 1; }
    unsigned long long s = 0;
    double ms = cpu_read_ms(h, n, &s);  // CPU 读：WC 内存每次加载都不经缓存
    if (s != expect_sum) { std::printf("FAIL: CPU read-back of %s\n", names[b]); return 1; }
    std::printf("%-24s CPU read of %zu MiB: %.2f ms (%.2f GB/s)\n", names[b], bytes >> 20, ms, bytes / ms / 1e6);
  }

  if (count >= 2) {
    // portable：在设备 0 上分配的锁页内存，设备 1 的流也把它当锁页内存，异步 DMA 不需要中转
    CHECK(cudaSetDevice(1));
    unsigned* d1 = nullptr;
    cudaStream_t s1;
    CHECK(cudaStreamCreate(&s1));
    CHECK(cudaMalloc(&d1, bytes));
    CHECK(cudaMemcpyAsync(d1, plain, bytes, cudaMemcpyHostToDevice, s1));
    CHECK(cudaMemcpyAsync(back.data(), d1, bytes, cudaMemcpyDeviceToHost, s1));
    CHECK(cudaStreamSynchronize(s1));
    for (size_t i = 0; i < n; ++i)
      if (back[i] != plain[i]) { std::printf("FAIL: portable pinned memory on device 1\n"); return 1; }
    std::printf("portable pinned buffer used by device 1's stream\n");
    CHECK(cudaFree(d1));
    CHECK(cudaStreamDestroy(s1));
    CHECK(cudaSetDevice(0));
  } else {
    std::printf("skipped: using the portable buffer from a second device needs >= 2 GPUs\n");
  }
  CHECK(cudaFree(d));
  CHECK(cudaFreeHost(plain));
  CHECK(cudaFreeHost(wc));
  std::printf("PASS\n");
  return 0;
}
