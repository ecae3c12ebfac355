"""Triton 与 Gluon 写同一个向量加法：Triton 的布局由编译器（Coalesce 遍）决定，Gluon 的布局由程序员写在代码里。
两者共用 triton 3.9 的编译器，在没有 GPU 的机器上以 GPUTarget 指定目标即可编译到 PTX。
页面 docs/compiler/kernel-languages.md 嵌入这里的片段，tests/test_compiler_kernel_languages.py 断言页面提到的每个事实。
"""

import sys
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


# --8<-- [start:gluon]
@gluon.jit
def add_kernel_gluon(x_ptr, y_ptr, out_ptr, n, BLOCK: gl.constexpr, layout: gl.constexpr):
    pid = gl.program_id(0)
    # 与 Triton 版唯一的区别：arange 必须带一个布局，说明 BLOCK 个元素怎样分给线程与寄存器
    offs = pid * BLOCK + gl.arange(0, BLOCK, layout=layout)
    mask = offs < n
    x = gl.load(x_ptr + offs, mask=mask)
    y = gl.load(y_ptr + offs, mask=mask)
    gl.store(out_ptr + offs, x + y, mask=mask)


def compile_gluon(size_per_thread=4, block=1024, num_warps=4, arch=90):
    """程序员选布局：每个线程 size_per_thread 个连续元素，一个 warp 32 个线程，num_warps 个 warp。"""
    layout = gl.BlockedLayout(size_per_thread=[size_per_thread], threads_per_warp=[32],
                              warps_per_cta=[num_warps], order=[0])
    src = GluonASTSource(
        fn=add_kernel_gluon,
        signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32",
                   "BLOCK": "constexpr", "layout": "constexpr"},
        constexprs={"BLOCK": block, "layout": layout},
        attrs={(i,): [["tt.divisibility", 16]] for i in range(4)},  # 与 Triton 版同样的对齐特化
    )
    kernel = triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": num_warps})
    return kernel.asm
# --8<-- [end:gluon]


def load_widths(ptx):
    """PTX 里全局读指令的条数：128 位向量读与 32 位标量读。"""
    return {"v4": ptx.count("ld.global.v4.b32"), "b32": ptx.count("ld.global.b32")}


if __name__ == "__main__":
    import record_ir
    import triton_stages as T

    tool = f"triton {triton.__version__} (Gluon), target cuda:90 (no GPU needed), loc() stripped"
    cmd = "python code/compiler/kernel_languages.py"
    asm = compile_gluon(4)
    record_ir.write("gluon-ttgir.txt", tool, cmd, T.strip_locations(asm["ttgir"]))
    print(sorted(asm), load_widths(asm["ptx"]), load_widths(compile_gluon(1)["ptx"]))
