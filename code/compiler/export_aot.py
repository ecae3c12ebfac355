"""torch.export、动态形状与 AOTInductor：导出一个小模型，读它的图、范围约束与守卫，看特化与无后备符号，再提前编译成 .pt2 包。

页面 docs/compiler/export-aot.md 嵌入这里的片段；实验 notebooks/compiler/export-aot-lab.ipynb 与测试
tests/test_compiler_export_aot.py 调用这些函数。

    python code/compiler/export_aot.py records   # 写 code/compiler/records/export-*.txt（含一次 AOTInductor 编译）
    python code/compiler/export_aot.py measure   # 在本机测 AOT 与 JIT 的编译时间与单次调用延迟，写 data/records/<机器>/export-aot.json
"""
from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.export import Dim, export

HERE = Path(__file__).resolve().parent
# torch 2.13 自己的代码（导出程序的 pytree 规格被复制时）触发这条弃用警告，与本文件无关
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*", category=FutureWarning)
D_MODEL, D_HIDDEN = 32, 128


# --8<-- [start:model]
class Block(torch.nn.Module):
    """Transformer 里的前馈子层：LayerNorm → Linear → GELU → Linear，再加残差。"""

    def __init__(self, d=D_MODEL, hidden=D_HIDDEN):
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.up = torch.nn.Linear(d, hidden)
        self.down = torch.nn.Linear(hidden, d)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


def make_model(seed=0):
    """同一个种子在任何进程里都得到同样的权重：新进程里的对照就靠它。"""
    torch.manual_seed(seed)
    return Block().eval()


def example(batch, seed=1):
    return torch.randn(batch, D_MODEL, generator=torch.Generator().manual_seed(seed + batch))
# --8<-- [end:model]


# --8<-- [start:export]
def export_block(model=None, max_batch=1024):
    """批维度是符号 s77，取值范围 [2, max_batch]；特征维度 32 是常量。"""
    model = make_model() if model is None else model
    batch = Dim("batch", min=2, max=max_batch)
    return export(model, (example(8),), dynamic_shapes={"x": {0: batch}})
# --8<-- [end:export]


def strip_file_comments(text):
    """ExportedProgram 的打印里每个节点前有 `# File: 路径:行号` 注释，去掉它们（路径因机器而异）。"""
    out = [l for l in text.splitlines() if not l.strip().startswith("# File:")]
    return re.sub(r"\n\s*\n(\s*\n)+", "\n\n", "\n".join(l.rstrip() for l in out)).strip() + "\n"


def graph_text(ep):
    return strip_file_comments(str(ep))


@contextlib.contextmanager
def captured_logs():
    """导出失败时 torch 把部分图直接打印到 stderr，特化时用 logging 发警告：收集起来，由调用者决定展示什么。"""
    messages, saved = [], []

    class Keep(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())

    handler = Keep(level=logging.WARNING)
    names = [n for n in logging.root.manager.loggerDict if n.startswith(("torch._export", "torch.export"))]
    for name in {"torch._export", "torch.export", *names}:
        logger = logging.getLogger(name)
        saved.append((logger, logger.handlers, logger.propagate))
        logger.handlers, logger.propagate = [handler], False
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            yield messages
    finally:
        for logger, handlers, propagate in saved:
            logger.handlers, logger.propagate = handlers, propagate


def call_error(fn, *args):
    """调用 fn，返回 (异常类名, 消息的第一行)；没有异常时返回 None。"""
    try:
        fn(*args)
    except Exception as e:  # noqa: BLE001 - 这里就是要看各种异常
        return type(e).__name__, str(e).strip().splitlines()[0]
    return None


def export_error(model, args, dynamic_shapes):
    """导出时违反约束：返回 (异常类名, 去掉调试提示后的消息)。"""
    try:
        with captured_logs():
            export(model, args, dynamic_shapes=dynamic_shapes)
    except Exception as e:  # noqa: BLE001
        text = str(e).split("\n\nThe error above occurred")[0]
        keep = [l for l in text.splitlines() if not l.startswith(("For more", "For extended", "If you suspect", "For C++", "Caused by"))]
        return type(e).__name__, "\n".join(keep).strip()
    return None


# --8<-- [start:specialize]
class ShapeBranch(torch.nn.Module):
    """依据形状的 Python 分支：导出时符号被迫取一边，这一边成了约束。"""

    def forward(self, x):
        if x.shape[0] > 16:
            return x.relu()
        return x.sigmoid()


class AddPair(torch.nn.Module):
    """x + y 要求两者的批维度相等：分别给两个 Dim，导出器证明不了它们无关。"""

    def forward(self, x, y):
        return x + y


def specialisations():
    """五种情形：示例批为 1 时 Dim 被 0/1 特化；Dim.AUTO 接受特化；分支让范围不成立；两个 Dim 必须相等；Dim.AUTO 收窄范围。"""
    m, b = make_model(), ShapeBranch()
    with captured_logs() as logs:
        auto_1 = export(m, (example(1),), dynamic_shapes={"x": {0: Dim.AUTO}})
    auto_4 = export(b, (example(4),), dynamic_shapes={"x": {0: Dim.AUTO}})
    auto_32 = export(b, (example(32),), dynamic_shapes={"x": {0: Dim.AUTO}})
    return {
        "batch1_dim": export_error(m, (example(1),), {"x": {0: Dim("batch")}}),
        "batch1_auto": auto_1,
        "batch1_auto_warning": logs[0] if logs else None,
        "branch_dim": export_error(b, (example(4),), {"x": {0: Dim("batch", max=1024)}}),
        "pair_dims": export_error(AddPair(), (example(4), example(4)), {"x": {0: Dim("a")}, "y": {0: Dim("b")}}),
        "branch_auto_4": auto_4,
        "branch_auto_32": auto_32,
    }
# --8<-- [end:specialize]


# --8<-- [start:unbacked]
class MeanOfPositives(torch.nn.Module):
    """nonzero 的输出长度取决于数据：导出时它是无后备（unbacked）符号 u0，没有示例值可以依据。"""

    def forward(self, x):
        idx = torch.nonzero(x > 0).squeeze(1)  # 形状 [u0]
        if idx.shape[0] > 0:  # 要 u0 的具体值才能选分支：导出失败
            return x[idx].mean()
        return x.new_zeros(())


class MeanOfPositivesChecked(torch.nn.Module):
    """torch._check 告诉导出器 u0 ≥ 1：分支在编译期就有答案，检查变成运行时断言。"""

    def forward(self, x):
        idx = torch.nonzero(x > 0).squeeze(1)
        torch._check(idx.shape[0] > 0)
        if idx.shape[0] > 0:
            return x[idx].mean()
        return x.new_zeros(())
# --8<-- [end:unbacked]


def unbacked():
    x = torch.tensor([1.0, -2.0, 3.0, 4.0, -5.0, 6.0])
    ep = export(MeanOfPositivesChecked(), (x,))
    return {
        "error": export_error(MeanOfPositives(), (x,), None),
        "checked": ep,
        "runtime_error": call_error(ep.module(), -x.abs()),
    }


# --8<-- [start:jit-guards]
def jit_shape_guards(fn, *args):
    """torch.compile(dynamic=True) 编译 fn 后，读出它的形状守卫（每条后面是 PyTorch 自己写的原因）。"""
    import torch._dynamo as dynamo
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    dynamo.reset()
    compiled = torch.compile(fn, backend="eager", dynamic=True)
    compiled(*args)
    manager = _debug_get_cache_entry_list(fn.__code__)[0].guard_manager
    names = fn.__code__.co_varnames[: fn.__code__.co_argcount]
    probe = {name: torch.empty([1] * a.dim()) for name, a in zip(names, args)}
    parts = manager.check_verbose(probe).verbose_code_parts  # 全 1 的形状让形状守卫失败，它就把这组守卫全列出来
    guards = []
    for part in parts:
        code, _, why = part.partition("  # ")
        if "size()" not in code or "stride()" in code:
            continue
        reason = "duck sizing" if "duck sizing" in why else "0/1 specialization" if "0/1 specialization" in why else ""
        guards.append((code.strip(), reason))
    return compiled, guards


def cat_rows(x, y):
    return torch.cat([x, y]).sum(0)
# --8<-- [end:jit-guards]


def count_jit_compiles(fn, arg_lists, dynamic=True):
    import torch._dynamo as dynamo
    from torch._dynamo.testing import CompileCounter

    dynamo.reset()
    counter = CompileCounter()
    compiled = torch.compile(fn, backend=counter, dynamic=dynamic)
    for args in arg_lists:
        torch.testing.assert_close(compiled(*args), fn(*args))
    return counter.frame_count


# aoti_load_package is checked on the locked torch (2.13, CI and CPU mode). The H200 image's torch 2.11.0+cu130 ends
# the process with SIGSEGV inside the native loader (torch/export/pt2_archive/_package.py, _load_aoti) for every
# package, CPU or CUDA, in the compiling process and in a fresh one alike, so on older torch the load step is skipped
# with one line that says why instead of crashing the lab.
AOTI_LOAD_MIN_TORCH = (2, 13)


def aoti_load_skip_reason(version=None):
    """None when this torch loads .pt2 packages in the versions checked here, else the one-line reason to skip."""
    version = version or torch.__version__
    major, minor = (int(p) for p in version.split("+")[0].split(".")[:2])
    if (major, minor) >= AOTI_LOAD_MIN_TORCH:
        return None
    return (f"跳过加载：torch {version} 的 aoti_load_package 在原生加载器里段错误（CPU 与 CUDA 包都复现）；"
            f"加载一步在 torch ≥ {AOTI_LOAD_MIN_TORCH[0]}.{AOTI_LOAD_MIN_TORCH[1]}（锁定版本）上验证")


# --8<-- [start:aoti]
def aoti_package(ep, folder):
    """AOTInductor：把 ExportedProgram 编译成共享库、连同权重打进一个 .pt2 包（zip）。"""
    path = str(Path(folder) / "block.pt2")
    start = time.perf_counter()
    torch._inductor.aoti_compile_and_package(ep, package_path=path)
    return path, time.perf_counter() - start


LOAD_SCRIPT = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
import torch
import export_aot as E
start = time.perf_counter()
runner = torch._inductor.aoti_load_package(sys.argv[2])
load_s = time.perf_counter() - start
model, out = E.make_model(), {"load_s": load_s, "pid": os.getpid(), "batches": {}}
repeats = int(sys.argv[4])
with torch.no_grad():
    for b in json.loads(sys.argv[3]):
        x = E.example(b)
        try:
            y = runner(x)
        except Exception as e:
            out["batches"][str(b)] = {"error": str(e).strip().splitlines()[0]}
            continue
        ref = model(x)
        row = {"max_abs_err": (y - ref).abs().max().item(), "shape": list(y.shape)}
        if repeats:
            row["aoti_us"] = E.median_us(lambda: runner(x), repeats)
            row["eager_us"] = E.median_us(lambda: model(x), repeats)
        out["batches"][str(b)] = row
print(json.dumps(out))
"""


def load_in_fresh_process(path, batches, repeats=0, check_inputs=False, timeout=120):
    """在一个新的 Python 进程里 aoti_load_package，逐个批大小与 eager 比较（可选计时），返回 JSON 结果。

    check_inputs=True 设置 AOTI_RUNTIME_CHECK_INPUTS=1：生成的 C++ 包装代码只在这时检查输入的形状与范围。
    """
    env = dict(os.environ, PYTHONWARNINGS="ignore", PYTHONFAULTHANDLER="1",  # a crash prints its Python stack
               AOTI_RUNTIME_CHECK_INPUTS="1" if check_inputs else "0")
    proc = subprocess.run([sys.executable, "-c", LOAD_SCRIPT, str(HERE), str(path), json.dumps(list(batches)), str(repeats)],
                          capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode != 0:
        how = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exit status {proc.returncode}"
        raise RuntimeError(f"the fresh process loading {path} ended with {how}\n"
                           f"stdout: {proc.stdout[-800:]}\nstderr: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])
# --8<-- [end:aoti]


def median_us(fn, repeats):
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    times.sort()
    return times[len(times) // 2] * 1e6


def wrapper_excerpt(package_path):
    """从 .pt2 包里取出 AOTInductor 生成的 C++ 包装代码中检查输入与 run_impl 两段。"""
    import zipfile

    with zipfile.ZipFile(package_path) as z:
        name = next(n for n in z.namelist() if n.endswith(".wrapper.cpp"))
        code = z.read(name).decode()
        files = sorted(re.sub(r"/[a-z0-9]{52}\.", "/<hash>.", n) for n in z.namelist())
    start = code.index("AOTI_NOINLINE static void check_input_0(")
    end = code.index("} // AOTInductorModel::run_impl") + len("} // AOTInductorModel::run_impl")
    return files, code[start:end]


# --- 测量：AOT 与 JIT 各在一个新进程里、用空的 Inductor 缓存计时 ---

JIT_SCRIPT = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import torch
import export_aot as E
from torch._dynamo.testing import CompileCounter
model, batches, repeats = E.make_model(), json.loads(sys.argv[2]), int(sys.argv[3])
compiled = torch.compile(model, dynamic=True)
out = {"batches": {}}
with torch.no_grad():
    x = E.example(batches[0])
    start = time.perf_counter()
    compiled(x)
    out["first_call_s"] = time.perf_counter() - start
    for b in batches:
        x = E.example(b)
        row = {"max_abs_err": (compiled(x) - model(x)).abs().max().item()}
        row["jit_us"] = E.median_us(lambda: compiled(x), repeats)
        out["batches"][str(b)] = row
print(json.dumps(out))
"""

AOT_SCRIPT = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import torch
import export_aot as E
start = time.perf_counter()
ep = E.export_block()
export_s = time.perf_counter() - start
path, compile_s = E.aoti_package(ep, sys.argv[2])
print(json.dumps({"export_s": export_s, "compile_s": compile_s}))
"""


def _fresh(script, *args, cache):
    """新进程、全冷：Inductor 的缓存目录与预编译头（放在临时目录下的 torchinductor_<用户>）都从空开始。"""
    Path(cache, "tmp").mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache, TMPDIR=str(Path(cache, "tmp")), PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, "-c", script, str(HERE), *args], capture_output=True, text=True,
                          timeout=600, env=env)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(batches=(2, 8, 64, 512), repeats=200):
    with tempfile.TemporaryDirectory() as tmp:
        aot = _fresh(AOT_SCRIPT, tmp, cache=str(Path(tmp) / "cache-aot"))
        loaded = load_in_fresh_process(Path(tmp) / "block.pt2", batches, repeats=repeats)
        jit = _fresh(JIT_SCRIPT, json.dumps(list(batches)), str(repeats), cache=str(Path(tmp) / "cache-jit"))
    rows = []
    for b in batches:
        a, j = loaded["batches"][str(b)], jit["batches"][str(b)]
        rows.append({"batch": b, "eager_us": round(a["eager_us"], 1), "aoti_us": round(a["aoti_us"], 1),
                     "jit_us": round(j["jit_us"], 1), "aoti_max_abs_err": a["max_abs_err"], "jit_max_abs_err": j["max_abs_err"]})
    return {"model": f"Block(d={D_MODEL}, hidden={D_HIDDEN}) float32, batch dimension dynamic in [2, 1024]",
            "export_s": round(aot["export_s"], 2), "aoti_compile_s": round(aot["compile_s"], 1),
            "aoti_load_s": round(loaded["load_s"], 3), "jit_first_call_s": round(jit["first_call_s"], 1),
            "repeats": repeats, "rows": rows}


def provenance(command):
    import datetime as dt
    import platform

    cpu = "unknown"
    if Path("/proc/cpuinfo").exists():
        m = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
        cpu = m.group(1).strip() if m else cpu
    cores = os.cpu_count() or 1
    gxx = subprocess.run(["g++", "--version"], capture_output=True, text=True).stdout.splitlines()[:1]
    root = HERE.parents[1]
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()
    os_name = "Linux"
    if Path("/etc/os-release").exists():
        rel = dict(l.split("=", 1) for l in Path("/etc/os-release").read_text().splitlines() if "=" in l)
        os_name = rel.get("PRETTY_NAME", os_name).strip('"')
    slug = "cpu-" + re.sub(r"[^a-z0-9]+", "-", cpu.lower()).strip("-") + f"-{cores}c"
    return {"machine": slug, "cpu": cpu, "cores": cores, "torch_threads": torch.get_num_threads(), "os": os_name,
            "kernel": platform.release(), "python": platform.python_version(), "torch": torch.__version__,
            "compiler": gxx[0] if gxx else None, "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "commit": commit or None, "command": command}


def write_measurement():
    command = "python code/compiler/export_aot.py measure"
    prov = provenance(command)
    load_start = os.getloadavg()[0]
    results = measure()
    prov["loadavg_1min"] = {"start": round(load_start, 2), "end": round(os.getloadavg()[0], 2)}
    record = {"schema": 1, "experiment": "export-aot",
              "title": "torch.export + AOTInductor against torch.compile (JIT) on CPU: compile time and per-call latency",
              "used_by": ["docs/compiler/export-aot.md"], "provenance": prov, "results": results}
    path = HERE.parents[1] / "data" / "records" / prov["machine"] / "export-aot.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print("wrote", path)


def write_records():
    import importlib

    sys.path.insert(0, str(HERE))
    # 只有写记录的命令行用到 record_ir（它按需导入本章所有的演示模块）；按名字导入，实验的文件清单就不会带上它
    write = importlib.import_module("record_ir").write

    tool = f"torch {torch.__version__}"
    cmd = "python code/compiler/export_aot.py records"
    ep = export_block()
    core = ep.run_decompositions()
    write("export-graph.txt", tool + " (torch.export.export, batch = Dim('batch', min=2, max=1024))", cmd,
          graph_text(ep) + "\n# run_decompositions() 之后（Core ATen）\n" + core.graph_module.code.strip())
    write("export-guards.txt", tool + " (guards checked when the exported program is called)", cmd, guards_report(ep))
    write("export-specialisation.txt", tool + " (0/1 and branch specialisation, constraint errors)", cmd, specialisation_report())
    write("export-jit-guards.txt", tool + " (torch.compile(dynamic=True): shape guards with their reasons)", cmd, jit_guards_report())
    u = unbacked()
    write("export-unbacked.txt", tool + " (nonzero: an unbacked size, torch._check)", cmd, unbacked_report(u))
    with tempfile.TemporaryDirectory() as tmp:
        path, _ = aoti_package(ep, tmp)
        files, excerpt = wrapper_excerpt(path)
    write("export-aoti-wrapper.txt", tool + " (AOTInductor C++ wrapper, CPU: input checks and run_impl)", cmd,
          "# .pt2 包里的文件\n" + "\n".join("//   " + f for f in files) + "\n\n" + excerpt)


def guards_report(ep):
    lines = ["# 导出的程序在调用时检查的守卫（ep.module() 里的 _guards_fn）"]
    mod = ep.module()
    for shape in [(8, D_MODEL), (1, D_MODEL), (2000, D_MODEL), (8, D_MODEL + 1)]:
        err = call_error(mod, torch.randn(*shape))
        lines.append(f"call x{list(shape)}: " + ("ok" if err is None else f"{err[0]}: {err[1]}"))
    return "\n".join(lines)


def specialisation_report():
    sp = specialisations()
    lines = ["# 示例批为 1，批维度标成 Dim('batch')：0/1 特化与 Dim 冲突", "{}: {}".format(*sp["batch1_dim"])]
    lines += ["", "# 同样的示例，改用 Dim.AUTO：接受特化", "warning: " + str(sp["batch1_auto_warning"]),
              f"range_constraints: {sp['batch1_auto'].range_constraints}",
              "guard: " + "; ".join(sp["batch1_auto"]._guards_code or ["(none)"])]
    lines += ["", "# ShapeBranch，Dim('batch', max=1024)：分支只对一部分范围成立", "{}: {}".format(*sp["branch_dim"])]
    for key in ("branch_auto_4", "branch_auto_32"):
        e = sp[key]
        lines += ["", f"# ShapeBranch，Dim.AUTO，示例批 {key.rsplit('_', 1)[1]}",
                  f"range_constraints: {e.range_constraints}", "guards: " + "; ".join(e._guards_code)]
    lines += ["", "# AddPair，x 与 y 的批维度各给一个 Dim", "{}: {}".format(*sp["pair_dims"])]
    return "\n".join(lines)


def jit_guards_report():
    _, guards = jit_shape_guards(cat_rows, torch.randn(4, 8), torch.randn(4, 8))
    lines = ["# torch.compile(dynamic=True) 对 cat_rows(x[4, 8], y[4, 8]) 记下的形状守卫"]
    lines += [f"{code}    # {why}" if why else code for code, why in guards]
    return "\n".join(lines)


def unbacked_report(u):
    ep = u["checked"]
    return "\n".join(["# 不加 torch._check：导出失败", "{}: {}".format(*u["error"]), "",
                      "# 加 torch._check(idx.shape[0] > 0) 之后导出的图",
                      f"range_constraints: {ep.range_constraints}", ep.graph_module.code.strip(), "",
                      "# 全是负数的输入：运行时断言", "{}: {}".format(*u["runtime_error"])])


if __name__ == "__main__":
    what = sys.argv[1:] or ["records"]
    if "records" in what:
        write_records()
    if "measure" in what:
        write_measurement()
