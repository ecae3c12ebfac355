"""本章的 softmax kernel 按 PyTorch 支持的方式变成自定义算子：Triton kernel（triton_op 与 custom_op 两种包法）、
NumPy 实现（有无 fake kernel 的对照）、C++/CUDA 扩展（custom-op-ext.cpp 与 .cu），以及一个原地改写输入的算子。

页面 docs/operator/custom-ops.md 嵌入这里的片段；实验 notebooks/operator/custom-op-lab.ipynb 与测试
tests/test_operator_custom_ops.py 调用这些函数。所有算子的反向都用同一个公式（softmax_backward）。

    python code/operator/custom_ops.py measure   # 三种头文件写法各编译两次扩展，写 data/records/<机器>/custom-op-build.json

没有 GPU 时先设 TRITON_INTERPRET=1 再导入本模块：Triton kernel 由 CPU 解释器执行（只验证正确性）。
"""
from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton

HERE = Path(__file__).resolve().parent
BLOCK = 1024  # 每段列数；行更长时 kernel 循环多段


# --8<-- [start:triton_kernel]
@triton.jit
def softmax_online_kernel(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    # 实验 softmax-lab 的在线 softmax：一个程序实例处理一行，第一遍边读边维护 (m, d)，第二遍写出。
    # y_ptr 可以等于 x_ptr（原地）：第二遍每个位置先读后写，第一遍已经读完整行。
    row = tl.program_id(0)
    base = row.to(tl.int64) * cols
    m = tl.full([], -3.4028234663852886e38, tl.float32)  # -FLT_MAX：两个空结果合并不会出现 inf - inf
    d = tl.zeros([], tl.float32)
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + base + offs, mask=offs < cols, other=-float("inf"))
        m_new = tl.maximum(m, tl.max(x, axis=0))
        d = d * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    inv_d = 1.0 / d
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < cols
        x = tl.load(x_ptr + base + offs, mask=mask)
        tl.store(y_ptr + base + offs, tl.exp(x - m) * inv_d, mask=mask)
# --8<-- [end:triton_kernel]


def _rows_cols(x: torch.Tensor) -> tuple[int, int]:
    cols = x.shape[-1] if x.dim() else 1
    return (x.numel() // cols if cols else 0), cols


def _check_float32(x: torch.Tensor, name: str) -> None:
    torch._check(x.dtype == torch.float32, lambda: f"{name}: expected float32, got {x.dtype}")


# --8<-- [start:backward]
def softmax_backward(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """y = softmax(x) 沿最后一维：dx = y ⊙ (dy − rowsum(dy ⊙ y))。只需要前向的输出 y，不需要 x。"""
    return y * (dy - (dy * y).sum(dim=-1, keepdim=True))


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(output)  # 存输出而不是输入：反向公式只用 y


def _backward(ctx, dy):
    (y,) = ctx.saved_tensors
    return softmax_backward(y, dy)  # 由 PyTorch 算子组成：反向图也能被追踪、被编译
# --8<-- [end:backward]


# --8<-- [start:triton_op]
@triton_op("handbook::triton_softmax", mutates_args=())
def triton_softmax(x: torch.Tensor) -> torch.Tensor:
    """triton_op：torch.compile 会把这个函数本身追踪进图，Inductor 看得见里面的 Triton kernel。"""
    _check_float32(x, "handbook::triton_softmax")
    x = x.contiguous()
    y = torch.empty_like(x)
    rows, cols = _rows_cols(x)
    if rows > 0:
        # wrap_triton 让追踪器把这次启动记成一个高阶算子节点，而不是真的在 FakeTensor 上启动 kernel
        wrap_triton(softmax_online_kernel)[(rows,)](x, y, cols, BLOCK=BLOCK)
    return y


triton_softmax.register_autograd(_backward, setup_context=_setup_context)
# --8<-- [end:triton_op]


def triton_op_traceable() -> bool:
    """triton_op 能否被 FakeTensor、torch.compile 与 opcheck 的后两项追踪：wrap_triton 要返回一个可追踪的包装。

    TRITON_INTERPRET=1 时 @triton.jit 给出的是解释器包装，wrap_triton 原样返回它，于是 fake kernel
    （就是上面这个函数本身）会在 FakeTensor 上真的启动解释器而失败。GPU 上返回 True。"""
    return wrap_triton(softmax_online_kernel) is not softmax_online_kernel


# --8<-- [start:opaque_op]
@torch.library.custom_op("handbook::opaque_softmax", mutates_args=())
def opaque_softmax(x: torch.Tensor) -> torch.Tensor:
    """同一个 Triton kernel 包成 custom_op：对 torch.compile 是黑盒，只能整体调用。"""
    _check_float32(x, "handbook::opaque_softmax")
    x = x.contiguous()
    y = torch.empty_like(x)
    rows, cols = _rows_cols(x)
    if rows > 0:
        softmax_online_kernel[(rows,)](x, y, cols, BLOCK=BLOCK)  # 直接启动，不需要 wrap_triton
    return y


@opaque_softmax.register_fake
def _(x):
    # 只描述输出：与 x 同形状、同 dtype、同设备、行主序连续（真实 kernel 先把 x 拷成连续）
    _check_float32(x, "handbook::opaque_softmax")
    return torch.empty_like(x, memory_format=torch.contiguous_format)


opaque_softmax.register_autograd(_backward, setup_context=_setup_context)
# --8<-- [end:opaque_op]


# --8<-- [start:numpy_op]
def numpy_softmax_rows(a: np.ndarray) -> np.ndarray:
    """一个逐行工作的 NumPy 函数（np.apply_along_axis）：Dynamo 的 NumPy 追踪不支持它，会断图。"""
    def row(r):
        e = np.exp(r - r.max())
        return e / e.sum()

    if a.size == 0:  # apply_along_axis 不接受空的迭代维
        return a.copy()
    return np.apply_along_axis(row, -1, a)


@torch.library.custom_op("handbook::numpy_softmax", mutates_args=())
def numpy_softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(numpy_softmax_rows(x.numpy(force=True))).to(x.device)


@numpy_softmax.register_fake
def _(x):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


numpy_softmax.register_autograd(_backward, setup_context=_setup_context)
# --8<-- [end:numpy_op]


# --8<-- [start:numpy_op_nofake]
@torch.library.custom_op("handbook::numpy_softmax_nofake", mutates_args=())
def numpy_softmax_nofake(x: torch.Tensor) -> torch.Tensor:
    """同一个实现，但没有 register_fake，也没有 register_autograd：演示缺了它们会怎样。"""
    return torch.from_numpy(numpy_softmax_rows(x.numpy(force=True))).to(x.device)
# --8<-- [end:numpy_op_nofake]


# --8<-- [start:dynamic_op]
@torch.library.custom_op("handbook::numpy_nonzero", mutates_args=())
def numpy_nonzero(x: torch.Tensor) -> torch.Tensor:
    """输出的行数取决于数据（非零元素的个数）：fake kernel 只能给出一个符号尺寸。"""
    return torch.from_numpy(np.stack(np.nonzero(x.numpy(force=True)), axis=1)).to(x.device)


@numpy_nonzero.register_fake
def _(x):
    nnz = torch.library.get_ctx().new_dynamic_size()  # 一个新的无后备符号整数 u0（unbacked SymInt）
    return x.new_empty(nnz, x.dim(), dtype=torch.int64)
# --8<-- [end:dynamic_op]


# --8<-- [start:inplace_op]
@torch.library.custom_op("handbook::softmax_", mutates_args={"x"})
def softmax_(x: torch.Tensor) -> None:
    """原地版本：把 softmax(x) 写回 x。mutates_args 声明了改写，返回 None，因此不需要 fake kernel。"""
    _check_float32(x, "handbook::softmax_")
    torch._check(x.is_contiguous(), lambda: "handbook::softmax_: expected a contiguous tensor")
    rows, cols = _rows_cols(x)
    if rows > 0:
        softmax_online_kernel[(rows,)](x, x, cols, BLOCK=BLOCK)
# --8<-- [end:inplace_op]


# --8<-- [start:undeclared_op]
@torch.library.custom_op("handbook::softmax_undeclared_", mutates_args=())
def softmax_undeclared_(x: torch.Tensor) -> None:
    """错误示范：同样改写了 x，却声明为不改写任何输入。"""
    rows, cols = _rows_cols(x)
    if rows > 0:
        softmax_online_kernel[(rows,)](x, x, cols, BLOCK=BLOCK)


@softmax_undeclared_.register_fake
def _(x):
    return None
# --8<-- [end:undeclared_op]


# --8<-- [start:models]
def model_with(op):
    """模型里的一段：softmax 前后各有一个逐元素运算，编译器可以把它们和 softmax 放进同一张图。"""
    def model(x):
        return op(x * 2.0) + 1.0
    return model


def model_numpy_inline(x):
    """直接在模型里调用 NumPy 函数，没有包成算子。"""
    y = torch.from_numpy(numpy_softmax_rows((x * 2.0).numpy(force=True)))
    return y + 1.0


def model_numpy_ufuncs(x):
    """同样直接调用 NumPy，但只用 Dynamo 认识的 ufunc 与归约：它们被翻译成 torch 运算，不断图。"""
    a = (x * 2.0).numpy(force=True)
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    return torch.from_numpy(e / e.sum(axis=-1, keepdims=True)) + 1.0


def model_inplace(x):
    h = x * 2.0
    softmax_(h)  # 原地改写中间结果 h
    return h + 1.0
# --8<-- [end:models]


def reference(x: torch.Tensor) -> torch.Tensor:
    """model_with(op) 应当等于的结果。"""
    return torch.softmax(x * 2.0, dim=-1) + 1.0


def functional_graph(fn, *args) -> str:
    """AOTAutograd 函数化之后、交给后端之前的前向图代码（torch.compile 的 aot_autograd 后端，fullgraph=True）。"""
    from torch._dynamo.backends.common import aot_autograd

    codes: list[str] = []

    def keep(gm, example_inputs):
        codes.append(gm.code)
        return gm

    torch._dynamo.reset()
    torch.compile(fn, fullgraph=True, backend=aot_autograd(fw_compiler=keep))(*args)
    return codes[-1]


def dispatch_keys(qualname: str) -> list[str]:
    """调度器上为这个算子注册了实现的分发键（torch._C._dispatch_dump 的键名，不含文件路径）。"""
    dump = torch._C._dispatch_dump(qualname)
    keys = re.findall(r"^(\w+(?:\[alias\])?): registered at", dump, flags=re.M)
    return [k for k in keys if k != "debug"]


def first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else ""


# ---- C++/CUDA 扩展 -------------------------------------------------------------------------------

_EXT: dict = {}


def cuda_build_problem() -> str | None:
    """在这台机器上编译 custom-op-ext.cu 的障碍（没有 nvcc，或 nvcc 与 torch 的 CUDA 主版本不同）；没有时返回 None。"""
    from torch.utils.cpp_extension import CUDA_HOME

    if torch.version.cuda is None:
        return "这个 torch 不是 CUDA 版本"
    nvcc = Path(CUDA_HOME or "/nonexistent") / "bin" / "nvcc"
    if not nvcc.is_file():
        return "找不到 nvcc（设置 CUDA_HOME 指向 CUDA 工具包）"
    out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True).stdout
    m = re.search(r"release (\d+)\.(\d+)", out)
    if m is None or m.group(1) != torch.version.cuda.split(".")[0]:
        found = f"{m.group(1)}.{m.group(2)}" if m else "unknown"
        return f"nvcc 的 CUDA {found} 与 torch 编译时的 CUDA {torch.version.cuda} 主版本不同"
    return None


def _cuda_arch_list() -> None:
    # 不设时 cpp_extension 为所有可见 GPU 的架构编译，并打印一条警告；这里只编当前 GPU 的架构
    if torch.cuda.is_available() and not os.environ.get("TORCH_CUDA_ARCH_LIST"):
        major, minor = torch.cuda.get_device_capability()
        os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}"


# --8<-- [start:build]
def build_extension(cpp: Path, cu: Path | None = None, verbose: bool = False) -> dict:
    """编译并加载 custom-op-ext.cpp（有 CUDA 源码时一起编译），每个进程只编译一次。

    build_directory 是一个临时目录（进程退出时删除）；is_python_module=False：共享库里只有
    TORCH_LIBRARY 的静态注册，没有 Python 模块，load 用 torch.ops.load_library 把它载入进程。
    schema、CPU/CUDA 与 Meta kernel 在 C++ 里注册，反向公式在这里用 Python 注册。"""
    if _EXT:
        return _EXT
    from torch.utils.cpp_extension import is_ninja_available, load

    if not is_ninja_available():
        raise RuntimeError("torch.utils.cpp_extension.load needs ninja: pip install ninja (or apt-get install ninja-build)")
    _cuda_arch_list()
    build_dir = tempfile.mkdtemp(prefix="handbook-ext-")
    atexit.register(shutil.rmtree, build_dir, ignore_errors=True)
    sources = [str(cpp)] + ([str(cu)] if cu is not None else [])
    t0 = time.perf_counter()
    load(name="handbook_ext", sources=sources, extra_cflags=["-O2"], extra_cuda_cflags=["-O3"],
         build_directory=build_dir, is_python_module=False, verbose=verbose)
    seconds = time.perf_counter() - t0
    torch.library.register_autograd("handbook_ext::softmax", _backward, setup_context=_setup_context)
    _EXT.update({"seconds": seconds, "cuda": cu is not None, "sources": [Path(s).name for s in sources]})
    return _EXT
# --8<-- [end:build]


# ---- 测量：三种头文件写法的编译时间 ------------------------------------------------------------------

INCLUDE_VARIANTS = {
    "minimal": None,  # 文件里的写法：Tensor.h + ops/empty.h + torch/library.h
    "aten": "#include <ATen/ATen.h>\n#include <torch/library.h>\n",
    "extension": "#include <torch/extension.h>\n",
}

_CHILD = r"""
import sys, time, json
from torch.utils.cpp_extension import load
t0 = time.perf_counter()
load(name="handbook_ext", sources=[sys.argv[1]], extra_cflags=["-O2"], build_directory=sys.argv[2], is_python_module=False)
print(json.dumps({"seconds": time.perf_counter() - t0}))
"""


def variant_source(variant: str) -> str:
    text = (HERE / "custom-op-ext.cpp").read_text(encoding="utf-8")
    if INCLUDE_VARIANTS[variant] is None:
        return text
    start, end = "// --8<-- [start:includes]\n", "// --8<-- [end:includes]\n"
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return head + start + INCLUDE_VARIANTS[variant] + end + tail


def measure_build(variant: str) -> float:
    """在一个新进程、一个新的临时目录里编译一种写法，返回 load() 的耗时（秒）。"""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "custom-op-ext.cpp"
        src.write_text(variant_source(variant), encoding="utf-8")
        build = Path(tmp) / "build"
        build.mkdir()
        out = subprocess.run([sys.executable, "-c", _CHILD, str(src), str(build)], capture_output=True, text=True,
                             check=True, env={**os.environ, "MAX_JOBS": "1"})
    return json.loads(out.stdout.strip().splitlines()[-1])["seconds"]


def write_measurement(repeats: int = 2) -> Path:
    import importlib

    sys.path.insert(0, str(HERE.parent / "compiler"))
    # 同一套来历字段（CPU、核数、OS、编译器、日期、提交）；按名字导入，实验的文件清单就不会带上它
    provenance = importlib.import_module("export_aot").provenance

    prov = provenance("python code/operator/custom_ops.py measure")
    load_start = os.getloadavg()[0]
    rows = []
    for variant in INCLUDE_VARIANTS:
        times = [measure_build(variant) for _ in range(repeats)]
        rows.append({"variant": variant, "includes": INCLUDE_VARIANTS[variant] or
                     "#include <ATen/core/Tensor.h>\n#include <ATen/ops/empty.h>\n#include <torch/library.h>\n",
                     "seconds": [round(t, 2) for t in times], "min_s": round(min(times), 2)})
    prov["loadavg_1min"] = {"start": round(load_start, 2), "end": round(os.getloadavg()[0], 2)}
    record = {"schema": 1, "experiment": "custom-op-build",
              "title": "Build time of code/operator/custom-op-ext.cpp with torch.utils.cpp_extension.load, by include style",
              "used_by": ["docs/operator/custom-ops.md"], "provenance": prov,
              "results": {"repeats": repeats, "flags": "-O2, ninja, MAX_JOBS=1, a fresh build directory each time",
                          "rows": rows}}
    path = HERE.parents[1] / "data" / "records" / prov["machine"] / "custom-op-build.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return path


if __name__ == "__main__":
    if sys.argv[1:] == ["measure"]:
        print("wrote", write_measurement())
    else:
        print(__doc__)
        raise SystemExit(2)
