"""IMEX channels and the IMEX node list, from the text files the driver and the daemon read.

docs/driver/operations.md embeds parts of this file; tests/test_driver_ops.py checks it against the
/proc/devices lines in data/records/nvidia-h200/nvml_telemetry.json and the examples of NVIDIA's IMEX
guide (https://docs.nvidia.com/multi-node-nvlink-systems/imex-guide/imexchannels.html).
Facts from NVIDIA/open-gpu-kernel-modules: kernel-open/nvidia/nv-caps-imex.c (the channel is the
minor number of the device node; only channel0 can be created by the driver, mode 0666) and
kernel-open/nvidia/nv-reg.h (NVreg_ImexChannelCount, default 2048; NVreg_CreateImexChannel0).
"""
from __future__ import annotations

import ipaddress
import re

# --8<-- [start:channels]
IMEX_CHARDEV = "nvidia-caps-imex-channels"
IMEX_DIR = "/dev/nvidia-caps-imex-channels"


def char_majors(proc_devices: str) -> dict[str, int]:
    """`/proc/devices`: 'Character devices:' then 'MAJOR name' lines (a name may repeat)."""
    majors: dict[str, int] = {}
    section = "Character devices:"
    for line in proc_devices.splitlines():
        line = line.strip()
        if line.endswith(":"):
            section = line
            continue
        m = re.fullmatch(r"(\d+)\s+(\S+)", line)
        if m and section == "Character devices:":
            majors.setdefault(m[2], int(m[1]))
    return majors


def channel_nodes(proc_devices: str, channels: list[int], channel_count: int = 2048) -> list[str]:
    """The mknod commands that grant IMEX channels: the driver registers the character device but
    does not create the nodes; the channel number is the node's minor number."""
    major = char_majors(proc_devices).get(IMEX_CHARDEV)
    if major is None:
        raise LookupError("nvidia.ko has not registered nvidia-caps-imex-channels (IMEX disabled?)")
    cmds = [f"mkdir -p {IMEX_DIR}"]
    for ch in channels:
        if not 0 <= ch < channel_count:
            raise ValueError(f"channel {ch} outside 0..{channel_count - 1} (NVreg_ImexChannelCount)")
        cmds.append(f"mknod {IMEX_DIR}/channel{ch} c {major} {ch}")
    return cmds


def parse_ls_channels(ls_output: str) -> dict[str, tuple[int, int]]:
    """`ls -l /dev/nvidia-caps-imex-channels/` -> {node: (major, minor)} for the character devices."""
    nodes = {}
    for line in ls_output.splitlines():
        m = re.match(r"c\S*\s+\d+\s+\S+\s+\S+\s+(\d+),\s*(\d+)\s+.*?\s(channel\d+)$", line.strip())
        if m:
            nodes[m[3]] = (int(m[1]), int(m[2]))
    return nodes
# --8<-- [end:channels]


# --8<-- [start:nodes]
def parse_nodes_config(text: str) -> list[str]:
    """nodes_config.cfg: one IP address of an IMEX peer per line; every node of the domain must hold
    the same list, because each daemon compares its address map with the others' before serving."""
    addrs = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        ipaddress.ip_address(line)            # raises on a host name or a typo
        if line in addrs:
            raise ValueError(f"duplicate node {line}")
        addrs.append(line)
    return addrs


def domain_consistent(configs: dict[str, str]) -> bool:
    """Every node's nodes_config.cfg names the same set of peers, and every node is in it."""
    sets = {node: set(parse_nodes_config(text)) for node, text in configs.items()}
    first = next(iter(sets.values()))
    return all(s == first for s in sets.values()) and set(configs) <= first
# --8<-- [end:nodes]
