"""What Inductor generates on the GPU (Triton kernels) and what it gains over eager, on one GPU."""
from __future__ import annotations

import re
import sys
from pathlib import Path

TITLE = "torch.compile 在 GPU 上：Inductor 生成的 Triton kernel 与相对 eager 的加速"
USED_BY = ["docs/compiler/torch-compile.md"]


def _kernels(code: str) -> list[str]:
    return re.findall(r"^def (triton_[a-z0-9_]+)\(", code, flags=re.M)


def run(torch) -> dict:
    root = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root / "code" / "compiler"))
    sys.path.insert(0, str(root / "code" / "framework"))
    import torch._dynamo as dynamo
    from torch._inductor.utils import run_and_get_code
    from triton.testing import do_bench

    import gpt_train
    import torch_compile_demo as demo

    torch.manual_seed(0)
    cases = []

    x = torch.randn(8192, 4096, device="cuda", dtype=torch.float16)
    s, t = torch.randn(4096, device="cuda", dtype=torch.float16), torch.randn(4096, device="cuda", dtype=torch.float16)
    layer = gpt_train.Layer(1024, 16, p=0.0).to("cuda", torch.bfloat16).eval()
    h = torch.randn(1024, 8, 1024, device="cuda", dtype=torch.bfloat16)
    causal = gpt_train.causal_mask(1024, "cuda")
    work = [("gelu_softmax", "gelu(x*s+t).softmax(-1), x: 8192x4096 fp16", demo.gelu_softmax, (x, s, t)),
            ("gpt_layer", "GPT layer forward (h 1024, 16 heads, s 1024, b 8, bf16, no dropout)", layer, (h, causal))]
    for name, what, fn, args in work:
        with torch.no_grad():
            ref = fn(*args)
            for mode in ("default", "max-autotune-no-cudagraphs"):
                dynamo.reset()
                compiled = torch.compile(fn, mode=mode)
                out, codes = run_and_get_code(compiled, *args)
                tol = 2e-2 if ref.dtype != torch.float32 else 1e-4
                torch.testing.assert_close(out, ref, rtol=tol, atol=tol)
                code = "\n".join(codes)
                eager_ms = do_bench(lambda: fn(*args), warmup=25, rep=200, return_mode="median")
                compiled_ms = do_bench(lambda: compiled(*args), warmup=25, rep=200, return_mode="median")
                case = {"case": name, "what": what, "mode": mode, "kernels": _kernels(code),
                        "extern_calls": sorted(set(re.findall(r"extern_kernels\.([a-z_]+)", code))),
                        "eager_ms": eager_ms, "compiled_ms": compiled_ms, "speedup": eager_ms / compiled_ms}
                if name == "gelu_softmax" and mode == "default":
                    first = re.search(r"@triton\.jit\ndef triton_.*?(?=\n\n\n|\n''', device_str)", code, flags=re.S)
                    case["first_kernel_source"] = first.group(0) if first else None
                cases.append(case)
    dynamo.reset()
    return {"timing": "triton.testing.do_bench, median, warmup 25 ms, rep 200 ms", "cases": cases}
