"""Python 数据模型的几条机制：属性查找、描述符、C3 线性化、迭代器与上下文管理器协议、__slots__、类的创建。

每一段都由 tests/test_python_data_model.py 对照解释器本身的行为断言（例如手写的 C3 与 __mro__ 相同）。
"""
from __future__ import annotations

import tracemalloc


# --8<-- [start:lookup]
def lookup(obj, name: str):
    """object.__getattribute__ 的纯 Python 版本（省略了 __getattr__ 回退与 __slots__ 的细节）。"""
    cls_attr = None
    for klass in type(obj).__mro__:          # 1. 沿类型的 MRO 找类属性
        if name in vars(klass):
            cls_attr = vars(klass)[name]
            break
    getter = getattr(type(cls_attr), "__get__", None)
    is_data = getter is not None and (hasattr(type(cls_attr), "__set__") or hasattr(type(cls_attr), "__delete__"))
    if is_data:                               # 2. 数据描述符（有 __set__ 或 __delete__）优先于实例字典
        return getter(cls_attr, obj, type(obj))
    inst = getattr(obj, "__dict__", {})
    if name in inst:                          # 3. 实例字典
        return inst[name]
    if getter is not None:                    # 4. 非数据描述符（函数、classmethod、staticmethod）
        return getter(cls_attr, obj, type(obj))
    if cls_attr is not None or any(name in vars(k) for k in type(obj).__mro__):
        return cls_attr                       # 5. 普通类属性
    raise AttributeError(name)
# --8<-- [end:lookup]


# --8<-- [start:descriptors]
class Positive:
    """数据描述符：校验并把值存进实例字典里的私有名字。__set_name__ 在类创建时被调用，告诉它自己的属性名。"""

    def __set_name__(self, owner, name):
        self.public, self.private = name, "_" + name

    def __get__(self, obj, objtype=None):
        if obj is None:                       # 通过类访问（Tensor.size）时返回描述符本身
            return self
        return getattr(obj, self.private)

    def __set__(self, obj, value):
        if value <= 0:
            raise ValueError(f"{self.public} must be positive, got {value}")
        setattr(obj, self.private, value)


class Buffer:
    size = Positive()                         # 数据描述符
    kind = "host"                             # 普通类属性

    def __init__(self, size):
        self.size = size                      # 经过 Positive.__set__

    def nbytes(self):                         # 函数是非数据描述符：实例访问时 __get__ 返回绑定方法
        return self.size * 4
# --8<-- [end:descriptors]


# --8<-- [start:c3]
def c3(cls) -> list:
    """C3 线性化：L[C] = C + merge(L[B1], …, L[Bn], [B1, …, Bn])。"""
    seqs = [c3(b) for b in cls.__bases__] + [list(cls.__bases__)]
    out = [cls]
    while any(seqs):
        seqs = [s for s in seqs if s]
        for s in seqs:                        # 取第一个“不出现在任何序列尾部”的头
            head = s[0]
            if not any(head in t[1:] for t in seqs):
                break
        else:
            raise TypeError("inconsistent hierarchy: no C3 linearization")
        out.append(head)
        seqs = [t[1:] if t[0] is head else t for t in seqs]
    return out


class Base:
    def hello(self, log):
        log.append("Base")


class Left(Base):
    def hello(self, log):
        log.append("Left")
        super().hello(log)                    # super() 找的是 MRO 里的下一个类，不一定是 Base


class Right(Base):
    def hello(self, log):
        log.append("Right")
        super().hello(log)


class Diamond(Left, Right):
    def hello(self, log):
        log.append("Diamond")
        super().hello(log)
# --8<-- [end:c3]


# --8<-- [start:iterators]
class Countdown:
    """可迭代对象：每次 iter() 返回一个新的迭代器，所以可以被遍历多次。"""

    def __init__(self, start):
        self.start = start

    def __iter__(self):
        return CountdownIterator(self.start)


class CountdownIterator:
    """迭代器：__next__ 返回下一个值，耗尽时抛 StopIteration；__iter__ 返回自身。"""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return self

    def __next__(self):
        if self.n <= 0:
            raise StopIteration
        self.n -= 1
        return self.n + 1


def countdown(n):
    """同一个迭代器写成生成器：局部变量与执行位置保存在生成器对象（帧）里。"""
    while n > 0:
        yield n
        n -= 1
# --8<-- [end:iterators]


# --8<-- [start:context]
class Resource:
    """上下文管理器：__exit__ 收到异常的类型、值与回溯，返回真值表示吞掉异常。"""

    def __init__(self, log, swallow=False):
        self.log, self.swallow = log, swallow

    def __enter__(self):
        self.log.append("acquire")
        return self

    def __exit__(self, exc_type, exc, tb):
        self.log.append(f"release ({exc_type.__name__ if exc_type else 'ok'})")
        return self.swallow
# --8<-- [end:context]


# --8<-- [start:slots]
class PointDict:
    def __init__(self, x, y):
        self.x, self.y = x, y


class PointSlots:
    __slots__ = ("x", "y")                    # 每个名字变成类上的一个成员描述符，实例里只有两个槽位

    def __init__(self, x, y):
        self.x, self.y = x, y


def per_instance_bytes(cls, n: int = 10000) -> float:
    """用 tracemalloc 量出创建 n 个实例新分配的字节数，再除以 n（字段取小整数，它们是缓存的，不计入）。"""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        objs = [cls(1, 2) for _ in range(n)]
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del objs
    return (after - before) / n
# --8<-- [end:slots]


# --8<-- [start:creation]
class Registry(type):
    """元类：class 语句执行完类体后调用 Registry("Name", bases, namespace) 创建类对象。"""
    created: list = []

    def __new__(mcls, name, bases, namespace):
        cls = super().__new__(mcls, name, bases, namespace)
        mcls.created.append(name)
        return cls


class Plugin:
    """多数“创建子类时做点事”的需求用 __init_subclass__ 就够了，不需要元类。"""
    registry: dict = {}

    def __init_subclass__(cls, /, key, **kwargs):
        super().__init_subclass__(**kwargs)
        Plugin.registry[key] = cls
# --8<-- [end:creation]
