"""The coding-round listings of code/foundations/algorithms/ (pages sorting-searching, trees-heaps-graphs,
backtracking-dp-greedy): each solution against a brute-force or library reference on many seeded random inputs
(with empty inputs, duplicates and negative numbers), and each stated complexity by counting operations
(comparisons, probes, relaxations, search-tree nodes) on growing inputs: never by wall-clock time.
"""
from __future__ import annotations

import bisect
import functools
import heapq
import itertools
import math
import random
import statistics
import subprocess
import sys
from collections import Counter, deque
from fractions import Fraction

import pytest

from conftest import ROOT, load_listing

CODE = ROOT / "code" / "foundations" / "algorithms"


def load(name: str):
    """The listings have kebab-case names, so they are loaded from their paths."""
    return load_listing(CODE / f"{name}.py", "coding_round_" + name.replace("-", "_"))


sorting = load("sorting")
bs = load("binary-search")
ht = load("hash-tables")
trees = load("trees")
heaps = load("heaps")
graphs = load("graphs")
bt = load("backtracking")
dp = load("dynamic-programming")
greedy = load("greedy")


def ratios(counts: list[float]) -> list[float]:
    """count(2n) / count(n) for consecutive doublings."""
    return [b / a for a, b in zip(counts, counts[1:])]


def loglog_slope(ns: list[int], counts: list[float]) -> float:
    """Least-squares slope of log(count) against log(n): about 1 for O(n), 1.1 for O(n log n) here, 2 for O(n^2)."""
    xs, ys = [math.log(n) for n in ns], [math.log(c) for c in counts]
    mx, my = statistics.mean(xs), statistics.mean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def int_lists(rng: random.Random, count: int, max_len: int = 40, lo: int = -20, hi: int = 20):
    """Random integer lists plus the edge cases every sort must survive."""
    yield from ([], [0], [5, 5, 5, 5], list(range(10)), list(range(10, 0, -1)), [-3, -1, -2, 0, -5], [2, 1])
    for _ in range(count):
        n = rng.randrange(max_len + 1)
        span = rng.choice([(lo, hi), (-3, 3), (-10**9, 10**9)])   # few distinct values, or almost all distinct
        yield [rng.randint(*span) for _ in range(n)]


class Rec:
    """A record ordered by its key only: equal keys keep their tags, so stability can be observed."""
    __slots__ = ("key", "tag")

    def __init__(self, key: int, tag: int):
        self.key, self.tag = key, tag

    def __lt__(self, other: Rec) -> bool:
        return self.key < other.key


@pytest.fixture
def recursion_limit():
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)          # CPython's default: the trap these tests show
    yield 1000
    sys.setrecursionlimit(old)


# ============================================================================ sorting

def test_numbers_quoted_on_the_sorting_page():
    # the constraints table: every row is a budget of 10^7 to about 10^8 simple operations
    rows = {"n!*n@10": 10 * math.factorial(10), "2^n*n@20": 20 * 2**20, "n^3@500": 500**3,
            "n^2@5000": 5000**2, "nlogn@1e6": 10**6 * math.log2(10**6)}
    assert all(10**7 <= ops <= 1.3 * 10**8 for ops in rows.values()), rows
    assert round(rows["n!*n@10"] / 1e7, 1) == 3.6 and round(rows["2^n*n@20"] / 1e7, 1) == 2.1
    assert rows["n^3@500"] == 1.25e8 and rows["n^2@5000"] == 2.5e7 and round(rows["nlogn@1e6"] / 1e7) == 2
    # comparison lower bound: log2 n! = n log2 n - n log2 e + O(log n), with log2 e = 1.44
    assert round(math.log2(math.e), 2) == 1.44
    for n in (10, 100, 10**4, 10**6):
        gap = math.lgamma(n + 1) / math.log(2) - (n * math.log2(n) - n * math.log2(math.e))
        assert 0 < gap <= math.log2(n) + 2                  # Stirling: the gap is (1/2) log2(2 pi n) + o(1)
    # randomized quicksort (two-way, distinct keys): E[C(n)] = n - 1 + (2/n) sum_{k<n} C(k) = 2(n+1)H_n - 4n
    c, total, harmonic = [Fraction(0)], Fraction(0), Fraction(0)
    for n in range(1, 151):
        total += c[-1]
        c.append(n - 1 + Fraction(2, n) * total)
        harmonic += Fraction(1, n)
        assert c[n] == 2 * (n + 1) * harmonic - 4 * n
    assert round(2 * math.log(2), 2) == 1.39                 # 2 n ln n = 1.39 n log2 n
    # the midpoint overflow: lo + hi <= 2(len - 1) first exceeds INT_MAX = 2^31 - 1 at len = 2^30 + 1
    assert 2**31 - 1 == 2147483647
    assert min(n for n in range(2**30 - 2, 2**30 + 3) if 2 * (n - 1) > 2**31 - 1) == 2**30 + 1
    # linear probing (Knuth): hit (1 + 1/(1-a))/2, miss (1 + 1/(1-a)^2)/2
    knuth = {a: ((1 + 1 / (1 - a)) / 2, (1 + 1 / (1 - a) ** 2) / 2) for a in (0.5, 0.9)}
    assert knuth[0.5] == (1.5, 2.5) and [round(x, 6) for x in knuth[0.9]] == [5.5, 50.5]
    # sizes: 2^32 four-byte counters, a 2^32-bit bitmap, 10^9 ints of 4 bytes, a block of 2 * 10^8 ints
    assert 2**32 * 4 == 16 * 2**30 and 2**32 // 8 == 512 * 2**20
    assert 10**9 * 4 == 4 * 10**9 and 2 * 10**8 * 4 == 800 * 10**6
    # CPython's default recursion limit, quoted on all three pages
    out = subprocess.run([sys.executable, "-c", "import sys; print(sys.getrecursionlimit())"],
                         capture_output=True, text=True, check=True).stdout
    assert int(out) == 1000


def test_every_sort_matches_sorted():
    rng = random.Random(10)
    for xs in int_lists(rng, 400):
        expect = sorted(xs)
        assert sorting.insertion_sort(xs[:]) == expect
        assert sorting.quick_sort(xs[:], rng=random.Random(len(xs))) == expect
        assert sorting.quick_sort_naive(xs[:]) == expect
        assert sorting.merge_sort(xs) == expect
        assert sorting.heap_sort(xs[:]) == expect
        if xs and max(xs) - min(xs) <= 10**4:
            assert sorting.counting_sort(xs) == expect
        assert sorting.radix_sort(xs) == expect
        assert sorting.radix_sort(xs, base=10) == expect
        for k in range(len(xs)):
            assert sorting.quickselect(xs[:], k, rng=random.Random(k)) == expect[k]
    assert sorting.counting_sort([]) == []
    with pytest.raises(IndexError):
        sorting.quickselect([], 0)
    for n in (0, 1, 2, 10, 200):
        fs = [rng.random() for _ in range(n)]
        assert sorting.bucket_sort(fs) == sorted(fs)


def test_stability_of_each_sort():
    rng = random.Random(11)
    unstable = {"quick": False, "heap": False}
    for _ in range(300):
        recs = [Rec(rng.randrange(4), i) for i in range(rng.randrange(2, 30))]
        expect = [r.tag for r in sorted(recs, key=lambda r: r.key)]   # list.sort is stable
        assert [r.tag for r in sorting.insertion_sort(recs[:])] == expect
        assert [r.tag for r in sorting.merge_sort(recs)] == expect
        assert [r.tag for r in sorting.counting_sort(recs, key=lambda r: r.key)] == expect
        for name, fn in (("quick", lambda a: sorting.quick_sort(a, rng=random.Random(1))), ("heap", sorting.heap_sort)):
            got = fn(recs[:])
            assert [r.key for r in got] == sorted(r.key for r in recs)
            unstable[name] |= [r.tag for r in got] != expect
    assert unstable == {"quick": True, "heap": True}   # both reorder equal keys on some inputs

    def insertion_le(a):                                 # the bug: also step over equal elements
        for i in range(1, len(a)):
            x, j = a[i], i - 1
            while j >= 0 and not a[j] < x:              # a[j] >= x, i.e. x <= a[j]
                a[j + 1] = a[j]
                j -= 1
            a[j + 1] = x
        return a

    recs = [Rec(1, 0), Rec(0, 1), Rec(1, 2)]
    got = insertion_le(recs[:])
    assert [r.key for r in got] == [0, 1, 1] and [r.tag for r in got] == [1, 2, 0]   # sorted, but 2 jumped over 0
    # heap sort's build must sift down from n // 2 - 1 backwards: forwards from the root leaves a non-heap
    a = [1, 2, 3, 4]
    for i in range(len(a) // 2):
        sorting._sift_down(a, i, len(a), Counter())
    assert a == [3, 4, 1, 2] and a[1] > a[0]
    a = [1, 2, 3, 4]
    for i in range(len(a) // 2 - 1, -1, -1):
        sorting._sift_down(a, i, len(a), Counter())
    assert all(not a[i] < a[c] for i in range(4) for c in (2 * i + 1, 2 * i + 2) if c < 4)
    # radix sort is correct only because each digit pass is stable: sort by the low digit, then the high one
    pairs = [(rng.randrange(10), rng.randrange(10)) for _ in range(200)]
    by_low = sorting.counting_sort(pairs, key=lambda p: p[1])
    assert sorting.counting_sort(by_low, key=lambda p: p[0]) == sorted(pairs)


def test_quick_sort_is_n_log_n_with_shallow_stack():
    ns = [512 * 2**i for i in range(5)]   # 512 .. 8192
    for shape in ("random", "sorted", "few-distinct"):
        counts = []
        for n in ns:
            rng = random.Random(n)
            xs = {"random": rng.sample(range(10 * n), n), "sorted": list(range(n)),
                  "few-distinct": [rng.randrange(n // 8) for _ in range(n)]}[shape]
            runs = []
            for seed in range(8):                   # the count is random (about 6 % spread): average 8 pivot seeds
                ops = Counter()
                assert sorting.quick_sort(xs[:], ops, random.Random(seed)) == sorted(xs)
                assert ops["max_depth"] <= math.log2(n) + 1   # recurse into the shorter side only
                runs.append(ops["cmp"])
            assert 0.8 <= statistics.mean(runs) / (n * math.log2(n)) <= 2.6
            counts.append(statistics.mean(runs))
        assert all(1.9 <= r <= 2.5 for r in ratios(counts)), (shape, ratios(counts))
    # all keys equal: one three-way partition finishes, 2 comparisons per element
    for n in (1000, 2000):
        ops = Counter()
        sorting.quick_sort([7] * n, ops)
        assert ops["cmp"] == 2 * n


def test_naive_quick_sort_is_quadratic_on_sorted_input(recursion_limit):
    counts = []
    for n in (100, 200, 400, 800):
        ops = Counter()
        sorting.quick_sort_naive(list(range(n)), ops)
        assert ops["cmp"] == n * (n - 1) // 2
        counts.append(ops["cmp"])
    assert all(3.9 <= r <= 4.1 for r in ratios(counts))
    for n in (100, 200, 400):                       # Lomuto puts every key equal to the pivot on one side
        ops = Counter()
        sorting.quick_sort_naive([7] * n, ops)
        assert ops["cmp"] == n * (n - 1) // 2
    with pytest.raises(RecursionError):             # depth n: Python's default limit is hit near n = 1000
        sorting.quick_sort_naive(list(range(3000)))
    assert sorting.quick_sort(list(range(3000))) == list(range(3000))   # the shallow version is fine


def test_merge_heap_insertion_counting_radix_bucket_counts():
    ns = [1024 * 2**i for i in range(5)]
    merge, heap, qsel = [], [], []
    for n in ns:
        xs = random.Random(n).sample(range(10 * n), n)
        lg = math.ceil(math.log2(n))
        ops = Counter()
        sorting.merge_sort(xs, ops)
        assert ops["cmp"] <= n * lg - 2**lg + 1          # worst case of top-down merge sort
        merge.append(ops["cmp"])
        ops = Counter()
        sorting.heap_sort(xs[:], ops)
        assert ops["cmp"] <= 2 * n * math.log2(n)
        heap.append(ops["cmp"])
        runs = []
        for seed in range(16):                           # one run varies a lot: average 16 pivot seeds
            ops = Counter()
            sorting.quickselect(xs[:], n // 2, ops, random.Random(seed))
            runs.append(ops["cmp"])
        assert statistics.mean(runs) <= 8 * n            # expected O(n): a constant per element, not log n
        qsel.append(statistics.mean(runs))
    assert all(2.0 <= r <= 2.3 for r in ratios(merge)), ratios(merge)
    assert all(2.0 <= r <= 2.35 for r in ratios(heap)), ratios(heap)
    assert 0.85 <= loglog_slope(ns, qsel) <= 1.15, qsel   # noisy run to run: fit all sizes at once

    ins_random, ins_sorted = [], []
    ins_ns = (250, 500, 1000, 2000)
    for n in ins_ns:
        ops = Counter()
        sorting.insertion_sort(random.Random(n).sample(range(n), n), ops)
        assert ops["cmp"] == pytest.approx(n * n / 4, rel=0.15)  # inversions of a random permutation: n(n-1)/4 on average
        ins_random.append(ops["cmp"])
        ops = Counter()
        sorting.insertion_sort(list(range(n)), ops)
        assert ops["cmp"] == n - 1                       # adaptive: no inversions, one comparison each
        ins_sorted.append(ops["cmp"])
    assert 1.9 <= loglog_slope(ins_ns, ins_random) <= 2.1, ins_random

    steps, passes = [], []
    for n in (1000, 2000, 4000, 8000):
        rng = random.Random(n)
        xs = [rng.randrange(-500, 500) for _ in range(n)]
        ops = Counter()
        sorting.counting_sort(xs, ops=ops)
        k = max(xs) - min(xs) + 1
        assert ops["step"] == 2 * n + k - 1              # count n, prefix sums k - 1, place n
        big = [rng.randrange(-2**31, 2**31) for _ in range(n)]
        ops = Counter()
        assert sorting.radix_sort(big, ops=ops) == sorted(big)
        assert ops["pass"] == math.ceil(math.log2(max(big) - min(big) + 1) / 8) == 4   # d = 4 digits of 8 bits
        steps.append(ops["step"])
    assert all(1.8 <= r <= 2.1 for r in ratios(steps)), ratios(steps)

    uniform, crowded = [], []
    for n in (500, 1000, 2000, 4000):
        rng = random.Random(n)
        ops = Counter()
        sorting.bucket_sort([rng.random() for _ in range(n)], ops)
        assert ops["cmp"] <= 2 * n                        # E[sum of bucket sizes squared] = 2n - 1
        uniform.append(ops["cmp"])
        ops = Counter()
        sorting.bucket_sort([rng.random() / n for _ in range(n)], ops)   # all in the first bucket
        crowded.append(ops["cmp"])
    assert all(1.7 <= r <= 2.3 for r in ratios(uniform)), ratios(uniform)
    n, squares = 1000, []
    for seed in range(40):                               # bucket sizes are Binomial(n, 1/n): E[n_i^2] = 2 - 1/n
        rng, sizes = random.Random(seed), Counter()
        for _ in range(n):
            sizes[min(int(rng.random() * n), n - 1)] += 1
        squares.append(sum(v * v for v in sizes.values()))
    assert statistics.mean(squares) == pytest.approx(2 * n - 1, rel=0.03)
    assert all(3.6 <= r <= 4.4 for r in ratios(crowded)), ratios(crowded)


# ============================================================================ binary search

def test_binary_search_bounds_against_bisect():
    rng = random.Random(20)
    for xs in int_lists(rng, 400, max_len=60, lo=-15, hi=15):
        a = sorted(xs)
        probes = {d + v for v in a for d in (-1, 0, 1)} | {-(10**10), 10**10, 0}   # every value, its neighbours, far outside
        for x in sorted(probes):
            assert bs.lower_bound(a, x) == bisect.bisect_left(a, x)
            assert bs.upper_bound(a, x) == bisect.bisect_right(a, x)
            idx = [i for i, v in enumerate(a) if v == x]
            assert bs.search_range(a, x) == ((idx[0], idx[-1]) if idx else (-1, -1))
            i = bs.binary_search(a, x)
            assert (i == -1) if not idx else (a[i] == x)


def test_binary_search_iterations_are_logarithmic():
    for n in [1, 2, 3, 7, 8, 100, 1000, 4095, 4096, 10**5]:
        a = list(range(0, 2 * n, 2))
        bound = math.floor(math.log2(n)) + 1
        worst = {}
        for x in list(range(-1, 2 * n + 1, max(1, n // 300))) + [2 * n - 2]:
            for name, fn in (("closed", bs.binary_search), ("lower", bs.lower_bound), ("upper", bs.upper_bound)):
                ops = Counter()
                fn(a, x, ops)
                worst[name] = max(worst.get(name, 0), ops["iter"])
        assert max(worst.values()) <= bound, (n, worst)
    # doubling n adds one iteration, it does not double them
    growth = []
    for n in (1024, 2048, 4096, 8192):
        ops = Counter()
        bs.lower_bound(list(range(n)), n, ops)
        growth.append(ops["iter"])
    assert [b - a for a, b in zip(growth, growth[1:])] == [1, 1, 1]


def test_rotated_search_and_binary_search_on_the_answer():
    rng = random.Random(21)
    for n in range(0, 30):
        base = sorted(rng.sample(range(-100, 100), n))
        for r in range(max(n, 1)):
            a = base[r:] + base[:r]
            for x in base + [-101, 100, 0, 1]:
                ops = Counter()
                got = bs.search_rotated(a, x, ops)
                assert got == (a.index(x) if x in a else -1)
                assert ops["iter"] <= (math.floor(math.log2(n)) + 1 if n else 0)

    def rotated_lt(a, x):                            # the bug: a[lo] < a[mid] misses a one-element left half
        lo, hi = 0, len(a) - 1
        while lo <= hi:
            mid = (lo + hi) // 2
            if a[mid] == x:
                return mid
            if a[lo] < a[mid]:
                lo, hi = (lo, mid - 1) if a[lo] <= x < a[mid] else (mid + 1, hi)
            else:
                lo, hi = (mid + 1, hi) if a[mid] < x <= a[hi] else (lo, mid - 1)
        return -1

    assert rotated_lt([3, 1], 1) == -1 and bs.search_rotated([3, 1], 1) == 1
    for _ in range(300):
        w = [rng.randint(1, 30) for _ in range(rng.randint(1, 25))]
        days = rng.randint(1, len(w))

        def days_needed(cap):
            need, load = 1, 0
            for x in w:
                if load + x > cap:
                    need, load = need + 1, 0
                load += x
            return need

        brute = next(c for c in range(max(w), sum(w) + 1) if days_needed(c) <= days)
        ops = Counter()
        assert bs.min_ship_capacity(w, days, ops) == brute
        assert ops["check"] <= math.ceil(math.log2(sum(w) - max(w) + 1))


# ============================================================================ hashing

@pytest.mark.parametrize("cls", ["ChainedMap", "LinearProbingMap"])
def test_hash_maps_against_dict(cls):
    rng = random.Random(30)
    for trial in range(40):
        m, ref = getattr(ht, cls)(capacity=rng.choice([1, 2, 8]) if cls == "ChainedMap" else rng.choice([2, 8])), {}
        keyspace = rng.choice([8, 50, 400])
        for _ in range(1500):
            k = rng.randrange(keyspace) if trial % 2 else f"k{rng.randrange(keyspace)}"
            op = rng.random()
            if op < 0.5:
                m.put(k, op)
                ref[k] = op
            elif op < 0.8:
                assert m.delete(k) == (ref.pop(k, None) is not None)
            else:
                assert m.get(k) == ref.get(k)
            assert m.size == len(ref)
        for k in range(keyspace):
            assert m.get(k) == ref.get(k)
        if cls == "LinearProbingMap":
            assert m.used <= m.max_load * len(m.keys) and EMPTY_EXISTS(m)


def EMPTY_EXISTS(m) -> bool:
    return any(k is ht.EMPTY for k in m.keys)   # every probe sequence must be able to stop


def test_probe_counts_match_the_load_factor_formulas():
    m = 1 << 14
    for alpha in (0.5, 1.0, 2.0, 4.0):           # chaining: hit 1 + alpha/2, miss alpha (comparisons with keys)
        hit, miss = ht.average_probes(ht.ChainedMap, m, alpha, seed=1)
        assert hit == pytest.approx(1 + alpha / 2, rel=0.05)
        assert miss == pytest.approx(alpha, rel=0.05)
    for alpha, tol in ((0.5, 0.08), (0.75, 0.12), (0.9, 0.3)):   # linear probing (Knuth): hit and miss
        hits, misses = zip(*(ht.average_probes(ht.LinearProbingMap, m, alpha, seed=s) for s in range(3)))
        assert statistics.mean(hits) == pytest.approx((1 + 1 / (1 - alpha)) / 2, rel=tol)
        assert statistics.mean(misses) == pytest.approx((1 + 1 / (1 - alpha) ** 2) / 2, rel=tol)


def test_tombstones_keep_probe_chains_intact():
    t = ht.LinearProbingMap(capacity=8, max_load=0.9)
    for k in (3, 11, 19):                        # hash(k) % 8 == 3 for all three: one cluster at slots 3, 4, 5
        t.put(k, k)
    assert t.delete(3) and t.get(11) == 11 and t.get(19) == 19
    broken = ht.LinearProbingMap(capacity=8, max_load=0.9)
    for k in (3, 11, 19):
        broken.put(k, k)
    i, _ = broken._find(3)
    broken.keys[i] = ht.EMPTY                    # the bug: empty the slot instead of leaving a tombstone
    assert broken.get(11) is None and broken.get(19) is None   # the chain is cut: both keys are lost


def test_resizing_is_amortised_constant():
    for cls in (ht.ChainedMap, ht.LinearProbingMap):
        totals = []
        for n in (2000, 4000, 8000, 16000):
            t = cls()
            keys = random.Random(n).sample(range(1 << 60), n)
            for k in keys:
                t.put(k, k)
            assert t.ops["move"] < 2 * n              # capacities double: moves 8 + 16 + ... < 2n
            totals.append(t.ops["probe"] + t.ops["move"])
        assert all(1.6 <= r <= 2.5 for r in ratios(totals)), (cls.__name__, ratios(totals))


# ============================================================================ trees

def random_tree(rng: random.Random, n: int, vals=None):
    """A binary tree of random shape: each new node hangs on a random free child slot."""
    vals = vals if vals is not None else [rng.randint(-5, 5) for _ in range(n)]
    if n == 0:
        return None, []
    nodes = [trees.TreeNode(vals[0])]
    slots = [(nodes[0], "left"), (nodes[0], "right")]
    for v in vals[1:]:
        parent, side = slots.pop(rng.randrange(len(slots)))
        child = trees.TreeNode(v)
        setattr(parent, side, child)
        nodes.append(child)
        slots += [(child, "left"), (child, "right")]
    return nodes[0], nodes


def test_traversals_iterative_equal_recursive():
    rng = random.Random(40)
    root = trees.from_level_order([3, 9, 20, None, None, 15, 7])
    assert trees.traverse_rec(root, "pre") == [3, 9, 20, 15, 7]
    assert trees.traverse_rec(root, "in") == [9, 3, 15, 20, 7]
    assert trees.traverse_rec(root, "post") == [9, 15, 7, 20, 3]
    assert trees.level_order(root) == [[3], [9, 20], [15, 7]]
    for n in list(range(0, 12)) * 5 + [rng.randrange(100) for _ in range(100)]:
        root, nodes = random_tree(rng, n)
        for order, fn in (("pre", trees.preorder_iter), ("in", trees.inorder_iter), ("post", trees.postorder_iter)):
            ops = Counter()
            assert fn(root, ops) == trees.traverse_rec(root, order)
            assert ops["push"] == n                  # every node enters the stack exactly once: O(n)
        levels = trees.level_order(root)
        assert sum(levels, []) == [nd.val for nd in bfs_nodes(root)]


def bfs_nodes(root):
    out, queue = [], deque([root] if root else [])
    while queue:
        nd = queue.popleft()
        out.append(nd)
        queue.extend(c for c in (nd.left, nd.right) if c)
    return out


def test_recursion_depth_trap_on_a_degenerate_tree(recursion_limit):
    root = None
    for v in range(5000, 0, -1):                     # a left chain 5000 deep
        root = trees.TreeNode(v, left=root)
    with pytest.raises(RecursionError):
        trees.traverse_rec(root, "in")
    assert trees.inorder_iter(root) == trees.postorder_iter(root) == list(range(5000, 0, -1))
    assert trees.preorder_iter(root) == list(range(1, 5001))


def test_bst_operations_against_a_set():
    rng = random.Random(41)
    for _ in range(60):
        root, ref = None, set()
        for _ in range(300):
            k = rng.randrange(-50, 50)
            if rng.random() < 0.6:
                root = trees.bst_insert(root, k)
                ref.add(k)
            else:
                root = trees.bst_delete(root, k)
                ref.discard(k)
            assert (trees.bst_search(root, k) is not None) == (k in ref)
        assert trees.inorder_iter(root) == sorted(ref)
        assert trees.is_valid_bst(root)
    # parent-child checks alone would accept this: 4 sits in the right subtree of 5
    assert not trees.is_valid_bst(trees.from_level_order([5, 1, 6, None, None, 4, 7]))


def test_bst_search_cost_is_the_height():
    ns, avg_depth, chain = (256, 512, 1024, 2048, 4096), [], []
    for n in ns:
        depths = []
        for seed in range(8):                        # random insertion order: average over eight trees
            keys = random.Random(10 * n + seed).sample(range(10 * n), n)
            root = None
            for k in keys:
                root = trees.bst_insert(root, k)
            ops = Counter()
            for k in keys:
                trees.bst_search(root, k, ops)
            depths.append(ops["step"] / n)
        harmonic = sum(1 / i for i in range(1, n + 1))
        expect = 2 * (1 + 1 / n) * harmonic - 4        # expected average depth of a random BST: about 2 ln n
        assert abs(statistics.mean(depths) - expect) <= 1.0   # one tree's average depth has a spread of about 0.65
        avg_depth.append(statistics.mean(depths))
    expect_4096 = 2 * (1 + 1 / 4096) * sum(1 / i for i in range(1, 4097)) - 4
    assert round(expect_4096, 1) == 13.8 and abs(expect_4096 - (2 * math.log(4096) - 2.85)) < 0.02
    assert round(2 * math.log(2), 2) == 1.39
    log_ns = [math.log2(n) for n in ns]                # logarithmic: + 2 ln 2 = 1.39 steps per doubling of n
    slope = statistics.linear_regression(log_ns, avg_depth).slope
    assert 1.1 <= slope <= 1.7, avg_depth
    for n in (256, 512, 1024):
        root = None
        for k in range(n):                           # sorted insertion: a chain of height n
            root = trees.bst_insert(root, k)
        ops = Counter()
        trees.bst_search(root, n - 1, ops)
        assert ops["step"] == n - 1
        chain.append(ops["step"])
    assert all(1.95 <= r <= 2.05 for r in ratios(chain))


def test_lowest_common_ancestor_against_brute_force():
    rng = random.Random(42)
    for _ in range(150):
        n = rng.randint(1, 40)
        root, nodes = random_tree(rng, n, vals=list(range(n)))
        below = {id(nd): {id(d) for d in bfs_nodes(nd)} for nd in nodes}
        depth = {id(nd): 0 for nd in nodes}
        for nd in bfs_nodes(root):
            for c in (nd.left, nd.right):
                if c:
                    depth[id(c)] = depth[id(nd)] + 1
        for _ in range(10):
            p, q = rng.choice(nodes), rng.choice(nodes)
            brute = max((nd for nd in nodes if {id(p), id(q)} <= below[id(nd)]), key=lambda nd: depth[id(nd)])
            assert trees.lca(root, p, q) is brute
            assert trees.lca_iter(root, p, q) is brute
    for _ in range(100):
        keys = rng.sample(range(-100, 100), rng.randint(1, 40))
        root = None
        for k in keys:
            root = trees.bst_insert(root, k)
        p, q = rng.choice(keys), rng.choice(keys)
        assert trees.lca_bst(root, p, q) is trees.lca(root, trees.bst_search(root, p), trees.bst_search(root, q))


# ============================================================================ heaps

def test_min_heap_against_heapq():
    rng = random.Random(50)
    for xs in int_lists(rng, 200):
        h, ref = heaps.MinHeap(xs), list(xs)
        heapq.heapify(ref)
        for _ in range(60):
            op = rng.random()
            if op < 0.4 or not ref:
                x = rng.randint(-30, 30)
                h.push(x)
                heapq.heappush(ref, x)
            elif op < 0.7:
                assert h.pop() == heapq.heappop(ref)
            else:
                x = rng.randint(-30, 30)
                assert h.replace(x) == heapq.heapreplace(ref, x)
            assert len(h) == len(ref) and (not ref or h.peek() == ref[0])
        assert [h.pop() for _ in range(len(h))] == sorted(ref)


def test_build_heap_is_linear_but_n_pushes_are_n_log_n():
    def height_sum(n):                               # heights of all nodes of the complete tree with n nodes
        h = [0] * n
        for i in range(n // 2 - 1, -1, -1):
            h[i] = 1 + max(h[c] for c in (2 * i + 1, 2 * i + 2) if c < n)
        return sum(h)

    assert all(height_sum(n) == n - bin(n).count("1") for n in range(1, 3000))
    build, pushes = [], []
    for n in (1024, 2048, 4096, 8192, 16384):
        ops = Counter()
        heaps.MinHeap(random.Random(n).sample(range(n), n), ops)
        assert ops["cmp"] <= 2 * (n - bin(n).count("1")) < 2 * n   # 2 comparisons per level of every sift-down
        build.append(ops["cmp"])
        ops = Counter()
        h = heaps.MinHeap(ops=ops)
        for x in range(n, 0, -1):                    # every new key is the smallest: it rises to the root
            h.push(x)
        assert ops["cmp"] == sum(int(math.log2(i)) for i in range(1, n + 1))
        pushes.append(ops["cmp"])
    assert all(1.9 <= r <= 2.1 for r in ratios(build)), ratios(build)
    assert all(2.1 <= r <= 2.3 for r in ratios(pushes)), ratios(pushes)


def test_merge_k_sorted_lists():
    rng = random.Random(51)
    assert heaps.merge_k_sorted([]) == [] and heaps.merge_k_sorted([[], []]) == []
    for _ in range(300):
        lists = [sorted(rng.randint(-20, 20) for _ in range(rng.randrange(8))) for _ in range(rng.randrange(8))]
        assert heaps.merge_k_sorted(lists) == sorted(itertools.chain.from_iterable(lists))
    by_n, by_k = [], []
    for total in (4096, 8192, 16384, 32768):         # fixed k = 16: linear in N
        lists = [sorted(random.Random(i).sample(range(10**6), total // 16)) for i in range(16)]
        ops = Counter()
        heaps.merge_k_sorted(lists, ops)
        by_n.append(ops["cmp"])
    assert all(1.9 <= r <= 2.1 for r in ratios(by_n)), ratios(by_n)
    for k in (4, 16, 64, 256):                       # fixed N: proportional to log k
        lists = [sorted(random.Random(k + i).sample(range(10**6), 8192 // k)) for i in range(k)]
        ops = Counter()
        heaps.merge_k_sorted(lists, ops)
        by_k.append(ops["cmp"] / (8192 * math.log2(k)))
    assert all(0.5 <= c <= 2.0 for c in by_k), by_k


def test_running_median_against_statistics():
    rng = random.Random(52)
    for _ in range(100):
        xs = [rng.randint(-50, 50) for _ in range(rng.randint(1, 60))]
        rm = heaps.RunningMedian()
        for i, x in enumerate(xs, 1):
            rm.add(x)
            assert rm.median() == statistics.median(xs[:i])


# ============================================================================ graphs

def random_graph(rng: random.Random, n: int, m: int, weights=None, directed=False):
    edges = []
    for _ in range(m):
        u, v = rng.randrange(n), rng.randrange(n)
        edges.append((u, v, rng.randint(*weights)) if weights else (u, v))
    return edges


def floyd_warshall(n, edges, directed):
    d = [[0 if i == j else math.inf for j in range(n)] for i in range(n)]
    for u, v, *w in edges:
        w = w[0] if w else 1
        d[u][v] = min(d[u][v], w)
        if not directed:
            d[v][u] = min(d[v][u], w)
    for k in range(n):
        for i in range(n):
            for j in range(n):
                d[i][j] = min(d[i][j], d[i][k] + d[k][j])
    return d


def test_bfs_and_dfs():
    rng = random.Random(60)
    for _ in range(200):
        n = rng.randint(1, 25)
        edges = random_graph(rng, n, rng.randint(0, 3 * n))
        adj = graphs.adjacency(n, edges)
        d = floyd_warshall(n, edges, directed=False)
        for src in range(n):
            ops = Counter()
            dist = graphs.bfs_distances(adj, src, ops)
            assert dist == [-1 if math.isinf(x) else x for x in d[src]]
            assert ops["edge"] == sum(len(adj[u]) for u in range(n) if dist[u] >= 0)   # each adjacency once

            seen, order = set(), []

            def rec(u):
                seen.add(u)
                order.append(u)
                for v in adj[u]:
                    if v not in seen:
                        rec(v)

            rec(src)
            assert graphs.dfs_order(adj, src) == order
    for n in (5, 10, 50):                            # on K_n the lazy-marking DFS stack holds O(E) entries
        ops = Counter()
        adj = graphs.adjacency(n, list(itertools.combinations(range(n), 2)))
        assert graphs.dfs_order(adj, 0, ops) == list(range(n))
        assert ops["max_stack"] == (n * n - 3 * n + 4) // 2
    growth = []
    for n in (1000, 2000, 4000, 8000):
        edges = random_graph(random.Random(n), n, 4 * n)
        ops = Counter()
        graphs.bfs_distances(graphs.adjacency(n, edges), 0, ops)
        growth.append(ops["edge"])
    assert all(1.8 <= r <= 2.2 for r in ratios(growth)), ratios(growth)


def test_topological_sort_and_cycle_detection():
    rng = random.Random(61)
    for _ in range(400):
        n = rng.randint(0, 6)
        if rng.random() < 0.5 and n:                 # a DAG: edges only forward in a hidden order
            perm = rng.sample(range(n), n)
            pairs = [(perm[i], perm[j]) for i in range(n) for j in range(i + 1, n)]
            edges = rng.sample(pairs, rng.randint(0, len(pairs)))
        else:
            edges = random_graph(rng, n, rng.randint(0, 2 * n)) if n else []
        ops = Counter()
        order = graphs.topo_sort(n, edges, ops)
        acyclic = any(all(p.index(u) < p.index(v) for u, v in edges) for p in itertools.permutations(range(n)))
        assert (order is not None) == acyclic
        if order is not None:
            pos = {u: i for i, u in enumerate(order)}
            assert sorted(order) == list(range(n)) and all(pos[u] < pos[v] for u, v in edges)
            assert ops["edge"] == len(edges)          # each edge lowers one in-degree once: O(V + E)
    assert graphs.topo_sort(1, [(0, 0)]) is None     # a self-loop is a cycle


def test_dijkstra_against_bellman_ford_and_floyd():
    rng = random.Random(62)
    for _ in range(300):
        n = rng.randint(1, 15)
        edges = random_graph(rng, n, rng.randint(0, 4 * n), weights=(0, 20), directed=True)
        d = floyd_warshall(n, edges, directed=True)
        src = rng.randrange(n)
        ops = Counter()
        got = graphs.dijkstra(n, edges, src, ops)
        assert got == d[src] == graphs.bellman_ford(n, edges, src)
        reachable = [u for u in range(n) if not math.isinf(got[u])]
        out_deg = Counter(u for u, _, _ in edges)
        assert ops["edge"] == sum(out_deg[u] for u in reachable)   # each vertex is expanded once
        assert ops["push"] <= len(edges) + 1
    growth = []
    for n in (1000, 2000, 4000, 8000):
        edges = random_graph(random.Random(n), n, 5 * n, weights=(1, 100), directed=True)
        ops = Counter()
        graphs.dijkstra(n, edges, 0, ops)
        growth.append(ops["edge"] + ops["push"])
    assert all(1.8 <= r <= 2.2 for r in ratios(growth)), ratios(growth)


def test_dijkstra_needs_non_negative_weights():
    edges = [(0, 1, 1), (0, 2, 2), (2, 1, -2), (1, 3, 1)]
    truth = graphs.bellman_ford(4, edges, 0)
    assert truth == [0, 0, 2, 1]

    def dijkstra_visited(n, edges, src):              # the textbook variant that never re-expands a vertex
        adj = graphs.adjacency(n, edges, directed=True)
        dist, done, heap = [math.inf] * n, [False] * n, [(0, src)]
        dist[src] = 0
        while heap:
            d, u = heapq.heappop(heap)
            if done[u]:
                continue
            done[u] = True
            for v, w in adj[u]:
                if not done[v] and d + w < dist[v]:
                    dist[v] = d + w
                    heapq.heappush(heap, (dist[v], v))
        return dist

    assert dijkstra_visited(4, edges, 0) == [0, 1, 2, 2]   # vertex 1 was settled at 1 before the -2 edge was seen
    assert graphs.dijkstra(4, edges, 0) == truth    # lazy deletion re-expands vertex 1
    # without a negative cycle the re-expanding version is always right (a label-correcting method),
    # but it may expand a vertex more than once: the O(E log V) bound is gone
    rng, reexpanded = random.Random(64), 0
    for _ in range(200):
        n = rng.randint(2, 9)
        perm = rng.sample(range(n), n)                # a DAG: edges only forward in a hidden order
        dag = [(perm[i], perm[j], rng.randint(-10, 10)) for i in range(n) for j in range(i + 1, n) if rng.random() < 0.5]
        ops = Counter()
        assert graphs.dijkstra(n, dag, perm[0], ops) == graphs.bellman_ford(n, dag, perm[0])
        reexpanded += ops["edge"] > len(dag)
    assert reexpanded > 0


def test_union_find():
    rng = random.Random(63)
    for _ in range(200):
        n = rng.randint(1, 30)
        edges = random_graph(rng, n, rng.randint(0, 2 * n))
        uf = graphs.UnionFind(n)
        for u, v in edges:
            uf.union(u, v)
        adj = graphs.adjacency(n, edges)
        reach = [graphs.bfs_distances(adj, u) for u in range(n)]   # BFS is checked against Floyd-Warshall above
        assert uf.components == len({min(v for v in range(n) if reach[u][v] >= 0) for u in range(n)})
        for u in range(n):
            for v in range(n):
                assert (uf.find(u) == uf.find(v)) == (reach[u][v] >= 0)
    good, bad = [], []
    for n in (250, 500, 1000, 2000):
        for flags, out in (({}, good), ({"by_size": False, "compress": False}, bad)):
            uf = graphs.UnionFind(n, **flags)
            for i in range(1, n):
                uf.union(0, i)            # naive linking hangs the old root under i: a chain 0 -> 1 -> ... -> i
            out.append(uf.ops["step"])
        assert good[-1] == n - 2                      # by size: i joins the big tree's root; find(0) takes one step
        assert bad[-1] == (n - 1) * (n - 2) // 2      # naive: find(0) walks the whole chain built so far
    assert all(1.8 <= r <= 2.2 for r in ratios(good)), ratios(good)
    assert all(3.8 <= r <= 4.2 for r in ratios(bad)), ratios(bad)
    random_steps = []
    for n in (2000, 4000, 8000, 16000):
        rng = random.Random(n)
        uf = graphs.UnionFind(n)
        for _ in range(2 * n):
            uf.union(rng.randrange(n), rng.randrange(n))
        random_steps.append(uf.ops["step"])
        assert uf.ops["step"] <= 3 * (4 * n)          # 2n unions = 4n finds
    assert all(1.8 <= r <= 2.2 for r in ratios(random_steps)), ratios(random_steps)


# ============================================================================ backtracking

def test_permutations_with_duplicates():
    rng = random.Random(70)
    assert bt.permutations_unique([]) == [[]]
    for _ in range(200):
        nums = [rng.randint(-2, 2) for _ in range(rng.randint(1, 7))]
        got = bt.permutations_unique(nums)
        assert got == sorted(map(list, set(itertools.permutations(nums))))
    counts = []
    for n in range(1, 9):                            # distinct: nodes = sum_k n!/(n-k)!, about e * n!
        ops = Counter()
        assert len(bt.permutations_unique(list(range(n)), ops)) == math.factorial(n)
        assert ops["node"] == sum(math.perm(n, k) for k in range(n + 1))
        counts.append(ops["node"])
    assert all(counts[n] == (n + 1) * counts[n - 1] + 1 for n in range(1, 8))   # nodes(n) = n * nodes(n-1) + 1: grows like n!
    assert counts == [math.floor(math.e * math.factorial(n)) for n in range(1, 9)] and counts[-1] == 109601
    ops = Counter()
    bt.permutations_unique([1] * 8, ops)
    assert ops["node"] == 9                          # all equal: the pruning leaves a single path


def test_subsets_and_combination_sum():
    rng = random.Random(71)
    assert bt.subsets_unique([]) == [[]]
    for _ in range(200):
        nums = [rng.randint(-3, 3) for _ in range(rng.randint(0, 9))]
        got = bt.subsets_unique(nums)
        brute = {tuple(sorted(c)) for r in range(len(nums) + 1) for c in itertools.combinations(nums, r)}
        assert len(got) == len(brute) and {tuple(s) for s in got} == brute
    counts = []
    for n in range(1, 13):
        ops = Counter()
        bt.subsets_unique(list(range(n)), ops)
        assert ops["node"] == 2**n                    # every node is one subset
        counts.append(ops["node"])
    assert set(ratios(counts)) == {2.0}
    for _ in range(150):
        cands = rng.sample(range(1, 12), rng.randint(1, 5))
        target = rng.randint(1, 25)
        brute = {c for r in range(1, target // min(cands) + 1)
                 for c in itertools.combinations_with_replacement(sorted(cands), r) if sum(c) == target}
        got = bt.combination_sum(cands, target)
        assert len(got) == len(brute) and {tuple(c) for c in got} == brute


def test_n_queens_with_and_without_pruning():
    for n in range(1, 9):
        ops = Counter()
        sols = bt.n_queens(n, ops)
        brute = [list(p) for p in itertools.permutations(range(n))
                 if all(abs(p[i] - p[j]) != j - i for i in range(n) for j in range(i + 1, n))]
        assert sorted(sols) == sorted(brute)
        if n <= 6:
            raw = Counter()
            assert bt.n_queens_unpruned(n, raw) == len(brute)
            assert raw["node"] == sum(n**k for k in range(n + 1))   # the full n-ary tree
            if n >= 5:
                assert ops["node"] * 50 < raw["node"]   # pruning cuts the tree by orders of magnitude
    ops = Counter()
    assert len(bt.n_queens(8, ops)) == 92            # the same count the permutation brute force gives above
    assert ops["node"] == 2057 and sum(8**k for k in range(9)) == 19173961   # quoted on the page


# ============================================================================ dynamic programming

def test_knapsacks_against_brute_force():
    rng = random.Random(80)
    for _ in range(300):
        n = rng.randint(0, 10)
        wgt = [rng.randint(1, 10) for _ in range(n)]
        val = [rng.randint(0, 20) for _ in range(n)]
        cap = rng.randint(0, 30)
        brute = max(sum(val[i] for i in s) for r in range(n + 1) for s in itertools.combinations(range(n), r)
                    if sum(wgt[i] for i in s) <= cap)
        assert dp.knapsack_01(wgt, val, cap) == dp.knapsack_01_1d(wgt, val, cap) == brute
        counts = itertools.product(*(range(cap // w + 1) for w in wgt[:5]))   # up to 5 item kinds, any multiplicity
        brute_u = max(sum(c * v for c, v in zip(cs, val)) for cs in counts
                      if sum(c * w for c, w in zip(cs, wgt)) <= cap)
        assert dp.knapsack_unbounded(wgt[:5], val[:5], cap) == brute_u
    states = []
    for n in (25, 50, 100, 200):
        ops = Counter()
        dp.knapsack_01([random.Random(i).randint(1, 50) for i in range(n)], list(range(n)), 500, ops)
        assert ops["state"] == n * 501
        states.append(ops["state"])
    assert set(ratios(states)) == {2.0}                # O(n * cap): pseudo-polynomial in the capacity


def test_coin_change_variants():
    rng = random.Random(81)
    for _ in range(300):
        coins = rng.sample(range(1, 13), rng.randint(1, 4))
        amount = rng.randint(0, 30)
        dist = {0: 0}                                 # BFS over amounts: fewest coins
        frontier = deque([0])
        while frontier:
            a = frontier.popleft()
            for c in coins:
                if a + c <= amount and a + c not in dist:
                    dist[a + c] = dist[a] + 1
                    frontier.append(a + c)
        assert dp.coin_change_min(coins, amount) == dist.get(amount, -1)
        combos = sum(1 for cs in itertools.product(*(range(amount // c + 1) for c in coins))
                     if sum(k * c for k, c in zip(cs, coins)) == amount)
        assert dp.coin_change_ways(coins, amount) == combos

        @functools.cache
        def sequences(a):
            return 1 if a == 0 else sum(sequences(a - c) for c in coins if c <= a)

        assert dp.coin_change_sequences(coins, amount) == sequences(amount)
    assert dp.coin_change_ways([1, 2], 3) == 2 and dp.coin_change_sequences([1, 2], 3) == 3   # {1,1,1},{1,2} vs 1+1+1,1+2,2+1


def test_edit_distance():
    rng = random.Random(82)

    def naive(s, t):                                  # the definition, exponential: only for short strings
        if not s or not t:
            return len(s) + len(t)
        if s[-1] == t[-1]:
            return naive(s[:-1], t[:-1])
        return 1 + min(naive(s, t[:-1]), naive(s[:-1], t), naive(s[:-1], t[:-1]))

    for _ in range(400):
        s = "".join(rng.choice("abc") for _ in range(rng.randint(0, 5)))
        t = "".join(rng.choice("abc") for _ in range(rng.randint(0, 5)))
        assert dp.edit_distance(s, t) == dp.edit_distance_1d(s, t) == naive(s, t)
    for _ in range(100):
        s = "".join(rng.choice("abcd") for _ in range(rng.randint(0, 30)))
        t = "".join(rng.choice("abcd") for _ in range(rng.randint(0, 30)))
        d = dp.edit_distance(s, t)
        assert d == dp.edit_distance_1d(s, t) == dp.edit_distance(t, s)
        assert abs(len(s) - len(t)) <= d <= max(len(s), len(t))
    assert dp.edit_distance("horse", "ros") == 3 and dp.edit_distance("intention", "execution") == 5
    cells = []
    for n in (50, 100, 200):
        ops = Counter()
        dp.edit_distance("a" * n, "b" * n, ops)
        cells.append(ops["state"])
    assert set(ratios(cells)) == {4.0}                 # O(mn): both lengths doubled


def test_longest_increasing_subsequence():
    rng = random.Random(83)
    for xs in int_lists(rng, 300, max_len=12, lo=-5, hi=5):
        brute = max((r for r in range(len(xs) + 1) for c in itertools.combinations(xs, r)
                     if all(a < b for a, b in zip(c, c[1:]))), default=0)
        assert dp.lis_quadratic(xs) == dp.lis_patience(xs) == brute
    quad, pat = [], []
    for n in (512, 1024, 2048, 4096):
        xs = random.Random(n).sample(range(10 * n), n)
        ops = Counter()
        assert dp.lis_patience(xs, ops) == (dp.lis_quadratic(xs) if n <= 1024 else dp.lis_patience(xs))
        assert ops["cmp"] <= n * math.ceil(math.log2(n + 1))
        pat.append(ops["cmp"])
        if n <= 1024:
            ops = Counter()
            dp.lis_quadratic(xs, ops)
            assert ops["cmp"] == n * (n - 1) // 2
            quad.append(ops["cmp"])
    assert 3.9 <= ratios(quad)[0] <= 4.1
    tails = []
    for x in [3, 4, 1]:                               # the page's example: tails is not a subsequence
        i = bisect.bisect_left(tails, x)
        tails[i:i + 1] = [x]
    assert tails == [1, 4] and dp.lis_patience([3, 4, 1]) == len(tails) == 2
    assert all(1.9 <= r <= 2.5 for r in ratios(pat)), ratios(pat)


# ============================================================================ greedy

def test_interval_scheduling_and_meeting_rooms():
    rng = random.Random(90)
    for _ in range(300):
        ivs = []
        for _ in range(rng.randint(0, 10)):
            s = rng.randint(0, 20)
            ivs.append((s, s + rng.randint(1, 8)))
        chosen = greedy.max_non_overlapping(ivs)
        ok = lambda sub: all(a[1] <= b[0] or b[1] <= a[0] for a, b in itertools.combinations(sub, 2))  # noqa: E731
        best = max(r for r in range(len(ivs) + 1) for c in itertools.combinations(ivs, r) if ok(c))
        assert len(chosen) == best and ok(chosen)
        overlap = max((sum(s <= t < e for s, e in ivs) for t, _ in ivs), default=0)
        assert greedy.min_meeting_rooms(ivs) == overlap

    def greedy_by(ivs, key):                          # the wrong orders: earliest start, shortest first
        chosen = []
        for iv in sorted(ivs, key=key):
            if all(iv[1] <= c[0] or c[1] <= iv[0] for c in chosen):
                chosen.append(iv)
        return chosen

    short = [(0, 5), (4, 7), (6, 11)]                 # the page's example
    assert len(greedy_by(short, lambda iv: iv[1] - iv[0])) == 1 and len(greedy.max_non_overlapping(short)) == 2
    long_first = [(0, 10), (1, 2), (3, 4), (5, 6)]
    assert len(greedy_by(long_first, lambda iv: iv[0])) == 1 and len(greedy.max_non_overlapping(long_first)) == 3


def test_fractional_knapsack_against_lp_vertices():
    """An optimal LP solution has at most one fractional item: try every subset plus one partly taken item."""
    rng = random.Random(91)
    for _ in range(300):
        n = rng.randint(1, 8)
        wgt = [rng.randint(1, 10) for _ in range(n)]
        val = [rng.randint(0, 20) for _ in range(n)]
        cap = rng.randint(0, 40)
        best = 0.0
        for r in range(n + 1):
            for s in itertools.combinations(range(n), r):
                w = sum(wgt[i] for i in s)
                if w > cap:
                    continue
                v = sum(val[i] for i in s)
                best = max(best, v, *(v + val[j] * min(1, (cap - w) / wgt[j]) for j in range(n) if j not in s))
        assert greedy.fractional_knapsack(wgt, val, cap) == pytest.approx(best)


def test_max_capacity_product_cutting_and_greedy_coins():
    rng = random.Random(92)
    for _ in range(300):
        ht_ = [rng.randint(0, 30) for _ in range(rng.randint(2, 40))]
        ops = Counter()
        got = greedy.max_capacity(ht_, ops)
        assert got == max(min(ht_[i], ht_[j]) * (j - i) for i, j in itertools.combinations(range(len(ht_)), 2))
        assert ops["iter"] == len(ht_) - 1            # each step discards one board: O(n)

    @functools.cache
    def best_cut(n, must_cut=True):
        options = [best_cut(n - k, False) * k for k in range(1, n)]
        return max(options) if must_cut else max([n, *options])

    for n in range(2, 61):
        assert greedy.max_product_cutting(n) == best_cut(n)
    assert all(2 * (f - 2) > f for f in range(5, 100)) and 2**3 < 3**2   # the argument on the page

    for amount in range(0, 300):                      # canonical coin system: greedy is optimal
        assert greedy.coin_change_greedy([1, 5, 10, 25], amount) == dp.coin_change_min([1, 5, 10, 25], amount)
    assert greedy.coin_change_greedy([1, 3, 4], 6) == 3 and dp.coin_change_min([1, 3, 4], 6) == 2
    assert greedy.coin_change_greedy([5, 3], 9) == -1 and dp.coin_change_min([5, 3], 9) == 3   # greedy can even fail
