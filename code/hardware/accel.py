"""Arithmetic behind docs/hardware/amd-tpu.md: peaks from compute units, ridge points, link bandwidths and the
time of an all-to-all on a fully connected mesh (AMD Infinity Fabric) against a switch (NVSwitch).

Every input is a datasheet figure of data/hardware/accelerators.yml (each with its source); nothing here is a
measurement. Units: TFLOPS = 1e12 FLOP/s, GB/s = 1e9 B/s, "dir" = one direction, "bidir" = both added.
tests/test_hardware_accelerators.py checks every function against hand-computed cases and the page's quotes.
"""
from __future__ import annotations

from pathlib import Path

import yaml

SPEC_FILE = Path(__file__).resolve().parents[2] / "data" / "hardware" / "accelerators.yml"


def load_specs(path: Path = SPEC_FILE) -> dict[str, dict]:
    """{slug: {field: value}} with the {value, source, where} triples flattened to their values."""
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))["accelerators"]
    return {slug: {k: (v["value"] if isinstance(v, dict) else v) for k, v in spec.items()} for slug, spec in raw.items()}


# --8<-- [start:peak]
def peak_tflops(compute_units: int, flop_per_clk_cu: int, clock_ghz: float) -> float:
    """Peak = CUs x FLOP per clock per CU x clock; e.g. MI300X BF16: 304 x 2048 x 2.1 GHz = 1307.4 TFLOPS."""
    return compute_units * flop_per_clk_cu * clock_ghz * 1e9 / 1e12


def clock_from_peak(tflops: float, compute_units: int, flop_per_clk_cu: int) -> float:
    """The clock (GHz) a quoted peak implies: the vendor multiplies by its peak engine clock."""
    return tflops * 1e12 / (compute_units * flop_per_clk_cu) / 1e9


def ridge_flop_per_byte(tflops: float, memory_gbps: float) -> float:
    """Roofline ridge point I* = pi / beta: below it a kernel is bound by HBM, above it by the matrix units."""
    return tflops * 1e12 / (memory_gbps * 1e9)


def hbm_gbps(stacks: int, gbps_per_pin: float, bits_per_stack: int = 1024) -> float:
    """Peak HBM bandwidth: stacks x 1024-bit interface x per-pin rate / 8."""
    return stacks * bits_per_stack * gbps_per_pin / 8
# --8<-- [end:peak]


# --8<-- [start:links]
def serdes_link_gbps_dir(lanes: int, gbps_per_lane: float) -> float:
    """One direction of a SerDes link: lanes x rate / 8 (Infinity Fabric xGMI: 16 x 32 Gb/s = 64 GB/s)."""
    return lanes * gbps_per_lane / 8


def mesh_gpu_gbps_dir(links: int, link_gbps_dir: float) -> float:
    """Per-GPU injection bandwidth of a fully connected mesh: one link to each of the other N-1 GPUs."""
    return links * link_gbps_dir
# --8<-- [end:links]


# --8<-- [start:alltoall]
Traffic = list[list[float]]     # traffic[i][j]: bytes GPU i sends to GPU j (diagonal ignored)


def uniform_alltoall(n: int, bytes_per_gpu: float) -> Traffic:
    """Each GPU splits bytes_per_gpu evenly over all n ranks (its own share stays local), as in an MoE dispatch
    with perfectly balanced routing or an NCCL/RCCL all-to-all of bytes_per_gpu per rank."""
    share = bytes_per_gpu / n
    return [[0.0 if i == j else share for j in range(n)] for i in range(n)]


def hotspot_alltoall(n: int, bytes_per_gpu: float, hot: int, hot_fraction: float) -> Traffic:
    """Skewed routing: every other GPU sends hot_fraction of its bytes to GPU `hot` (a popular expert) and spreads
    the rest evenly over the remaining n - 2 peers; GPU `hot` itself sends uniformly."""
    t = uniform_alltoall(n, bytes_per_gpu)
    for i in range(n):
        if i == hot:
            continue
        sent = bytes_per_gpu * (n - 1) / n            # the same bytes leave the GPU as in the uniform case
        for j in range(n):
            if j != i:
                t[i][j] = sent * hot_fraction if j == hot else sent * (1 - hot_fraction) / (n - 2)
    return t


def paired_alltoall(n: int, bytes_per_gpu: float, partner_fraction: float) -> Traffic:
    """Pair-skewed routing: GPU i sends partner_fraction of its outgoing bytes to GPU (i + 1) % n and spreads the
    rest over the other n - 2 peers. partner_fraction = 1 / (n - 1) is the uniform case, 1 a pure permutation
    (a pipeline stage sending to the next)."""
    sent = bytes_per_gpu * (n - 1) / n
    t = [[0.0] * n for _ in range(n)]
    for i in range(n):
        for j in range(n):
            if j != i:
                t[i][j] = sent * partner_fraction if j == (i + 1) % n else sent * (1 - partner_fraction) / (n - 2)
    return t


def mesh_seconds(traffic: Traffic, link_gbps_dir: float) -> float:
    """Fully connected mesh, direct routing: each ordered pair (i, j) has its own link of link_gbps_dir, so the
    collective ends when the most loaded link drains. (RCCL can route through a third GPU; this bound does not.)"""
    n = len(traffic)
    worst = max(traffic[i][j] for i in range(n) for j in range(n) if i != j)
    return worst / (link_gbps_dir * 1e9)


def switch_seconds(traffic: Traffic, port_gbps_dir: float) -> float:
    """Non-blocking switch (NVSwitch): each GPU has one port of port_gbps_dir each way into a full-bisection
    fabric, so the time is set by the busiest port: max over GPUs of bytes out or bytes in."""
    n = len(traffic)
    out = [sum(traffic[i][j] for j in range(n) if j != i) for i in range(n)]
    into = [sum(traffic[i][j] for i in range(n) if i != j) for j in range(n)]
    return max(out + into) / (port_gbps_dir * 1e9)
# --8<-- [end:alltoall]


# --8<-- [start:torus]
def torus_bisection_links(k: int) -> int:
    """Links one way across the middle of a k x k x k torus: a k x k face, doubled by the wraparound."""
    return 2 * k * k


def torus_bisection_share(k: int, links_per_chip: int = 6) -> float:
    """Bisection bandwidth per chip of the half that sends, as a share of the chip's own ICI bandwidth:
    2k^2 links shared by k^3 / 2 chips, each with links_per_chip links. A full-bisection fat tree gives 1."""
    return torus_bisection_links(k) / (k ** 3 / 2) / links_per_chip
# --8<-- [end:torus]
