"""The Python listings of the foundations pages (code/foundations/**.py) behave as the pages say.

Each listing is loaded from its path (file names are kebab-case, so they cannot be imported by name)
and checked against brute force or against facts that do not depend on timing.
"""
from __future__ import annotations

import errno
import importlib.util
import itertools
import math
import multiprocessing
import random
import struct
import sys
import socket
import threading

import pytest

from conftest import ROOT

CODE = ROOT / "code" / "foundations"


def load(rel: str):
    path = CODE / rel
    name = "foundations_" + path.stem.replace("-", "_")
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # registered first, so that pickle (process pools) can find its functions
    spec.loader.exec_module(module)
    return module


# ----------------------------------------------------------------------------- python/

def test_dedupe_matches_brute_force():
    m = load("python/dedupe.py")
    rng = random.Random(0)
    for _ in range(300):
        xs = [rng.randrange(10) for _ in range(rng.randrange(30))]
        expect = [x for i, x in enumerate(xs) if x not in xs[:i]]  # first occurrences, O(n^2)
        assert m.dedupe_fast(xs) == expect
        assert m.dedupe(xs) == expect
        assert sorted(m.dedupe_unordered(xs)) == sorted(expect)
        assert m.dedupe_sorted(xs) == sorted(expect)
        lists = [[x] for x in xs]  # unhashable elements take the == fallback
        assert m.dedupe(lists) == [[x] for x in expect]
        mixed = [[x] if x % 2 else x for x in xs]
        assert m.dedupe(mixed) == [[x] if x % 2 else x for x in expect]


def test_dedupe_equal_keys_and_key_function():
    m = load("python/dedupe.py")
    assert m.dedupe_fast([1, 1.0, True]) == [1]  # equal and same hash: one key
    assert m.dedupe(["GPU", "gpu", "Cpu", "CPU"], key=str.lower) == ["GPU", "Cpu"]
    assert m.dedupe([{"a": 1}, {"a": 1}, {"a": 2}]) == [{"a": 1}, {"a": 2}]
    with pytest.raises(TypeError):
        m.dedupe_fast([[1], [1]])


def test_timed_keeps_metadata_and_records_on_error():
    m = load("python/decorators.py")

    @m.timed
    def f(x: int) -> int:
        """doc"""
        if x < 0:
            raise ValueError
        return x

    assert (f.__name__, f.__doc__, f.__annotations__) == ("f", "doc", {"x": "int", "return": "int"})
    assert f.__wrapped__.__name__ == "f" and f.last_seconds is None
    assert f(3) == 3 and f.last_seconds >= 0
    f.last_seconds = None
    with pytest.raises(ValueError):
        f(-1)
    assert f.last_seconds is not None


def test_retry_backoff_exhaustion_and_both_spellings():
    m = load("python/decorators.py")
    slept = []
    calls = []

    @m.retry(times=4, delay=0.5, backoff=3.0, sleep=slept.append)
    def always_fails():
        calls.append(1)
        raise TimeoutError("down")

    with pytest.raises(TimeoutError):
        always_fails()
    assert len(calls) == 4 and slept == [0.5, 1.5, 4.5]  # 3 waits between 4 attempts

    state = {"n": 0}

    @m.retry  # without parentheses
    def twice():
        state["n"] += 1
        if state["n"] < 2:
            raise ConnectionError
        return "ok"

    assert twice() == "ok" and state["n"] == 2 and twice.__name__ == "twice" and twice.retry_times == 3

    @m.retry(times=5, sleep=slept.append)
    def wrong_kind():
        calls.append(2)
        raise KeyError  # not in `exceptions`: no retry

    with pytest.raises(KeyError):
        wrong_kind()
    assert calls.count(2) == 1
    with pytest.raises(ValueError):
        m.retry(times=0)


def test_gil_demo_threads_and_processes_agree():
    m = load("python/gil-demo.py")
    assert m.count_primes(0, 20_000) == 2262  # pi(20000)
    assert m.chunks(10, 3) == [(0, 4), (4, 8), (8, 10)]
    ctx = multiprocessing.get_context("fork") if sys.platform.startswith("linux") else None
    out = m.run(hi=20_000, workers=2, mp_context=ctx)
    assert out["results"] == {"serial": 2262, "threads": 2262, "processes": 2262}
    status = m.gil_status()
    assert isinstance(status["free_threaded_build"], bool) and isinstance(status["gil_enabled"], bool)
    if not status["free_threaded_build"]:
        assert status["gil_enabled"]


def test_refcount_and_cycle_collection():
    m = load("python/refcount-gc.py")
    assert m.refcount_deltas() == (1, 1)
    assert m.freed_immediately()
    r = m.cycle_needs_collector()
    assert r["alive_after_del"] and not r["alive_after_collect"] and r["unreachable_found"] >= 2


@pytest.mark.skipif(sys.implementation.name != "cpython", reason="pymalloc is CPython's allocator")
def test_pymalloc_geometry_matches_the_page():
    m = load("python/refcount-gc.py")
    geo = m.pymalloc_geometry()
    if geo is None:
        pytest.skip("this interpreter has no pymalloc statistics (free-threaded build or --without-pymalloc)")
    if sys.version_info < (3, 10):
        pytest.skip("arena and pool sizes changed in 3.10")
    if struct.calcsize("P") == 8:  # 64-bit: 16-byte size classes, 16 KiB pools, 1 MiB arenas
        assert geo == {"threshold": 512, "size_classes": 32, "arena_bytes": 1 << 20, "pool_bytes": 16 << 10}
    else:
        assert geo == {"threshold": 512, "size_classes": 64, "arena_bytes": 256 << 10, "pool_bytes": 4 << 10}


# ----------------------------------------------------------------------------- os/

def test_generators_and_asyncio_interleave_in_one_thread():
    m = load("os/coroutines.py")
    import asyncio

    log = []
    m.round_robin(m.worker("A", 3, log), m.worker("B", 2, log))
    assert log == ["A0", "B0", "A1", "B1", "A2"]
    log = []
    m.round_robin(m.outer(log))
    assert log == ["outer-start", "helper", "outer-end"]
    assert asyncio.run(m.interleaving()) == ["A0", "B0", "A1", "B1", "A2", "B2"]
    total, seconds, extra_threads = asyncio.run(m.many_waits(n=500, delay=0.05))
    assert total == 500 and extra_threads == 0
    assert seconds < 500 * 0.05 / 10  # concurrent waits, not 25 s of serial ones (a 10x margin)
    blocked, offloaded = asyncio.run(m.blocking_vs_offloaded())
    assert blocked == 0  # nothing else can run while a coroutine blocks the loop
    assert offloaded >= 1


def test_sparse_file_ls_vs_du(tmp_path):
    m = load("os/sparse-file.py")
    p = str(tmp_path / "sparse.bin")
    m.make_sparse(p, 16 << 20)
    s = m.sizes(p)
    assert s["ls_l_bytes"] == 16 << 20 and s["fs_free_bytes"] > 0
    if s["du_bytes"] >= s["ls_l_bytes"]:
        pytest.skip("this file system does not keep holes in sparse files")
    assert s["du_bytes"] < s["ls_l_bytes"]
    du = m.du_kib(p)
    if du is not None:
        assert du * 1024 == s["du_bytes"]


# ----------------------------------------------------------------------------- networking/

def test_tcp_echo_framing_and_multiplexing():
    m = load("networking/tcp-echo.py")
    big = bytes(range(256)) * 4096
    with m.EchoServer() as srv:
        assert srv.address[0] == "127.0.0.1" and srv.address[1] > 0
        assert m.client(srv.address, [b"hello", b"", big]) == [b"hello", b"", big]
    assert not srv.thread.is_alive()
    assert m.concurrent_clients(n_clients=8, rounds=20) == (True, 8)


def test_tcp_recv_exact_reports_a_short_stream():
    m = load("networking/tcp-echo.py")
    a, b = socket.socketpair()
    with a, b:
        a.settimeout(5)
        b.sendall(m.HEADER.pack(10) + b"abc")  # announces 10 bytes, sends 3, then closes
        b.shutdown(socket.SHUT_WR)
        with pytest.raises(ConnectionError):
            m.recv_msg(a)


def test_udp_boundaries_truncation_and_size_limit():
    m = load("networking/udp-exchange.py")
    msgs = [b"a", b"", b"bb" * 10, b"c" * 60_000]
    assert m.exchange(msgs) == [x.upper() for x in msgs]
    assert m.truncation_demo() == (10, b"next")
    assert m.MAX_UDP_PAYLOAD_IPV4 == 65507
    assert m.too_big_errno() == errno.EMSGSIZE
    assert threading.active_count() < 50  # no server threads left behind


# ----------------------------------------------------------------------------- algorithms/

def test_floyd_entry_length_and_step_bound_exhaustively():
    m = load("algorithms/floyd-cycle.py")
    assert m.find_cycle(None) is None
    for n in range(1, 61):
        for entry in [None, *range(n)]:
            head, nodes = m.build(n, entry)
            got = m.find_cycle(head)
            if entry is None:
                assert got is None and m.find_cycle_hashset(head) is None
                continue
            node, length, steps = got
            assert node is nodes[entry] is m.find_cycle_hashset(head)
            assert length == n - entry
            assert steps <= n  # the first phase meets within a + c = n iterations


def test_two_sum_against_brute_force():
    m = load("algorithms/two-sum.py")
    rng = random.Random(1)
    for _ in range(400):
        nums = [rng.randrange(-20, 21) for _ in range(rng.randrange(0, 25))]
        target = rng.randrange(-30, 31)
        pairs = [(i, j) for i, j in itertools.combinations(range(len(nums)), 2) if nums[i] + nums[j] == target]
        got = m.two_sum(nums, target)
        if not pairs:
            assert got is None
        else:
            i, j = got
            assert i < j and nums[i] + nums[j] == target
            assert j == min(q for _, q in pairs)  # one pass: it stops at the first j that completes a pair
        s = sorted(nums)
        got = m.two_sum_sorted(s, target)
        assert (got is None) == (not pairs)
        if got is not None:
            assert got[0] < got[1] and s[got[0]] + s[got[1]] == target


def test_red_black_tree_constants():
    m = load("algorithms/rb-tree.py")
    rng = random.Random(2)
    t = m.RBTree()
    keys = rng.sample(range(10**6), 3000)
    for i, k in enumerate(keys, 1):
        t.insert(k)
        assert t.rotations <= 2  # insertion: at most 2 rotations
        if i % 500 == 0 or i < 64:
            t.validate()
            assert t.height() <= m.height_bound(t.size)
    # insertion only: every recolouring step (case 1) removes one red node, each insert adds one
    assert t.total_recolor_steps <= len(keys)

    live = list(keys)
    for step in range(4000):
        if live and rng.random() < 0.6:
            k = live.pop(rng.randrange(len(live)))
            assert t.delete(k) and not t.search(k)
            assert t.rotations <= 3  # deletion: at most 3 rotations
        else:
            k = rng.randrange(10**6)
            if not t.search(k):
                t.insert(k)
                live.append(k)
                assert t.rotations <= 2
        if step % 500 == 0:
            bh = t.validate()
            assert t.size == len(live) and t.size >= 2 ** (bh - 1) - 1  # n >= 2^bh - 1; validate() counts the root too, so bh = value - 1
            assert t.height() <= m.height_bound(t.size)
    assert not t.delete(-1)

    # sorted input: a plain BST would become a list of height n; the red-black tree comes close to its bound
    for n, expect_height in [(1023, 18), (4095, 22)]:
        seq = m.RBTree()
        for k in range(1, n + 1):
            seq.insert(k)
            assert seq.rotations <= 2
        seq.validate()
        assert seq.height() == expect_height <= m.height_bound(n)  # bounds: 20.0 and 24.0
        assert math.ceil(math.log2(n + 1)) < expect_height          # a perfect tree would have 10 and 12 levels
        assert seq.total_recolor_steps <= n
