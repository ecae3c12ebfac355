"""Performance per watt and total cost of ownership (TCO) for docs/hardware/power-cost.md.

Performance per watt divides a datasheet peak by a datasheet power (data/hardware/accelerators.yml), or a measured
throughput by a measured power (data/records/nvidia-h200/nvml_telemetry.json). The TCO model turns capital cost,
power, PUE and utilisation into a cost per GPU-hour and per million tokens. Every input of the TCO model is an
assumption the caller states; the defaults of the page are labelled as such there, none is a quoted price.
tests/test_hardware_tco.py checks each function on hand-computed cases.
"""
from __future__ import annotations

from dataclasses import dataclass

HOURS_PER_YEAR = 365 * 24          # 8760; amortisation per wall-clock hour, no leap days


# --8<-- [start:perf-per-watt]
def gflops_per_watt(tflops: float, watts: float) -> float:
    """Energy efficiency in GFLOP per joule (= GFLOPS/W): 1e3 x TFLOPS / W."""
    return tflops * 1e3 / watts


def joules_per_token(watts: float, tokens_per_s: float) -> float:
    """Energy per generated token at a steady draw: W / (tokens/s) = J/token."""
    return watts / tokens_per_s
# --8<-- [end:perf-per-watt]


# --8<-- [start:tco]
@dataclass(frozen=True)
class Assumptions:
    """One accelerator's share of a deployment. Every field is an input the reader must supply or accept."""
    capex_usd: float             # accelerator + its share of server, network, installation (paid up front)
    years: float                 # amortisation period (straight line when rate = 0)
    busy_w: float                # accelerator draw while working (TDP, or measured)
    idle_w: float                # accelerator draw while idle (TDP for a worst case, or measured)
    host_w: float                # its share of CPUs, NICs, switches, fans: drawn all the time
    pue: float                   # power usage effectiveness: facility power / IT power (>= 1)
    usd_per_kwh: float           # electricity price
    utilisation: float           # fraction of wall-clock hours doing paid work (0 < u <= 1)
    rate: float = 0.0            # cost of capital per year; > 0 turns straight line into an annuity
    opex_frac_per_year: float = 0.0   # maintenance, space, staff as a fraction of capex per year


def capex_per_hour(a: Assumptions) -> float:
    """Capital cost per wall-clock hour. With rate r the yearly payment is the annuity capex x r / (1 - (1+r)^-n)."""
    if a.rate == 0:
        per_year = a.capex_usd / a.years
    else:
        per_year = a.capex_usd * a.rate / (1 - (1 + a.rate) ** -a.years)
    return per_year / HOURS_PER_YEAR


def average_it_watts(a: Assumptions) -> float:
    """Accelerator draw averaged over busy and idle hours, plus the host share."""
    return a.utilisation * a.busy_w + (1 - a.utilisation) * a.idle_w + a.host_w


def energy_per_hour(a: Assumptions) -> float:
    """Electricity per wall-clock hour: average IT kW x PUE x price."""
    return average_it_watts(a) / 1000 * a.pue * a.usd_per_kwh


def cost_per_gpu_hour(a: Assumptions) -> float:
    """What one accelerator costs per wall-clock hour, used or not."""
    return capex_per_hour(a) + energy_per_hour(a) + a.capex_usd * a.opex_frac_per_year / HOURS_PER_YEAR


def cost_per_useful_hour(a: Assumptions) -> float:
    """Idle hours still cost: spread them over the busy ones."""
    return cost_per_gpu_hour(a) / a.utilisation


def cost_per_million_tokens(a: Assumptions, tokens_per_s: float) -> float:
    """Cost of 1e6 tokens at a sustained tokens_per_s per accelerator while busy."""
    return cost_per_useful_hour(a) / (tokens_per_s * 3600 / 1e6)


def energy_share(a: Assumptions) -> float:
    """Fraction of the hourly cost that is electricity."""
    return energy_per_hour(a) / cost_per_gpu_hour(a)
# --8<-- [end:tco]
