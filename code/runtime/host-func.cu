// 流中的主机函数（host function）：cudaLaunchHostFunc 把一个 CPU 函数排进流里。它在流中排在它之前的工作
// 全部完成后才被调用（在驱动的一个后台线程里），而它之后的工作要等它返回才开始。主机函数里不能调用
// 任何 CUDA API（可能死锁或报错），只做纯 CPU 的事，例如记下时刻、通知别的线程。
// 检查：回调看到的是它之前那次 D2H 拷贝的结果；它写进映射锁页内存的值被它之后的 kernel 读到；
// 回调记录的顺序与流中的顺序一致。见 docs/runtime/advanced-apis.md。
//
// 编译与运行：
//   nvcc -O3 -arch=sm_90 -o host-func code/runtime/host-func.cu && ./host-func
#include <atomic>
#include <cstdio>
#include <cstdlib>

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

constexpr int STEPS = 8;

struct Shared {           // 放在映射的锁页内存里：主机与 GPU 都能直接读写
  int copied[STEPS];      // 每一步 D2H 拷贝的目的地
  int token[STEPS];       // 回调写下的令牌，后面的 kernel 读
  int seen[STEPS];        // kernel 读到的令牌
};

struct Ctx {
  Shared* sh;
  int step;
  std::atomic<int>* order;  // 回调按什么顺序运行
  int* ran_as;
};

__global__ void produce(int* dev, int step) { *dev = 100 + step; }
__global__ void consume(const volatile int* token, int* seen) { *seen = *token; }

// --8<-- [start:callback]
// 主机函数：只做 CPU 上的事，不调用任何 CUDA API
void CUDART_CB on_host(void* arg) {
  Ctx* c = static_cast<Ctx*>(arg);
  const int got = c->sh->copied[c->step];       // 前面的拷贝一定已经完成
  c->sh->token[c->step] = (got == 100 + c->step) ? 1000 + c->step : -1;
  c->ran_as[c->step] = c->order->fetch_add(1);  // 记录第几个被调用
}
// --8<-- [end:callback]

int main() {
  CHECK(cudaSetDevice(0));
  Shared* sh;
  CHECK(cudaHostAlloc(&sh, sizeof(Shared), cudaHostAllocMapped));
  Shared* sh_dev;  // 同一块锁页内存在设备侧的地址
  CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&sh_dev), sh, 0));
  for (int i = 0; i < STEPS; ++i) sh->copied[i] = sh->token[i] = sh->seen[i] = 0;
  int* dev;
  CHECK(cudaMalloc(&dev, STEPS * sizeof(int)));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::atomic<int> order{0};
  int ran_as[STEPS];
  Ctx ctx[STEPS];

  // --8<-- [start:stream]
  for (int i = 0; i < STEPS; ++i) {
    ctx[i] = {sh, i, &order, ran_as};
    produce<<<1, 1, 0, s>>>(dev + i, i);                                      // GPU 写
    CHECK(cudaMemcpyAsync(&sh->copied[i], dev + i, sizeof(int), cudaMemcpyDeviceToHost, s));  // 拷回主机
    CHECK(cudaLaunchHostFunc(s, on_host, &ctx[i]));                           // 拷贝完成后才调用
    consume<<<1, 1, 0, s>>>(&sh_dev->token[i], &sh_dev->seen[i]);             // 回调返回后才开始
  }
  CHECK(cudaStreamSynchronize(s));
  // --8<-- [end:stream]

  bool ok = true;
  for (int i = 0; i < STEPS; ++i) {
    ok = ok && sh->copied[i] == 100 + i && sh->token[i] == 1000 + i && sh->seen[i] == 1000 + i && ran_as[i] == i;
    if (i < 2 || !ok) std::printf("step %d: copied %d, token %d, kernel saw %d, callback #%d\n", i, sh->copied[i],
                                  sh->token[i], sh->seen[i], ran_as[i]);
  }
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(dev));
  CHECK(cudaFreeHost(sh));
  if (!ok) { std::printf("FAIL: stream order was not respected\n"); return 1; }
  std::printf("PASS\n");
  return 0;
}
