"""DataLoader 式的进程间交付：子进程把数据写进匿名共享内存（memfd），经 Unix 域 socket 用 SCM_RIGHTS 把文件描述符交给父进程，
父进程 mmap 后直接读取，数据本身不经过 socket。再用一个信号演示异步通知。"""
from __future__ import annotations

import mmap
import os
import signal
import socket
import struct


# --8<-- [start:fds]
def child_fills_shared_memory(n: int) -> tuple[list[int], int]:
    """返回 (父进程经共享内存读到的 n 个 int64, socket 上实际传送的字节数)。"""
    parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid == 0:                                        # 子进程：相当于一个 DataLoader worker
        try:
            parent_sock.close()
            fd = os.memfd_create("batch")               # 没有路径名的共享内存文件
            os.ftruncate(fd, 8 * n)
            with mmap.mmap(fd, 8 * n) as buf:           # MAP_SHARED：写入对所有映射者可见
                buf[:] = struct.pack(f"{n}q", *(i * i for i in range(n)))
            socket.send_fds(child_sock, [b"B"], [fd])   # 只发 1 字节，附带描述符（SCM_RIGHTS）
            os.close(fd)
        finally:
            os._exit(0)
    child_sock.close()
    msg, fds, _, _ = socket.recv_fds(parent_sock, 16, maxfds=1)
    parent_sock.close()
    os.waitpid(pid, 0)
    (fd,) = fds                                         # 内核在本进程里新建的描述符，号码可能与子进程的不同
    with mmap.mmap(fd, 8 * n, prot=mmap.PROT_READ) as buf:
        values = list(struct.unpack(f"{n}q", buf[:]))
    os.close(fd)
    return values, len(msg)
# --8<-- [end:fds]


# --8<-- [start:signal]
def sigterm_checkpoint() -> list[str]:
    """训练进程收到 SIGTERM：处理函数只置标志，主循环在安全点保存检查点后退出。"""
    events: list[str] = []
    stop = False

    def handler(signum, frame):                         # CPython 在主线程的字节码间隙运行它
        nonlocal stop
        stop = True

    old = signal.signal(signal.SIGTERM, handler)
    try:
        for step in range(100):
            if step == 3:
                os.kill(os.getpid(), signal.SIGTERM)     # 模拟调度系统发来的终止信号
            if stop:
                events.append(f"checkpoint at step {step}")
                break
            events.append(f"step {step}")
    finally:
        signal.signal(signal.SIGTERM, old)
    return events
# --8<-- [end:signal]
