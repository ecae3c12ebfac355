// SAXPY（y = a·x + y）的运行时 API 版本：与 code/driver/launch_driver_api.py 里经驱动 API
// 启动的是同一个内核。code/driver/saxpy.ptx 由本文件生成：
//   nvcc -ptx -arch=sm_90 -o code/driver/saxpy.ptx code/driver/saxpy.cu
// 编译与运行（自检，打印 PASS）：
//   nvcc -O3 -arch=sm_90 -o saxpy code/driver/saxpy.cu && ./saxpy
#include <cmath>
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
// extern "C" 关掉 C++ 名字修饰（name mangling）：PTX 里的入口名就是 "saxpy"，
// 驱动 API 的 cuModuleGetFunction 用这个名字找到它。
extern "C" __global__ void saxpy(float a, const float* __restrict__ x,
                                 float* __restrict__ y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

// 空内核：测量“启动本身”的代价时用，它不读写任何内存。
extern "C" __global__ void empty_kernel() {}
// --8<-- [end:kernel]

static int count_wrong(const std::vector<float>& got, const std::vector<float>& x,
                       const std::vector<float>& y0, float a, int times) {
  int wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    float ref = y0[i];
    for (int t = 0; t < times; ++t) ref = std::fma(a, x[i], ref);  // 设备端把 a*x+y 收缩成 FMA
    if (std::fabs(got[i] - ref) > 1e-6f * (1.0f + std::fabs(ref))) ++wrong;
  }
  return wrong;
}

int main() {
  const int n = (1 << 20) + 7;  // 不是块大小的整数倍：检验边界检查
  const float a = 2.5f;
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  std::vector<float> hx(n), hy(n), out(n);
  for (int i = 0; i < n; ++i) {
    hx[i] = static_cast<float>(i % 1000) * 1e-3f;
    hy[i] = 1.0f - static_cast<float>(i % 37) * 0.01f;
  }
  float *dx, *dy;
  CHECK(cudaMalloc(&dx, bytes));
  CHECK(cudaMalloc(&dy, bytes));
  CHECK(cudaMemcpy(dx, hx.data(), bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dy, hy.data(), bytes, cudaMemcpyHostToDevice));

  // --8<-- [start:launch]
  const unsigned threads = 256, blocks = (n + threads - 1) / threads;
  // 写法一：三重尖括号。nvcc 把它改写成对 cudaLaunchKernel 的调用（经一个生成的桩函数）。
  saxpy<<<blocks, threads>>>(a, dx, dy, n);
  CHECK(cudaGetLastError());
  // 写法二：显式调用 cudaLaunchKernel，参数数组里每一项是“指向实参的指针”，
  // 与驱动 API cuLaunchKernel 的 kernelParams 形式相同。
  int n_arg = n;
  float a_arg = a;
  void* args[] = {&a_arg, &dx, &dy, &n_arg};
  CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(saxpy), dim3(blocks), dim3(threads),
                         args, 0, /*stream=*/nullptr));
  CHECK(cudaDeviceSynchronize());
  // --8<-- [end:launch]

  CHECK(cudaMemcpy(out.data(), dy, bytes, cudaMemcpyDeviceToHost));
  const int wrong = count_wrong(out, hx, hy, a, 2);  // 两次启动：y = a·x + (a·x + y0)
  empty_kernel<<<1, 1>>>();
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::printf("saxpy n=%d launches=2 mismatches=%d %s\n", n, wrong, wrong == 0 ? "PASS" : "FAIL");
  CHECK(cudaFree(dx));
  CHECK(cudaFree(dy));
  return wrong == 0 ? 0 : 1;
}
