// 导出 VMM 物理内存的可共享句柄（shareable handle）：父进程用 cuMemCreate 创建内存时声明可以导出为 POSIX
// 文件描述符，cuMemExportToShareableHandle 得到一个 fd；fd 经 Unix 域套接字的 SCM_RIGHTS 辅助消息传给子进程
// （内核在子进程里装一个指向同一对象的新 fd），子进程 cuMemImportFromShareableHandle 导入、映射到自己的地址，
// 读到父进程写下的字节。父进程也在本进程里导入同一个 fd，映射到第二个地址，检查两个映射是同一块物理内存。
// fork 在任何 CUDA 调用之前完成：CUDA 不支持在 fork 出的子进程里继续使用父进程已初始化的状态。
// 检查：两个映射互相可见；子进程读到的全部字节正确（子进程以退出码报告）。见 docs/runtime/advanced-apis.md。
//
// 编译与运行：
//   nvcc -O3 -arch=sm_90 -o vmm-export code/runtime/vmm-export.cu && ./vmm-export
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cuda.h>
#include <cudaTypedefs.h>  // PFN_<函数>_v<引入它的 CUDA 版本>
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

#define CU_CHECK(call)                                                           \
  do {                                                                           \
    CUresult res_ = (call);                                                      \
    if (res_ != CUDA_SUCCESS) {                                                  \
      std::fprintf(stderr, "%s:%d: CUresult %d\n", __FILE__, __LINE__, (int)res_); \
      std::exit(2);                                                              \
    }                                                                            \
  } while (0)

#define SYS_CHECK(cond)                                                          \
  do {                                                                           \
    if (!(cond)) { std::perror(#cond); std::exit(2); }                           \
  } while (0)

template <class Pfn>
static Pfn driver(const char* name, unsigned version) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found;
  CHECK(cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess || fn == nullptr) {
    std::fprintf(stderr, "%s: not provided by this driver\n", name);
    std::exit(2);
  }
  return reinterpret_cast<Pfn>(fn);
}

struct Vmm {  // 本进程用到的驱动 API
  PFN_cuDeviceGet_v2000 deviceGet;
  PFN_cuMemGetAllocationGranularity_v10020 granularity;
  PFN_cuMemCreate_v10020 create;
  PFN_cuMemRelease_v10020 release;
  PFN_cuMemAddressReserve_v10020 reserve;
  PFN_cuMemAddressFree_v10020 addressFree;
  PFN_cuMemMap_v10020 map;
  PFN_cuMemUnmap_v10020 unmap;
  PFN_cuMemSetAccess_v10020 setAccess;
  PFN_cuMemExportToShareableHandle_v10020 exportHandle;
  PFN_cuMemImportFromShareableHandle_v10020 importHandle;
  CUdevice dev;

  Vmm() {
    CHECK(cudaSetDevice(0));
    CHECK(cudaFree(nullptr));  // 初始化运行时与主上下文
    deviceGet = driver<PFN_cuDeviceGet_v2000>("cuDeviceGet", 2000);
    granularity = driver<PFN_cuMemGetAllocationGranularity_v10020>("cuMemGetAllocationGranularity", 10020);
    create = driver<PFN_cuMemCreate_v10020>("cuMemCreate", 10020);
    release = driver<PFN_cuMemRelease_v10020>("cuMemRelease", 10020);
    reserve = driver<PFN_cuMemAddressReserve_v10020>("cuMemAddressReserve", 10020);
    addressFree = driver<PFN_cuMemAddressFree_v10020>("cuMemAddressFree", 10020);
    map = driver<PFN_cuMemMap_v10020>("cuMemMap", 10020);
    unmap = driver<PFN_cuMemUnmap_v10020>("cuMemUnmap", 10020);
    setAccess = driver<PFN_cuMemSetAccess_v10020>("cuMemSetAccess", 10020);
    exportHandle = driver<PFN_cuMemExportToShareableHandle_v10020>("cuMemExportToShareableHandle", 10020);
    importHandle = driver<PFN_cuMemImportFromShareableHandle_v10020>("cuMemImportFromShareableHandle", 10020);
    CU_CHECK(deviceGet(&dev, 0));
  }

  CUdeviceptr map_rw(CUmemGenericAllocationHandle h, size_t size) {  // 保留一段地址、映射、授权
    CUdeviceptr va = 0;
    CU_CHECK(reserve(&va, size, 0, 0, 0));
    CU_CHECK(map(va, size, 0, h, 0));
    CUmemAccessDesc rw = {};
    rw.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    rw.location.id = dev;
    rw.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CU_CHECK(setAccess(va, size, &rw, 1));
    return va;
  }
  void unmap_free(CUdeviceptr va, size_t size) {
    CU_CHECK(unmap(va, size));
    CU_CHECK(addressFree(va, size));
  }
};

// --8<-- [start:scm]
// 经 Unix 域套接字传一个文件描述符（SCM_RIGHTS），顺带 8 字节的正文（这里是大小）
static void send_fd(int sock, int fd, uint64_t size) {
  char ctrl[CMSG_SPACE(sizeof(int))] = {};
  iovec iov = {&size, sizeof(size)};
  msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = ctrl;
  msg.msg_controllen = sizeof(ctrl);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  SYS_CHECK(sendmsg(sock, &msg, 0) == static_cast<ssize_t>(sizeof(size)));
}

static int recv_fd(int sock, uint64_t* size) {
  char ctrl[CMSG_SPACE(sizeof(int))] = {};
  iovec iov = {size, sizeof(*size)};
  msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = ctrl;
  msg.msg_controllen = sizeof(ctrl);
  SYS_CHECK(recvmsg(sock, &msg, 0) == static_cast<ssize_t>(sizeof(*size)));
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  SYS_CHECK(c != nullptr && c->cmsg_type == SCM_RIGHTS);
  int fd;
  std::memcpy(&fd, CMSG_DATA(c), sizeof(int));
  return fd;  // 内核在本进程里新建的描述符，指向同一个对象
}
// --8<-- [end:scm]

static unsigned pattern(size_t i) { return static_cast<unsigned>(i * 2654435761u + 12345u); }

__global__ void write_pattern(unsigned* p, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = static_cast<unsigned>(i * 2654435761u + 12345u);
}

static bool matches(CUdeviceptr va, size_t size) {
  std::vector<unsigned> h(size / sizeof(unsigned));
  CHECK(cudaMemcpy(h.data(), reinterpret_cast<void*>(va), size, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < h.size(); ++i)
    if (h[i] != pattern(i)) return false;
  return true;
}

static int child(int sock) {
  uint64_t size = 0;
  int fd = recv_fd(sock, &size);
  Vmm v;  // 子进程自己的 CUDA 初始化
  // --8<-- [start:import]
  CUmemGenericAllocationHandle h;
  CU_CHECK(v.importHandle(&h, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)),
                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  close(fd);  // 导入后 fd 可以关掉，句柄已持有那块物理内存
  CUdeviceptr va = v.map_rw(h, size);  // 映射到子进程自己选的地址
  // --8<-- [end:import]
  bool ok = matches(va, size);
  std::printf("child: imported %llu MiB at 0x%llx, bytes %s\n", (unsigned long long)(size >> 20),
              (unsigned long long)va, ok ? "match" : "DIFFER");
  v.unmap_free(va, size);
  CU_CHECK(v.release(h));
  return ok ? 0 : 1;
}

int main() {
  int sv[2];
  SYS_CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  pid_t pid = fork();  // 在任何 CUDA 调用之前
  SYS_CHECK(pid >= 0);
  if (pid == 0) {
    close(sv[0]);
    std::exit(child(sv[1]));
  }
  close(sv[1]);

  Vmm v;
  // --8<-- [start:export]
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = v.dev;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;  // 创建时就要声明可导出的句柄类型
  size_t gran = 0;
  CU_CHECK(v.granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  const size_t size = 4 * gran;
  CUmemGenericAllocationHandle h;
  CU_CHECK(v.create(&h, size, &prop, 0));
  CUdeviceptr va1 = v.map_rw(h, size);
  write_pattern<<<256, 256>>>(reinterpret_cast<unsigned*>(va1), size / sizeof(unsigned));
  CHECK(cudaDeviceSynchronize());

  int fd = -1;  // POSIX fd 类型的可共享句柄：一个普通的文件描述符
  CU_CHECK(v.exportHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  // --8<-- [end:export]

  // 本进程内：导入同一个 fd，映射到第二个地址，两个地址看到同一块物理内存
  CUmemGenericAllocationHandle h2;
  CU_CHECK(v.importHandle(&h2, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)),
                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  CUdeviceptr va2 = v.map_rw(h2, size);
  bool same = va2 != va1 && matches(va2, size);
  const unsigned probe = 0xdeadbeefu;  // 经第二个地址写，从第一个地址读回，再写回原值
  unsigned back = 0;
  CHECK(cudaMemcpy(reinterpret_cast<void*>(va2), &probe, sizeof(probe), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(&back, reinterpret_cast<void*>(va1), sizeof(back), cudaMemcpyDeviceToHost));
  const unsigned orig = pattern(0);
  CHECK(cudaMemcpy(reinterpret_cast<void*>(va1), &orig, sizeof(orig), cudaMemcpyHostToDevice));
  same = same && back == probe;
  std::printf("parent: 0x%llx and 0x%llx %s\n", (unsigned long long)va1, (unsigned long long)va2,
              same ? "alias the same memory" : "DO NOT alias");

  send_fd(sv[0], fd, size);  // 子进程导入、映射并检查
  close(fd);
  int status = 0;
  SYS_CHECK(waitpid(pid, &status, 0) == pid);  // 子进程结束前，父进程一直持有这块内存
  const bool child_ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;

  v.unmap_free(va2, size);
  v.unmap_free(va1, size);
  CU_CHECK(v.release(h2));
  CU_CHECK(v.release(h));
  close(sv[0]);
  if (!same || !child_ok) {
    std::printf("FAIL: %s\n", !same ? "second mapping differs" : "child did not see the bytes");
    return 1;
  }
  std::printf("PASS\n");
  return 0;
}
