"""code/hardware/fabrics.py derives the figures of docs/hardware/blackwell-systems.md and
docs/hardware/scale-up-scale-out.md from data/hardware/systems.yml; this checks the data file
(every entry sourced), the arithmetic (closed forms, brute-force enumeration) and that the pages
quote what the code computes.

References: NVIDIA (Blackwell brief, DGX B200 guide, GB200 NVL72 page, Grace Hopper blog, nvCOMP
DE FAQ), Chips and Cheese (B200 SM count, L2), the UALink Consortium (200G 1.0 overview and Q&A),
Hoefler et al. 2025 (UE 1.0), NVIDIA's GTC 2025 photonics figures, the CXL Consortium and Pond.
"""
from __future__ import annotations

import itertools

import pytest

from conftest import ROOT, load_listing


def _load(name):
    return load_listing(ROOT / "code" / "hardware" / f"{name}.py", name)


F = _load("fabrics")
L = _load("links")
SYS = F.load_systems(ROOT / "data" / "hardware" / "systems.yml")
PAGE_B = (ROOT / "docs" / "hardware" / "blackwell-systems.md").read_text(encoding="utf-8")
PAGE_S = (ROOT / "docs" / "hardware" / "scale-up-scale-out.md").read_text(encoding="utf-8")

B200, NVL, HGX, GH = SYS["b200"], SYS["gb200_nvl72"], SYS["hgx_b200"], SYS["gh200"]
NVLINK_DIR = B200["nvlink_bidir_gbps"] / 2        # 900 GB/s per direction
NIC_DIR = L.gbps_to_gbytes(HGX["nic_gbps_per_gpu"])  # 50 GB/s


def test_every_entry_has_a_source_url():
    for key, entry in SYS.items():
        assert entry.get("source", "").startswith("https://"), key
        for field, value in entry.items():
            if field.endswith("_source"):
                assert value.startswith("https://"), f"{key}.{field}"


def test_published_figures_agree_with_each_other():
    # NVLink 5 per GPU is 18 links x 50 GB/s x 2, as links.py derives it
    assert B200["nvlink_bidir_gbps"] == L.nvlink_gpu_bidir(5)
    # 72 GPUs x 1.8 TB/s is NVIDIA's "130 TB/s"
    assert F.nvlink_domain_tbps(NVL["gpus"], B200["nvlink_bidir_gbps"]) == pytest.approx(129.6)
    assert F.nvlink_domain_tbps(NVL["gpus"], B200["nvlink_bidir_gbps"]) == pytest.approx(NVL["nvlink_domain_tbps"], rel=0.01)
    # two GPUs per Grace, four per compute tray, two NVSwitch chips per switch tray
    assert NVL["gpus"] == 2 * NVL["grace_cpus"] == 4 * NVL["compute_trays"]
    assert NVL["nvlink_switch_trays"] * NVL["nvswitch_chips_per_tray"] == 18
    # 13.4 TB over 72 GPUs is the 186 GB of a GB200 GPU, a little more than HGX B200's 180 GB
    assert NVL["hbm_tb"] * 1000 / NVL["gpus"] == pytest.approx(NVL["hbm_gb_per_gpu"], abs=0.5)
    assert NVL["hbm_gb_per_gpu"] > B200["hbm_gb"]
    # 74 of 80 SMs on each of two dies
    assert B200["sm_count"] == B200["dies"] * 74
    # C2C is "7x PCIe Gen5": 900 GB/s over the datasheets' 128 GB/s (both directions, raw)
    assert GH["c2c_bidir_gbps"] / (2 * L.PCIE[5].gt_per_s * 16 / 8) == pytest.approx(GH["c2c_vs_pcie5"], abs=0.05)


def test_b200_dual_die():
    assert F.per_die(B200["hbm_gb"]) == 90
    assert F.per_die(B200["hbm_tbps"]) == 4
    assert F.per_die(B200["hbm_stacks"]) == 4
    ratio = F.die_link_vs_hbm(B200["nv_hbi_tbps"], B200["hbm_tbps"])
    assert ratio == 1.25 and ratio > 1  # the die link is not the bottleneck for any access pattern
    # against NVLink 5's per-GPU total (both NVIDIA figures are totals): 10 / 1.8
    assert B200["nv_hbi_tbps"] * 1000 / B200["nvlink_bidir_gbps"] == pytest.approx(5.56, abs=0.005)
    # read conservatively as 5 TB/s per direction, the link still carries one die's whole HBM (4 TB/s)
    assert B200["nv_hbi_tbps"] / 2 >= F.per_die(B200["hbm_tbps"])


def test_rack_power_capacity():
    assert F.rack_power_capacity_kw(NVL["power_shelves"], NVL["psus_per_shelf"], NVL["psu_kw"]) == 264


def test_alltoall_flat_equals_brute_force():
    # every GPU sends S/n to each of the n-1 others through its own port
    for n in (2, 8, 72):
        s = 1e9
        per_peer = s / n
        assert F.alltoall_seconds_flat(s, n, 100) == pytest.approx((n - 1) * per_peer / 100e9)


def test_moe_alltoall_nvl72_vs_nine_hgx_nodes():
    s = F.moe_dispatch_bytes(4096, 7168, 8, 2)
    assert s == 469_762_048
    t72 = F.alltoall_seconds_flat(s, NVL["gpus"], NVLINK_DIR)
    t9 = F.alltoall_seconds_nodes(s, NVL["gpus"] // HGX["gpus"], HGX["gpus"], NVLINK_DIR, NIC_DIR)
    assert t72 == pytest.approx(0.515e-3, abs=1e-6)
    assert t9 == pytest.approx(8.35e-3, abs=1e-5)
    assert t9 / t72 == pytest.approx(64 / 71 * NVLINK_DIR / NIC_DIR)
    assert round(t9 / t72) == 16
    # with one node the "nodes" formula is the flat one over NVLink
    assert F.alltoall_seconds_nodes(s, 1, 8, NVLINK_DIR, NIC_DIR) == pytest.approx(F.alltoall_seconds_flat(s, 8, NVLINK_DIR))


def test_offload_70b_over_c2c_and_pcie():
    w = 70e9 * 2
    pcie = L.pcie_gbytes_per_s(5, 16)
    c2c = GH["c2c_bidir_gbps"] / 2
    t_pcie = F.stream_seconds(w, pcie)
    t_c2c = F.stream_seconds(w, c2c, GH["lpddr5x_gbps"])
    assert t_pcie == pytest.approx(2.22, abs=0.005)
    assert t_c2c == pytest.approx(0.311, abs=0.001)
    assert t_pcie / t_c2c == pytest.approx(7.14, abs=0.01)
    assert F.stream_seconds(w, GH["hbm3_gbps"]) == pytest.approx(0.0467, abs=1e-4)
    # the source caps the stream when host memory is slower than the link
    assert F.stream_seconds(w, 900, 546) == F.stream_seconds(w, 546)


def test_decompression_ingest():
    de = SYS["decompression_engine"]
    pcie = L.pcie_gbytes_per_s(5, 16)
    assert F.ingest_gbytes(pcie, 2, de["peak_gbps"]) == pytest.approx(126.0, abs=0.1)
    assert F.ingest_gbytes(pcie, 4, de["peak_gbps"]) == pytest.approx(252.1, abs=0.1)
    assert F.ingest_gbytes(GH["c2c_bidir_gbps"] / 2, 2, de["peak_gbps"]) == 600
    assert {"Snappy", "LZ4", "Deflate"} <= set(de["formats"])


def test_tp_allreduce_nvlink_vs_nic():
    act = 8192 * 8192 * 2
    sent = L.ring_allreduce_bytes_per_gpu(act, 8)
    assert act / 1e6 == pytest.approx(134, abs=0.5) and sent / 1e6 == pytest.approx(235, abs=0.5)
    assert L.transfer_seconds(sent, NVLINK_DIR) == pytest.approx(0.261e-3, abs=1e-6)
    assert L.transfer_seconds(sent, NIC_DIR) == pytest.approx(4.70e-3, abs=1e-5)
    assert NVLINK_DIR / NIC_DIR == 18


def test_ualink_port_arithmetic():
    u = SYS["ualink"]
    port = F.port_gbytes_dir(u["lane_gbps"], u["lanes_per_port"])
    assert port == 100
    assert F.ports_to_match(NVLINK_DIR, port) == 9
    assert F.ports_to_match(901, port) == 10 and F.ports_to_match(100, port) == 1
    assert u["lane_gbps"] / u["lane_signal_gbps"] == pytest.approx(0.941, abs=5e-4)
    assert u["dl_flit_bytes"] == 10 * u["tl_flit_bytes"]
    assert max(u["request_bytes"]) == 256 and u["max_accelerators"] == 1024


def test_ecmp_closed_form_matches_enumeration():
    for flows, paths in ((2, 2), (3, 4), (4, 4), (5, 3)):
        busy = 0
        count = 0
        for assign in itertools.product(range(paths), repeat=flows):
            busy += len(set(assign))
            count += 1
        assert F.ecmp_expected_utilization(flows, paths) == pytest.approx(busy / count / paths)
    assert F.ecmp_expected_utilization(8, 8) == pytest.approx(0.656, abs=5e-4)


def test_cpo_power():
    c = SYS["cpo"]
    assert F.picojoule_per_bit(c["pluggable_port_w"], c["port_tbps"]) == pytest.approx(18.75)
    assert F.picojoule_per_bit(c["cpo_port_w"], c["port_tbps"]) == pytest.approx(5.625)
    ratio = c["pluggable_port_w"] / c["cpo_port_w"]
    assert ratio == pytest.approx(3.33, abs=0.01) and abs(ratio - c["power_efficiency_x"]) < 0.25
    # Spectrum-X Photonics' 512 x 800 Gb/s (~400 Tb/s) is 256 ports of 1.6 Tb/s, the size the
    # per-port watts are quoted for
    ports = 512 * 800 / 1000 / c["port_tbps"]
    assert ports == 256 and ports * c["port_tbps"] == pytest.approx(c["spectrum_x_max_tbps"], rel=0.03)
    assert F.optics_kw_saved(int(ports), c["pluggable_port_w"], c["cpo_port_w"]) == pytest.approx(5.376)
    assert c["quantum_x_ports"] * c["quantum_x_port_gbps"] / 1000 == pytest.approx(115.2)


def test_cxl_bandwidth_in_ddr5_channels():
    c = SYS["cxl"]
    ddr = F.ddr_channel_gbytes(c["ddr5_mts"])
    assert ddr == pytest.approx(38.4)
    for version, (_year, gen, gts) in c["versions"].items():
        assert L.PCIE[gen].gt_per_s == gts, version
    assert L.pcie_gbytes_per_s(5, 16) / ddr == pytest.approx(1.64, abs=0.005)
    assert L.pcie_gbytes_per_s(6, 16) / ddr == pytest.approx(3.07, abs=0.005)


def test_pages_quote_the_computed_figures():
    for text in (
        "2080 亿", "148", "90 GB、4 TB/s", "$10 / 8 = 1.25$", "129.6", "264", "13.4 TB", "186 GB", "470", "约 0.51 ms",
        "约 8.35 ms", "约 16 倍", "约 2.22 s", "约 0.31 s", "约 0.047 s", "约 7.1 倍", "约 126 GB/s",
        "约 252 GB/s", "600 GB/s", "4 MB",
    ):
        assert text in PAGE_B, text
    for text in (
        "约 134 MB", "235", "约 0.26 ms", "约 4.7 ms", "$900 / 50 = 18$", "100 GB/s", "9 个 x4 端口",
        "94\\%", "65.6\\%", "18.8", "5.6", "3.3 倍", "5.4 kW", "38.4", "1.6 个 DDR5", "3.1 个通道",
        "70–90 ns", "1024", "150 ns", "640 B",
    ):
        assert text in PAGE_S, text
