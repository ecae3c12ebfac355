"""Arithmetic for docs/hardware/blackwell-systems.md and docs/hardware/scale-up-scale-out.md.

The vendor and consortium figures live in data/hardware/systems.yml, each with its source; this
module only derives from them (times, ratios, totals), so the pages and
tests/test_hardware_fabrics.py cannot drift apart. Units: GB/s = 10^9 bytes/s, Gb/s = 10^9
bits/s, "per direction" unless a name says "bidir".
"""
from __future__ import annotations

from pathlib import Path

import yaml


def load_systems(path: str | Path) -> dict:
    """The `systems:` map of data/hardware/systems.yml."""
    return yaml.safe_load(Path(path).read_text(encoding="utf-8"))["systems"]


# --8<-- [start:b200]
def per_die(total: float, dies: int = 2) -> float:
    """What each die of a multi-die GPU owns (HBM stacks, capacity, bandwidth, SMs)."""
    return total / dies


def die_link_vs_hbm(nv_hbi_tbps: float, hbm_tbps: float) -> float:
    """NV-HBI bandwidth over the whole GPU's HBM bandwidth. Above 1, even a kernel whose every
    load goes to the other die's HBM is not limited by the die-to-die link."""
    return nv_hbi_tbps / hbm_tbps
# --8<-- [end:b200]


# --8<-- [start:alltoall]
def alltoall_seconds_flat(nbytes_per_gpu: float, gpus: int, gbytes_per_s_dir: float) -> float:
    """All-to-all inside one switched domain: each GPU keeps 1/n of its buffer and sends the
    rest through its own port, so time = (n - 1) / n x S / B (bandwidth term only)."""
    return (gpus - 1) / gpus * nbytes_per_gpu / (gbytes_per_s_dir * 1e9)


def alltoall_seconds_nodes(nbytes_per_gpu: float, nodes: int, gpus_per_node: int,
                           nvlink_gbytes_dir: float, nic_gbytes_dir: float) -> float:
    """The same all-to-all over `nodes` NVLink islands joined by one NIC per GPU: the share of
    each buffer bound for other nodes, (N - g) / N, must leave through the NIC; the on-node share
    goes over NVLink at the same time. The slower of the two sets the time."""
    n = nodes * gpus_per_node
    off_node = (n - gpus_per_node) / n * nbytes_per_gpu
    on_node = (gpus_per_node - 1) / n * nbytes_per_gpu
    return max(off_node / (nic_gbytes_dir * 1e9), on_node / (nvlink_gbytes_dir * 1e9))


def moe_dispatch_bytes(tokens: int, hidden: int, top_k: int, bytes_per_elem: int) -> int:
    """Bytes one GPU sends in an MoE dispatch: every token's hidden vector to its k experts."""
    return tokens * hidden * top_k * bytes_per_elem
# --8<-- [end:alltoall]


# --8<-- [start:rack]
def rack_power_capacity_kw(shelves: int, psus_per_shelf: int, psu_kw: float) -> float:
    """Rated supply of the rack's power shelves: a provisioning ceiling, not the draw."""
    return shelves * psus_per_shelf * psu_kw


def nvlink_domain_tbps(gpus: int, per_gpu_bidir_gbps: float) -> float:
    """Sum of every GPU's NVLink bandwidth, both directions (how NVIDIA's 130 TB/s is counted)."""
    return gpus * per_gpu_bidir_gbps / 1000
# --8<-- [end:rack]


# --8<-- [start:c2c]
def stream_seconds(nbytes: float, link_gbytes_dir: float, source_gbytes: float | None = None) -> float:
    """Time to stream nbytes from host memory to the GPU: the link (one direction) or the host
    memory's own bandwidth, whichever is lower, bounds it."""
    bw = link_gbytes_dir if source_gbytes is None else min(link_gbytes_dir, source_gbytes)
    return nbytes / (bw * 1e9)
# --8<-- [end:c2c]


# --8<-- [start:decompress]
def ingest_gbytes(link_gbytes_dir: float, ratio: float, engine_gbytes: float) -> float:
    """Uncompressed bytes per second that reach HBM when compressed data crosses the link and
    the engine expands it in flight: link x ratio, capped by the engine's output rate."""
    return min(link_gbytes_dir * ratio, engine_gbytes)
# --8<-- [end:decompress]


# --8<-- [start:ualink]
def port_gbytes_dir(lane_gbps: float, lanes: int) -> float:
    """Payload of one port, one direction, GB/s."""
    return lane_gbps * lanes / 8


def ports_to_match(target_gbytes_dir: float, port_gbytes: float) -> int:
    """Ports a GPU needs so its scale-up bandwidth reaches `target_gbytes_dir`."""
    n = int(target_gbytes_dir // port_gbytes)
    return n if n * port_gbytes >= target_gbytes_dir else n + 1
# --8<-- [end:ualink]


# --8<-- [start:ecmp]
def ecmp_expected_utilization(flows: int, paths: int) -> float:
    """Expected share of `paths` equal uplinks that carry traffic when `flows` line-rate flows
    are each hashed to one path (RoCEv2-style ECMP): a path stays idle with probability
    (1 - 1/P)^F, so E[busy paths] / P = 1 - (1 - 1/P)^F. Spraying every packet of every flow
    over all paths (UET) drives it to 1 whenever flows * rate >= paths * rate."""
    return 1 - (1 - 1 / paths) ** flows
# --8<-- [end:ecmp]


# --8<-- [start:cpo]
def picojoule_per_bit(watts: float, tbps: float) -> float:
    """Energy per bit of a port: W / (bit/s) in pJ."""
    return watts / (tbps * 1e12) * 1e12


def optics_kw_saved(ports: int, pluggable_w: float, cpo_w: float) -> float:
    return ports * (pluggable_w - cpo_w) / 1000
# --8<-- [end:cpo]


# --8<-- [start:cxl]
def ddr_channel_gbytes(mts: float, bus_bits: int = 64) -> float:
    """Peak of one DDR channel: transfers/s x bus width / 8."""
    return mts * 1e6 * bus_bits / 8 / 1e9
# --8<-- [end:cxl]
