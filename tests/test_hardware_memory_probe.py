"""The memory-hierarchy probes: the access patterns are what the page says, the Triton kernels (in the CPU
interpreter) walk them exactly as the host does, and the committed H200 record has the level structure
the page reads from it."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r"""
import os, sys
os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, "code/hardware")
import torch, memory_probe as mp
nxt, first = mp.chase_pattern(torch, 32 * 1024, "cpu", seed=3)
slots, step = 32 * 1024 // mp.LINE, mp.LINE // 4
lap, i = [], first
for _ in range(slots):
    lap.append(i); i = int(nxt[i])
assert i == first and sorted(lap) == list(range(0, 32 * 1024 // 4, step))   # one cycle through every slot
for n in (1, 5, 300):
    assert mp.chase(torch, nxt, n, first) == mp.chase_reference(nxt.numpy(), n, first)
    assert mp.chase(torch, nxt, n, first, skip_l1=True) == mp.chase_reference(nxt.numpy(), n, first)
p, s = mp.page_pattern(torch, 5, "cpu", seed=1)
lap, i = [], s
for _ in range(5):
    lap.append(i); i = int(p[i])
per_page = (2 << 20) // 8
assert i == s and sorted(x // per_page for x in lap) == list(range(5))
assert len({(x % per_page) * 8 // mp.LINE for x in lap}) == 5                  # a different line in each page
x = torch.arange(3000, dtype=torch.float32)
out = mp.read_all(torch, x, 4, 3, block=512)
assert torch.allclose(out, torch.full((4,), 3 * float(x.sum())))
print("ok")
"""


def test_patterns_and_kernels_walk_as_the_host_does():
    env = dict(os.environ, TRITON_INTERPRET="1")
    r = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-2000:]


def test_h200_record_has_three_levels_in_order():
    rec = json.loads((ROOT / "data" / "records" / "nvidia-h200" / "memory_hierarchy.json").read_text("utf-8"))
    res = rec["results"]
    lat = {r["bytes"]: r["ns"] for r in res["latency"]}
    l1 = max(v for b, v in lat.items() if b <= 128 << 10)
    l2 = [v for b, v in lat.items() if (512 << 10) <= b <= (16 << 20)]
    hbm = [v for b, v in lat.items() if b >= 128 << 20]
    assert l1 < min(l2) and max(l2) < min(hbm)
    bw = {r["bytes"]: r["gb_per_s"] for r in res["bandwidth"]}
    assert bw[128 << 10] > bw[4 << 20] > bw[1 << 30] and bw[1 << 30] < 4800   # below the 4.8 TB/s spec
    assert rec["provenance"]["gpu"] == "NVIDIA H200" and rec["provenance"]["commit"]
