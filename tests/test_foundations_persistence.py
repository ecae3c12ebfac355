"""Listings of the files-and-persistence pages (docs/foundations/os/file-io.md, page-cache.md, file-systems.md,
crash-consistency.md, async-io.md): read vs mmap loading returns the file's bytes, the committed file-loading record has
its provenance, the crash model enumerates every crash point (the safe replace protocol leaves only the old or the new
file), the real protocol on disk, hard and symbolic links, and the FTL simulator against the FIFO formula.
The C listings (rio.c, fd-sharing.c, io-uring.c) run under ASan + UBSan in tests/test_listings.py.
No test asserts a time."""
from __future__ import annotations

import filecmp
import json
import os
import re
import shutil
import stat
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, load_listing

OS = ROOT / "code" / "foundations" / "os"
DOCS = ROOT / "docs" / "foundations" / "os"


def load(name: str):
    return load_listing(OS / f"{name}.py", "persistence_" + name.replace("-", "_"))


def table_rows(page: str, first_cell: str) -> dict[str, list[str]]:
    """Rows of the Markdown tables in a page whose first cell matches first_cell: {first cell: the other cells}."""
    rows = {}
    for line in (DOCS / page).read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and re.fullmatch(first_cell, cells[0]):
            rows[cells[0]] = cells[1:]
    return rows


# ----------------------------------------------------------------------------- file-loading.py
@pytest.fixture(scope="module")
def fl():
    return load("file-loading")


def test_every_loader_returns_the_files_bytes(fl, tmp_path):
    path = str(tmp_path / "w.bin")
    fl.write_weights(path, 3 * fl.MIB + 4096)
    raw = open(path, "rb").read()
    assert len(raw) == 3 * fl.MIB + 4096
    assert np.array_equal(np.frombuffer(raw, dtype=np.float32)[:4],
                          np.random.default_rng(0).standard_normal(4, dtype=np.float32))
    assert fl.load_read(path).tobytes() == raw
    reuse = np.zeros(len(raw), dtype=np.uint8)
    assert fl.load_read(path, out=reuse) is reuse and reuse.tobytes() == raw
    for kwargs in ({}, {"advice": fl.mmap.MADV_SEQUENTIAL}, {"populate": True}):
        data, mm = fl.load_mmap(path, **kwargs)
        assert data.tobytes() == raw and not data.flags.writeable
        del data
        mm.close()
    want = int(np.frombuffer(raw, dtype=np.uint64).sum(dtype=np.uint64))
    for method in fl.METHODS:
        assert fl.run_once(path, method)["checksum"] == want, method


def test_copies_are_byte_identical(fl, tmp_path):
    src = str(tmp_path / "src.bin")
    fl.write_weights(src, 2 * fl.MIB + 12)
    for copy in (fl.copy_read_write, fl.copy_sendfile):
        dst = str(tmp_path / f"{copy.__name__}.bin")
        assert copy(src, dst) == os.path.getsize(src)
        assert filecmp.cmp(src, dst, shallow=False), copy.__name__


def test_residency_is_measured_by_mincore(fl, tmp_path):
    path = str(tmp_path / "w.bin")
    fl.write_weights(path, 1 * fl.MIB)
    fl.load_read(path)
    assert fl.resident_fraction(path) == 1.0          # just read: every page is in the page cache
    after = fl.drop_cache(path)                        # 0 on a disk file system; tmpfs keeps its pages
    assert 0.0 <= after <= 1.0
    if fl.filesystem_of(path)["type"] in ("ext4", "xfs", "btrfs"):
        assert after < 0.01, "POSIX_FADV_DONTNEED did not drop the clean pages"


def test_measure_runs_every_method_and_cache_state(fl, tmp_path):
    res = fl.measure(str(tmp_path), 2 * fl.MIB, repeats=1)
    assert {(r["method"], r["cache"]) for r in res["rows"]} == {(m, c) for m in fl.METHODS for c in ("cold", "warm")}
    assert all(r["resident_before_min"] == 1.0 for r in res["rows"] if r["cache"] == "warm")


def test_committed_record_has_provenance_and_is_quoted(fl):
    records = sorted((ROOT / "data" / "records").glob("cpu-*/file-loading.json"))
    assert records, "run: python code/foundations/os/file-loading.py"
    page = (DOCS / "page-cache.md").read_text(encoding="utf-8")
    for path in records:
        rec = json.loads(path.read_text(encoding="utf-8"))
        prov = rec["provenance"]
        for key in ("cpu", "cores", "kernel", "filesystem", "date", "command", "python", "numpy"):
            assert prov.get(key), f"{path}: provenance lacks {key}"
        assert prov["filesystem"]["type"] and prov["command"].startswith("python code/foundations/os/file-loading.py")
        assert path.parent.name == prov["machine"]
        res = rec["results"]
        assert {(r["method"], r["cache"]) for r in res["rows"]} == {(m, c) for m in fl.METHODS for c in ("cold", "warm")}
        rows = {(r["method"], r["cache"]): r for r in res["rows"]}
        if res["cold_cache_dropped"]:
            assert all(r["resident_before_max"] < 0.01 for r in res["rows"] if r["cache"] == "cold")
            assert rows["read", "cold"]["major_faults"] == 0            # read never faults on the file's pages
        for cache in ("cold", "warm"):
            assert rows["read", cache]["minor_faults"] < rows["read-fresh", cache]["minor_faults"]  # the fresh buffer faults in
        assert rows["mmap-populate", "warm"]["load_s"] > rows["mmap", "warm"]["load_s"]  # populate maps in mmap()
        assert f"records/{path.parent.name}/file-loading" in page


# ----------------------------------------------------------------------------- crash-model.py
@pytest.fixture(scope="module")
def cm():
    return load("crash-model")


@pytest.mark.parametrize("mode", ["posix", "ext3-ordered", "ext4-delalloc", "ext4"])
def test_safe_protocol_leaves_old_or_new_and_is_durable(cm, mode):
    per_point = cm.outcomes(cm.PROGRAMS["safe"], mode)
    assert all(kinds <= {"old", "new"} for kinds in per_point), per_point
    assert per_point[0] == {"old"} and per_point[-1] == {"new"}


@pytest.mark.parametrize("mode", ["posix", "ext3-ordered", "ext4-delalloc", "ext4"])
def test_unsafe_variants_can_lose_the_file(cm, mode):
    for name in ("in-place", "in-place+fsync"):
        anywhere, after = cm.summary(name, mode)
        assert {"empty", "partial"} <= anywhere, (name, mode)  # the window between O_TRUNC and the last write
    assert cm.summary("in-place+fsync", mode)[1] == {"new"}
    anywhere, after = cm.summary("tmp+fsync+rename", mode)
    assert anywhere <= {"old", "new"} and "old" in after    # atomic, but the rename is not yet durable on return
    anywhere, _ = cm.summary("tmp+rename", mode)
    if mode in ("posix", "ext4-delalloc"):                   # the 2009 zero-length files
        assert "empty" in anywhere
    else:                                                    # ext3's ordered mode, ext4's auto_da_alloc
        assert anywhere <= {"old", "new"}


def test_enumeration_is_not_vacuous(cm):
    ops, durable = cm.issue(cm.PROGRAMS["tmp+rename"], 4, "posix")
    assert len(ops) == 4 and not durable
    assert sum(1 for _ in cm.persisted_sets(ops, durable, "posix")) == 2 ** 4
    ops, durable = cm.issue(cm.PROGRAMS["safe"], 6, "posix")
    assert durable == set(range(len(ops)))                   # after the directory fsync nothing is pending


def test_page_table_matches_the_model(cm):
    rows = table_rows("crash-consistency.md", r"`[a-z+-]+`")
    assert {k.strip("`") for k in rows} == set(cm.PROGRAMS)
    for name, cells in rows.items():
        prog = name.strip("`")
        want = [cm.cell(cm.summary(prog, mode)[0]) for mode in cm.MODES] + [cm.cell(cm.summary(prog, "posix")[1])]
        assert cells[:len(want)] == want, (prog, cells, want)


# ----------------------------------------------------------------------------- atomic-replace.py
@pytest.fixture(scope="module")
def ar():
    return load("atomic-replace")


def test_atomic_replace_on_disk(ar, tmp_path):
    target = tmp_path / "model.bin"
    ar.atomic_replace(str(target), b"old")
    os.chmod(target, 0o644)
    new = os.urandom(3 << 20)
    ar.atomic_replace(str(target), new)
    assert target.read_bytes() == new
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.bin"]


def test_a_failed_write_leaves_the_old_file(ar, tmp_path, monkeypatch):
    target = tmp_path / "model.bin"
    target.write_bytes(b"old weights")
    calls = []
    real_write = os.write

    def failing_write(fd, data):                             # first call: a short write of 10 bytes; then the disk is full
        calls.append(len(data))
        if len(calls) > 1:
            raise OSError(28, "No space left on device")
        return real_write(fd, bytes(data[:10]))

    monkeypatch.setattr(ar.os, "write", failing_write)
    with pytest.raises(OSError):
        ar.atomic_replace(str(target), b"x" * 100)
    monkeypatch.undo()
    assert target.read_bytes() == b"old weights"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.bin"]
    assert calls[0] == 100                                   # the first write was short: the loop went on


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed: the system-call order was not traced")
def test_syscall_order_is_fsync_rename_fsync_dir(tmp_path):
    target = tmp_path / "model.bin"
    target.write_bytes(b"old")
    log = tmp_path / "trace.txt"
    code = (f"import importlib.util as u; s = u.spec_from_file_location('ar', {str(OS / 'atomic-replace.py')!r}); "
            f"m = u.module_from_spec(s); s.loader.exec_module(m); m.atomic_replace({str(target)!r}, b'new')")
    proc = subprocess.run(["strace", "-f", "-o", str(log), "-e", "trace=openat,fsync,rename,renameat,renameat2",
                           sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0 and "ptrace" in proc.stderr.lower():
        pytest.skip(f"ptrace is not permitted here: {proc.stderr.strip()[:200]}")
    assert proc.returncode == 0, proc.stderr
    assert target.read_bytes() == b"new"
    lines = [line for line in log.read_text().splitlines() if str(tmp_path) in line or "fsync(" in line]
    events = []
    fds: dict[str, str] = {}
    for line in lines:
        if m := re.search(r'openat\(AT_FDCWD, "([^"]+)", ([A-Z_|]+).*= (\d+)$', line):
            fds[m.group(3)] = "dir" if "O_DIRECTORY" in m.group(2) else ("tmp" if m.group(1).endswith(".tmp") else "file")
        elif m := re.search(r"fsync\((\d+)\)\s+= 0", line):
            events.append(f"fsync:{fds.get(m.group(1), '?')}")
        elif "rename" in line and "= 0" in line:
            events.append("rename")
    assert events[-3:] == ["fsync:tmp", "rename", "fsync:dir"], events


# ----------------------------------------------------------------------------- links.py
def test_hard_and_symbolic_links(tmp_path):
    out = load("links").link_demo(str(tmp_path))
    assert out["same_inode"] and out["nlink_after_link"] == 2
    assert out["symlink_own_inode"] and out["symlink_size"] == len("a.bin") and out["symlink_target"] == "a.bin"
    names = dict(out["readdir"])
    assert names["a.bin"] == names["b.bin"] != names["s.bin"]
    assert out["read_via_hard_link"] == b"weights" and out["nlink_after_unlink"] == 1 and out["symlink_dangling"]
    assert out["nlink_while_open"] == 0 and out["read_after_all_names_gone"] == b"weights"


# ----------------------------------------------------------------------------- ftl-sim.py
@pytest.fixture(scope="module")
def ftl():
    return load("ftl-sim")


def test_sequential_writes_have_no_amplification(ftl):
    for policy in ("greedy", "fifo"):
        assert ftl.write_amplification(0.07, policy, "sequential") == pytest.approx(1.0)


def test_fifo_matches_the_formula_and_greedy_does_better(ftl):
    rows = ftl.table()
    for spare, alpha, formula, fifo, greedy in rows:
        assert fifo == pytest.approx(formula, rel=0.03), spare     # u = exp(-alpha (1 - u)), WA = 1 / (1 - u)
        assert greedy <= fifo * 1.001, spare
    was = [r[3] for r in rows]
    assert was == sorted(was, reverse=True)                      # more over-provisioning, less amplification
    page = table_rows("file-systems.md", r"\d+ %")
    assert len(page) == len(rows)
    for spare, alpha, formula, fifo, greedy in rows:
        assert page[f"{round(spare * 100)} %"][:4] == [f"{alpha:.3f}", f"{formula:.2f}", f"{fifo:.2f}", f"{greedy:.2f}"]


def test_trim_lowers_write_amplification(ftl):
    with_trim = ftl.write_amplification(0.07, trimmed=0.25, trim=True)
    without = ftl.write_amplification(0.07, trimmed=0.25, trim=False)
    assert with_trim < without
    # with TRIM the deleted quarter is spare space: the FIFO formula at that alpha bounds greedy from above
    assert with_trim <= ftl.fifo_formula(ftl.log_alpha(0.07) / 0.75) * 1.03
    page = (DOCS / "file-systems.md").read_text(encoding="utf-8")
    assert f"发了 TRIM 写放大是 {with_trim:.2f}，不发是 {without:.2f}" in page
