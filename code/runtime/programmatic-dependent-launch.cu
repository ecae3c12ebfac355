// nvcc-arch: sm_90
// 程序化依赖启动（programmatic dependent launch，PDL）：同一条流里的后一个 kernel（secondary）不等前一个
// （primary）结束就开始启动，先做不依赖 primary 结果的准备工作，再在 cudaGridDependencySynchronize()
// 处等 primary 完成且其写入可见。primary 里的 cudaTriggerProgrammaticLaunchCompletion() 表示“可以开始
// 调度 secondary 了”（每个块都调用过或退出后才生效），它本身不保证内存可见。secondary 用 cudaLaunchKernelEx
// 加 cudaLaunchAttributeProgrammaticStreamSerialization 属性启动；没有这个属性时两者照常串行。
// 检查：R 轮之后 b[i] = Σ_r (i + r) + R·3i，两种启动方式结果相同。需要计算能力 9.0（griddepcontrol 指令）。
// 见 docs/runtime/advanced-apis.md。
//
// 编译与运行：
//   nvcc -O3 -arch=sm_90 -o programmatic-dependent-launch code/runtime/programmatic-dependent-launch.cu && ./programmatic-dependent-launch
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

constexpr int N = 1 << 20;
constexpr int ROUNDS = 50;

// --8<-- [start:kernels]
__global__ void primary(int* a, int round, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] = i + round;            // secondary 要读的结果
  cudaTriggerProgrammaticLaunchCompletion();  // 本块已写完：允许调度 secondary
}

__global__ void secondary(const int* a, int* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int prologue = (i < n) ? 3 * i : 0;     // 不依赖 a 的准备工作，可以与 primary 的尾部重叠
  cudaGridDependencySynchronize();        // 等 primary 整个网格完成、写入可见
  if (i < n) b[i] += a[i] + prologue;
}
// --8<-- [end:kernels]

static bool run(bool pdl, int* a, int* b, cudaStream_t s) {
  CHECK(cudaMemsetAsync(b, 0, N * sizeof(int), s));
  const dim3 grid((N + 255) / 256), block(256);
  for (int r = 0; r < ROUNDS; ++r) {
    primary<<<grid, block, 0, s>>>(a, r, N);
    // --8<-- [start:launch]
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;  // 0：普通的流内串行
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    CHECK(cudaLaunchKernelEx(&cfg, secondary, static_cast<const int*>(a), b, N));
    // --8<-- [end:launch]
  }
  std::vector<int> h(N);
  CHECK(cudaMemcpyAsync(h.data(), b, N * sizeof(int), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < N; ++i) {
    long long want = static_cast<long long>(ROUNDS) * i + ROUNDS * (ROUNDS - 1) / 2 + 3LL * ROUNDS * i;
    if (h[i] != want) {
      std::printf("FAIL (%s): b[%d] = %d, expected %lld\n", pdl ? "PDL" : "serial", i, h[i], want);
      return false;
    }
  }
  std::printf("%s: %d rounds correct\n", pdl ? "PDL   " : "serial", ROUNDS);
  return true;
}

int main() {
  int *a, *b;
  CHECK(cudaMalloc(&a, N * sizeof(int)));
  CHECK(cudaMalloc(&b, N * sizeof(int)));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  if (!run(false, a, b, s) || !run(true, a, b, s)) return 1;
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  std::printf("PASS\n");
  return 0;
}
