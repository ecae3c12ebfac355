"""Bandwidth arithmetic for the links of docs/hardware/interconnect.md.

Every figure a page quotes is computed here from the signalling rate, the lane count and the line
encoding, so the page and tests/test_hardware_links.py cannot drift apart. Units: Gb/s for bits
on the wire, GB/s (10^9 bytes per second) for payload, "per direction" unless a name says "bidir".
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction


# --8<-- [start:pcie]
@dataclass(frozen=True)
class PcieGen:
    gen: int
    gt_per_s: float        # transfers per second per lane, in GT/s (one bit per transfer for NRZ)
    encoding: Fraction     # payload bits / line bits of the line code
    code: str


PCIE = {
    1: PcieGen(1, 2.5, Fraction(8, 10), "8b/10b"),
    2: PcieGen(2, 5.0, Fraction(8, 10), "8b/10b"),
    3: PcieGen(3, 8.0, Fraction(128, 130), "128b/130b"),
    4: PcieGen(4, 16.0, Fraction(128, 130), "128b/130b"),
    5: PcieGen(5, 32.0, Fraction(128, 130), "128b/130b"),
    # 6.0: PAM4 (2 bits per symbol at 32 GBaud) and 256-byte FLITs with no line code; of each
    # FLIT 236 bytes carry TLPs, the rest is DLLP (6), CRC (8) and FEC (6) bytes.
    6: PcieGen(6, 64.0, Fraction(236, 256), "PAM4 + 256 B FLIT"),
}


def pcie_gbytes_per_s(gen: int, lanes: int = 16) -> float:
    """Payload bandwidth of one direction of a PCIe link, after the line code (or FLIT overhead),
    before TLP headers: rate x lanes x efficiency / 8 bits per byte."""
    g = PCIE[gen]
    return g.gt_per_s * lanes * float(g.encoding) / 8
# --8<-- [end:pcie]


# --8<-- [start:nvlink]
@dataclass(frozen=True)
class NvlinkGen:
    version: int
    gpu: str
    links: int                     # NVLink links per GPU
    gbytes_per_link_dir: float     # GB/s per link per direction


NVLINK = {
    1: NvlinkGen(1, "P100", 4, 20.0),
    2: NvlinkGen(2, "V100", 6, 25.0),
    3: NvlinkGen(3, "A100", 12, 25.0),
    4: NvlinkGen(4, "H100", 18, 25.0),
    5: NvlinkGen(5, "B200", 18, 50.0),
}


def nvlink_gpu_bidir(version: int) -> float:
    """The per-GPU figure NVIDIA quotes: links x per-link rate x 2 directions."""
    g = NVLINK[version]
    return g.links * g.gbytes_per_link_dir * 2


def nvl_domain_bidir_tbps(gpus: int, version: int = 5) -> float:
    """Aggregate NVLink bandwidth of an NVSwitch domain (e.g. GB200 NVL72), TB/s, both directions."""
    return gpus * nvlink_gpu_bidir(version) / 1000
# --8<-- [end:nvlink]


# --8<-- [start:ib]
@dataclass(frozen=True)
class IbGen:
    name: str
    lane_gbps: float      # data rate per lane after the line code, Gb/s (as the IBTA names it)


# 4x ports (four lanes), the usual HCA and switch port width.
IB = {
    "SDR": IbGen("SDR", 2.0),       # 2.5 Gb/s signalling, 8b/10b
    "DDR": IbGen("DDR", 4.0),       # 5 Gb/s, 8b/10b
    "QDR": IbGen("QDR", 8.0),       # 10 Gb/s, 8b/10b
    "FDR": IbGen("FDR", 13.64),     # 14.0625 Gb/s, 64b/66b
    "EDR": IbGen("EDR", 25.0),      # 25.78125 Gb/s, 64b/66b
    "HDR": IbGen("HDR", 50.0),      # PAM4
    "NDR": IbGen("NDR", 100.0),     # PAM4
    "XDR": IbGen("XDR", 200.0),     # PAM4
}


def ib_port_gbps(name: str, lanes: int = 4) -> float:
    return IB[name].lane_gbps * lanes


def gbps_to_gbytes(gbps: float) -> float:
    return gbps / 8
# --8<-- [end:ib]


# --8<-- [start:time]
def transfer_seconds(nbytes: float, gbytes_per_s: float, latency_s: float = 0.0) -> float:
    """alpha-beta model of one message: latency + size / bandwidth."""
    return latency_s + nbytes / (gbytes_per_s * 1e9)


def ring_allreduce_bytes_per_gpu(nbytes: float, n: int) -> float:
    """Bytes each GPU sends in a ring all-reduce of nbytes: 2 (n - 1) / n x nbytes."""
    return 2 * (n - 1) / n * nbytes
# --8<-- [end:time]
