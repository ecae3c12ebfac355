"""图：邻接表，BFS 最短跳数，迭代 DFS，Kahn 拓扑排序（顺带判环），Dijkstra，并查集。

顶点编号 0..n-1，边是 (u, v) 或 (u, v, w) 的列表。ops（collections.Counter）记扫描的边数、
堆的入堆次数、并查集沿父指针走的步数，测试据此验证 O(V + E)、O(E log V) 与近乎线性。
"""
from __future__ import annotations

import heapq
from collections import Counter, deque


def adjacency(n: int, edges, directed: bool = False) -> list[list]:
    """邻接表：O(V + E) 空间。稀疏图（E 远小于 V²）用它；邻接矩阵 O(V²) 空间，只在稠密图或要 O(1) 判边时划算。"""
    adj: list[list] = [[] for _ in range(n)]
    for e in edges:
        u, v, *w = e
        adj[u].append((v, *w) if w else v)
        if not directed:
            adj[v].append((u, *w) if w else u)
    return adj


# --8<-- [start:bfs-dfs]
def bfs_distances(adj: list[list[int]], src: int, ops: Counter | None = None) -> list[int]:
    """无权图的最短跳数，不可达为 -1。入队时就标记，每个顶点只入队一次、每条边只看一次（无向图两个方向各一次）。"""
    ops = ops if ops is not None else Counter()
    dist = [-1] * len(adj)
    dist[src] = 0
    queue = deque([src])
    while queue:
        u = queue.popleft()
        for v in adj[u]:
            ops["edge"] += 1
            if dist[v] < 0:           # 出队时才标记会让同一个顶点多次入队
                dist[v] = dist[u] + 1
                queue.append(v)
    return dist


def dfs_order(adj: list[list[int]], src: int, ops: Counter | None = None) -> list[int]:
    """迭代 DFS，访问顺序与递归版相同：出栈时才标记，邻居逆序压栈。

    代价是同一顶点可能在栈里有多份（每条指向它的边一份），栈最长 O(E) 而不是 O(V)。
    """
    ops = ops if ops is not None else Counter()
    seen, order, stack = [False] * len(adj), [], [src]
    while stack:
        u = stack.pop()
        if seen[u]:
            continue                  # 同一顶点的旧副本：已经访问过
        seen[u] = True
        order.append(u)
        stack.extend(v for v in reversed(adj[u]) if not seen[v])
        ops["max_stack"] = max(ops["max_stack"], len(stack))
    return order
# --8<-- [end:bfs-dfs]


# --8<-- [start:topo]
def topo_sort(n: int, edges: list[tuple[int, int]], ops: Counter | None = None) -> list[int] | None:
    """Kahn 算法：反复取出入度为 0 的顶点。取不完（还剩顶点但没有入度为 0 的）说明有环，返回 None。O(V + E)。"""
    ops = ops if ops is not None else Counter()
    adj, indeg = adjacency(n, edges, directed=True), [0] * n
    for _, v in edges:
        indeg[v] += 1
    queue = deque(u for u in range(n) if indeg[u] == 0)
    order = []
    while queue:
        u = queue.popleft()
        order.append(u)
        for v in adj[u]:
            ops["edge"] += 1
            indeg[v] -= 1
            if indeg[v] == 0:
                queue.append(v)
    return order if len(order) == n else None
# --8<-- [end:topo]


# --8<-- [start:dijkstra]
def dijkstra(n: int, edges: list[tuple[int, int, int]], src: int, ops: Counter | None = None) -> list[float]:
    """非负权的单源最短路。堆里允许同一顶点有多个旧条目（懒删除），弹出时比 dist 大就跳过。O((V + E) log V)。"""
    ops = ops if ops is not None else Counter()
    adj = adjacency(n, edges, directed=True)
    dist = [float("inf")] * n
    dist[src] = 0
    heap = [(0, src)]
    ops["push"] += 1
    while heap:
        d, u = heapq.heappop(heap)
        if d > dist[u]:
            continue                  # 过期条目：u 早已以更短的距离出堆
        for v, w in adj[u]:           # u 出堆时距离已是最终值（权非负，后出堆的都不会更短）
            ops["edge"] += 1
            if d + w < dist[v]:
                dist[v] = d + w
                heapq.heappush(heap, (dist[v], v))
                ops["push"] += 1
    return dist
# --8<-- [end:dijkstra]


def bellman_ford(n: int, edges: list[tuple[int, int, int]], src: int) -> list[float]:
    """参照实现：松弛全部边 n - 1 轮，O(VE)，允许负权（无负环时）。"""
    dist = [float("inf")] * n
    dist[src] = 0
    for _ in range(n - 1):
        for u, v, w in edges:
            if dist[u] + w < dist[v]:
                dist[v] = dist[u] + w
    return dist


# --8<-- [start:union-find]
class UnionFind:
    """不相交集合。按大小合并（小树挂到大树下，树高不超过 log2 n）+ 路径减半；两者都开时 m 次操作 O(m α(n))。"""

    def __init__(self, n: int, by_size: bool = True, compress: bool = True):
        self.parent, self.size = list(range(n)), [1] * n
        self.by_size, self.compress = by_size, compress
        self.components, self.ops = n, Counter()

    def find(self, x: int) -> int:
        while self.parent[x] != x:
            self.ops["step"] += 1
            if self.compress:         # 路径减半：让 x 指向祖父，走过的路径长度减半
                self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: int, b: int) -> bool:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return False              # 已经连通：Kruskal 里这条边会成环，判环也靠它
        if self.by_size and self.size[ra] > self.size[rb]:
            ra, rb = rb, ra
        self.parent[ra] = rb          # 不按大小时总把 a 的根挂到 b 的根下，可能连成一条长链
        self.size[rb] += self.size[ra]
        self.components -= 1
        return True
# --8<-- [end:union-find]
