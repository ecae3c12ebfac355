// nvcc-flags: -rdc=true -lcudadevrt
// 条件节点（conditional node）：一个 WHILE 节点把“循环到收敛”整个放进 CUDA Graph。
// 循环体里的 kernel 每次把 x 减半并计数，x < 1 时调用 cudaGraphSetConditional(handle, 0) 结束循环；
// 条件句柄以默认值 1 创建并带 cudaGraphCondAssignDefault，所以每次启动图时先置 1（do-while）。
// 对照是主机循环：每一轮启动同一个 kernel，再把“是否继续”拷回主机判断。两者的轮数都必须是
// ceil(log2(x0))，结果一致。需要 CUDA 12.3+（WHILE 节点）；设备端的 cudaGraphSetConditional 在设备运行时库里，
// 按 NVIDIA 示例的做法用 -rdc=true -lcudadevrt 编译；见 docs/runtime/advanced-apis.md。
//
// 编译与运行：
//   nvcc -O3 -arch=sm_90 -rdc=true -o graph-conditional-while code/runtime/graph-conditional-while.cu -lcudadevrt && ./graph-conditional-while
#include <cmath>
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

struct State {
  float x;     // 被迭代的值
  int iters;   // 已执行的轮数
  int more;    // 主机循环用：是否还要再来一轮
};

// --8<-- [start:body]
__device__ bool step(State* s) {  // 一轮迭代；返回是否还要继续
  s->x *= 0.5f;
  s->iters += 1;
  return s->x >= 1.0f;
}

// 图里的循环体：由设备端决定 WHILE 节点是否再执行一轮
__global__ void body_graph(State* s, cudaGraphConditionalHandle handle) {
  if (!step(s)) cudaGraphSetConditional(handle, 0);
}

// 主机循环的版本：把“是否继续”写进内存，主机每轮拷回来读
__global__ void body_host(State* s) { s->more = step(s) ? 1 : 0; }
// --8<-- [end:body]

int main() {
  const float x0 = 1000.0f;
  const int expected = static_cast<int>(std::ceil(std::log2(x0)));  // 1000 → 10 轮
  State* s;
  CHECK(cudaMalloc(&s, sizeof(State)));
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  const State init{x0, 0, 1};

  // --8<-- [start:graph]
  cudaGraph_t graph;
  CHECK(cudaGraphCreate(&graph, 0));
  cudaGraphConditionalHandle handle;  // 条件值住在设备上，每次启动图时复位为 1
  CHECK(cudaGraphConditionalHandleCreate(&handle, graph, 1, cudaGraphCondAssignDefault));

  cudaGraphNodeParams cond = {};
  cond.type = cudaGraphNodeTypeConditional;
  cond.conditional.handle = handle;
  cond.conditional.type = cudaGraphCondTypeWhile;
  cond.conditional.size = 1;  // WHILE 只有一个循环体子图
  cudaGraphNode_t while_node;
  CHECK(cudaGraphAddNode(&while_node, graph, nullptr, nullptr, 0, &cond));
  cudaGraph_t body = cond.conditional.phGraph_out[0];  // 驱动创建的循环体子图

  // 用流捕获往循环体里放一个 kernel
  CHECK(cudaStreamBeginCaptureToGraph(stream, body, nullptr, nullptr, 0, cudaStreamCaptureModeGlobal));
  body_graph<<<1, 1, 0, stream>>>(s, handle);
  CHECK(cudaStreamEndCapture(stream, nullptr));

  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  // --8<-- [end:graph]

  // 启动两次：每次都从 x0 开始，都要正好 expected 轮（第二次证明条件值在启动时复位）
  for (int launch = 0; launch < 2; ++launch) {
    CHECK(cudaMemcpyAsync(s, &init, sizeof(State), cudaMemcpyHostToDevice, stream));
    CHECK(cudaGraphLaunch(exec, stream));  // 一次提交，循环在 GPU 上跑完
    State out;
    CHECK(cudaMemcpyAsync(&out, s, sizeof(State), cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));
    std::printf("graph WHILE, launch %d: %d iterations, x = %g\n", launch, out.iters, out.x);
    if (out.iters != expected || !(out.x < 1.0f && out.x * 2.0f >= 1.0f)) {
      std::printf("FAIL: expected %d iterations\n", expected);
      return 1;
    }
  }

  // --8<-- [start:host]
  // 对照：主机循环，每轮一次启动 + 一次拷回 + 一次同步
  CHECK(cudaMemcpy(s, &init, sizeof(State), cudaMemcpyHostToDevice));
  int host_iters = 0;
  for (int more = 1; more;) {
    body_host<<<1, 1, 0, stream>>>(s);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpyAsync(&more, &s->more, sizeof(int), cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));  // 主机要看到条件才能决定下一轮
    ++host_iters;
  }
  // --8<-- [end:host]
  std::printf("host loop: %d iterations\n", host_iters);
  if (host_iters != expected) {
    std::printf("FAIL: host loop ran %d iterations, expected %d\n", host_iters, expected);
    return 1;
  }

  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaStreamDestroy(stream));
  CHECK(cudaFree(s));
  std::printf("PASS\n");
  return 0;
}
