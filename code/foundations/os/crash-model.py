"""崩溃一致性的小模型：页缓存里的修改什么时候落盘、以什么顺序落盘，决定了崩溃后看到什么。

一个程序是一串操作：create / trunc（元数据），write（数据），fsync / fsync_dir（屏障），rename（元数据）。
崩溃可能发生在任意两个操作之间；崩溃时，已被屏障持久化的修改一定在盘上，其余“悬而未决”的修改
可能已被后台写回、也可能没有——模型枚举文件系统允许的每一种组合，重放到崩溃前的磁盘状态上，
再看目标文件的内容是旧版本、新版本，还是空的、写了一半的、新旧混杂的。

四种文件系统行为（mode）：
    posix          POSIX 只保证 fsync 过的东西：任何未同步的修改都可能丢，也可能以任意顺序落盘
    ext3-ordered   日志按顺序提交元数据（一个前缀）；每次提交前先把所有脏数据写盘
    ext4-delalloc  日志按顺序提交元数据；延迟分配（delayed allocation）的数据与提交无关，可能晚于元数据落盘
    ext4           ext4 的默认：再加上 auto_da_alloc，rename 覆盖已有文件时，源文件的数据随这次提交一起落盘
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

TARGET = "model.bin"
OLD = b"old weights, version 1. " * 2            # 崩溃前盘上已持久化的旧文件
NEW = b"NEW WEIGHTS, VERSION 2! " * 4            # 要原子地换上的新内容，分两次 write
HALF = len(NEW) // 2
MODES = ("posix", "ext3-ordered", "ext4-delalloc", "ext4")
META = {"create", "trunc", "rename"}


# --8<-- [start:programs]
PROGRAMS = {
    # 原地覆盖：open(O_TRUNC) 之后写；截断与写之间崩溃就是空文件
    "in-place": [("trunc", TARGET), ("write", TARGET, 0, NEW[:HALF]), ("write", TARGET, HALF, NEW[HALF:])],
    "in-place+fsync": [("trunc", TARGET), ("write", TARGET, 0, NEW[:HALF]), ("write", TARGET, HALF, NEW[HALF:]),
                       ("fsync", TARGET)],
    # 写临时文件再 rename，但不 fsync：rename 可能先于数据落盘
    "tmp+rename": [("create", "tmp"), ("write", "tmp", 0, NEW[:HALF]), ("write", "tmp", HALF, NEW[HALF:]),
                   ("rename", "tmp", TARGET)],
    # fsync 了文件，没有 fsync 目录：不会损坏，但返回之后崩溃，rename 可能丢失
    "tmp+fsync+rename": [("create", "tmp"), ("write", "tmp", 0, NEW[:HALF]), ("write", "tmp", HALF, NEW[HALF:]),
                         ("fsync", "tmp"), ("rename", "tmp", TARGET)],
    # 安全的协议：写临时文件 → fsync 文件 → rename 覆盖 → fsync 目录
    "safe": [("create", "tmp"), ("write", "tmp", 0, NEW[:HALF]), ("write", "tmp", HALF, NEW[HALF:]),
             ("fsync", "tmp"), ("rename", "tmp", TARGET), ("fsync_dir",)],
}
# --8<-- [end:programs]


@dataclass
class Op:
    kind: str           # create | trunc | write | rename
    ino: int            # 操作落在哪个 inode 上（发出时按当时的目录解析）
    name: str = ""
    dst: str = ""
    off: int = 0
    data: bytes = b""
    replaces: bool = False  # rename 覆盖了一个已存在的文件（auto_da_alloc 只认这种模式）


# --8<-- [start:issue]
def issue(program: list[tuple], upto: int, mode: str) -> tuple[list[Op], set[int]]:
    """执行程序的前 upto 个操作：返回发出的修改（按顺序）和其中已被屏障持久化的下标。"""
    names = {TARGET: 1}                     # 页缓存里看到的目录：名字 → inode
    next_ino = 2
    ops: list[Op] = []
    durable: set[int] = set()
    journaled = mode != "posix"
    for step in program[:upto]:
        kind = step[0]
        if kind == "create":
            names[step[1]] = next_ino
            ops.append(Op("create", next_ino, name=step[1]))
            next_ino += 1
        elif kind == "trunc":
            ops.append(Op("trunc", names[step[1]]))
        elif kind == "write":
            ops.append(Op("write", names[step[1]], off=step[2], data=step[3]))
        elif kind == "rename":
            src, dst = step[1], step[2]
            ops.append(Op("rename", names[src], name=src, dst=dst, replaces=dst in names))
            names[dst] = names.pop(src)
        elif kind == "fsync":               # 文件的数据与 inode 元数据落盘
            ino = names[step[1]]
            durable |= {i for i, op in enumerate(ops) if op.ino == ino and op.kind in ("write", "trunc")}
            if journaled:                   # ext3/ext4 的 fsync 提交整个日志事务：此前所有元数据都落盘
                durable |= {i for i, op in enumerate(ops) if op.kind in META}
            if mode == "ext3-ordered":      # ext3 的 ordered 模式提交前先写出全部脏数据
                durable |= set(range(len(ops)))
        elif kind == "fsync_dir":           # 目录项（create、rename）落盘
            durable |= {i for i, op in enumerate(ops) if op.kind in ("create", "rename")}
            if journaled:
                durable |= {i for i, op in enumerate(ops) if op.kind in META}
            if mode == "ext3-ordered":
                durable |= set(range(len(ops)))
        else:
            raise ValueError(f"unknown operation {kind!r}")
    return ops, durable
# --8<-- [end:issue]


# --8<-- [start:crash]
def persisted_sets(ops: list[Op], durable: set[int], mode: str):
    """崩溃时可能已经落盘的修改集合：durable 一定在内，其余按 mode 的规则枚举。"""
    pending = [i for i in range(len(ops)) if i not in durable]
    if mode == "posix":                     # 任意子集，没有任何顺序保证
        for r in range(len(pending) + 1):
            for extra in combinations(pending, r):
                yield durable | set(extra)
        return
    meta = [i for i, op in enumerate(ops) if op.kind in META]
    data = [i for i in pending if ops[i].kind == "write"]
    for p in range(len(meta) + 1):          # 日志按顺序提交：落盘的元数据是一个前缀
        committed = set(meta[:p])
        if not {i for i in durable if i in meta} <= committed:
            continue
        forced = set()
        if mode == "ext3-ordered" and p:    # 提交之前写出此前全部数据
            forced = {i for i in data if i < meta[p - 1]}
        if mode == "ext4":                  # auto_da_alloc：覆盖式 rename 提交时带上源文件的数据
            for m in meta[:p]:
                if ops[m].kind == "rename" and ops[m].replaces:
                    forced |= {i for i in data if i < m and ops[i].ino == ops[m].ino}
        free = [i for i in data if i not in forced]
        for r in range(len(free) + 1):
            for extra in combinations(free, r):
                yield durable | committed | forced | set(extra)


def replay(ops: list[Op], persisted: set[int]) -> bytes | None:
    """从崩溃前的盘面（目录里只有旧文件）出发，按发出顺序重放落盘的修改；返回目标文件的内容。"""
    names = {TARGET: 1}
    files = {1: bytearray(OLD)}
    for i, op in enumerate(ops):
        if i not in persisted:
            continue
        if op.kind == "create":
            names[op.name] = op.ino
            files.setdefault(op.ino, bytearray())
        elif op.kind == "trunc":
            files[op.ino] = bytearray()
        elif op.kind == "write":
            buf = files.setdefault(op.ino, bytearray())
            buf.extend(b"\0" * max(0, op.off + len(op.data) - len(buf)))
            buf[op.off:op.off + len(op.data)] = op.data
        elif op.kind == "rename":
            names.pop(op.name, None)
            names[op.dst] = op.ino
            files.setdefault(op.ino, bytearray())
    ino = names.get(TARGET)
    return None if ino is None else bytes(files[ino])


def classify(content: bytes | None) -> str:
    if content is None:
        return "missing"
    if content == OLD:
        return "old"
    if content == NEW:
        return "new"
    if not content:
        return "empty"
    if NEW.startswith(content):
        return "partial"                    # 新内容的前一段：后半截没写到
    if len(content) <= len(NEW) and all(c in (n, 0) for c, n in zip(content, NEW)):
        return "hole"                       # 新内容，但中间有没写到的块（读出来是 0）
    return "mixed"                          # 新旧内容混在一起


LABELS = {"old": "旧", "new": "新", "empty": "空", "partial": "半截", "hole": "空洞", "mixed": "新旧混杂", "missing": "不存在"}


def cell(kinds: set[str]) -> str:
    """页面表格里的一格：按固定顺序列出结果种类。"""
    return "、".join(LABELS[k] for k in LABELS if k in kinds)


def outcomes(program: list[tuple], mode: str) -> list[set[str]]:
    """对每个崩溃点 k（执行了前 k 个操作之后崩溃），枚举所有允许的落盘组合，返回看到的结果种类。"""
    result = []
    for k in range(len(program) + 1):
        ops, durable = issue(program, k, mode)
        result.append({classify(replay(ops, s)) for s in persisted_sets(ops, durable, mode)})
    return result
# --8<-- [end:crash]


def summary(name: str, mode: str) -> tuple[set[str], set[str]]:
    """(任意崩溃点可能看到的结果, 程序全部执行完之后崩溃能看到的结果)。"""
    per_point = outcomes(PROGRAMS[name], mode)
    return set().union(*per_point), per_point[-1]


if __name__ == "__main__":
    for name in PROGRAMS:
        for mode in MODES:
            anywhere, after = summary(name, mode)
            print(f"{name:18s} {mode:14s} anywhere={sorted(anywhere)} after-return={sorted(after)}")
