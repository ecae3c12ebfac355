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


# generation: (bits per stack, Gb/s per pin): the JEDEC standard's maximum, except HBM2E and
# HBM3E, which have no standard of their own and are given at their first products' rate
HBM = {
    "HBM": (1024, 1.0),
    "HBM2": (1024, 2.0),
    "HBM2E": (1024, 3.6),
    "HBM3": (1024, 6.4),
    "HBM3E": (1024, 9.6),
    "HBM4": (2048, 8.0),
}
# --8<-- [end:bandwidth]


# What each standard allows per stack, as its JEDEC announcement states it:
# generation: (stack heights, (smallest, largest) die density in Gb). HBM3's 16-high is only a
# "provision for a future extension" in JESD238; HBM4 (JESD270-4) lists 16-high outright.
STANDARD_STACKS = {
    "HBM3": ((4, 8, 12, 16), (8, 32)),
    "HBM4": ((4, 8, 12, 16), (24, 32)),
}

# First products (vendor announcements the page cites): generation -> [(dies, Gb per die), ...]
FIRST_PRODUCTS = {
    "HBM": [(4, 2)],                 # SK hynix HBM1, 2015: 1 GB
    "HBM2": [(4, 8)],                # Samsung, 2016-01: 4 GB
    "HBM2E": [(8, 16)],              # Samsung Flashbolt and SK hynix, 2020: 16 GB
    "HBM3": [(8, 16), (12, 16)],     # SK hynix, 2021-10: 16 GB and 24 GB
    "HBM3E": [(8, 24), (12, 24)],    # SK hynix, 2024-03 and 2024-09: 24 GB and 36 GB
    "HBM4": [(12, 24)],              # SK hynix samples, 2025-03: 36 GB
}


def standard_capacity_range(gen: str) -> tuple[float, float]:
    """Smallest and largest stack a standard allows: lowest stack of the smallest die, tallest of the largest."""
    heights, (small, large) = STANDARD_STACKS[gen]
    return stack_capacity_gbytes(min(heights), small), stack_capacity_gbytes(max(heights), large)
