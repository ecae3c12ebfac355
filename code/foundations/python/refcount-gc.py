"""CPython 的内存管理可以直接观察：引用计数、循环回收、弱引用，以及 pymalloc 的分块参数。"""
from __future__ import annotations

import gc
import re
import subprocess
import sys
import weakref


class Node:
    def __init__(self, name: str):
        self.name = name
        self.other = None


# --8<-- [start:refcount]
def refcount_deltas() -> tuple[int, int]:
    """多一个名字、多一个容器槽位，计数各加一。getrefcount 的参数本身也临时算一个引用。"""
    x = Node("x")
    base = sys.getrefcount(x)
    y = x
    after_name = sys.getrefcount(x) - base
    holder = [x]
    after_list = sys.getrefcount(x) - base - after_name
    del y, holder
    return after_name, after_list


def freed_immediately() -> bool:
    """最后一个引用消失时对象立刻被释放：不需要等垃圾回收。"""
    events = []
    x = Node("tmp")
    weakref.finalize(x, events.append, "freed")  # 弱引用不增加计数
    del x  # 计数归零，析构立即发生
    return events == ["freed"]
# --8<-- [end:refcount]


# --8<-- [start:cycle]
def cycle_needs_collector() -> dict:
    """两个对象互相引用：删掉外部名字后计数仍为 1，只有循环回收器能发现它们不可达。"""
    was_enabled = gc.isenabled()
    gc.disable()  # 关掉自动回收，排除“恰好在此刻触发了一次回收”的干扰
    try:
        gc.collect()
        a, b = Node("a"), Node("b")
        a.other, b.other = b, a
        probe = weakref.ref(a)
        del a, b
        alive_after_del = probe() is not None      # 引用计数救不了环
        found = gc.collect()                        # 返回找到的不可达对象数
        alive_after_collect = probe() is not None
    finally:
        if was_enabled:
            gc.enable()
    return {"alive_after_del": alive_after_del, "unreachable_found": found,
            "alive_after_collect": alive_after_collect}
# --8<-- [end:cycle]


def pymalloc_geometry(python: str = sys.executable) -> dict | None:
    """在子进程里调用 sys._debugmallocstats()（它直接写 C 层的 stderr），解析出 pymalloc 的参数。

    返回小块阈值、大小等级数、arena 大小与 pool 大小（字节）；没有 pymalloc（例如自由线程构建
    改用 mimalloc）时返回 None。
    """
    proc = subprocess.run([python, "-c", "import sys; sys._debugmallocstats()"],
                          capture_output=True, text=True, timeout=60)
    text = proc.stderr
    m1 = re.search(r"Small block threshold = (\d+), in (\d+) size classes", text)
    m2 = re.search(r"arenas \* (\d+) bytes/arena", text)
    m3 = re.search(r"unused pools \* (\d+) bytes", text)
    if not (m1 and m2 and m3):
        return None
    return {"threshold": int(m1.group(1)), "size_classes": int(m1.group(2)),
            "arena_bytes": int(m2.group(1)), "pool_bytes": int(m3.group(1))}


if __name__ == "__main__":
    assert refcount_deltas() == (1, 1)
    assert freed_immediately()
    r = cycle_needs_collector()
    assert r["alive_after_del"] and not r["alive_after_collect"] and r["unreachable_found"] >= 2
    print("gc thresholds:", gc.get_threshold())
    print("pymalloc:", pymalloc_geometry())
