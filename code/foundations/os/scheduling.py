"""调度策略的模拟：FIFO、SJF、STCF、RR 的周转时间与响应时间（OSTEP 第 7 章的例子），以及 CFS 按权重分 CPU。"""
from __future__ import annotations

import heapq


# --8<-- [start:policies]
def simulate(jobs: dict[str, tuple[int, int]], policy: str, quantum: int = 1) -> dict[str, float]:
    """jobs: 名字 -> (到达时间, 运行时长)。单核、不计切换开销，时间以 1 为步长推进。
    返回平均周转时间（完成 - 到达）与平均响应时间（首次运行 - 到达）。"""
    remaining = {j: run for j, (_, run) in jobs.items()}
    first_run: dict[str, int] = {}
    done: dict[str, int] = {}
    queue: list[str] = []               # RR 的就绪队列
    t, current, slice_left = 0, None, 0
    while len(done) < len(jobs):
        arrived = [j for j, (a, _) in sorted(jobs.items(), key=lambda kv: (kv[1][0], kv[0])) if a == t]
        queue.extend(arrived)
        ready = [j for j in jobs if jobs[j][0] <= t and j not in done]
        if not ready:
            t += 1
            continue
        if policy == "fifo":            # 按到达顺序，运行到结束
            if current not in ready:
                current = min(ready, key=lambda j: (jobs[j][0], j))
        elif policy == "sjf":           # 非抢占：当前任务结束后选最短的
            if current not in ready:
                current = min(ready, key=lambda j: (remaining[j], j))
        elif policy == "stcf":          # 抢占：每一步都选剩余时间最短的
            current = min(ready, key=lambda j: (remaining[j], j))
        elif policy == "rr":            # 时间片轮转
            if current not in ready or slice_left == 0:
                if current in ready:
                    queue.append(current)
                queue = [j for j in queue if j not in done]
                current, slice_left = queue.pop(0), quantum
                queue = [j for j in queue if j != current]
            slice_left -= 1
        first_run.setdefault(current, t)
        remaining[current] -= 1
        t += 1
        if remaining[current] == 0:
            done[current] = t
    n = len(jobs)
    return {"turnaround": sum(done[j] - jobs[j][0] for j in jobs) / n,
            "response": sum(first_run[j] - jobs[j][0] for j in jobs) / n}
# --8<-- [end:policies]


# --8<-- [start:cfs]
# kernel/sched/core.c 的 sched_prio_to_weight：nice 0 为 1024，每差 1 级约差 1.25 倍
NICE_TO_WEIGHT = {-5: 3121, -1: 1277, 0: 1024, 1: 820, 5: 335, 10: 110, 19: 15}


def cfs_shares(nices: dict[str, int], ticks: int = 100_000) -> dict[str, float]:
    """每个 tick 运行 vruntime 最小的任务，它的 vruntime 增加 1024/weight。返回各任务得到的 CPU 比例。"""
    heap = [(0.0, name) for name in sorted(nices)]   # 用最小堆代替红黑树，取“最左”任务
    ran = dict.fromkeys(nices, 0)
    for _ in range(ticks):
        vruntime, name = heapq.heappop(heap)
        ran[name] += 1
        heapq.heappush(heap, (vruntime + 1024 / NICE_TO_WEIGHT[nices[name]], name))
    return {name: ran[name] / ticks for name in nices}
# --8<-- [end:cfs]
