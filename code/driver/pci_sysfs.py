"""Enumerate PCI devices the way the kernel exposes them under /sys/bus/pci/devices.

docs/driver/linux-driver-model.md embeds parts of this file. Everything here reads plain sysfs
text files (no lspci, no root): `vendor`, `device`, `class` (24-bit class code), `resource` (one
line per resource: start, end and flags in hex, as the kernel's resource_show() prints them),
`numa_node`, the `driver` symlink, the PCIe link attributes and the `msi_irqs` directory.
Run it as a script to print a table of this machine's devices:

    python code/driver/pci_sysfs.py [SYSFS_ROOT]
"""
from __future__ import annotations

import os
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path

SYSFS_PCI = Path("/sys/bus/pci/devices")

# --8<-- [start:classes]
# Base classes (bits 23..16 of the class code) and a few sub-classes (bits 15..8) from the PCI
# Code and ID Assignment Specification; the low byte is the programming interface.
BASE_CLASSES = {
    0x00: "unclassified", 0x01: "mass storage", 0x02: "network", 0x03: "display",
    0x04: "multimedia", 0x05: "memory", 0x06: "bridge", 0x07: "communication",
    0x08: "system peripheral", 0x09: "input", 0x0A: "docking station", 0x0B: "processor",
    0x0C: "serial bus", 0x0D: "wireless", 0x0E: "intelligent I/O", 0x0F: "satellite",
    0x10: "encryption", 0x11: "signal processing", 0x12: "processing accelerator",
    0x13: "non-essential instrumentation", 0x40: "co-processor", 0xFF: "unassigned",
}
SUB_CLASSES = {
    (0x01, 0x08): "NVM controller", (0x01, 0x06): "SATA controller", (0x01, 0x80): "other storage",
    (0x02, 0x00): "Ethernet", (0x02, 0x07): "InfiniBand",
    (0x03, 0x00): "VGA-compatible", (0x03, 0x02): "3D controller",
    (0x06, 0x00): "host bridge", (0x06, 0x01): "ISA bridge", (0x06, 0x04): "PCI-to-PCI bridge",
    (0x08, 0x80): "other system peripheral", (0x0C, 0x03): "USB controller",
    (0x12, 0x00): "processing accelerator",
}


def decode_class(code: int) -> str:
    """'display / 3D controller' for 0x030200; every 24-bit code decodes to a base class."""
    base, sub = (code >> 16) & 0xFF, (code >> 8) & 0xFF
    name = BASE_CLASSES.get(base, f"reserved base class 0x{base:02x}")
    sub_name = SUB_CLASSES.get((base, sub))
    return f"{name} / {sub_name}" if sub_name else name
# --8<-- [end:classes]


# --8<-- [start:resource]
# Flag bits of struct resource (include/linux/ioport.h) that matter for a BAR.
IORESOURCE_IO = 0x00000100
IORESOURCE_MEM = 0x00000200
IORESOURCE_PREFETCH = 0x00002000
IORESOURCE_MEM_64 = 0x00100000
IORESOURCE_DISABLED = 0x10000000
N_STANDARD_BARS = 6          # lines 0-5 are BAR0..BAR5, line 6 the expansion ROM, later lines
                             # bridge windows or SR-IOV VF BARs


@dataclass(frozen=True)
class Bar:
    index: int
    start: int
    size: int
    flags: int

    @property
    def kind(self) -> str:
        if self.flags & IORESOURCE_IO:
            return "io"
        return "mem64" if self.flags & IORESOURCE_MEM_64 else "mem32"

    @property
    def prefetchable(self) -> bool:
        return bool(self.flags & IORESOURCE_PREFETCH)


def parse_resource(text: str) -> list[Bar]:
    """The BARs of one `resource` file: '0x<start> 0x<end> 0x<flags>' per line, unused lines all
    zero. A BAR spans [start, end], so its size is end - start + 1. A 64-bit BAR takes two BAR
    registers; the kernel prints it on the lower index and leaves the next line zero."""
    bars = []
    for index, line in enumerate(text.splitlines()[:N_STANDARD_BARS]):
        start, end, flags = (int(word, 16) for word in line.split())
        if end == 0 or not flags & (IORESOURCE_IO | IORESOURCE_MEM):
            continue
        bars.append(Bar(index, start, end - start + 1, flags))
    return bars
# --8<-- [end:resource]


# --8<-- [start:config]
def parse_config_header(raw: bytes) -> dict:
    """The fields of a type-0 configuration header (its first 64 bytes, which sysfs `config` lets
    any user read): IDs at 0x00/0x02, class code at 0x09-0x0B, header type at 0x0E and the six BAR
    registers at 0x10-0x24. A BAR register's low bits say what the kernel's flags say: bit 0 set is
    I/O space; otherwise bits 2:1 = 0b10 is a 64-bit BAR (it uses the next register for the upper
    half) and bit 3 is prefetchable."""
    vendor, device = struct.unpack_from("<HH", raw, 0x00)
    class_code = raw[0x09] | raw[0x0A] << 8 | raw[0x0B] << 16
    header_type = raw[0x0E] & 0x7F
    bars, i = [], 0
    while header_type == 0 and i < N_STANDARD_BARS:
        (reg,) = struct.unpack_from("<I", raw, 0x10 + 4 * i)
        if reg & 1:
            bars.append({"index": i, "kind": "io", "prefetchable": False})
            i += 1
            continue
        is64 = (reg >> 1) & 0b11 == 0b10
        upper = struct.unpack_from("<I", raw, 0x14 + 4 * i)[0] if is64 else 0
        if reg or upper:                      # an unimplemented BAR reads as zero
            bars.append({"index": i, "kind": "mem64" if is64 else "mem32", "prefetchable": bool(reg & 0b1000)})
        i += 2 if is64 else 1
    return {"vendor": vendor, "device": device, "class_code": class_code, "header_type": header_type,
            "bars": bars}
# --8<-- [end:config]


def human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:g} {unit}" if unit == "B" else f"{n:.0f} {unit}" if n == int(n) else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


# --8<-- [start:device]
@dataclass
class PciDevice:
    bdf: str                      # domain:bus:device.function, e.g. 0000:18:00.0
    vendor: int
    device: int
    class_code: int
    bars: list[Bar]
    numa_node: int | None         # None when the file is absent or says -1 (no affinity known)
    driver: str | None            # the bound driver's name, None if no driver claimed it
    link: dict[str, str] = field(default_factory=dict)
    msi_vectors: int = 0          # entries of msi_irqs/: MSI or MSI-X vectors now allocated
    iommu_group: int | None = None

    @property
    def class_name(self) -> str:
        return decode_class(self.class_code)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:               # absent attribute, or one the kernel refuses to read
        return None


def read_device(path: Path) -> PciDevice:
    numa = _read(path / "numa_node")
    driver = path / "driver"
    group = path / "iommu_group"
    link = {name: value for name in ("current_link_speed", "current_link_width",
                                     "max_link_speed", "max_link_width")
            if (value := _read(path / name)) is not None}
    msi = path / "msi_irqs"
    return PciDevice(
        bdf=path.name,
        vendor=int(_read(path / "vendor"), 16),
        device=int(_read(path / "device"), 16),
        class_code=int(_read(path / "class"), 16),
        bars=parse_resource(_read(path / "resource") or ""),
        numa_node=None if numa in (None, "-1") else int(numa),
        driver=os.path.basename(os.readlink(driver)) if driver.is_symlink() else None,
        link=link,
        msi_vectors=len(os.listdir(msi)) if msi.is_dir() else 0,
        iommu_group=int(os.path.basename(os.readlink(group))) if group.is_symlink() else None,
    )


def enumerate_pci(root: Path = SYSFS_PCI) -> list[PciDevice]:
    return [read_device(p) for p in sorted(Path(root).iterdir())]
# --8<-- [end:device]


def table(devices: list[PciDevice]) -> str:
    rows = []
    for d in devices:
        bars = ", ".join(f"BAR{b.index} {human_bytes(b.size)} {b.kind}{' pf' if b.prefetchable else ''}"
                         for b in d.bars) or "-"
        link = (f"{d.link.get('current_link_speed', '?')} x{d.link.get('current_link_width', '?')}"
                if d.link else "-")
        rows.append(f"{d.bdf}  {d.vendor:04x}:{d.device:04x}  {d.class_name:<34} "
                    f"drv={d.driver or '-':<12} numa={d.numa_node if d.numa_node is not None else '-'} "
                    f"msi={d.msi_vectors} link={link}  {bars}")
    return "\n".join(rows)


if __name__ == "__main__":
    print(table(enumerate_pci(Path(sys.argv[1]) if len(sys.argv) > 1 else SYSFS_PCI)))
