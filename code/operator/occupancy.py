"""Theoretical occupancy of a CUDA kernel on one SM, the way the CUDA occupancy calculator counts it.

The rules follow `cuda_occupancy.h`, the header shipped with the CUDA toolkit that implements
`cudaOccupancyMaxActiveBlocksPerMultiprocessor`: registers are handed out per warp in units of
256, inside each of the SM's four sub-partitions; shared memory is handed out per block in units
of 128 bytes, plus 1 KB the driver reserves for every block (compute capability 8.0 and later);
the number of resident threads and resident blocks per SM is capped. The limits of compute
capability 9.0 (H100, H200) come from the CUDA C++ Programming Guide's table of technical
specifications. docs/operator/programming-model.md walks through the examples that
tests/test_occupancy.py asserts. Only the standard library is used.
"""

from __future__ import annotations

from dataclasses import dataclass

KB = 1024


# --8<-- [start:limits]
@dataclass(frozen=True)
class SMLimits:
    """Per-SM and per-block limits of one compute capability."""

    name: str
    warp_size: int = 32
    max_threads_per_block: int = 1024
    max_threads_per_sm: int = 2048        # = 64 resident warps
    max_blocks_per_sm: int = 32
    regs_per_sm: int = 64 * KB            # 65536 32-bit registers
    regs_per_block: int = 64 * KB
    max_regs_per_thread: int = 255
    reg_alloc_unit: int = 256             # registers are allocated per warp, in multiples of 256
    sub_partitions: int = 4               # each holds a quarter of the register file
    smem_per_sm: int = 228 * KB           # largest shared-memory carveout of the unified 256 KB
    smem_per_block_optin: int = 227 * KB  # above 48 KB only with cudaFuncSetAttribute
    smem_reserved_per_block: int = 1 * KB
    smem_alloc_unit: int = 128

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // self.warp_size


HOPPER = SMLimits(name="compute capability 9.0 (H100, H200)")
# --8<-- [end:limits]


def _ceil_div(x: int, y: int) -> int:
    return -(-x // y)


def _round_up(x: int, y: int) -> int:
    return _ceil_div(x, y) * y


@dataclass(frozen=True)
class Occupancy:
    blocks_per_sm: int
    warps_per_sm: int
    occupancy: float                      # resident warps / max resident warps
    limits: dict[str, int]                # blocks per SM allowed by each resource
    regs_per_warp: int                    # after rounding to the allocation unit
    smem_per_block: int                   # after adding the reserve and rounding

    @property
    def limiters(self) -> list[str]:
        """The resources that set blocks_per_sm (several can tie)."""
        return [k for k, v in self.limits.items() if v == self.blocks_per_sm]


# --8<-- [start:occupancy]
def occupancy(threads_per_block: int, regs_per_thread: int, smem_per_block: int = 0,
              sm: SMLimits = HOPPER) -> Occupancy:
    """Resident blocks and warps per SM for one kernel launch configuration.

    smem_per_block is the shared memory the kernel asks for (static plus dynamic), in bytes.
    A result of 0 blocks means the launch fails: "too many resources requested for launch".
    """
    warps = _ceil_div(threads_per_block, sm.warp_size)

    # 1. Resident warps (threads) per SM, and the hard cap on resident blocks.
    by_warps = sm.max_warps_per_sm // warps if threads_per_block <= sm.max_threads_per_block else 0
    by_blocks = sm.max_blocks_per_sm

    # 2. Registers: per warp, rounded up to the allocation unit, inside each sub-partition.
    regs_per_warp = _round_up(regs_per_thread * sm.warp_size, sm.reg_alloc_unit)
    if regs_per_thread > sm.max_regs_per_thread or \
            regs_per_warp * _round_up(warps, sm.sub_partitions) > sm.regs_per_block:
        by_regs = 0
    elif regs_per_warp == 0:
        by_regs = by_blocks
    else:
        warps_per_sub = (sm.regs_per_sm // sm.sub_partitions) // regs_per_warp
        by_regs = warps_per_sub * sm.sub_partitions // warps

    # 3. Shared memory: the driver's 1 KB reserve is added to every block, then rounded.
    smem = _round_up(smem_per_block + sm.smem_reserved_per_block, sm.smem_alloc_unit)
    if smem > sm.smem_per_block_optin + sm.smem_reserved_per_block:
        by_smem = 0
    else:
        by_smem = sm.smem_per_sm // smem

    limits = {"warps": by_warps, "blocks": by_blocks, "registers": by_regs, "shared memory": by_smem}
    blocks = min(limits.values())
    return Occupancy(blocks, blocks * warps, blocks * warps / sm.max_warps_per_sm, limits,
                     regs_per_warp, smem)
# --8<-- [end:occupancy]


def waves(grid_blocks: int, blocks_per_sm: int, sm_count: int = 132) -> float:
    """How many full "waves" a grid needs when every SM holds blocks_per_sm blocks at once."""
    return grid_blocks / (blocks_per_sm * sm_count)


if __name__ == "__main__":
    for cfg in [(256, 64, 48 * KB), (256, 65, 0), (128, 128, 0), (32, 16, 0), (1024, 65, 0)]:
        o = occupancy(*cfg)
        print(cfg, o.blocks_per_sm, "blocks,", o.warps_per_sm, "warps,",
              f"{o.occupancy:.1%}", "limited by", ", ".join(o.limiters))
