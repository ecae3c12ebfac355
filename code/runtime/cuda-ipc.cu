// 同机进程之间共享显存的两条路：
//   A. 传统 CUDA IPC：导出方对 cudaMalloc 的块调 cudaIpcGetMemHandle（64 字节的不透明句柄），导入方
//      cudaIpcOpenMemHandle 映射到自己的地址空间；顺序靠跨进程事件（cudaEventInterprocess）：导出方在写完的
//      流上记录事件，导入方 cudaIpcOpenEventHandle 后 cudaStreamWaitEvent。
//   B. 内存池 IPC：导出方用 handleTypes = POSIX 文件描述符创建池，cudaMemPoolExportToShareableHandle 得到 fd，
//      经 Unix 域套接字（SCM_RIGHTS）传给导入方；单个分配用 cudaMemPoolExportPointer 导出 64 字节的描述，
//      导入方 cudaMemPoolImportFromShareableHandle + cudaMemPoolImportPointer 得到指针。
// 进程模型：先 fork、再初始化 CUDA（fork 之后子进程不能沿用父进程的 CUDA 状态）。父进程导出，子进程导入、
// 拷回主机核对，并把结果经套接字告诉父进程；父进程等子进程关掉映射之后才释放。见 docs/runtime/multi-gpu-memory.md。
//
// 编译与运行：
//   nvcc -O3 -arch=sm_90 -o cuda-ipc code/runtime/cuda-ipc.cu && ./cuda-ipc
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime.h>

#define CHECK(call)                                                                           \
  do {                                                                                        \
    cudaError_t err_ = (call);                                                                \
    if (err_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(err_));      \
      std::exit(2);                                                                           \
    }                                                                                         \
  } while (0)

constexpr int N = 1 << 20;
constexpr size_t BYTES = N * sizeof(int);

// 父进程发给子进程的全部内容（句柄都是普通字节，可以经任何 IPC 传递；fd 例外，要 SCM_RIGHTS）
struct Message {
  cudaIpcMemHandle_t mem;
  cudaIpcEventHandle_t event;
  int has_pool;
  cudaMemPoolPtrExportData pool_ptr;
};

__global__ void fill(int* x, int n, int mul) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = mul * i + 7;
}

static void send_all(int sock, const void* buf, size_t len, int fd_to_pass) {
  iovec iov = {const_cast<void*>(buf), len};
  msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char ctrl[CMSG_SPACE(sizeof(int))] = {};
  if (fd_to_pass >= 0) {  // 把文件描述符本身交给对方进程：内核在对方那里新建一个 fd
    msg.msg_control = ctrl;
    msg.msg_controllen = sizeof ctrl;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd_to_pass, sizeof(int));
  }
  if (sendmsg(sock, &msg, 0) != static_cast<ssize_t>(len)) { std::perror("sendmsg"); std::exit(2); }
}

static int recv_all(int sock, void* buf, size_t len) {  // 返回收到的 fd（没有则 -1）
  iovec iov = {buf, len};
  msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char ctrl[CMSG_SPACE(sizeof(int))] = {};
  msg.msg_control = ctrl;
  msg.msg_controllen = sizeof ctrl;
  if (recvmsg(sock, &msg, MSG_WAITALL) != static_cast<ssize_t>(len)) { std::perror("recvmsg"); std::exit(2); }
  int fd = -1;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  if (c && c->cmsg_type == SCM_RIGHTS) std::memcpy(&fd, CMSG_DATA(c), sizeof(int));
  return fd;
}

static bool check(const std::vector<int>& h, int mul) {
  for (int i = 0; i < N; ++i)
    if (h[i] != mul * i + 7) return false;
  return true;
}

// --8<-- [start:child]
static int child(int sock) {
  Message m;
  int pool_fd = recv_all(sock, &m, sizeof m);
  CHECK(cudaSetDevice(0));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  cudaEvent_t ready;
  CHECK(cudaIpcOpenEventHandle(&ready, m.event));
  CHECK(cudaStreamWaitEvent(s, ready, 0));  // 等父进程流上的 fill 完成：GPU 上等待，不经 CPU
  int* p = nullptr;
  CHECK(cudaIpcOpenMemHandle(reinterpret_cast<void**>(&p), m.mem, cudaIpcMemLazyEnablePeerAccess));
  std::vector<int> h(N);
  CHECK(cudaMemcpyAsync(h.data(), p, BYTES, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  bool ok = check(h, 3);
  CHECK(cudaIpcCloseMemHandle(p));  // 必须在导出方 cudaFree 之前关闭

  if (m.has_pool) {
    cudaMemPool_t pool;
    CHECK(cudaMemPoolImportFromShareableHandle(&pool, reinterpret_cast<void*>(static_cast<intptr_t>(pool_fd)),
                                               cudaMemHandleTypePosixFileDescriptor, 0));
    cudaMemLocation here = {cudaMemLocationTypeDevice, 0};
    cudaMemAccessFlags acc = cudaMemAccessFlagsProtNone;
    CHECK(cudaMemPoolGetAccess(&acc, pool, &here));
    if (acc != cudaMemAccessFlagsProtReadWrite) {  // 导入的池不继承导出方设置的访问权限：需要时自己设
      cudaMemAccessDesc want = {here, cudaMemAccessFlagsProtReadWrite};
      CHECK(cudaMemPoolSetAccess(pool, &want, 1));
    }
    int* q = nullptr;
    CHECK(cudaMemPoolImportPointer(reinterpret_cast<void**>(&q), pool, &m.pool_ptr));
    CHECK(cudaMemcpyAsync(h.data(), q, BYTES, cudaMemcpyDeviceToHost, s));  // 同一事件也覆盖了池上的 fill
    CHECK(cudaStreamSynchronize(s));
    ok = ok && check(h, 5);
    CHECK(cudaFree(q));  // 导入的指针要在导出方释放之前释放
    CHECK(cudaMemPoolDestroy(pool));
    close(pool_fd);
  }
  CHECK(cudaEventDestroy(ready));
  CHECK(cudaStreamDestroy(s));
  char verdict = ok ? 1 : 0;
  send_all(sock, &verdict, 1, -1);
  return ok ? 0 : 1;
}
// --8<-- [end:child]

int main() {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) { std::perror("socketpair"); return 2; }
  pid_t pid = fork();  // 在任何 CUDA 调用之前 fork
  if (pid < 0) { std::perror("fork"); return 2; }
  if (pid == 0) {
    close(sv[0]);
    std::exit(child(sv[1]));
  }
  close(sv[1]);

  // --8<-- [start:parent]
  CHECK(cudaSetDevice(0));
  int ipc_events = 0, pool_types = 0;
  CHECK(cudaDeviceGetAttribute(&ipc_events, cudaDevAttrIpcEventSupport, 0));
  CHECK(cudaDeviceGetAttribute(&pool_types, cudaDevAttrMemoryPoolSupportedHandleTypes, 0));
  if (!ipc_events) { std::printf("FAIL: device reports no IPC event support\n"); return 1; }
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  Message m = {};

  int* a = nullptr;  // A. 传统 IPC：整块 cudaMalloc
  CHECK(cudaMalloc(&a, BYTES));
  fill<<<(N + 255) / 256, 256, 0, s>>>(a, N, 3);
  CHECK(cudaIpcGetMemHandle(&m.mem, a));

  int pool_fd = -1;  // B. 内存池 IPC
  cudaMemPool_t pool = nullptr;
  int* b = nullptr;
  m.has_pool = (pool_types & cudaMemHandleTypePosixFileDescriptor) != 0;
  if (m.has_pool) {
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypePosixFileDescriptor;  // 建池时就要声明可导出
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    CHECK(cudaMemPoolCreate(&pool, &props));
    CHECK(cudaMallocFromPoolAsync(reinterpret_cast<void**>(&b), BYTES, pool, s));
    fill<<<(N + 255) / 256, 256, 0, s>>>(b, N, 5);
    CHECK(cudaMemPoolExportToShareableHandle(&pool_fd, pool, cudaMemHandleTypePosixFileDescriptor, 0));
    CHECK(cudaMemPoolExportPointer(&m.pool_ptr, b));
  } else {
    std::printf("skipped: the device's memory pools cannot export POSIX file descriptors\n");
  }
  CHECK(cudaGetLastError());

  cudaEvent_t done;  // 跨进程事件必须关掉计时
  CHECK(cudaEventCreateWithFlags(&done, cudaEventInterprocess | cudaEventDisableTiming));
  CHECK(cudaEventRecord(done, s));  // 两次 fill（以及池上的分配）都排在它之前
  CHECK(cudaIpcGetEventHandle(&m.event, done));
  send_all(sv[0], &m, sizeof m, pool_fd);  // 不等 GPU：顺序由子进程里的 cudaStreamWaitEvent 保证

  char verdict = 0;
  recv_all(sv[0], &verdict, 1);  // 子进程关闭映射、释放导入指针之后才回信
  // --8<-- [end:parent]
  int status = 0;
  waitpid(pid, &status, 0);
  if (m.has_pool) {
    CHECK(cudaFreeAsync(b, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemPoolDestroy(pool));
    close(pool_fd);
  }
  CHECK(cudaFree(a));
  CHECK(cudaEventDestroy(done));
  CHECK(cudaStreamDestroy(s));
  if (!verdict || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::printf("FAIL: the child process saw wrong data (exit status %d)\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return 1;
  }
  std::printf("child process read both buffers: cudaIpc handle%s\n", m.has_pool ? " and memory-pool import" : "");
  std::printf("PASS\n");
  return 0;
}
