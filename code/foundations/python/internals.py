"""CPython 内部的三个机制：字节码与特化自适应解释器、导入系统（查找器、加载器与 sys.modules）、dict 的紧凑布局。

tests/test_python_data_model.py 对照解释器本身断言这里的每个函数。
"""
from __future__ import annotations

import dis
import importlib.abc
import importlib.util
import sys


# --8<-- [start:bytecode]
SCALE = 2


def scale_global(xs):
    total = 0
    for x in xs:
        total += x * SCALE        # SCALE 是全局名字：每次 LOAD_GLOBAL（3.11 起带内联缓存）
    return total


def scale_local(xs, scale=SCALE):
    total = 0
    for x in xs:
        total += x * scale        # scale 是局部变量：LOAD_FAST，按下标直接读帧里的数组
    return total


def opnames(fn, adaptive: bool = False) -> list[str]:
    """函数的指令名；adaptive=True 时给出解释器运行后改写成的特化指令（3.11 起）。"""
    return [i.opname for i in dis.get_instructions(fn, adaptive=adaptive)]
# --8<-- [end:bytecode]


# --8<-- [start:specialize]
def add(a, b):
    return a + b                  # 通用指令 BINARY_OP：每次检查两个操作数的类型再分派


def warm_up(fn, *args, times: int = 100):
    """多次调用，让特化自适应解释器（PEP 659）观察操作数类型并改写指令。"""
    for _ in range(times):
        fn(*args)


def specialized_after_warm_up() -> tuple[list[str], list[str]]:
    """预热前后 add 的自适应视图：用两个 int 调用之后，BINARY_OP 被改写成 BINARY_OP_ADD_INT。"""
    before = opnames(add, adaptive=True)
    warm_up(add, 1, 2)
    return before, opnames(add, adaptive=True)
# --8<-- [end:specialize]


# --8<-- [start:imports]
class DictFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """从一个 {模块名: 源码} 的字典里导入模块：既是查找器（find_spec）也是加载器（exec_module）。"""

    def __init__(self, sources: dict[str, str]):
        self.sources = sources
        self.executed: list[str] = []

    def find_spec(self, name, path=None, target=None):
        if name not in self.sources:
            return None                        # 交给 sys.meta_path 里的下一个查找器
        return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec):
        return None                            # 用默认方式创建空模块对象

    def exec_module(self, module):
        self.executed.append(module.__name__)
        module.__file__ = f"<dict:{module.__name__}>"  # 有位置的模块，出错信息才会指出循环导入
        exec(compile(self.sources[module.__name__], f"<{module.__name__}>", "exec"), module.__dict__)


def install(sources: dict[str, str]) -> DictFinder:
    finder = DictFinder(sources)
    sys.meta_path.insert(0, finder)            # 排在内置、冻结与路径查找器之前
    return finder


def uninstall(finder: DictFinder) -> None:
    sys.meta_path.remove(finder)
    for name in finder.sources:
        sys.modules.pop(name, None)
# --8<-- [end:imports]


# --8<-- [start:dict]
def dict_sizes(n: int) -> list[int]:
    """逐个插入 n 个键时 sys.getsizeof 的变化：按 2 的幂扩容，所以只有少数几个不同的值。"""
    d: dict = {}
    sizes = [sys.getsizeof(d)]
    for i in range(n):
        d[f"k{i}"] = i
        sizes.append(sys.getsizeof(d))
    return sizes
# --8<-- [end:dict]
