"""装饰器：计时、带参数的重试，以及“带不带括号都能用”的写法。"""
from __future__ import annotations

import functools
import time
from collections.abc import Callable


# --8<-- [start:timed]
def timed(fn):
    """最简单的装饰器：接收函数，返回包装函数。"""
    @functools.wraps(fn)  # 复制 __module__、__name__、__qualname__、__doc__ 等，合并 __dict__，设置 __wrapped__
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:  # 抛异常时也记录耗时
            wrapper.last_seconds = time.perf_counter() - t0
    wrapper.last_seconds = None
    return wrapper
# --8<-- [end:timed]


# --8<-- [start:retry]
def retry(fn: Callable | None = None, *, times: int = 3, exceptions: tuple = (ConnectionError, TimeoutError),
          delay: float = 0.0, backoff: float = 2.0, sleep: Callable[[float], None] = time.sleep):
    """带参数的装饰器。既可以写 @retry，也可以写 @retry(times=5, delay=0.1)。

    三层函数：retry(参数) 返回 deco，deco(fn) 返回 wrapper，调用时执行的是 wrapper。
    """
    if times < 1:
        raise ValueError("times must be >= 1")

    def deco(f):
        @functools.wraps(f)
        def wrapper(*args, **kwargs):
            wait = delay
            for attempt in range(1, times + 1):
                try:
                    return f(*args, **kwargs)
                except exceptions:
                    if attempt == times:
                        raise  # 用完次数：把最后一次的异常原样抛出
                    sleep(wait)
                    wait *= backoff  # 指数退避
        wrapper.retry_times = times
        return wrapper

    if fn is not None:  # 写作 @retry 时，Python 直接把函数传进来
        return deco(fn)
    return deco  # 写作 @retry(...) 时，先得到 deco，再由 Python 调用 deco(函数)
# --8<-- [end:retry]


if __name__ == "__main__":
    calls = {"n": 0}

    @retry(times=3)  # 等价于 flaky = retry(times=3)(timed(flaky))：离函数最近的装饰器先应用
    @timed
    def flaky() -> str:
        """偶尔失败的远程调用。"""
        calls["n"] += 1
        if calls["n"] < 3:
            raise ConnectionError("transient")
        return "ok"

    assert flaky() == "ok" and calls["n"] == 3
    assert flaky.__name__ == "flaky" and flaky.__doc__ == "偶尔失败的远程调用。"
    assert flaky.__wrapped__.last_seconds >= 0  # __wrapped__ 指向内层（timed 的 wrapper）
    print("ok")
