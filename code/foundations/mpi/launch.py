"""在本机用 mpirun 启动 MPI 程序：限时、只走本机通道（共享内存或回环 TCP），卡住时全部结束，不留下进程。

死锁无法从程序内部“报告”：每个 rank 都停在一次阻塞调用里。能做的是从外面观察——
等到所有 rank 都宣布进入了发送，再多等一段宽裕的时间，确认没有一个 rank 返回，然后结束这次启动的所有进程。
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
# --8<-- [start:mca]
# 固定传输路径，让 eager 上限是一个已知的数：ob1 点对点层，加上 self（发给自己）和一个本机通道。
# vader 是同机共享内存，tcp 限定在回环接口 lo 上；UCX、InfiniBand 都不参与，消息不离开本机。
# single_copy_mechanism=none：大消息不用 CMA（跨进程直接读内存，容器里常被禁止），协议不变。
TRANSPORTS = {
    "vader": ["--mca", "btl", "self,vader", "--mca", "btl_vader_single_copy_mechanism", "none"],
    "tcp": ["--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo"],
}
# --8<-- [end:mca]
JSON_OBJ = re.compile(r"\{[^{}]*\}")  # mpirun 转发多个 rank 的输出时，行可能被拼在一起：按 {...} 取


def available() -> bool:
    if shutil.which("mpirun") is None:
        return False
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return True


def command(script: str, args: list[str], n: int, transport: str = "vader", mca: list[str] | None = None) -> list[str]:
    root = ["--allow-run-as-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []
    return ["mpirun", *root, "--oversubscribe", "--bind-to", "none", "-n", str(n), "--mca", "pml", "ob1",
            *TRANSPORTS[transport], *(mca or []),
            sys.executable, "-m", "mpi4py", str(HERE / script), *args]  # -m mpi4py：未捕获的异常会 MPI_Abort 全体


@dataclass
class Result:
    returncode: int | None          # None：被我们结束（卡住了）
    records: list[dict] = field(default_factory=list)
    stderr: str = ""
    stopped: bool = False           # 是否由启动器结束
    seconds: float = 0.0

    def events(self, name: str) -> list[int]:
        return sorted(r["rank"] for r in self.records if r.get("event") == name)


# --8<-- [start:run]
def run(script: str, args: list[str], n: int = 2, *, timeout: float = 120.0, until=None, grace: float = 2.0,
        transport: str = "vader", mca: list[str] | None = None) -> Result:
    """启动 n 个 rank；until(records) 为真后再等 grace 秒就结束（用来判定“卡住”），总时长不超过 timeout。"""
    proc = subprocess.Popen(command(script, args, n, transport, mca), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)  # 新会话：会话号 = mpirun 的进程号
    out, err = [], []
    readers = [threading.Thread(target=lambda s=s, b=b: b.extend(iter(s.readline, "")), daemon=True)
               for s, b in ((proc.stdout, out), (proc.stderr, err))]
    for t in readers:
        t.start()
    start, seen_at, stopped = time.monotonic(), None, False
    while proc.poll() is None:
        now = time.monotonic()
        if until is not None and seen_at is None and until(_records(out)):
            seen_at = now
        if now - start > timeout or (seen_at is not None and now - seen_at > grace):
            stopped = True
            _kill_session(proc)
            break
        time.sleep(0.02)
    proc.wait()
    _kill_session(proc)  # mpirun 已退出时也清一遍：会话里不允许留下任何 rank
    for t in readers:
        t.join(timeout=5)
    return Result(None if stopped else proc.returncode, _records(out), "".join(err), stopped,
                  time.monotonic() - start)


def _session(sid: int) -> list[int]:
    """会话 sid 里还活着的进程（僵尸不算）。Open MPI 给每个 rank 单独建进程组，但它们仍在 mpirun 的会话里。"""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # 进程恰好退出了
        if int(fields[3]) == sid and fields[0] not in ("Z", "X"):
            pids.append(int(stat.parent.name))
    return pids


def _kill_session(proc: subprocess.Popen) -> None:
    """先 SIGTERM，5 秒后仍有进程就 SIGKILL；对象是这次启动的会话里的每个进程，直到一个不剩。"""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        proc.poll()  # 回收已退出的 mpirun，否则它作为僵尸还留在表里
        members = _session(proc.pid)
        if not members:
            return
        for pid in members:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and _session(proc.pid):
            proc.poll()
            time.sleep(0.05)
    if _session(proc.pid):
        raise RuntimeError(f"processes of session {proc.pid} survived SIGKILL")
# --8<-- [end:run]


def _records(lines: list[str]) -> list[dict]:
    return [json.loads(m.group(0)) for m in JSON_OBJ.finditer("".join(lines))]


def ompi_param(name: str) -> int:
    """读 Open MPI 的一个 MCA 参数的当前值（例如 btl_vader_eager_limit），来自 ompi_info，而不是抄文档。"""
    framework, component = name.split("_")[:2]
    out = subprocess.run(["ompi_info", "--param", framework, component, "--level", "9", "--parsable"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    m = re.search(rf"^mca:{framework}:{component}:param:{name}:value:(\d+)$", out, re.M)
    if not m:
        raise KeyError(name)
    return int(m.group(1))
