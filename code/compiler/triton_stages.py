"""Triton 编译器的每一级：在没有 GPU 的机器上，以 GPUTarget 指定目标架构，triton.compile 照样跑完
Python AST → TTIR → TTGIR → LLVM IR → PTX → cubin（ptxas 随 triton 的 wheel 一起发布），再用同样随附的
cuobjdump 反汇编出 SASS。页面 docs/compiler/triton-compiler.md 与 docs/compiler/llvm-ptx-sass.md 嵌入这里的片段。
"""

import re
import subprocess
import tempfile
from pathlib import Path

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

NVIDIA_BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"


# --8<-- [start:kernel]
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)
# --8<-- [end:kernel]


# --8<-- [start:compile]
def compile_for(arch=90, block=1024, num_warps=4, aligned=True):
    """不需要 GPU：只给出目标（cuda、计算能力、warp 大小），返回各级产物 {ttir, ttgir, llir, ptx, cubin}。

    aligned=True 模拟 Triton 在运行时的特化：三个指针和 n 都能被 16 整除时，它给参数加上
    tt.divisibility = 16，后面的合并访存分析才敢用 128 位的向量读写。
    """
    attrs = {(i,): [["tt.divisibility", 16]] for i in range(4)} if aligned else None
    fn = add_kernel
    if not isinstance(fn, triton.runtime.jit.JITFunction):  # TRITON_INTERPRET=1 时 @triton.jit 返回解释器包装
        fn = triton.runtime.jit.JITFunction(add_kernel.fn)
    src = ASTSource(
        fn=fn,
        signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
        constexprs={"BLOCK": block},
        attrs=attrs,
    )
    kernel = triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": num_warps})
    return kernel.asm, kernel.metadata


def sass(cubin):
    """用随 triton 发布的 cuobjdump 把 cubin 反汇编成 SASS。"""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([str(NVIDIA_BIN / "cuobjdump"), "-sass", f.name], check=True, capture_output=True, text=True).stdout


def ptxas_report(ptx):
    """ptxas -v：寄存器、共享内存与溢出的报告（寄存器分配发生在这一步）。

    triton 3.9 用随附的 ptxas-blackwell（CUDA 13.4）汇编所有架构；同目录的 ptxas（CUDA 12.9）不认 PTX 9.4。
    """
    arch = re.search(r"^\.target (\S+)", ptx, re.M).group(1)
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "k.ptx"
        p.write_text(ptx)
        out = subprocess.run(
            [str(NVIDIA_BIN / "ptxas-blackwell"), "-v", f"-arch={arch}", str(p), "-o", str(Path(d) / "k.cubin")],
            check=True, capture_output=True, text=True,
        )
        return (out.stdout + out.stderr).strip()
# --8<-- [end:compile]


def strip_locations(mlir):
    """去掉 MLIR 文本里的源码位置（loc(...) 与 #loc 定义），只为便于阅读；其余字符不动。"""
    lines = [l for l in mlir.splitlines() if not l.startswith("#loc")]
    return "\n".join(re.sub(r" loc\((?:#loc\d*|\"[^\"]*\"(?:\([^)]*\))?)\)", "", l) for l in lines)


def strip_debug(text):
    """去掉 LLVM IR / PTX 里的调试信息段，只为便于阅读。"""
    out = []
    for l in text.splitlines():
        if l.startswith("!") or l.lstrip().startswith(".loc") or l.lstrip().startswith(".file"):
            continue
        if l.startswith("\t.section\t.debug") or l.startswith(".section .debug"):
            break
        out.append(re.sub(r", !dbg !\d+", "", l))
    return "\n".join(out).rstrip()
