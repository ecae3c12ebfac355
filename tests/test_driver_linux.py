"""code/driver/pci_sysfs.py (docs/driver/linux-driver-model.md) against the machine it runs on.

Every fact the listing parses from /sys/bus/pci/devices is checked against a second, independent
view the kernel gives of the same device: the raw configuration header (sysfs `config`: IDs, class
code and the BAR registers' type bits) and /proc/bus/pci/devices (printed by a different piece of
the kernel, drivers/pci/proc.c: IDs, BAR sizes, bound driver). A constructed sysfs tree covers what
a sparse VM lacks (a 3D controller with 32- and 64-bit, prefetchable BARs, link attributes, NUMA
node, MSI-X vectors, IOMMU group), and the committed H200 record, once present, is parsed again.
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

from conftest import ROOT

_spec = importlib.util.spec_from_file_location("pci_sysfs", ROOT / "code" / "driver" / "pci_sysfs.py")
P = importlib.util.module_from_spec(_spec)
sys.modules["pci_sysfs"] = P
_spec.loader.exec_module(P)
SYSFS = Path("/sys/bus/pci/devices")
PROC = Path("/proc/bus/pci/devices")
RECORD = ROOT / "data" / "records" / "nvidia-h200" / "nvml_telemetry.json"
HAVE_PCI = SYSFS.is_dir() and any(SYSFS.iterdir())


def proc_devices() -> dict[tuple[int, int], dict]:
    """/proc/bus/pci/devices: 'bus<<8|devfn' hex, vendor<<16|device hex, irq, 7 base addresses,
    7 sizes (BAR0-5 and the ROM), then the driver name if one is bound. Domain 0 only."""
    out, seen = {}, {}
    for line in PROC.read_text().splitlines():
        f = line.split("\t")
        busdevfn, ids = int(f[0], 16), int(f[1], 16)
        sizes = [int(x, 16) for x in f[10:17]]
        key = (busdevfn >> 8, busdevfn & 0xFF)
        seen[key] = seen.get(key, 0) + 1
        out[key] = {"vendor": ids >> 16, "device": ids & 0xFFFF,
                    "sizes": sizes, "driver": f[17].strip() if len(f) > 17 else ""}
    # the file has no domain column: a bus/devfn present in two PCI domains is ambiguous, drop it
    return {k: v for k, v in out.items() if seen[k] == 1}


@pytest.mark.skipif(not HAVE_PCI, reason="no PCI devices in this machine's sysfs")
def test_every_device_on_this_machine_parses_and_its_class_decodes():
    devices = P.enumerate_pci()
    assert devices
    for d in devices:
        assert 0 < d.vendor < 0xFFFF, d
        assert not d.class_name.startswith("reserved"), (d.bdf, hex(d.class_code))
        assert d.class_name == P.decode_class(d.class_code)
        for b in d.bars:
            assert 0 <= b.index < 6 and b.size > 0
            assert b.size & (b.size - 1) == 0, f"{d.bdf} BAR{b.index}: a BAR's size is a power of two"
            assert b.start % b.size == 0, f"{d.bdf} BAR{b.index}: a BAR is aligned to its size"
    print("\n" + P.table(devices))


@pytest.mark.skipif(not HAVE_PCI, reason="no PCI devices in this machine's sysfs")
def test_sysfs_agrees_with_the_raw_config_header():
    for d in P.enumerate_pci():
        head = P.parse_config_header((SYSFS / d.bdf / "config").read_bytes()[:64])
        assert (head["vendor"], head["device"], head["class_code"]) == (d.vendor, d.device, d.class_code)
        if head["header_type"] != 0:
            continue                                    # bridges have a different header layout
        by_index = {b["index"]: b for b in head["bars"]}
        for b in d.bars:                                # the kernel's flags match the BAR's own type bits
            assert by_index[b.index]["kind"] == b.kind, (d.bdf, b)
            assert by_index[b.index]["prefetchable"] == b.prefetchable, (d.bdf, b)


@pytest.mark.skipif(not (HAVE_PCI and PROC.exists()), reason="no /proc/bus/pci/devices")
def test_sysfs_agrees_with_proc_bus_pci():
    proc = proc_devices()
    checked = 0
    for d in P.enumerate_pci():
        domain, bus, devfn = d.bdf.split(":")[0], int(d.bdf.split(":")[1], 16), d.bdf.split(":")[2]
        slot, func = devfn.split(".")
        key = (bus, int(slot, 16) << 3 | int(func))
        if domain != "0000" or key not in proc:
            continue
        ref = proc[key]
        assert (ref["vendor"], ref["device"]) == (d.vendor, d.device)
        sizes = {b.index: b.size for b in d.bars}
        assert [sizes.get(i, 0) for i in range(6)] == ref["sizes"][:6], d.bdf
        assert ref["driver"] == (d.driver or ""), d.bdf
        checked += 1
    assert checked > 0


@pytest.mark.skipif(not HAVE_PCI, reason="no PCI devices in this machine's sysfs")
def test_driver_and_msi_vectors_match_the_links():
    for d in P.enumerate_pci():
        path = SYSFS / d.bdf
        link = path / "driver"
        assert d.driver == (os.path.basename(os.readlink(link)) if link.is_symlink() else None)
        msi = path / "msi_irqs"
        assert d.msi_vectors == (len(os.listdir(msi)) if msi.is_dir() else 0)


@pytest.mark.parametrize("code,name", [
    (0x030200, "display / 3D controller"), (0x030000, "display / VGA-compatible"),
    (0x020700, "network / InfiniBand"), (0x020000, "network / Ethernet"),
    (0x060400, "bridge / PCI-to-PCI bridge"), (0x010802, "mass storage / NVM controller"),
    (0x120000, "processing accelerator / processing accelerator"), (0x0B4000, "processor"),
    (0xFFFF00, "unassigned"), (0x150000, "reserved base class 0x15"),
])
def test_decode_class(code, name):
    assert P.decode_class(code) == name


def test_parse_resource_format():
    # BAR0 32-bit 16 MiB; BAR1 64-bit prefetchable 64 GiB (takes BAR1+BAR2); BAR3 64-bit prefetchable
    # 32 MiB; BAR5 I/O 128 bytes; line 6 the expansion ROM (ignored), then bridge/IOV lines.
    text = "\n".join([
        "0x00000000da000000 0x00000000daffffff 0x0000000000040200",
        "0x0000380000000000 0x0000380fffffffff 0x000000000014220c",
        "0x0000000000000000 0x0000000000000000 0x0000000000000000",
        "0x0000381000000000 0x0000381001ffffff 0x000000000014220c",
        "0x0000000000000000 0x0000000000000000 0x0000000000000000",
        "0x000000000000e000 0x000000000000e07f 0x0000000000040101",
        "0x00000000db000000 0x00000000db07ffff 0x0000000000046200",
    ] + ["0x0000000000000000 0x0000000000000000 0x0000000000000000"] * 10) + "\n"
    bars = P.parse_resource(text)
    assert [(b.index, b.size, b.kind, b.prefetchable) for b in bars] == [
        (0, 16 << 20, "mem32", False), (1, 64 << 30, "mem64", True),
        (3, 32 << 20, "mem64", True), (5, 128, "io", False)]
    assert P.human_bytes(64 << 30) == "64 GiB" and P.human_bytes(128) == "128 B"


def _fake_device(root: Path, bdf: str, *, vendor, device, cls, resource, numa="-1", driver=None,
                 link=None, msi=0, group=None, drivers_dir: Path):
    d = root / bdf
    d.mkdir(parents=True)
    (d / "vendor").write_text(f"0x{vendor:04x}\n")
    (d / "device").write_text(f"0x{device:04x}\n")
    (d / "class").write_text(f"0x{cls:06x}\n")
    (d / "resource").write_text(resource)
    (d / "numa_node").write_text(numa + "\n")
    for k, v in (link or {}).items():
        (d / k).write_text(v + "\n")
    if driver:
        (drivers_dir / driver).mkdir(parents=True, exist_ok=True)
        (d / "driver").symlink_to(drivers_dir / driver)
    if msi:
        (d / "msi_irqs").mkdir()
        for i in range(msi):
            (d / "msi_irqs" / str(100 + i)).write_text("msix\n")
    if group is not None:
        (root.parent / "iommu_groups" / str(group)).mkdir(parents=True, exist_ok=True)
        (d / "iommu_group").symlink_to(root.parent / "iommu_groups" / str(group))


def test_enumerate_a_constructed_gpu_server_tree(tmp_path):
    """The sysfs layout of a GPU behind a PCIe switch port, built file by file as the kernel lays it out."""
    root = tmp_path / "devices"
    zero = "0x0000000000000000 0x0000000000000000 0x0000000000000000\n"
    gpu_res = ("0x00000000da000000 0x00000000daffffff 0x0000000000040200\n"
               "0x0000380000000000 0x0000381fffffffff 0x000000000014220c\n" + zero +
               "0x0000382000000000 0x0000382001ffffff 0x000000000014220c\n" + zero * 13)
    _fake_device(root, "0000:18:00.0", vendor=0x10DE, device=0x1234, cls=0x030200, resource=gpu_res,
                 numa="0", driver="nvidia", msi=1, group=27, drivers_dir=tmp_path / "drivers",
                 link={"current_link_speed": "32.0 GT/s PCIe", "current_link_width": "16",
                       "max_link_speed": "32.0 GT/s PCIe", "max_link_width": "16"})
    _fake_device(root, "0000:17:00.0", vendor=0x1000, device=0xC030, cls=0x060400, resource=zero * 17,
                 numa="0", driver="pcieport", drivers_dir=tmp_path / "drivers")
    devs = {d.bdf: d for d in P.enumerate_pci(root)}
    gpu = devs["0000:18:00.0"]
    assert gpu.class_name == "display / 3D controller" and gpu.driver == "nvidia"
    assert [(b.index, b.size, b.kind, b.prefetchable) for b in gpu.bars] == [
        (0, 16 << 20, "mem32", False), (1, 128 << 30, "mem64", True), (3, 32 << 20, "mem64", True)]
    assert gpu.numa_node == 0 and gpu.msi_vectors == 1 and gpu.iommu_group == 27
    assert gpu.link["current_link_speed"].startswith("32.0 GT/s")
    bridge = devs["0000:17:00.0"]
    assert bridge.class_name == "bridge / PCI-to-PCI bridge" and bridge.bars == [] and bridge.numa_node == 0
    table = P.table(list(devs.values()))
    assert "BAR1 128 GiB mem64 pf" in table and "x16" in table


@pytest.mark.skipif(not RECORD.exists(), reason="no H200 record yet")
def test_h200_record_sysfs_facts_parse_again():
    rec = json.loads(RECORD.read_text())["results"]["sysfs"]
    if not rec or "gpu" not in rec:
        pytest.skip(f"the record has no sysfs facts: {rec}")
    gpu = rec["gpu"]
    bars = P.parse_resource(rec["resource_file"])
    assert [(b.index, b.size) for b in bars] == [(b["index"], b["size_bytes"]) for b in gpu["bars"]]
    assert gpu["vendor"] == "0x10de" and P.decode_class(int(gpu["class"], 16)).startswith("display")
    if "config_header_hex" in rec:
        head = P.parse_config_header(bytes.fromhex(rec["config_header_hex"]))
        assert head["vendor"] == 0x10DE and head["class_code"] == int(gpu["class"], 16)
        assert {b["index"]: b["kind"] for b in head["bars"]} == {b.index: b.kind for b in bars}
