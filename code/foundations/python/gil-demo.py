"""同一个 CPU 密集任务分别交给线程池和进程池：结果必须相同；耗时只打印，不作断言。

在有 GIL 的构建上，线程池的耗时接近串行（同一时刻只有一个线程执行字节码），
进程池在多核机器上才会变快；在自由线程构建（free-threaded build）上线程池也能并行。
"""
from __future__ import annotations

import multiprocessing
import sys
import sysconfig
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor


def gil_status() -> dict:
    """这个解释器是否支持关闭 GIL，以及此刻 GIL 是否启用（3.13 起才有这两个接口）。"""
    is_enabled = getattr(sys, "_is_gil_enabled", lambda: True)
    return {"free_threaded_build": bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
            "gil_enabled": is_enabled()}


# --8<-- [start:work]
def count_primes(lo: int, hi: int) -> int:
    """纯 Python 的 CPU 密集计算：试除法数 [lo, hi) 内的素数。"""
    n = 0
    for x in range(max(lo, 2), hi):
        d = 2
        while d * d <= x:
            if x % d == 0:
                break
            d += 1
        else:
            n += 1
    return n


def chunks(hi: int, parts: int) -> list[tuple[int, int]]:
    step = -(-hi // parts)  # 向上取整
    return [(i, min(i + step, hi)) for i in range(0, hi, step)]


def run(hi: int = 60_000, workers: int = 4, mp_context=None) -> dict:
    parts = chunks(hi, workers)
    lo_list, hi_list = [a for a, _ in parts], [b for _, b in parts]
    timings, results = {}, {}

    t0 = time.perf_counter()
    results["serial"] = sum(count_primes(a, b) for a, b in parts)
    timings["serial"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as ex:  # 有 GIL 时：线程轮流持有 GIL，总耗时约等于串行
        results["threads"] = sum(ex.map(count_primes, lo_list, hi_list))
    timings["threads"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    with ProcessPoolExecutor(workers, mp_context=mp_context) as ex:  # 每个进程一个解释器、一把 GIL
        results["processes"] = sum(ex.map(count_primes, lo_list, hi_list))
    timings["processes"] = time.perf_counter() - t0
    return {"results": results, "seconds": timings}
# --8<-- [end:work]


if __name__ == "__main__":
    out = run()
    assert len(set(out["results"].values())) == 1, out["results"]
    print(gil_status(), "cpus:", multiprocessing.cpu_count())
    for k, v in out["seconds"].items():  # 只作演示：共享的机器上这些数字波动很大
        print(f"{k:10s} {v:6.2f} s  primes below 60000: {out['results'][k]}")
