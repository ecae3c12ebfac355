"""The listings of docs/foundations/networking/message-passing.md, run under a real MPI (Open MPI + mpi4py).

Every run goes through code/foundations/mpi/launch.py: ranks on this machine only (shared memory, or TCP on the
loopback interface), a time limit, and the whole process group ended afterwards; each test checks that no rank
survives. The deadlock is observed from outside: every rank announces that it entered its send, none returns
within a generous grace period, and the launcher then stops the group. No timing is asserted.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import ROOT, load_listing

CODE = ROOT / "code" / "foundations" / "mpi"


def load(name: str):
    return load_listing(CODE / f"{name}.py", "mpi_listing_" + name.replace("-", "_"))


launch = load("launch")

if not launch.available():
    # CI installs Open MPI (Debian: openmpi-bin, libopenmpi-dev) and mpi4py; there a missing MPI is an error.
    if os.environ.get("CI"):
        pytest.fail("mpirun or mpi4py is missing: install openmpi-bin and the pinned mpi4py", pytrace=False)
    pytest.skip("Open MPI (mpirun) or mpi4py is not installed", allow_module_level=True)


def alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    try:
        state = stat.read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")  # a zombie has exited; only its parent's bookkeeping is left


def assert_no_rank_left(result) -> None:
    pids = {r["pid"] for r in result.records if "pid" in r}
    assert pids, "the ranks reported no pid"
    assert not [p for p in pids if alive(p)], "a rank outlived the launcher"


def started_sends(n: int):
    return lambda records: sum(r.get("event") == "send-start" for r in records) >= n


def test_mpi_library_and_standard():
    r = launch.run("p2p.py", ["info"], n=2, timeout=120)
    assert r.returncode == 0, r.stderr
    assert sorted(x["rank"] for x in r.records) == [0, 1] and all(x["size"] == 2 for x in r.records)
    assert r.records[0]["library"].startswith(("Open MPI", "MPICH"))
    assert tuple(r.records[0]["standard"]) >= (3, 1)
    assert_no_rank_left(r)


@pytest.mark.parametrize("transport", ["vader", "tcp"])
def test_eager_below_limit_rendezvous_above(transport):
    limit = launch.ompi_param(f"btl_{transport}_eager_limit")  # counts protocol headers too
    sizes = [64, limit - 128, limit, 4 * limit, 1 << 20]
    r = launch.run("p2p.py", ["probe", *map(str, sizes)], n=2, transport=transport, timeout=120)
    assert r.returncode == 0, r.stderr
    got = {x["bytes"]: x["completed_before_recv"] for x in r.records if "bytes" in x}
    assert got == {64: True, limit - 128: True, limit: False, 4 * limit: False, 1 << 20: False}
    assert_no_rank_left(r)


def test_eager_limit_is_a_tunable():
    r = launch.run("p2p.py", ["probe", "8192", "16384"], n=2, mca=["--mca", "btl_vader_eager_limit", "16384"])
    assert r.returncode == 0, r.stderr
    assert {x["bytes"]: x["completed_before_recv"] for x in r.records} == {8192: True, 16384: False}
    assert_no_rank_left(r)


def test_both_send_first_deadlocks_above_eager_limit():
    r = launch.run("p2p.py", ["deadlock", str(1 << 20)], n=2, until=started_sends(2), grace=2.0, timeout=120)
    assert r.stopped, f"the unsafe exchange finished: {r.records}"
    assert r.events("send-start") == [0, 1] and r.events("send-done") == []
    assert_no_rank_left(r)


def test_same_program_completes_below_eager_limit():
    r = launch.run("p2p.py", ["deadlock", "64"], n=2, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.events("send-done") == [0, 1] and r.events("recv-done") == [0, 1]
    assert_no_rank_left(r)


def test_whether_it_deadlocks_depends_on_the_transport():
    n = str(16 * 1024)  # above the shared-memory eager limit (4 KiB), below TCP's (64 KiB) in Open MPI 4.1
    vader, tcp = launch.ompi_param("btl_vader_eager_limit"), launch.ompi_param("btl_tcp_eager_limit")
    assert vader < int(n) < tcp - 128
    r = launch.run("p2p.py", ["deadlock", n], n=2, transport="tcp", timeout=120)
    assert r.returncode == 0 and r.events("recv-done") == [0, 1], r.stderr
    assert_no_rank_left(r)
    r = launch.run("p2p.py", ["deadlock", n], n=2, transport="vader", until=started_sends(2), grace=2.0)
    assert r.stopped and r.events("send-done") == []
    assert_no_rank_left(r)


def test_synchronous_send_deadlocks_even_when_small():
    r = launch.run("p2p.py", ["deadlock", "64", "ssend"], n=2, until=started_sends(2), grace=2.0, timeout=120)
    assert r.stopped and r.events("send-start") == [0, 1] and r.events("send-done") == []
    assert_no_rank_left(r)


@pytest.mark.parametrize("method", ["parity", "sendrecv", "nonblocking", "bsend"])
def test_fixes_complete_with_large_messages(method):
    # Three ranks: an odd ring, where rank 2 and rank 0 are both even (parity must still work).
    r = launch.run("p2p.py", ["exchange", method, str(1 << 20)], n=3, timeout=120)
    assert r.returncode == 0, r.stderr
    assert sorted(x["rank"] for x in r.records) == [0, 1, 2]
    assert all(x["ok"] and x["method"] == method and x["nbytes"] == 1 << 20 for x in r.records)
    assert_no_rank_left(r)


@pytest.mark.parametrize("p, n", [(4, 4096), (3, 999), (2, 2)])
def test_collectives_and_ring_allreduce(p, n):
    r = launch.run("collectives.py", [str(n)], n=p, timeout=120)
    assert r.returncode == 0, r.stderr
    (summary,) = r.records
    assert summary["checks"] == ["Bcast", "Reduce", "Allreduce", "Allreduce(IN_PLACE)", "Allgather",
                                 "Reduce_scatter_block", "Reduce_scatter+Allgather", "Alltoall", "Iallreduce",
                                 "ring_allreduce"]
    # ring all-reduce: each rank sends 2(p-1) blocks of n/p elements, i.e. 2(p-1)/p of the buffer.
    assert summary["ring_bytes_sent"] == [2 * (p - 1) * (n // p) * summary["itemsize"]] * p


def test_a_failing_rank_aborts_the_job():
    # n not divisible by p: the assertion fails on every rank; `python -m mpi4py` turns it into MPI_Abort.
    r = launch.run("collectives.py", ["10"], n=3, timeout=120)
    assert not r.stopped and r.returncode != 0
    assert "AssertionError" in r.stderr
