"""把编译器各阶段的真实输出存成带出处的记录（code/compiler/records/*.txt），页面原样嵌入。

用法：.venv/bin/python code/compiler/record_ir.py torch   （可选目标见 TARGETS）
每个记录的开头几行写明工具、版本、机器与命令，测试检查这些版本与当前安装一致。
"""

import datetime
import platform
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RECORDS = HERE / "records"
sys.path.insert(0, str(HERE))


# --8<-- [start:provenance]
def _header(tool, command):
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    return [
        f"# tool: {tool}",
        f"# machine: {platform.machine()} {platform.system()}, Python {platform.python_version()}",
        f"# produced: {now} by `{command}`",
    ]


def write(name, tool, command, body):
    RECORDS.mkdir(exist_ok=True)
    text = "\n".join(_header(tool, command) + [body.rstrip(), ""])
    (RECORDS / name).write_text(text)
    print("wrote", RECORDS / name)
# --8<-- [end:provenance]


def record_torch():
    import torch

    import torch_compile_demo as d

    tool = f"torch {torch.__version__}"
    cmd = "python code/compiler/record_ir.py torch"
    torch.manual_seed(0)
    x, s, t = torch.randn(8, 16, requires_grad=True), torch.randn(16, requires_grad=True), torch.randn(16)
    _, g = d.aot_graphs(d.gelu_softmax, x, s, t)
    write("aot-graphs.txt", tool, cmd, "# 前向图\n" + g["forward"] + "\n\n# 反向图\n" + g["backward"])
    _, g = d.aot_graphs(d.gelu_softmax, x, s, t, decompose=True)
    write("aot-graphs-decomposed.txt", tool, cmd, "# 前向图（Inductor 分解表分解后）\n" + g["forward"])
    x, s, t = torch.randn(64, 128), torch.randn(128), torch.randn(128)
    _, codes = d.inductor_code(d.gelu_softmax, x, s, t)
    code = codes[0]
    start = code.index("#include <torch/csrc/inductor/cpp_prefix.h>")
    end = code.index("''')", start)
    write("inductor-cpp-kernel.txt", tool + " (Inductor, CPU C++ backend)", cmd, code[start:end])
    start = code.index("def call(self, args):")
    call = code[start : code.index("runner = Runner", start)]
    write("inductor-call.txt", tool + " (Inductor wrapper)", cmd, call)


def record_tvm():
    import tvm

    import tvm_matmul as tm

    tool = f"apache-tvm {tvm.__version__}"
    cmd = "python code/compiler/record_ir.py tvm"
    steps = dict(tm.schedule_steps(tm.matmul_module(256, 256, 256)))
    write("tvm-matmul-naive.txt", tool + " (TVMScript of the TE-defined matmul)", cmd, steps["naive"].script())
    write("tvm-matmul-scheduled.txt", tool + " (after split, reorder, vectorize, parallel)", cmd, steps["parallel"].script())
    sch = tm.sampled_schedule(tm.matmul_module(256, 256, 256), seed=1)
    write("tvm-matmul-trace.txt", tool + " (trace of a sampled schedule, seed=1)", cmd, str(sch.trace))
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU()).eval()
    stages, _ = tm.relax_flow(model, torch.randn(4, 16))
    write("tvm-relax-imported.txt", tool + " (Relax from torch.export, Linear(16, 8) + ReLU)", cmd, stages["imported"])
    write("tvm-relax-fused.txt", tool + " (after LegalizeOps, AnnotateTIROpPattern, FuseOps, FuseTIR)", cmd, stages["fused"])


def record_isl():
    import importlib.metadata

    import polyhedral as P

    tool = f"islpy {importlib.metadata.version('islpy')}"
    cmd = "python code/compiler/record_ir.py isl"
    dep = P.dependences()
    lines = ["# 流依赖（原调度下）", str(dep), "", "# 距离向量", str(P.distances(dep, P.ORIGINAL))]
    for name, sched in [("矩形分块", P.TILED), ("倾斜后分块", P.SKEWED_TILED)]:
        lines += ["", f"# {name}：{sched}", "# 被违反的依赖", str(P.violated(dep, sched)), "# 距离向量", str(P.distances(dep, sched))]
    write("isl-dependences.txt", tool, cmd, "\n".join(lines))
    write("isl-tiled-c.txt", tool + " (AST from the rectangular tiling: illegal here)", cmd, P.generate_c(P.TILED))
    write("isl-skewed-tiled-c.txt", tool + " (AST from skewing j' = i + j, then tiling)", cmd, P.generate_c(P.SKEWED_TILED))
    write("isl-schedule.txt", tool + " (isl scheduler on the flow dependences)", cmd, str(P.isl_schedule(dep)))


def record_xla():
    import jax
    import jaxlib

    import xla_demo as X

    tool = f"jax {jax.__version__}, jaxlib {jaxlib.__version__}, XLA CPU backend"
    cmd = "python code/compiler/record_ir.py xla"
    st = X.stages(X.gelu_softmax, *X.example_inputs())
    write("xla-stablehlo.txt", tool + " (jax.jit(f).lower(...).as_text())", cmd, st["stablehlo"])
    write("xla-optimized-hlo.txt", tool + " (compiled HLO module, printed without metadata)", cmd, st["optimized"])


def record_triton():
    import subprocess

    import triton

    import triton_stages as T

    ver = subprocess.run([str(T.NVIDIA_BIN / "ptxas-blackwell"), "--version"], capture_output=True, text=True).stdout
    ptxas = ver.strip().splitlines()[-2]
    tool = f"triton {triton.__version__}, target cuda:90 (no GPU needed)"
    cmd = "python code/compiler/record_ir.py triton"
    asm, _ = T.compile_for(90)
    write("triton-ttir.txt", tool + ", loc() stripped", cmd, T.strip_locations(asm["ttir"]))
    write("triton-ttgir.txt", tool + ", loc() stripped", cmd, T.strip_locations(asm["ttgir"]))
    unaligned, _ = T.compile_for(90, aligned=False)
    write("triton-ttgir-unaligned.txt", tool + ", no tt.divisibility hints, loc() stripped", cmd, T.strip_locations(unaligned["ttgir"]))
    write("triton-llir.txt", tool + ", debug metadata stripped", cmd, T.strip_debug(asm["llir"]))
    write("triton-ptx.txt", tool + ", .loc/.file and debug sections stripped", cmd, T.strip_debug(asm["ptx"]))
    write("triton-ptxas-v.txt", tool + f"; ptxas-blackwell: {ptxas}", cmd, T.ptxas_report(asm["ptx"]))
    cuobjdump = subprocess.run([str(T.NVIDIA_BIN / "cuobjdump"), "--version"], capture_output=True, text=True).stdout
    write("triton-sass-sm90.txt", tool + "; cuobjdump -sass, " + cuobjdump.strip().splitlines()[-2], cmd, T.sass(asm["cubin"]))
    asm80, _ = T.compile_for(80)
    write("triton-sass-sm80.txt", f"triton {triton.__version__}, target cuda:80; cuobjdump -sass", cmd, T.sass(asm80["cubin"]))


TARGETS = {"torch": record_torch, "tvm": record_tvm, "isl": record_isl, "xla": record_xla, "triton": record_triton}

if __name__ == "__main__":
    for name in sys.argv[1:] or TARGETS:
        TARGETS[name]()
