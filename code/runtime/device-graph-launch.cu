// nvcc-flags: -rdc=true -lcudadevrt
// 设备端图启动（device graph launch）：调度 kernel 在 GPU 上读一个选择值，决定启动两张设备图中的哪一张，
// 不回主机。设备图要用 cudaGraphInstantiateFlagDeviceLaunch 实例化并先 cudaGraphUpload；设备端只能
// 启动进三个具名流之一，这里用到两个：cudaStreamGraphFireAndForget（子图立即开始，与父图并发，父图的执行环境等它完成）与
// cudaStreamGraphTailLaunch（父图连同它的子图全部完成后才开始）。而且设备端启动只能发生在一张图里的
// kernel 中，所以调度 kernel 本身也被捕获成一张（主机启动的）图。
// 检查：sel = 0 时 x = (0 + 1) · 2，sel = 1 时 x = (0 + 100) · 2：乘 2 的尾启动图一定排在加法子图之后。
// 按 NVIDIA 示例的做法用 -rdc=true -lcudadevrt 编译（设备端 cudaGraphLaunch 在设备运行时库里）。见 docs/runtime/advanced-apis.md。
//
// 编译与运行：
//   nvcc -O3 -arch=sm_90 -rdc=true -o device-graph-launch code/runtime/device-graph-launch.cu -lcudadevrt && ./device-graph-launch
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

__global__ void add(int* x, int a) { atomicAdd(x, a); }
__global__ void twice(int* x) { *x *= 2; }

// --8<-- [start:scheduler]
// 调度 kernel：在 GPU 上按数据选图，一个线程发起启动（设备端启动是按线程的）
__global__ void scheduler(const int* sel, cudaGraphExec_t g_small, cudaGraphExec_t g_big,
                          cudaGraphExec_t g_tail, int* err) {
  if (threadIdx.x != 0) return;
  cudaGraphExec_t pick = (*sel == 0) ? g_small : g_big;
  cudaError_t e1 = cudaGraphLaunch(pick, cudaStreamGraphFireAndForget);  // 子图，立即开始
  cudaError_t e2 = cudaGraphLaunch(g_tail, cudaStreamGraphTailLaunch);   // 本图及子图完成后才开始
  *err = (e1 != cudaSuccess) ? static_cast<int>(e1) : static_cast<int>(e2);
}
// --8<-- [end:scheduler]

// 捕获一个 kernel 成图；device 为真时实例化成设备图并上传
template <typename F>
static cudaGraphExec_t one_kernel_graph(cudaStream_t s, F launch, bool device) {
  cudaGraph_t g;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  launch(s);
  CHECK(cudaStreamEndCapture(s, &g));
  CHECK(cudaGraphInstantiate(&exec, g, device ? cudaGraphInstantiateFlagDeviceLaunch : 0));
  if (device) CHECK(cudaGraphUpload(exec, s));  // 设备端启动前必须上传（或先从主机启动一次）
  CHECK(cudaGraphDestroy(g));  // 可执行图不依赖原图
  return exec;
}

int main() {
  int *x, *sel, *err;
  CHECK(cudaMalloc(&x, sizeof(int)));
  CHECK(cudaMalloc(&sel, sizeof(int)));
  CHECK(cudaMalloc(&err, sizeof(int)));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  // --8<-- [start:setup]
  cudaGraphExec_t g_small = one_kernel_graph(s, [&](cudaStream_t t) { add<<<1, 1, 0, t>>>(x, 1); }, true);
  cudaGraphExec_t g_big = one_kernel_graph(s, [&](cudaStream_t t) { add<<<1, 1, 0, t>>>(x, 100); }, true);
  cudaGraphExec_t g_tail = one_kernel_graph(s, [&](cudaStream_t t) { twice<<<1, 1, 0, t>>>(x); }, true);
  // 发起启动的 kernel 必须在图里：它所在的图从主机启动，不需要 DeviceLaunch 标志
  cudaGraphExec_t g_sched = one_kernel_graph(
      s, [&](cudaStream_t t) { scheduler<<<1, 32, 0, t>>>(sel, g_small, g_big, g_tail, err); }, false);
  // --8<-- [end:setup]

  for (int choice = 0; choice < 2; ++choice) {
    CHECK(cudaMemsetAsync(x, 0, sizeof(int), s));
    CHECK(cudaMemsetAsync(err, 0, sizeof(int), s));
    CHECK(cudaMemcpyAsync(sel, &choice, sizeof(int), cudaMemcpyHostToDevice, s));
    CHECK(cudaGraphLaunch(g_sched, s));  // 流上的这一次启动，要等尾启动图也完成才算完成
    int hx = -1, herr = -1;
    CHECK(cudaMemcpyAsync(&hx, x, sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK(cudaMemcpyAsync(&herr, err, sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    const int want = (choice == 0 ? 1 : 100) * 2;
    std::printf("sel = %d: x = %d (expected %d), device-side launch status %d\n", choice, hx, want, herr);
    if (herr != 0 || hx != want) { std::printf("FAIL\n"); return 1; }
  }

  for (cudaGraphExec_t e : {g_sched, g_small, g_big, g_tail}) CHECK(cudaGraphExecDestroy(e));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(x));
  CHECK(cudaFree(sel));
  CHECK(cudaFree(err));
  std::printf("PASS\n");
  return 0;
}
