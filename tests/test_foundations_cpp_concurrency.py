"""The C++ concurrency and C++20/23 pages (lock-free.md, thread-pool.md, coroutines.md, modern-cpp.md).

(a) the thread-pool record (data/records/cpu-*/thread-pool.json, written by code/foundations/cpp/thread-pool-bench.py):
    provenance, one row per workload x workers x pool, and the nesting depths that do not depend on the machine;
    the runner itself, in its quick mode;
(b) symmetric transfer in coroutines.cpp: no stack growth at -O2, linear growth at -O0 (GCC emits no tail call);
(c) the table "GCC 12 能用哪些 C++20/23 特性" of modern-cpp.md, compiled header by header on g++ 12.
The listings themselves run under the sanitizers in tests/test_listings.py; nothing here asserts a timing.
"""
from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

CPP = ROOT / "code" / "foundations" / "cpp"
RECORDS = sorted((ROOT / "data" / "records").glob("cpu-*/thread-pool.json"))
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


def gxx_major() -> int | None:
    if shutil.which("g++") is None:
        return None
    out = subprocess.run(["g++", "-dumpversion"], capture_output=True, text=True).stdout.strip()
    return int(out.split(".")[0]) if out else None


# ---- (a) the thread-pool record

def test_there_is_a_thread_pool_record():
    assert RECORDS, "no data/records/cpu-*/thread-pool.json: run python code/foundations/cpp/thread-pool-bench.py"


@pytest.mark.parametrize("path", RECORDS, ids=[p.parent.name for p in RECORDS])
def test_thread_pool_record(path):
    record = json.loads(path.read_text(encoding="utf-8"))
    assert record["schema"] == 1 and record["experiment"] == "thread-pool"
    prov = record["provenance"]
    for key in ("machine", "cpu", "cores", "os", "kernel", "compiler", "cxxflags", "date", "commit", "command",
                "loadavg_1min"):
        assert prov.get(key) is not None, f"{path.name}: provenance lacks {key}"
    assert prov["machine"] == path.parent.name and "-O2" in prov["cxxflags"]
    assert "--quick" not in prov["command"], "the committed record must come from a full run"
    results = record["results"]
    rows = results["workloads"]
    keys = {(r["workload"], r["workers"], r["pool"]) for r in rows}
    assert len(keys) == len(rows) == 3 * 2 * 2
    for r in rows:
        assert 0 < r["fastest"] <= r["seconds"] <= r["slowest"], r
        if r["pool"] == "single-queue":
            assert r["steals"] == 0
    sizes = results["sizes"]
    tasks = sizes["sum_elements"] // sizes["sum_grain"]
    # With one worker the run is deterministic: the FIFO queue nests tasks/2 + 1 deep while helping,
    # the worker's own LIFO deque only as deep as the recursion (thread-pool.cpp asserts the same for 512).
    one = {r["pool"]: r for r in rows if r["workload"] == "fork-join-sum" and r["workers"] == 1}
    assert one["single-queue"]["tasks"] == tasks
    assert one["single-queue"]["max_nesting"] == tasks // 2 + 1
    assert one["work-stealing"]["max_nesting"] == int(math.log2(tasks)) + 1
    page = (ROOT / "docs" / "foundations" / "cpp" / "thread-pool.md").read_text(encoding="utf-8")
    assert f"records/{path.parent.name}/thread-pool" in page


@needs_gxx
def test_thread_pool_runner_quick(tmp_path):
    out = tmp_path / "tp.json"
    proc = subprocess.run([sys.executable, str(CPP / "thread-pool-bench.py"), "--quick", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(out.read_text(encoding="utf-8"))
    assert record["provenance"]["cores"] >= 1 and record["provenance"]["cpu"]
    rows = record["results"]["workloads"]
    assert {r["pool"] for r in rows} == {"single-queue", "work-stealing"}
    one = {r["pool"]: r for r in rows if r["workload"] == "fork-join-sum" and r["workers"] == 1}
    assert one["single-queue"]["max_nesting"] == one["single-queue"]["tasks"] // 2 + 1


# ---- (b) symmetric transfer

def stack_growth(tmp_path, opt: str, awaits: int) -> int:
    exe = tmp_path / f"co{opt}-{awaits}"
    subprocess.run(["g++", "-std=c++20", opt, f"-DAWAITS={awaits}", str(CPP / "coroutines.cpp"), "-o", str(exe)],
                   check=True, capture_output=True, timeout=300)
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120, check=True).stdout
    m = re.search(rf"{awaits} awaits in a loop, stack grew (\d+) bytes", out)
    assert m, out
    return int(m.group(1))


@needs_gxx
def test_symmetric_transfer_is_a_tail_call_at_O2(tmp_path):
    assert stack_growth(tmp_path, "-O2", 1_000_000) == 0


@needs_gxx
def test_symmetric_transfer_grows_the_stack_at_O0(tmp_path):
    small, large = stack_growth(tmp_path, "-O0", 1000), stack_growth(tmp_path, "-O0", 2000)
    assert small > 0 and large > 1.9 * small  # linear in the number of awaits
    assert small / 1000 * 1_000_000 > 8 * 2**20  # a million awaits would overflow an 8 MiB stack


# ---- (c) the GCC 12 feature table

HEADERS = {  # header: present in GCC 12's libstdc++ with -std=c++23
    "concepts": True, "ranges": True, "coroutine": True, "span": True, "stop_token": True, "expected": True,
    "mdspan": False, "print": False, "flat_map": False, "generator": False,
}
MACROS = {  # feature-test macro: (value or None when undefined) with -std=c++23
    "__cpp_lib_expected": 202202, "__cpp_lib_jthread": 201911, "__cpp_lib_atomic_shared_ptr": 201711,
    "__cpp_lib_move_only_function": 202110, "__cpp_lib_ranges_to_container": None, "__cpp_lib_mdspan": None,
}


@pytest.mark.skipif(gxx_major() != 12, reason="the table describes g++ 12")
def test_gcc12_feature_table(tmp_path):
    for header, present in HEADERS.items():
        src = tmp_path / f"{header}.cpp"
        src.write_text(f"#include <{header}>\nint main() {{}}\n")
        proc = subprocess.run(["g++", "-std=c++23", "-fsyntax-only", str(src)], capture_output=True, text=True)
        assert (proc.returncode == 0) == present, f"<{header}>: {proc.stderr[:300]}"
    src = tmp_path / "macros.cpp"
    src.write_text("#include <cstdio>\n#include <version>\nint main() {\n" + "".join(
        f"#ifdef {m}\n  std::printf(\"{m} %ld\\n\", (long){m});\n#else\n  std::printf(\"{m} -1\\n\");\n#endif\n"
        for m in MACROS) + "}\n")
    exe = tmp_path / "macros"
    subprocess.run(["g++", "-std=c++23", str(src), "-o", str(exe)], capture_output=True, text=True, check=True)
    values = dict(line.split() for line in subprocess.run([str(exe)], capture_output=True, text=True,
                                                          check=True).stdout.splitlines())
    for macro, want in MACROS.items():
        assert int(values[macro]) == (want if want is not None else -1), macro
    page = (ROOT / "docs" / "foundations" / "cpp" / "modern-cpp.md").read_text(encoding="utf-8")
    assert "`__cpp_lib_expected` 为 202202L" in page
