"""协程在单个线程里交替执行：生成器是最朴素的无栈协程，asyncio 在它之上加了事件循环。"""
from __future__ import annotations

import asyncio
import collections
import threading
import time


# --8<-- [start:generators]
def worker(name: str, steps: int, log: list):
    for i in range(steps):
        log.append(f"{name}{i}")
        yield  # 挂起点：把控制权交还调度器，局部变量 i 保存在生成器对象里（而不是在线程栈上）


def round_robin(*gens) -> None:
    """最小的“事件循环”：一个就绪队列，轮流把每个协程推进到下一个挂起点。"""
    ready = collections.deque(gens)
    while ready:
        g = ready.popleft()
        try:
            next(g)
        except StopIteration:
            continue
        ready.append(g)


def helper(log: list):
    log.append("helper")
    yield  # 普通函数里写不了挂起；想在嵌套调用里挂起，这一层也得是生成器


def outer(log: list):
    log.append("outer-start")
    yield from helper(log)  # 无栈协程只能在“自己这一帧”挂起，每一层都要显式转交（yield from / await）
    log.append("outer-end")
# --8<-- [end:generators]


# --8<-- [start:asyncio]
async def _step(name: str, steps: int, log: list) -> None:
    for i in range(steps):
        log.append(f"{name}{i}")
        await asyncio.sleep(0)  # 让出一次：事件循环先去运行其他就绪的任务


async def interleaving() -> list:
    log: list = []
    await asyncio.gather(_step("A", 3, log), _step("B", 3, log))
    return log


async def many_waits(n: int = 1000, delay: float = 0.05) -> tuple[int, float, int]:
    """n 个协程同时等待（模拟 n 个空闲连接），全部在一个线程里完成。"""
    threads_before = threading.active_count()
    t0 = time.perf_counter()
    done = await asyncio.gather(*(asyncio.sleep(delay, result=1) for _ in range(n)))
    return sum(done), time.perf_counter() - t0, threading.active_count() - threads_before


async def blocking_vs_offloaded(block: float = 0.2, tick: float = 0.01) -> tuple[int, int]:
    """心跳任务每 10 ms 计一次数。在协程里直接 time.sleep 会冻结整个事件循环；
    用 asyncio.to_thread 把阻塞调用放进线程池，事件循环照常运行其他任务。"""
    ticks = 0

    async def heartbeat():
        nonlocal ticks
        while True:
            await asyncio.sleep(tick)
            ticks += 1

    hb = asyncio.create_task(heartbeat())
    await asyncio.sleep(tick * 3)  # 让心跳先跑起来

    start = ticks
    time.sleep(block)  # 错误示范：阻塞调用，这段时间里没有任何其他协程能运行
    during_blocking = ticks - start

    start = ticks
    await asyncio.to_thread(time.sleep, block)  # 正确做法：阻塞调用交给线程，当前协程 await 它
    during_offloaded = ticks - start

    hb.cancel()
    return during_blocking, during_offloaded
# --8<-- [end:asyncio]


if __name__ == "__main__":
    log: list = []
    round_robin(worker("A", 3, log), worker("B", 2, log))
    assert log == ["A0", "B0", "A1", "B1", "A2"]
    log = []
    round_robin(outer(log))
    assert log == ["outer-start", "helper", "outer-end"]
    assert asyncio.run(interleaving()) == ["A0", "B0", "A1", "B1", "A2", "B2"]
    total, seconds, extra_threads = asyncio.run(many_waits())
    assert total == 1000 and extra_threads == 0
    blocked, offloaded = asyncio.run(blocking_vs_offloaded())
    assert blocked == 0 and offloaded >= 1
    print(f"1000 waits of 50 ms took {seconds:.2f} s in one thread; heartbeat ticks: {blocked} vs {offloaded}")
