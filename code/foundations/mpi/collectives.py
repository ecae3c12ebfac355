"""MPI 集合通信（mpi4py）：六个常用原语对照 NumPy 参考结果，以及用 Sendrecv 手写的 ring all-reduce。

用 code/foundations/mpi/launch.py 在本机启动：mpirun -n 4 python -m mpi4py collectives.py 4096
每个 rank 都能算出所有 rank 的输入（由 rank 号决定），所以每个 rank 都能就地核对自己的结果。
数据是 int64，求和没有舍入，所以可以要求逐元素相等。rank 0 最后打印一行 JSON 摘要。
"""
from __future__ import annotations

import json
import sys

import numpy as np


def data(rank: int, n: int) -> np.ndarray:
    """rank 的输入：与 rank 有关的整数序列，不同 rank 互不相同。"""
    return np.arange(n, dtype=np.int64) * (rank + 1) + 1000 * rank


# --8<-- [start:collectives]
def check_collectives(comm, n: int) -> list[str]:
    from mpi4py import MPI

    rank, p = comm.Get_rank(), comm.Get_size()
    assert n % p == 0, "reduce-scatter 与 all-to-all 把缓冲区切成 p 块"
    blk = n // p
    x = data(rank, n)
    every = np.stack([data(r, n) for r in range(p)])  # 参考：所有 rank 的输入，形状 (p, n)
    mine = slice(rank * blk, (rank + 1) * blk)
    done = []

    b = x.copy() if rank == 0 else np.empty_like(x)
    comm.Bcast(b, root=0)                               # 根的缓冲区复制到每个 rank
    assert (b == every[0]).all(); done.append("Bcast")

    r = np.empty_like(x) if rank == 0 else None
    comm.Reduce(x, r, op=MPI.SUM, root=0)               # 逐元素求和，结果只在根上
    assert rank != 0 or (r == every.sum(0)).all(); done.append("Reduce")

    s = np.empty_like(x)
    comm.Allreduce(x, s, op=MPI.SUM)                    # 结果出现在每个 rank 上
    assert (s == every.sum(0)).all(); done.append("Allreduce")

    y = x.copy()
    comm.Allreduce(MPI.IN_PLACE, y, op=MPI.MAX)         # 原地：y 既是输入也是输出
    assert (y == every.max(0)).all(); done.append("Allreduce(IN_PLACE)")

    g = np.empty((p, n), dtype=x.dtype)
    comm.Allgather(x, g)                                # 第 i 行来自 rank i
    assert (g == every).all(); done.append("Allgather")

    rs = np.empty(blk, dtype=x.dtype)
    comm.Reduce_scatter_block(x, rs, op=MPI.SUM)        # 求和后切块：rank i 只拿第 i 块
    assert (rs == every.sum(0)[mine]).all(); done.append("Reduce_scatter_block")

    ag = np.empty_like(x)
    comm.Allgather(rs, ag)                              # reduce-scatter + all-gather = all-reduce
    assert (ag == s).all(); done.append("Reduce_scatter+Allgather")

    t = np.empty_like(x)
    comm.Alltoall(x, t)                                 # rank i 的第 j 块 → rank j 的第 i 块：块矩阵转置
    assert (t.reshape(p, blk) == every[:, mine]).all(); done.append("Alltoall")

    out = np.empty_like(x)
    req = comm.Iallreduce(x, out, op=MPI.SUM)           # 非阻塞集合操作：先发起，再做别的事，最后等待
    local = int(x.sum())                                # 与通信重叠的“计算”（此时不能读写 x 与 out）
    req.Wait()
    assert (out == s).all() and local == int(every[rank].sum()); done.append("Iallreduce")
    return done
# --8<-- [end:collectives]


# --8<-- [start:ring]
def ring_allreduce(comm, x: np.ndarray) -> tuple[np.ndarray, int]:
    """ring all-reduce：p-1 步 reduce-scatter 加 p-1 步 all-gather，每步只和左右邻居交换一块。

    返回结果和本 rank 发送的字节数，后者应等于 2(p-1)/p · n · 元素大小。
    每一步用 Sendrecv：所有 rank 同时向右发、从左收，若写成先 Send 后 Recv，块一大就是环形死锁。
    """
    rank, p = comm.Get_rank(), comm.Get_size()
    right, left = (rank + 1) % p, (rank - 1) % p
    chunks = np.array_split(x.copy(), p)                # 允许 n 不被 p 整除
    sent = 0
    for step in range(p - 1):                           # reduce-scatter：累加左邻居送来的部分和
        si, ri = (rank - step) % p, (rank - step - 1) % p
        incoming = np.empty_like(chunks[ri])
        comm.Sendrecv(chunks[si], dest=right, recvbuf=incoming, source=left)
        chunks[ri] += incoming
        sent += chunks[si].nbytes
    for step in range(p - 1):                           # all-gather：rank r 此时持有第 (r+1) mod p 块的完整和
        si, ri = (rank + 1 - step) % p, (rank - step) % p
        comm.Sendrecv(chunks[si], dest=right, recvbuf=chunks[ri], source=left)
        sent += chunks[si].nbytes
    return np.concatenate(chunks), sent
# --8<-- [end:ring]


def main(argv: list[str]) -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    n = int(argv[0])
    rank, p = comm.Get_rank(), comm.Get_size()
    done = check_collectives(comm, n)
    x = data(rank, n)
    ring, sent = ring_allreduce(comm, x)
    ref = np.empty_like(x)
    comm.Allreduce(x, ref, op=MPI.SUM)
    assert (ring == ref).all()
    sent_all = comm.gather(sent, root=0)                # 小写的 gather 传 Python 对象（pickle），大写的传缓冲区
    if rank == 0:
        print(json.dumps({"p": p, "n": n, "itemsize": x.itemsize, "checks": done + ["ring_allreduce"],
                          "ring_bytes_sent": sent_all}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
