// 设备端调用栈（call stack）：递归和深调用链的栈帧放在每个线程的本地内存里，栈的大小由
// cudaLimitStackSize 决定（默认 1 KiB 左右）。驱动按“栈大小 × 整卡最多驻留的线程数”预留本地内存，
// 所以调大栈会立刻少掉一大块显存：少掉的是新旧两次预留之差（默认的 1 KiB 栈已经预留过），打印的模型值
// 则是 16 KiB 栈的总预留。这里把栈调到 16 KiB，用 cudaDeviceGetLimit 读回，再跑一个
// 递归 64 层（每层约 136 B 的栈帧，默认的 1 KiB 只够几层）、每层帧里有一个局部数组的 kernel，结果与主机上同一个递归逐位相同。
// 见 docs/runtime/advanced-apis.md。
//
// 编译与运行：
//   nvcc -O3 -arch=sm_90 -o call-stack code/runtime/call-stack.cu && ./call-stack
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

constexpr int DEPTH = 64;

// --8<-- [start:recursion]
// 不能内联的递归：每一层在栈上有一个 16 个元素的数组，递归返回后还要用它
__host__ __device__ __noinline__ unsigned walk(unsigned seed, int depth) {
  unsigned local[16];
  for (int k = 0; k < 16; ++k) local[k] = seed * 2654435761u + k * depth;
  if (depth == 0) return local[seed % 16];
  unsigned below = walk(local[depth % 16], depth - 1);
  return below ^ local[(below + depth) % 16];
}

__global__ void run(unsigned* out, int depth) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = walk(static_cast<unsigned>(i), depth);
}
// --8<-- [end:recursion]

int main() {
  CHECK(cudaSetDevice(0));
  CHECK(cudaFree(nullptr));
  // --8<-- [start:limit]
  int sms = 0, threads_per_sm = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK(cudaDeviceGetAttribute(&threads_per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, 0));
  size_t before = 0, after = 0, free0 = 0, free1 = 0, total = 0;
  CHECK(cudaDeviceGetLimit(&before, cudaLimitStackSize));
  CHECK(cudaMemGetInfo(&free0, &total));
  CHECK(cudaDeviceSetLimit(cudaLimitStackSize, 16 * 1024));  // 每线程 16 KiB
  CHECK(cudaDeviceGetLimit(&after, cudaLimitStackSize));     // 驱动可能向上取整
  CHECK(cudaMemGetInfo(&free1, &total));
  const double model = double(after) * threads_per_sm * sms / (1 << 20);  // 栈 × 整卡驻留线程数（总预留，不是减少量）
  std::printf("stack %zu -> %zu B/thread; free memory fell by %.0f MiB (stack x %d threads/SM x %d SMs = %.0f MiB)\n",
              before, after, double(free0 - free1) / (1 << 20), threads_per_sm, sms, model);
  // --8<-- [end:limit]
  if (after < 16 * 1024) { std::printf("FAIL: limit not applied\n"); return 1; }

  const int n = 4096;
  unsigned* d;
  CHECK(cudaMalloc(&d, n * sizeof(unsigned)));
  run<<<n / 128, 128>>>(d, DEPTH);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());  // 栈不够时这里报非法地址之类的错误（粘性，上下文作废）
  std::vector<unsigned> h(n);
  CHECK(cudaMemcpy(h.data(), d, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i)
    if (h[i] != walk(static_cast<unsigned>(i), DEPTH)) {
      std::printf("FAIL: thread %d got %u, host %u\n", i, h[i], walk(static_cast<unsigned>(i), DEPTH));
      return 1;
    }
  std::printf("recursion depth %d correct on %d threads\n", DEPTH, n);
  CHECK(cudaFree(d));
  std::printf("PASS\n");
  return 0;
}
