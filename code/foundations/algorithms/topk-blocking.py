"""手写题：用大小为 k 的最小堆求 top-k；分块（cache blocking）的矩阵转置与矩阵乘法。"""
from __future__ import annotations

import heapq


# --8<-- [start:topk]
def top_k(stream, k: int) -> list:
    """一遍扫描，堆里只留当前最大的 k 个：O(n log k) 时间、O(k) 空间，适合放不进内存的流。"""
    if k <= 0:
        return []
    heap: list = []
    for x in stream:
        if len(heap) < k:
            heapq.heappush(heap, x)
        elif x > heap[0]:                 # 比堆里最小的大：替换它
            heapq.heapreplace(heap, x)
    return sorted(heap, reverse=True)
# --8<-- [end:topk]


# --8<-- [start:blocking]
def transpose_blocked(a: list[list[float]], block: int = 32) -> list[list[float]]:
    """按 block x block 的小块转置：读与写都落在少数几条缓存行上，而不是每写一个元素跨一整行。"""
    n, m = len(a), len(a[0])
    t = [[0.0] * n for _ in range(m)]
    for i0 in range(0, n, block):
        for j0 in range(0, m, block):
            for i in range(i0, min(i0 + block, n)):
                row = a[i]
                for j in range(j0, min(j0 + block, m)):
                    t[j][i] = row[j]
    return t


def matmul_blocked(a: list[list[float]], b: list[list[float]], block: int = 32) -> list[list[float]]:
    """C = A B，按 i、k、j 三个维度分块；块内用 i-k-j 顺序，最内层沿 B 与 C 的行连续访问。"""
    n, kk, m = len(a), len(b), len(b[0])
    c = [[0.0] * m for _ in range(n)]
    for i0 in range(0, n, block):
        for k0 in range(0, kk, block):
            for j0 in range(0, m, block):
                for i in range(i0, min(i0 + block, n)):
                    ci, ai = c[i], a[i]
                    for k in range(k0, min(k0 + block, kk)):
                        aik, bk = ai[k], b[k]
                        for j in range(j0, min(j0 + block, m)):
                            ci[j] += aik * bk[j]
    return c


def matmul_naive(a: list[list[float]], b: list[list[float]]) -> list[list[float]]:
    n, kk, m = len(a), len(b), len(b[0])
    return [[sum(a[i][k] * b[k][j] for k in range(kk)) for j in range(m)] for i in range(n)]
# --8<-- [end:blocking]
