"""Decode the ioctls that libcuda sends to /dev/nvidiactl, as strace prints them.

docs/driver/linux-driver-model.md embeds parts of this file; tests/test_driver_ops.py checks it.
The numbers and structure layouts come from NVIDIA/open-gpu-kernel-modules (595.45.04):
kernel-open/common/inc/nv-ioctl-numbers.h (NV_IOCTL_MAGIC 'F', NV_IOCTL_BASE 200),
src/nvidia/arch/nvalloc/unix/include/nv_escape.h (NV_ESC_RM_*), src/common/sdk/nvidia/inc/nvos.h
(NVOS21/NVOS54/NVOS64_PARAMETERS) and src/common/sdk/nvidia/inc/class/cl0040.h.
"""
from __future__ import annotations

import ctypes
import re

# --8<-- [start:numbers]
# Linux's _IOC layout (include/uapi/asm-generic/ioctl.h): nr 8 bits, type 8, size 14, dir 2.
IOC_NRBITS, IOC_TYPEBITS, IOC_SIZEBITS = 8, 8, 14
IOC_WRITE, IOC_READ = 1, 2


def ioc(direction: int, type_: int, nr: int, size: int) -> int:
    return (direction << 30) | (size << 16) | (type_ << 8) | nr


def ioc_decode(cmd: int) -> dict:
    return {"dir": cmd >> 30, "type": (cmd >> 8) & 0xFF, "nr": cmd & 0xFF, "size": (cmd >> 16) & 0x3FFF}


NV_IOCTL_MAGIC = ord("F")
NV_ESC = {  # nv_escape.h (RM API escapes) and nv-ioctl-numbers.h (OS-layer escapes, base 200)
    0x27: "NV_ESC_RM_ALLOC_MEMORY", 0x29: "NV_ESC_RM_FREE", 0x2A: "NV_ESC_RM_CONTROL",
    0x2B: "NV_ESC_RM_ALLOC", 0x34: "NV_ESC_RM_DUP_OBJECT", 0x4A: "NV_ESC_RM_VID_HEAP_CONTROL",
    0x4E: "NV_ESC_RM_MAP_MEMORY", 0x57: "NV_ESC_RM_MAP_MEMORY_DMA", 0x58: "NV_ESC_RM_UNMAP_MEMORY_DMA",
    200 + 0: "NV_ESC_CARD_INFO", 200 + 1: "NV_ESC_REGISTER_FD", 200 + 10: "NV_ESC_CHECK_VERSION_STR",
    200 + 11: "NV_ESC_IOCTL_XFER_CMD", 200 + 12: "NV_ESC_ATTACH_GPUS_TO_FD", 200 + 14: "NV_ESC_SYS_PARAMS",
}
NvHandle, NvU32, NvP64 = ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint64


class NVOS21_PARAMETERS(ctypes.Structure):       # RM alloc: create object hObjectNew of class hClass
    _fields_ = [("hRoot", NvHandle), ("hObjectParent", NvHandle), ("hObjectNew", NvHandle),
                ("hClass", NvU32), ("pAllocParms", NvP64), ("paramsSize", NvU32), ("status", NvU32)]


class NVOS64_PARAMETERS(ctypes.Structure):       # RM alloc with requested access rights
    _fields_ = [("hRoot", NvHandle), ("hObjectParent", NvHandle), ("hObjectNew", NvHandle),
                ("hClass", NvU32), ("pAllocParms", NvP64), ("pRightsRequested", NvP64),
                ("paramsSize", NvU32), ("flags", NvU32), ("status", NvU32)]


class NVOS54_PARAMETERS(ctypes.Structure):       # RM control: run command `cmd` on object hObject
    _fields_ = [("hClient", NvHandle), ("hObject", NvHandle), ("cmd", NvU32), ("flags", NvU32),
                ("params", NvP64), ("paramsSize", NvU32), ("status", NvU32)]


RM_CLASSES = {0x0041: "NV01_ROOT_CLIENT", 0x0080: "NV01_DEVICE_0", 0x2080: "NV20_SUBDEVICE_0",
              0x0040: "NV01_MEMORY_LOCAL_USER", 0x003E: "NV01_MEMORY_SYSTEM",
              0xA06C: "KEPLER_CHANNEL_GROUP_A", 0xC86F: "HOPPER_CHANNEL_GPFIFO_A",
              0xCBC0: "HOPPER_COMPUTE_A"}
# --8<-- [end:numbers]

# --8<-- [start:strace]
_STRACE = re.compile(
    r"ioctl\((?P<fd>\d+)(?:<(?P<path>[^>]*)>)?,\s*"
    r"(?:_IOC\((?P<dir>[^,]+),\s*(?P<type>0x[0-9a-f]+),\s*(?P<nr>0x[0-9a-f]+),\s*(?P<size>0x[0-9a-f]+)\)"
    r"|(?P<raw>0x[0-9a-f]+))"
    r",\s*(?P<arg>[^)]*)\)\s*=\s*(?P<ret>-?\d+)")


def parse_strace_ioctl(line: str) -> dict | None:
    """One `strace -e ioctl -y` line -> {path, cmd, name, size}. strace cannot name NVIDIA's ioctls,
    so it prints them raw, either as _IOC(dir, type, nr, size) or as one hex number."""
    m = _STRACE.search(line)
    if m is None:
        return None
    if m["raw"]:
        cmd = int(m["raw"], 16)
    else:
        d = (IOC_READ if "_IOC_READ" in m["dir"] else 0) | (IOC_WRITE if "_IOC_WRITE" in m["dir"] else 0)
        cmd = ioc(d, int(m["type"], 16), int(m["nr"], 16), int(m["size"], 16))
    f = ioc_decode(cmd)
    if f["type"] != NV_IOCTL_MAGIC:
        return {"path": m["path"], "cmd": cmd, "name": None, "size": f["size"], "ret": int(m["ret"])}
    return {"path": m["path"], "cmd": cmd, "name": NV_ESC.get(f["nr"], hex(f["nr"])), "size": f["size"],
            "ret": int(m["ret"])}


def param_struct(name: str, size: int):
    """The parameter structure nvidia.ko expects for this escape and size (escape.c checks the size)."""
    if name == "NV_ESC_RM_ALLOC":
        for s in (NVOS21_PARAMETERS, NVOS64_PARAMETERS):
            if ctypes.sizeof(s) == size:
                return s
    if name == "NV_ESC_RM_CONTROL" and ctypes.sizeof(NVOS54_PARAMETERS) == size:
        return NVOS54_PARAMETERS
    return None
# --8<-- [end:strace]
