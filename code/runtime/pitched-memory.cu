// 二维与三维的行对齐分配（pitched allocation）：
//   cudaMallocPitch 把每行补齐到 pitch 字节，使每行行首都落在对齐边界上，按行访问的 warp 才能合并访存；
//   cudaMalloc3D 对每个二维切片做同样的补齐。本程序检查 pitch ≥ 行宽、且是设备报告的
//   纹理 pitch 对齐（cudaDevAttrTexturePitchAlignment）的倍数，然后用 cudaMemcpy2D / cudaMemcpy3D
//   把紧密排列的主机数组拷进带 pitch 的显存、在 GPU 上按 pitch 寻址改写、再拷回并逐元素核对，
//   最后用 cudaMemcpy2D 取出一个子矩阵（源 pitch 与目的 pitch 不同的跨步拷贝）。
// 见 docs/runtime/multi-gpu-memory.md。
//
// 编译与运行：
//   nvcc -O3 -arch=sm_90 -o pitched-memory code/runtime/pitched-memory.cu && ./pitched-memory
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

static void expect(bool ok, const char* what) {
  if (!ok) {
    std::printf("FAIL: %s\n", what);
    std::exit(1);
  }
}

// --8<-- [start:kernel]
// 第 r 行从 (char*)base + r * pitch 开始：行内按元素下标，行间按字节 pitch 跳
__global__ void add_coords(float* base, size_t pitch, int width, int height) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  int r = blockIdx.y * blockDim.y + threadIdx.y;
  if (c < width && r < height) {
    float* row = reinterpret_cast<float*>(reinterpret_cast<char*>(base) + r * pitch);
    row[c] += 1000.0f * r + c;
  }
}
// --8<-- [end:kernel]

int main() {
  int dev = 0, pitch_align = 0, tex_align = 0;
  CHECK(cudaSetDevice(dev));
  CHECK(cudaDeviceGetAttribute(&pitch_align, cudaDevAttrTexturePitchAlignment, dev));
  CHECK(cudaDeviceGetAttribute(&tex_align, cudaDevAttrTextureAlignment, dev));

  // --8<-- [start:pitch2d]
  const int W = 1001, H = 37;  // 每行 4004 字节：4004 mod 32 = 4，紧密排列时 7/8 的行首不在 32 字节边界上
  const size_t row_bytes = W * sizeof(float);
  float* d = nullptr;
  size_t pitch = 0;
  CHECK(cudaMallocPitch(reinterpret_cast<void**>(&d), &pitch, row_bytes, H));
  std::printf("width %zu B -> pitch %zu B (texture pitch alignment %d B, texture alignment %d B), "
              "%zu padding bytes per row\n", row_bytes, pitch, pitch_align, tex_align, pitch - row_bytes);
  expect(pitch >= row_bytes, "pitch covers a whole row");
  expect(pitch % pitch_align == 0, "pitch is a multiple of the device's pitch alignment");

  std::vector<float> h(W * H), back(W * H);
  for (int i = 0; i < W * H; ++i) h[i] = 0.5f * i;
  // 主机端紧密排列（pitch = 行宽），设备端按 pitch：cudaMemcpy2D 逐行拷，跳过补齐的字节
  CHECK(cudaMemcpy2D(d, pitch, h.data(), row_bytes, row_bytes, H, cudaMemcpyHostToDevice));
  dim3 block(32, 8), grid((W + 31) / 32, (H + 7) / 8);
  add_coords<<<grid, block>>>(d, pitch, W, H);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy2D(back.data(), row_bytes, d, pitch, row_bytes, H, cudaMemcpyDeviceToHost));
  // --8<-- [end:pitch2d]
  for (int r = 0; r < H; ++r)
    for (int c = 0; c < W; ++c)
      expect(back[r * W + c] == h[r * W + c] + 1000.0f * r + c, "2-D round trip through pitched memory");

  // 跨步拷贝：取第 5..14 行、第 100..163 列的子矩阵，目的地是紧密的 10 × 64 数组
  const int R0 = 5, C0 = 100, SR = 10, SC = 64;
  std::vector<float> sub(SR * SC);
  CHECK(cudaMemcpy2D(sub.data(), SC * sizeof(float), reinterpret_cast<char*>(d) + R0 * pitch + C0 * sizeof(float),
                     pitch, SC * sizeof(float), SR, cudaMemcpyDeviceToHost));
  for (int r = 0; r < SR; ++r)
    for (int c = 0; c < SC; ++c) expect(sub[r * SC + c] == back[(R0 + r) * W + C0 + c], "strided sub-matrix copy");
  CHECK(cudaFree(d));

  // --8<-- [start:pitch3d]
  const int D = 4;
  cudaExtent ext = make_cudaExtent(row_bytes, H, D);  // 宽度以字节计，高与深以元素计
  cudaPitchedPtr p3;
  CHECK(cudaMalloc3D(&p3, ext));
  expect(p3.pitch >= row_bytes && p3.pitch % pitch_align == 0, "cudaMalloc3D pads rows the same way");
  std::vector<float> h3(W * H * D), b3(W * H * D);
  for (size_t i = 0; i < h3.size(); ++i) h3[i] = static_cast<float>(i % 9973);
  cudaMemcpy3DParms up = {};
  up.srcPtr = make_cudaPitchedPtr(h3.data(), row_bytes, W, H);
  up.dstPtr = p3;
  up.extent = ext;
  up.kind = cudaMemcpyHostToDevice;
  CHECK(cudaMemcpy3D(&up));
  cudaMemcpy3DParms down = {};
  down.srcPtr = p3;
  down.dstPtr = make_cudaPitchedPtr(b3.data(), row_bytes, W, H);
  down.extent = ext;
  down.kind = cudaMemcpyDeviceToHost;
  CHECK(cudaMemcpy3D(&down));
  // --8<-- [end:pitch3d]
  for (size_t i = 0; i < h3.size(); ++i) expect(b3[i] == h3[i], "3-D round trip through cudaMalloc3D");
  std::printf("cudaMalloc3D: pitch %zu B, slice %zu B\n", p3.pitch, p3.pitch * H);
  CHECK(cudaFree(p3.ptr));
  std::printf("PASS\n");
  return 0;
}
