// 图内存节点（graph memory nodes）：在流捕获中调用 cudaMallocAsync / cudaFreeAsync，得到的不是一次
// 分配，而是图里的分配节点与释放节点。地址在图创建时就定下，每次重放都相同；生命期不重叠的两块
// 临时缓冲区可以被分到同一段虚拟地址（驱动“可以”这样做，所以这里只报告、不断言）。图用过的物理
// 内存由驱动为图保留，cudaDeviceGetGraphMemAttribute 读出用量，cudaDeviceGraphMemTrim 归还空闲部分。
// 检查：节点类型的计数、分配节点记录的地址、两次重放的结果都等于 2i+1，重放后为图保留的物理内存
// 至少一块缓冲区，销毁图并 trim 之后不再有内存与图关联。见 docs/runtime/advanced-apis.md。
//
// 编译与运行：
//   nvcc -O3 -arch=sm_90 -o graph-memory-nodes code/runtime/graph-memory-nodes.cu && ./graph-memory-nodes
#include <cstdint>
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

constexpr int N = 1 << 22;  // 16 MiB 的 float
constexpr size_t BYTES = N * sizeof(float);

__global__ void iota(float* t, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) t[i] = static_cast<float>(i);
}
__global__ void axpb(float* y, const float* x, float a, float b, int n) {  // y = a·x + b
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + b;
}

static uint64_t graph_mem(cudaGraphMemAttributeType attr) {
  uint64_t v = 0;
  CHECK(cudaDeviceGetGraphMemAttribute(0, attr, &v));
  return v;
}

static bool check(const float* out, cudaStream_t s, const char* what) {
  std::vector<float> h(N);
  CHECK(cudaMemcpyAsync(h.data(), out, BYTES, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < N; ++i)
    if (h[i] != 2.0f * i + 1.0f) {
      std::printf("FAIL %s: out[%d] = %g, expected %g\n", what, i, h[i], 2.0f * i + 1.0f);
      return false;
    }
  return true;
}

int main() {
  CHECK(cudaSetDevice(0));
  float* out;
  CHECK(cudaMalloc(&out, BYTES));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  const dim3 grid((N + 255) / 256), block(256);

  // --8<-- [start:capture]
  cudaGraph_t graph;
  float *t1, *t2;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(cudaMallocAsync(&t1, BYTES, s));  // → 分配节点：地址现在就定下
  iota<<<grid, block, 0, s>>>(t1, N);
  axpb<<<grid, block, 0, s>>>(out, t1, 2.0f, 0.0f, N);  // out = 2i
  CHECK(cudaFreeAsync(t1, s));            // → 释放节点：t1 的生命期到此为止
  CHECK(cudaMallocAsync(&t2, BYTES, s));  // 与 t1 生命期不重叠，可以复用同一段地址
  axpb<<<grid, block, 0, s>>>(t2, out, 1.0f, 1.0f, N);  // t2 = 2i + 1
  axpb<<<grid, block, 0, s>>>(out, t2, 1.0f, 0.0f, N);  // out = 2i + 1
  CHECK(cudaFreeAsync(t2, s));            // 图里分配的都在图里释放，才能反复重放
  CHECK(cudaStreamEndCapture(s, &graph));
  // --8<-- [end:capture]

  // 数一数节点类型，并核对分配节点记下的地址就是捕获时拿到的指针
  size_t count = 0;
  CHECK(cudaGraphGetNodes(graph, nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count);
  CHECK(cudaGraphGetNodes(graph, nodes.data(), &count));
  int allocs = 0, frees = 0, kernels = 0;
  for (cudaGraphNode_t n : nodes) {
    cudaGraphNodeType type;
    CHECK(cudaGraphNodeGetType(n, &type));
    if (type == cudaGraphNodeTypeMemAlloc) {
      cudaMemAllocNodeParams p;
      CHECK(cudaGraphMemAllocNodeGetParams(n, &p));
      if (p.dptr != t1 && p.dptr != t2) { std::printf("FAIL: alloc node address\n"); return 1; }
      ++allocs;
    }
    frees += type == cudaGraphNodeTypeMemFree;
    kernels += type == cudaGraphNodeTypeKernel;
  }
  std::printf("nodes: %d alloc, %d free, %d kernel; t1 %s t2 (virtual address %s)\n", allocs, frees, kernels,
              t1 == t2 ? "==" : "!=", t1 == t2 ? "reused" : "not reused");
  if (allocs != 2 || frees != 2 || kernels != 4) { std::printf("FAIL: node counts\n"); return 1; }

  // --8<-- [start:footprint]
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int launch = 0; launch < 2; ++launch) {  // 每次重放用同样的地址
    CHECK(cudaMemsetAsync(out, 0, BYTES, s));
    CHECK(cudaGraphLaunch(exec, s));
    if (!check(out, s, launch ? "second launch" : "first launch")) return 1;
  }
  uint64_t used = graph_mem(cudaGraphMemAttrUsedMemCurrent);       // 此刻被图占用的物理内存
  uint64_t reserved = graph_mem(cudaGraphMemAttrReservedMemCurrent);  // 为图保留的物理内存
  std::printf("after launch: used %llu MiB, reserved %llu MiB (one buffer is %zu MiB)\n",
              (unsigned long long)(used >> 20), (unsigned long long)(reserved >> 20), BYTES >> 20);
  if (reserved < BYTES) { std::printf("FAIL: less than one buffer was reserved for the graph\n"); return 1; }

  CHECK(cudaGraphExecDestroy(exec));  // 销毁可执行图，它占的物理内存回到图内存池
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaDeviceGraphMemTrim(0));   // 把池里空闲的物理内存还给驱动
  uint64_t used_after = graph_mem(cudaGraphMemAttrUsedMemCurrent);
  std::printf("after destroy + trim: used %llu MiB, reserved %llu MiB\n", (unsigned long long)(used_after >> 20),
              (unsigned long long)(graph_mem(cudaGraphMemAttrReservedMemCurrent) >> 20));
  // --8<-- [end:footprint]
  if (used_after != 0) { std::printf("FAIL: memory still associated with a destroyed graph\n"); return 1; }

  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(out));
  std::printf("PASS\n");
  return 0;
}
