"""把一个大的权重文件读进内存：read 拷贝与 mmap 按需缺页，在页缓存冷与热两种状态下各测一遍。

冷缓存不需要 root：先 fsync 让页变干净，再 posix_fadvise(POSIX_FADV_DONTNEED) 请内核丢掉这个文件的页缓存，
然后用 mincore 数一数还有多少页驻留，确认丢掉了才算“冷”。tmpfs 上的文件就是页缓存本身，丢不掉，记录会如实写明。

    python code/foundations/os/file-loading.py [--size-mib 512] [--repeats 3] [--dir /tmp] [--out data/records/<机器>/file-loading.json]
"""
from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import mmap
import os
import platform
import re
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
PAGE = mmap.PAGESIZE
MIB = 1 << 20


# --8<-- [start:generate]
def write_weights(path: str, nbytes: int, seed: int = 0) -> None:
    """生成 nbytes 字节的 float32“权重”，写完 fsync：页缓存里的页变干净，之后才能被丢弃。"""
    rng = np.random.default_rng(seed)
    chunk = 16 * MIB
    with open(path, "wb") as f:
        for off in range(0, nbytes, chunk):
            n = min(chunk, nbytes - off) // 4
            f.write(rng.standard_normal(n, dtype=np.float32).tobytes())
        f.flush()
        os.fsync(f.fileno())
# --8<-- [end:generate]


# --8<-- [start:residency]
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]


def resident_fraction(path: str) -> float:
    """文件有多少页在页缓存里：映射它（只建 VMA，不缺页），mincore 为每页给出一个字节，最低位 1 表示驻留。"""
    size = os.path.getsize(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap failed")
        pages = (size + PAGE - 1) // PAGE
        vec = ctypes.create_string_buffer(pages)
        try:
            if _libc.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), "mincore failed")
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)
    flags = np.frombuffer(vec.raw, dtype=np.uint8)
    return float(np.count_nonzero(flags & 1)) / pages


def drop_cache(path: str) -> float:
    """把文件赶出页缓存（不需要 root），返回之后仍驻留的比例：脏页丢不掉，所以先 fsync。"""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return resident_fraction(path)
# --8<-- [end:residency]


# --8<-- [start:load]
def load_read(path: str, out: np.ndarray | None = None) -> np.ndarray:
    """read：内核把页缓存里的数据拷进我们的缓冲区（out，或新分配的一块）。短计数（short count）合法，要循环到读满。"""
    size = os.path.getsize(path)
    buf = np.empty(size, dtype=np.uint8) if out is None else out   # 新分配的内存要在拷贝时逐页缺页、清零
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:      # 不要 Python 的缓冲层：直接 readinto → read(2)
        got = 0
        while got < size:
            n = f.readinto(view[got:])
            if not n:
                raise EOFError(f"{path}: file shrank to {got} bytes")
            got += n
    return buf


def load_mmap(path: str, advice: int | None = None, populate: bool = False) -> tuple[np.ndarray, mmap.mmap]:
    """mmap：只建立映射，数据在第一次访问某页时经缺页读入；数组直接指向页缓存里的页，没有拷贝。"""
    with open(path, "rb") as f:
        flags = mmap.MAP_SHARED | (mmap.MAP_POPULATE if populate else 0)  # MAP_POPULATE：映射时就把页全部读入、填好页表
        mm = mmap.mmap(f.fileno(), 0, flags=flags, prot=mmap.PROT_READ)  # 映射持有文件的引用，可以关掉 fd
    if advice is not None:
        mm.madvise(advice)                         # 例如 MADV_SEQUENTIAL：加大预读，读过的页可以早些回收
    return np.frombuffer(mm, dtype=np.uint8), mm


def checksum(data: np.ndarray) -> int:
    """把每个 8 字节当作 uint64 相加（模 2^64）：必须读到每一页，用来让 mmap 真正缺页，也用来比较内容。"""
    return int(data.view(np.uint64).sum(dtype=np.uint64))
# --8<-- [end:load]


# --8<-- [start:copy]
def copy_read_write(src: str, dst: str, bufsize: int = 1 * MIB) -> int:
    """经用户态缓冲区复制：每块数据从页缓存拷到用户态、再拷回内核，每块两次系统调用。"""
    total = 0
    with open(src, "rb", buffering=0) as fi, open(dst, "wb", buffering=0) as fo:
        buf = bytearray(bufsize)
        view = memoryview(buf)
        while n := fi.readinto(buf):
            done = 0
            while done < n:                        # write 也可能短计数
                done += fo.write(view[done:n])
            total += n
    return total


def copy_sendfile(src: str, dst: str) -> int:
    """sendfile：数据在内核里从源文件的页缓存直接进入目标，不经过用户态缓冲区。"""
    total = 0
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        size = os.fstat(fi.fileno()).st_size
        while total < size:
            n = os.sendfile(fo.fileno(), fi.fileno(), total, size - total)
            if n == 0:
                break
            total += n
    return total
# --8<-- [end:copy]


METHODS = {  # 名字 → 说明；run_once 按名字执行
    "read": "read(2) 读进一块已分配并触碰过的缓冲区（每次复用）",
    "read-fresh": "read(2) 读进新分配的缓冲区（np.fromfile、torch.load 的做法）",
    "mmap": "mmap(2) MAP_SHARED，首次访问时缺页",
    "mmap-sequential": "mmap + madvise(MADV_SEQUENTIAL)",
    "mmap-populate": "mmap + MAP_POPULATE（映射时预读全部页）",
}


def _faults() -> tuple[int, int]:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_minflt, ru.ru_majflt


def run_once(path: str, method: str, reuse: np.ndarray | None = None) -> dict:
    """加载一次并把每个字节读一遍（校验和），返回分阶段时间、缺页数与校验和。reuse：method="read" 复用的缓冲区。"""
    if method == "read" and reuse is None:
        reuse = np.ones(os.path.getsize(path), dtype=np.uint8)    # 先写一遍：物理页已分配好
    min0, maj0 = _faults()
    t0 = time.perf_counter()
    mm = None
    if method == "read":
        data = load_read(path, out=reuse)
    elif method == "read-fresh":
        data = load_read(path)
    elif method == "mmap":
        data, mm = load_mmap(path)
    elif method == "mmap-sequential":
        data, mm = load_mmap(path, advice=mmap.MADV_SEQUENTIAL)
    elif method == "mmap-populate":
        data, mm = load_mmap(path, populate=True)
    else:
        raise ValueError(f"unknown method {method!r}; one of {sorted(METHODS)}")
    t1 = time.perf_counter()
    total = checksum(data)
    t2 = time.perf_counter()
    min1, maj1 = _faults()
    del data
    if mm is not None:
        mm.close()
    return {"load_s": t1 - t0, "pass_s": t2 - t1, "total_s": t2 - t0,
            "minor_faults": min1 - min0, "major_faults": maj1 - maj0, "checksum": total}


# ------------------------------------------------------------------ provenance

def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_slug() -> str:
    """data/records/ 下的目录名：cpu-<型号>-<核数>c，例如 cpu-amd-epyc-2c。"""
    model = re.sub(r"\((r|tm)\)|cpu|processor|@.*$", " ", _cpu_model().lower())
    words = re.sub(r"[^a-z0-9]+", "-", model).strip("-")
    return f"cpu-{words}-{os.cpu_count()}c"


def filesystem_of(path: str) -> dict:
    """path 所在的挂载点：/proc/mounts 里最长的前缀匹配。"""
    real = os.path.realpath(path)
    best = {"type": "unknown", "mount_point": "/", "device": "", "options": ""}
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            dev, mnt, fstype, opts = line.split()[:4]
            mnt = mnt.replace("\\040", " ")
            inside = real == mnt or real.startswith(mnt.rstrip("/") + "/")
            if inside and len(mnt) >= len(best["mount_point"]) and (mnt != "/" or best["mount_point"] == "/"):
                best = {"type": fstype, "mount_point": mnt, "device": dev, "options": opts}
    except OSError:
        pass
    dev = os.path.basename(best["device"])
    queue = Path("/sys/block") / dev / "queue"
    for key in ("read_ahead_kb", "rotational"):
        try:
            best[key] = int((queue / key).read_text())
        except (OSError, ValueError):
            pass
    if best["type"] == "ext4":
        jbd2 = Path("/proc/fs/jbd2")
        best["ext4_journal"] = jbd2.is_dir() and any(p.name.startswith(dev + "-") for p in jbd2.iterdir())
    return best


def free_page_reporting() -> dict:
    """虚拟机的 balloon 驱动是否把空闲内存报告给宿主机（virtio 特性位 5）；被报告的页再次使用时要由宿主机重新提供。"""
    enabled = False
    for dev in Path("/sys/bus/virtio/devices").glob("*"):
        try:
            if (dev / "device").read_text().strip() == "0x0005":          # virtio-balloon
                enabled = enabled or (dev / "features").read_text()[5:6] == "1"
        except OSError:
            pass
    try:
        reported = int(Path("/sys/module/page_reporting/parameters/reported_kib").read_text())
    except (OSError, ValueError):
        reported = None
    return {"enabled": enabled, "reported_kib": reported}


def provenance(workdir: str, argv: list[str]) -> dict:
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    mem_kib = next((int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                    if line.startswith("MemTotal:")), None)
    return {
        "machine": machine_slug(), "cpu": _cpu_model(), "cores": os.cpu_count(),
        "memory_gib": round(mem_kib / MIB, 1) if mem_kib else None,
        "os": platform.system(), "kernel": platform.release(),
        "python": platform.python_version(), "numpy": np.__version__,
        "filesystem": filesystem_of(workdir), "page_size": PAGE,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit,
        "command": "python " + " ".join(shlex.quote(a) for a in argv),
    }


# ------------------------------------------------------------------ the measurement

def measure(workdir: str, size: int, repeats: int, methods: list[str] | None = None) -> dict:
    methods = methods or list(METHODS)
    path = os.path.join(workdir, "weights.bin")
    write_weights(path, size)
    expected = checksum(np.fromfile(path, dtype=np.uint8))
    reuse = np.ones(size, dtype=np.uint8)                 # "read" 复用的缓冲区，物理页已分配
    runs: dict[tuple[str, str], list[dict]] = {}
    for cache in ("cold", "warm"):
        if cache == "warm":
            load_read(path)                               # 读一遍：整个文件进入页缓存
        for _ in range(repeats):
            for method in methods:                        # 交错执行，机器状态的漂移平均到各方法上
                resident = drop_cache(path) if cache == "cold" else resident_fraction(path)
                r = run_once(path, method, reuse)
                if r["checksum"] != expected:
                    raise AssertionError(f"{method}/{cache}: checksum {r['checksum']} != {expected}")
                r["resident_before"] = resident
                runs.setdefault((method, cache), []).append(r)
    in_memory = np.fromfile(path, dtype=np.uint8)
    t0 = time.perf_counter()
    checksum(in_memory)
    pass_only = time.perf_counter() - t0
    del in_memory
    touch = []                                            # 只分配并第一次写一块同样大的内存：read-fresh 多付的那部分
    for _ in range(repeats):
        t0 = time.perf_counter()
        fresh = np.empty(size, dtype=np.uint8)
        fresh.fill(1)
        touch.append(time.perf_counter() - t0)
        del fresh
    rows = []
    for (method, cache), rs in runs.items():
        best = statistics.median(r["total_s"] for r in rs)
        rows.append({
            "method": method, "cache": cache, "what": METHODS[method],
            "total_s": best, "gib_per_s": size / best / (1 << 30),
            "total_s_min": min(r["total_s"] for r in rs), "total_s_max": max(r["total_s"] for r in rs),
            "load_s": statistics.median(r["load_s"] for r in rs),
            "pass_s": statistics.median(r["pass_s"] for r in rs),
            "minor_faults": statistics.median(r["minor_faults"] for r in rs),
            "major_faults": statistics.median(r["major_faults"] for r in rs),
            "resident_before_max": max(r["resident_before"] for r in rs),
            "resident_before_min": min(r["resident_before"] for r in rs),
            "runs": [{k: v for k, v in r.items() if k != "checksum"} for r in rs],
        })
    cold = [r for r in rows if r["cache"] == "cold"]
    return {
        "file_bytes": size, "file_mib": size / MIB, "repeats": repeats, "pages": (size + PAGE - 1) // PAGE,
        "checksum_pass_in_memory_s": pass_only,
        "first_touch_s": {"median": statistics.median(touch), "min": min(touch), "max": max(touch), "runs": touch},
        "cold_cache_dropped": all(r["resident_before_max"] < 0.01 for r in cold),
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mib", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where the temporary file goes (default: the system temp folder)")
    ap.add_argument("--out", default=None, help="default: data/records/<machine>/file-loading.json")
    args = ap.parse_args(argv)
    out = Path(args.out) if args.out else ROOT / "data" / "records" / machine_slug() / "file-loading.json"
    load_start = os.getloadavg()[0]
    reporting = free_page_reporting()
    with tempfile.TemporaryDirectory(prefix="file-loading-", dir=args.dir) as d:
        results = measure(d, args.size_mib * MIB, args.repeats)
        prov = provenance(d, ["code/foundations/os/file-loading.py", *argv])
    prov["loadavg_1min"] = {"start": load_start, "end": os.getloadavg()[0]}  # 别的进程在用 CPU 时数字会变差
    after = free_page_reporting()["reported_kib"]
    prov["vm_free_page_reporting"] = {
        "enabled": reporting["enabled"],
        "reported_gib_during_run": None if after is None or reporting["reported_kib"] is None
        else (after - reporting["reported_kib"]) / MIB}
    record = {"schema": 1, "experiment": "file-loading",
              "title": "mmap 与 read 加载大文件：页缓存冷与热", "provenance": prov, "results": results}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    for r in results["rows"]:
        print(f"{r['method']:16s} {r['cache']:5s} {r['total_s'] * 1e3:8.1f} ms {r['gib_per_s']:6.2f} GiB/s "
              f"minflt {r['minor_faults']:>8.0f} majflt {r['major_faults']:>6.0f} resident-before {r['resident_before_max']:.3f}")
    ft = results["first_touch_s"]
    print(f"allocate + first touch: median {ft['median'] * 1e3:.1f} ms (min {ft['min'] * 1e3:.1f}, max {ft['max'] * 1e3:.1f}); "
          f"checksum pass over memory: {results['checksum_pass_in_memory_s'] * 1e3:.1f} ms; "
          f"cold cache dropped: {results['cold_cache_dropped']}; wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
