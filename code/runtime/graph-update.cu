// 更新可执行图（cudaGraphExec_t）而不重新实例化：
//   1. cudaGraphExecKernelNodeSetParams 直接改一个 kernel 节点的参数（这里把加数 1 改成 10）；
//   2. cudaGraphExecUpdate 用一张拓扑相同、参数不同的新捕获图整体更新（加数改成 100）；
//   3. 拓扑变了（多一个节点）时 cudaGraphExecUpdate 拒绝，结果码是 TopologyChanged，只能重新实例化。
// 每一步之后重放图，检查数组每个元素都等于累加的结果。见 docs/runtime/advanced-apis.md。
//
// 编译与运行：
//   nvcc -O3 -arch=sm_90 -o graph-update code/runtime/graph-update.cu && ./graph-update
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

__global__ void add(float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += a;
}

constexpr int N = 1 << 16;

static cudaGraph_t capture(cudaStream_t s, float* x, float a, int kernels) {
  cudaGraph_t g;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int k = 0; k < kernels; ++k) add<<<(N + 255) / 256, 256, 0, s>>>(x, a, N);
  CHECK(cudaStreamEndCapture(s, &g));
  return g;
}

// 重放一次，检查每个元素都等于 want
static bool replay_and_check(cudaGraphExec_t exec, cudaStream_t s, float* x, float want, const char* what) {
  std::vector<float> h(N);
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaMemcpyAsync(h.data(), x, N * sizeof(float), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < N; ++i)
    if (h[i] != want) {
      std::printf("FAIL %s: x[%d] = %g, expected %g\n", what, i, h[i], want);
      return false;
    }
  std::printf("%-40s x = %g\n", what, want);
  return true;
}

int main() {
  float* x;
  CHECK(cudaMalloc(&x, N * sizeof(float)));
  CHECK(cudaMemset(x, 0, N * sizeof(float)));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));

  cudaGraph_t g1 = capture(s, x, 1.0f, 1);
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, g1, 0));
  if (!replay_and_check(exec, s, x, 1.0f, "instantiated (a = 1)")) return 1;

  // --8<-- [start:node]
  // 1. 改单个节点：取出捕获图里的 kernel 节点，换一个参数数组，写进可执行图
  cudaGraphNode_t node;
  size_t count = 1;
  CHECK(cudaGraphGetNodes(g1, &node, &count));
  cudaKernelNodeParams p;
  CHECK(cudaGraphKernelNodeGetParams(node, &p));
  float a = 10.0f;
  int n = N;
  void* args[] = {&x, &a, &n};  // 与 add(float*, float, int) 一一对应，调用时按值拷走
  p.kernelParams = args;
  p.extra = nullptr;
  CHECK(cudaGraphExecKernelNodeSetParams(exec, node, &p));  // 不改 g1，只改 exec
  // --8<-- [end:node]
  if (!replay_and_check(exec, s, x, 11.0f, "after ExecKernelNodeSetParams (a = 10)")) return 1;

  // --8<-- [start:whole]
  // 2. 整图更新：重新捕获一张拓扑相同的图（参数不同），把差别写进已有的 exec
  cudaGraph_t g2 = capture(s, x, 100.0f, 1);
  cudaGraphExecUpdateResultInfo info;
  CHECK(cudaGraphExecUpdate(exec, g2, &info));
  if (info.result != cudaGraphExecUpdateSuccess) { std::printf("FAIL: update refused\n"); return 1; }
  // --8<-- [end:whole]
  if (!replay_and_check(exec, s, x, 111.0f, "after ExecUpdate (a = 100)")) return 1;

  // --8<-- [start:topology]
  // 3. 拓扑变了（两个节点）：更新被拒绝，只能重新实例化
  cudaGraph_t g3 = capture(s, x, 1000.0f, 2);
  cudaError_t err = cudaGraphExecUpdate(exec, g3, &info);
  (void)cudaGetLastError();  // 清掉这次预期中的失败，它不是粘性错误
  if (err != cudaErrorGraphExecUpdateFailure || info.result != cudaGraphExecUpdateErrorTopologyChanged) {
    std::printf("FAIL: a topology change was not refused (%s, result %d)\n", cudaGetErrorString(err), (int)info.result);
    return 1;
  }
  // --8<-- [end:topology]
  cudaGraphExec_t exec3;
  CHECK(cudaGraphInstantiate(&exec3, g3, 0));
  if (!replay_and_check(exec3, s, x, 2111.0f, "re-instantiated (2 nodes, a = 1000)")) return 1;

  CHECK(cudaGraphExecDestroy(exec3));
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(g3));
  CHECK(cudaGraphDestroy(g2));
  CHECK(cudaGraphDestroy(g1));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(x));
  std::printf("PASS\n");
  return 0;
}
