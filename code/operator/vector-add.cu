// 向量加法（vector add）的 CUDA C++ 版本：与实验 notebooks/operator/vector-add.ipynb 中的
// Numba 与 Triton 内核一一对应。自带正确性检查：结果与主机端逐元素相加完全一致才返回 0。
//
// 编译与运行：
//   nvcc -O3 -arch=sm_90 -o vector-add code/operator/vector-add.cu && ./vector-add 16777219
#include <cmath>
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

// --8<-- [start:kernel]
// 一个线程负责一个元素：全局下标 = 块号 × 块大小 + 块内线程号。
// 最后一个块可能越过 n，所以必须做边界检查。
__global__ void vector_add(const float* __restrict__ a, const float* __restrict__ b,
                           float* __restrict__ c, int64_t n) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
// --8<-- [end:kernel]

int main(int argc, char** argv) {
  // 默认长度故意不是块大小的整数倍，用来检验边界检查。
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : (int64_t{1} << 24) + 3;
  const int threads = 256;
  const int64_t blocks = (n + threads - 1) / threads;
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);

  std::vector<float> ha(n), hb(n), hc(n);
  uint32_t state = 12345u;  // 线性同余发生器：可复现的非零输入
  for (int64_t i = 0; i < n; ++i) {
    state = state * 1664525u + 1013904223u;
    ha[i] = static_cast<float>(state >> 8) / 16777216.0f;
    state = state * 1664525u + 1013904223u;
    hb[i] = static_cast<float>(state >> 8) / 16777216.0f - 0.5f;
  }

  float *da, *db, *dc;
  CHECK(cudaMalloc(&da, bytes));
  CHECK(cudaMalloc(&db, bytes));
  CHECK(cudaMalloc(&dc, bytes));
  CHECK(cudaMemcpy(da, ha.data(), bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, hb.data(), bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dc, 0xFF, bytes));  // 先写满 NaN：漏写的元素会被检查出来

  vector_add<<<static_cast<unsigned>(blocks), threads>>>(da, db, dc, n);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(hc.data(), dc, bytes, cudaMemcpyDeviceToHost));

  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) {
    // 单次 IEEE 754 加法在主机和设备上舍入相同，因此要求逐位相等。
    if (!(hc[i] == ha[i] + hb[i])) ++wrong;
  }
  std::printf("vector_add n=%lld blocks=%lld threads=%d mismatches=%lld %s\n",
              static_cast<long long>(n), static_cast<long long>(blocks), threads,
              static_cast<long long>(wrong), wrong == 0 ? "PASS" : "FAIL");
  CHECK(cudaFree(da));
  CHECK(cudaFree(db));
  CHECK(cudaFree(dc));
  return wrong == 0 ? 0 : 1;
}
