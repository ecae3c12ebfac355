"""MPI 点对点通信（mpi4py）：eager 与 rendezvous、双方都先发的死锁，以及四种修法。

用 code/foundations/mpi/launch.py 在本机启动，例如：
    mpirun -n 2 python p2p.py probe 1024 1048576
    mpirun -n 2 python p2p.py deadlock 1048576            # 会卡住：由启动器超时后结束
    mpirun -n 3 python p2p.py exchange sendrecv 1048576
每个 rank 把结果写成一行 JSON 打到标准输出（带 "rank" 字段），启动器按行收集。
"""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np


def say(comm, **fields) -> None:
    print(json.dumps({"rank": comm.Get_rank(), "pid": os.getpid(), **fields}), flush=True)


# --8<-- [start:probe]
def probe(comm, sizes: list[int], wait: float = 1.0) -> None:
    """rank 0 对每个大小发起 Isend，在 rank 1 投递接收之前轮询 wait 秒：发送能否先完成？

    标准模式的 MPI_Send 等于 Isend + Wait，所以这里“先完成”就等于“阻塞的 Send 不等接收方就返回”。
    小消息走 eager 协议：数据连同信封直接拷进对端的接收队列，发送端的缓冲区立刻可以复用。
    大消息走 rendezvous：先发一个请求头，等接收方匹配上接收、回了确认才搬数据，之前发送不可能完成。
    """
    rank = comm.Get_rank()
    from mpi4py import MPI

    for tag, n in enumerate(sizes):
        buf = np.zeros(n, dtype=np.uint8)
        if rank == 0:
            req = comm.Isend([buf, MPI.BYTE], dest=1, tag=tag)
            deadline = time.monotonic() + wait
            done = req.Test()                      # Test 也推动进度（progress）
            while not done and time.monotonic() < deadline:
                done = req.Test()
            comm.Barrier()                          # 到这里 rank 1 才去接收
            req.Wait()
            say(comm, bytes=n, completed_before_recv=bool(done))
        elif rank == 1:
            comm.Barrier()
            comm.Recv([buf, MPI.BYTE], source=0, tag=tag)
# --8<-- [end:probe]


# --8<-- [start:deadlock]
def deadlock(comm, n: int, synchronous: bool = False) -> None:
    """环上每个 rank 都先把 n 字节阻塞地发给右邻居，再从左邻居收：不安全（unsafe）的程序。

    消息小于 eager 上限时发送被缓冲、程序“碰巧”能跑完；超过上限，或改用同步模式 Ssend，
    每个 rank 都停在发送里等一个永远不会被投递的接收：循环等待，死锁。
    """
    from mpi4py import MPI

    rank, size = comm.Get_rank(), comm.Get_size()
    right, left = (rank + 1) % size, (rank - 1) % size
    out = np.full(n, rank % 256, dtype=np.uint8)
    inp = np.empty(n, dtype=np.uint8)
    send = comm.Ssend if synchronous else comm.Send
    say(comm, event="send-start")
    send([out, MPI.BYTE], dest=right)
    say(comm, event="send-done")
    comm.Recv([inp, MPI.BYTE], source=left)
    assert inp[0] == left % 256
    say(comm, event="recv-done")
# --8<-- [end:deadlock]


# --8<-- [start:fixes]
def exchange(comm, method: str, n: int) -> np.ndarray:
    """同一个环形交换（发给右邻居、收左邻居）的四种无死锁写法；返回收到的数据。"""
    from mpi4py import MPI

    rank, size = comm.Get_rank(), comm.Get_size()
    right, left = (rank + 1) % size, (rank - 1) % size
    out = np.full(n, rank % 256, dtype=np.uint8)
    inp = np.empty(n, dtype=np.uint8)
    if method == "parity":
        # 按 rank 奇偶错开顺序：偶数先发后收，奇数先收后发。等待图里不再有环
        # （奇数个 rank 时 rank size-1 与 rank 0 都是偶数，形成一条链而不是环，依然能跑完）。
        if rank % 2 == 0:
            comm.Send([out, MPI.BYTE], dest=right)
            comm.Recv([inp, MPI.BYTE], source=left)
        else:
            comm.Recv([inp, MPI.BYTE], source=left)
            comm.Send([out, MPI.BYTE], dest=right)
    elif method == "sendrecv":
        # 一个调用同时声明发送和接收，由库安排顺序，保证不会因为彼此等待而死锁。
        comm.Sendrecv([out, MPI.BYTE], dest=right, recvbuf=[inp, MPI.BYTE], source=left)
    elif method == "nonblocking":
        # 先把接收和发送都投递出去，再一起等待完成：两个操作互不阻塞对方。
        reqs = [comm.Irecv([inp, MPI.BYTE], source=left), comm.Isend([out, MPI.BYTE], dest=right)]
        MPI.Request.Waitall(reqs)
    elif method == "bsend":
        # 缓冲模式：用户提供足够的缓冲区，Bsend 把消息拷进去就返回（本地完成），代价是一次额外拷贝。
        pool = bytearray(n + MPI.BSEND_OVERHEAD)
        MPI.Attach_buffer(pool)
        comm.Bsend([out, MPI.BYTE], dest=right)
        comm.Recv([inp, MPI.BYTE], source=left)
        MPI.Detach_buffer()  # 等缓冲区里的消息都发出去才返回
    else:
        raise ValueError(method)
    return inp
# --8<-- [end:fixes]


def main(argv: list[str]) -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    mode = argv[0]
    if mode == "probe":
        probe(comm, [int(x) for x in argv[1:]])
    elif mode == "deadlock":
        deadlock(comm, int(argv[1]), synchronous=len(argv) > 2 and argv[2] == "ssend")
    elif mode == "exchange":
        inp = exchange(comm, argv[1], int(argv[2]))
        left = (comm.Get_rank() - 1) % comm.Get_size()
        say(comm, method=argv[1], ok=bool((inp == left % 256).all()), nbytes=int(inp.size))
    elif mode == "info":
        say(comm, size=comm.Get_size(), library=MPI.Get_library_version().splitlines()[0].strip("\x00 "),
            standard=list(MPI.Get_version()))
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main(sys.argv[1:])
