"""The words a user-mode driver writes to hand work to an NVIDIA GPU, encoded from the published
bit fields: pushbuffer method headers (open-gpu-doc, manuals/ampere/ga100/dev_ram.ref.txt,
NV_FIFO_DMA_*) and GPFIFO entries (open-gpu-kernel-modules, class/clc86f.h, NVC86F_GP_ENTRY*,
the Hopper channel class HOPPER_CHANNEL_GPFIFO_A).

What is documented: the formats below, the Host semaphore methods of the channel class, and the
submission order (write PB segment, write GP entry, update GP_PUT in USERD, write the channel's
token to NV_USERMODE_NOTIFY_CHANNEL_PENDING). What is inferred: which methods libcuda writes for a
launch; `compute_launch` follows the open drivers (Mesa NVK, tinygrad) that launch compute work
with the documented SEND_PCAS_A / SEND_SIGNALING_PCAS2_B methods of the compute class.
"""
from __future__ import annotations

# --8<-- [start:header]
# PB method header (32 bits): SEC_OP 31:29 | COUNT 28:16 | SUBCHANNEL 15:13 | ADDRESS 11:0
SEC_OP = {"inc": 1, "non_inc": 3, "immd": 4, "one_inc": 5, "end_pb_segment": 7}


def _field(value: int, hi: int, lo: int) -> int:
    width = hi - lo + 1
    if not 0 <= value < (1 << width):
        raise ValueError(f"{value:#x} does not fit in bits {hi}:{lo}")
    return value << lo


def method_header(subchannel: int, method: int, count: int, op: str = "inc") -> int:
    """Header of `count` data words for `method` (a byte offset, as class headers list it)."""
    if method % 4:
        raise ValueError("method offsets are dword aligned")
    return (_field(SEC_OP[op], 31, 29) | _field(count, 28, 16)
            | _field(subchannel, 15, 13) | _field(method >> 2, 11, 0))  # 头里存的是 dword 地址


def immediate(subchannel: int, method: int, data: int) -> int:
    """Immediate-data header: a 13-bit operand rides in the COUNT field, no data word follows."""
    return method_header(subchannel, method, data, op="immd")


def decode_header(word: int) -> dict:
    return {"op": {v: k for k, v in SEC_OP.items()}.get(word >> 29, "other"),
            "count": (word >> 16) & 0x1FFF, "subchannel": (word >> 13) & 0x7,
            "method": (word & 0xFFF) << 2}
# --8<-- [end:header]


# --8<-- [start:gpentry]
# GPFIFO entry (8 bytes), clc86f.h: ENTRY0 GET 31:2 = PB address bits 31:2;
# ENTRY1 GET_HI 7:0 = address bits 39:32, LEVEL 9:9, LENGTH 30:10 (dwords), SYNC 31:31.
GP_ENTRY_BYTES = 8


def gp_entry(pb_address: int, length_dwords: int, *, subroutine: bool = False, sync_wait: bool = False) -> int:
    """The 64-bit GP entry (ENTRY1 in the high word) that points Host at one PB segment."""
    if pb_address % 4:
        raise ValueError("PB segments are dword aligned")
    entry0 = _field((pb_address & 0xFFFFFFFF) >> 2, 31, 2)          # 地址位 31:2 原位存放
    entry1 = (_field(pb_address >> 32, 7, 0) | _field(int(subroutine), 9, 9)
              | _field(length_dwords, 30, 10) | _field(int(sync_wait), 31, 31))
    return entry1 << 32 | entry0


def decode_gp_entry(value: int) -> dict:
    entry0, entry1 = value & 0xFFFFFFFF, value >> 32
    return {"pb_address": ((entry1 & 0xFF) << 32) | (entry0 & 0xFFFFFFFC),
            "length_dwords": (entry1 >> 10) & 0x1FFFFF,
            "subroutine": bool((entry1 >> 9) & 1), "sync_wait": bool(entry1 >> 31)}
# --8<-- [end:gpentry]


# Host (channel class) and compute class methods used below: byte offsets from the class headers.
SEM_ADDR_LO = 0x5C            # clc86f.h: SEM_ADDR_LO, SEM_ADDR_HI, SEM_PAYLOAD_LO/HI, SEM_EXECUTE
SEM_EXECUTE_RELEASE = 0x1     # SEM_EXECUTE_OPERATION_RELEASE (bits 2:0)
SEND_PCAS_A = 0x02B4          # clcbc0.h (HOPPER_COMPUTE_A): QMD address >> 8
SEND_SIGNALING_PCAS2_B = 0x02C0
PCAS_ACTION_INVALIDATE_COPY_SCHEDULE = 0x3
COMPUTE_SUBCHANNEL = 1        # dev_ram.ref: SetObject binds subchannel 1 to the compute class


# --8<-- [start:launch]
def compute_launch(qmd_address: int) -> list[int]:
    """Method words that start the grid described by the QMD at `qmd_address` (256-byte aligned)."""
    if qmd_address % 256:
        raise ValueError("a QMD is 256-byte aligned")
    return [method_header(COMPUTE_SUBCHANNEL, SEND_PCAS_A, 1), qmd_address >> 8,
            method_header(COMPUTE_SUBCHANNEL, SEND_SIGNALING_PCAS2_B, 1), PCAS_ACTION_INVALIDATE_COPY_SCHEDULE]


def semaphore_release(address: int, payload: int) -> list[int]:
    """Host methods that write `payload` to `address` once the work before them is done.
    SEM_EXECUTE = RELEASE with PAYLOAD_SIZE (bit 24) = 0 selects a 32-bit release, so only
    PAYLOAD_LO reaches memory; PAYLOAD_HI is still written to keep the five methods contiguous."""
    return [method_header(0, SEM_ADDR_LO, 5), address & 0xFFFFFFFC, address >> 32,
            payload & 0xFFFFFFFF, payload >> 32, SEM_EXECUTE_RELEASE]
# --8<-- [end:launch]
