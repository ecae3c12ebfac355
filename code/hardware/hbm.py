"""DRAM and HBM bandwidth and capacity arithmetic for docs/hardware/memory.md.

bandwidth = bus width (bits) x data rate per pin (Gb/s) / 8  ->  GB/s
capacity  = dies per stack x die density (Gb) / 8             ->  GB
tests/test_hardware_memory.py checks these against the JEDEC and vendor figures the page cites.
"""
from __future__ import annotations


# --8<-- [start:bandwidth]
def bandwidth_gbytes(bus_bits: int, gbps_per_pin: float) -> float:
    """Peak bandwidth of a memory interface: every pin moves gbps_per_pin gigabits per second."""
    return bus_bits * gbps_per_pin / 8


def pin_rate_gbps(bandwidth_gbytes_per_s: float, bus_bits: int) -> float:
    """The per-pin data rate a quoted bandwidth implies for a given bus width."""
    return bandwidth_gbytes_per_s * 8 / bus_bits


def stack_capacity_gbytes(dies: int, die_gbit: int) -> float:
    """Capacity of one HBM stack: dies stacked on the base die x density of each die."""
    return dies * die_gbit / 8


# generation: (bits per stack, max Gb/s per pin in the standard or first products)
HBM = {
    "HBM": (1024, 1.0),
    "HBM2": (1024, 2.0),
    "HBM2E": (1024, 3.6),
    "HBM3": (1024, 6.4),
    "HBM3E": (1024, 9.6),
    "HBM4": (2048, 8.0),
}
# --8<-- [end:bandwidth]
