"""How much device memory a context reserves for its limits (cuCtxSetLimit).

docs/driver/driver-api.md embeds parts of this file; tests/test_driver_ops.py checks it.
The stack is local memory: the driver must back the per-thread stack of every thread that can be
resident at once, so the reservation is stack bytes x resident threads per SM x SMs (a model: the driver
reference does not state it; code/driver/launch_ex.cu checks it on a GPU). The 8 MiB heap default is the
CUDA C++ Programming Guide's; the stack and printf FIFO defaults are what cuCtxGetLimit reports
(launch_ex.cu prints all three).
"""
from __future__ import annotations

# --8<-- [start:limits]
MiB = 1 << 20
DEFAULTS = {"CU_LIMIT_STACK_SIZE": 1024,               # bytes per thread
            "CU_LIMIT_PRINTF_FIFO_SIZE": 1 * MiB,      # one buffer per context
            "CU_LIMIT_MALLOC_HEAP_SIZE": 8 * MiB}      # one heap per context


def stack_reservation(stack_bytes: int, threads_per_sm: int, sms: int) -> int:
    """Local memory the driver reserves for the stack: every resident thread needs its own."""
    return stack_bytes * threads_per_sm * sms


def reservation(limits: dict[str, int], threads_per_sm: int, sms: int) -> dict[str, int]:
    """Bytes each limit holds back from cudaMalloc, for a context with these limits."""
    merged = {**DEFAULTS, **limits}
    return {"stack": stack_reservation(merged["CU_LIMIT_STACK_SIZE"], threads_per_sm, sms),
            "printf": merged["CU_LIMIT_PRINTF_FIFO_SIZE"],
            "heap": merged["CU_LIMIT_MALLOC_HEAP_SIZE"]}
# --8<-- [end:limits]
