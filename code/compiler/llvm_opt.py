"""在真实的 LLVM（llvmlite 自带的那份）上运行标量与循环优化，取出每个变换前后的 IR，并用 MCJIT 执行对照。

输入函数直接写成 clang -O0（去掉 optnone）会产生的 LLVM IR：每个局部变量一个 alloca，读写都经过内存。
llvmlite 的新遍管理器（new pass manager）能单独添加 sroa、instcombine、sccp、dce、adce、loop-reduce 等遍，
但 licm、indvars、loop-vectorize 只在 O1–O3 的默认流水线里；它们的效果用 LLVM 自己的 -print-before/-print-after
插桩在子进程里截取（那个遍运行前后的整个模块），所以看到的是流水线里那一次运行的真实输入与输出。

页面 docs/compiler/scalar-loop-optimization.md 嵌入这里的片段与 code/compiler/records/llvm-*.txt；
实验 notebooks/compiler/llvm-opt-lab.ipynb 与测试 tests/test_compiler_llvm_opt.py 断言变换的形状与执行结果。
记录用 `python code/compiler/llvm_opt.py` 重新生成。
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import llvmlite
import llvmlite.binding as llvm

HERE = Path(__file__).resolve().parent
llvm.initialize_all_targets()
llvm.initialize_all_asmprinters()
llvm.initialize_native_target()
llvm.initialize_native_asmprinter()

# 记录用固定的目标（与运行它的机器无关，所以记录可以逐字重现）：x86-64，Haswell（AVX2，256 位向量寄存器）。
TRIPLE = "x86_64-unknown-linux-gnu"
CPU = "haswell"
LLVM_VERSION = ".".join(map(str, llvm.llvm_version_info))
TOOL = f"llvmlite {llvmlite.__version__}, LLVM {LLVM_VERSION}; target {TRIPLE}, cpu {CPU}"


# --8<-- [start:programs]
# 每个程序：C 源码（注释）与 clang -O0 风格的 IR。{nsw} 等占位符让同一函数有“带/不带 UB 标志”的两个版本。
SUM_TO = """
; int sum_to(int n) { int s = 0; for (int i = 0; i < n; i++) s += i; return s; }
define i32 @sum_to(i32 noundef %n) {
entry:
  %n.addr = alloca i32, align 4
  %s = alloca i32, align 4
  %i = alloca i32, align 4
  store i32 %n, ptr %n.addr, align 4
  store i32 0, ptr %s, align 4
  store i32 0, ptr %i, align 4
  br label %for.cond

for.cond:
  %0 = load i32, ptr %i, align 4
  %1 = load i32, ptr %n.addr, align 4
  %cmp = icmp {cmp} i32 %0, %1
  br i1 %cmp, label %for.body, label %for.end

for.body:
  %2 = load i32, ptr %i, align 4
  %3 = load i32, ptr %s, align 4
  %add = add {nsw}i32 %3, %2
  store i32 %add, ptr %s, align 4
  br label %for.inc

for.inc:
  %4 = load i32, ptr %i, align 4
  %inc = add {nsw}i32 %4, 1
  store i32 %inc, ptr %i, align 4
  br label %for.cond

for.end:
  %5 = load i32, ptr %s, align 4
  ret i32 %5
}
"""
# --8<-- [end:programs]

ABS_DIFF = """
; int abs_diff(int a, int b) { int x; if (a > b) x = a - b; else x = b - a; return x; }
define i32 @abs_diff(i32 noundef %a, i32 noundef %b) {
entry:
  %a.addr = alloca i32, align 4
  %b.addr = alloca i32, align 4
  %x = alloca i32, align 4
  store i32 %a, ptr %a.addr, align 4
  store i32 %b, ptr %b.addr, align 4
  %0 = load i32, ptr %a.addr, align 4
  %1 = load i32, ptr %b.addr, align 4
  %cmp = icmp sgt i32 %0, %1
  br i1 %cmp, label %if.then, label %if.else

if.then:
  %2 = load i32, ptr %a.addr, align 4
  %3 = load i32, ptr %b.addr, align 4
  %sub = sub nsw i32 %2, %3
  store i32 %sub, ptr %x, align 4
  br label %if.end

if.else:
  %4 = load i32, ptr %b.addr, align 4
  %5 = load i32, ptr %a.addr, align 4
  %sub1 = sub nsw i32 %4, %5
  store i32 %sub1, ptr %x, align 4
  br label %if.end

if.end:
  %6 = load i32, ptr %x, align 4
  ret i32 %6
}
"""

SCCP_DEMO = """
; int sccp_demo(int n) { int x = 1; for (int k = 0; k < n; k++) { if (x != 1) x = 2; } return x; }
define i32 @sccp_demo(i32 noundef %n) {
entry:
  %n.addr = alloca i32, align 4
  %x = alloca i32, align 4
  %k = alloca i32, align 4
  store i32 %n, ptr %n.addr, align 4
  store i32 1, ptr %x, align 4
  store i32 0, ptr %k, align 4
  br label %for.cond

for.cond:
  %0 = load i32, ptr %k, align 4
  %1 = load i32, ptr %n.addr, align 4
  %cmp = icmp slt i32 %0, %1
  br i1 %cmp, label %for.body, label %for.end

for.body:
  %2 = load i32, ptr %x, align 4
  %cmp1 = icmp ne i32 %2, 1
  br i1 %cmp1, label %if.then, label %if.end

if.then:
  store i32 2, ptr %x, align 4
  br label %if.end

if.end:
  br label %for.inc

for.inc:
  %3 = load i32, ptr %k, align 4
  %inc = add nsw i32 %3, 1
  store i32 %inc, ptr %k, align 4
  br label %for.cond

for.end:
  %4 = load i32, ptr %x, align 4
  ret i32 %4
}
"""

ADCE_DEMO = """
; int adce_demo(int n) { int s = 0; unsigned d = 0; for (int i = 0; i < n; i++) { s += i; d = d * 3 + i; } return s; }
define i32 @adce_demo(i32 noundef %n) {
entry:
  %n.addr = alloca i32, align 4
  %s = alloca i32, align 4
  %d = alloca i32, align 4
  %i = alloca i32, align 4
  store i32 %n, ptr %n.addr, align 4
  store i32 0, ptr %s, align 4
  store i32 0, ptr %d, align 4
  store i32 0, ptr %i, align 4
  br label %for.cond

for.cond:
  %0 = load i32, ptr %i, align 4
  %1 = load i32, ptr %n.addr, align 4
  %cmp = icmp slt i32 %0, %1
  br i1 %cmp, label %for.body, label %for.end

for.body:
  %2 = load i32, ptr %i, align 4
  %3 = load i32, ptr %s, align 4
  %add = add nsw i32 %3, %2
  store i32 %add, ptr %s, align 4
  %4 = load i32, ptr %d, align 4
  %mul = mul i32 %4, 3
  %5 = load i32, ptr %i, align 4
  %add1 = add i32 %mul, %5
  store i32 %add1, ptr %d, align 4
  br label %for.inc

for.inc:
  %6 = load i32, ptr %i, align 4
  %inc = add nsw i32 %6, 1
  store i32 %inc, ptr %i, align 4
  br label %for.cond

for.end:
  %7 = load i32, ptr %s, align 4
  ret i32 %7
}
"""

SCALE = """
; void {name}(int *{restrict}a, int *b, int n, int k) { for (int i = 0; i < n; i++) a[i] = a[i] * (k * k) + *b; }
define void @{name}(ptr {noalias}noundef %a, ptr noundef %b, i32 noundef %n, i32 noundef %k) {
entry:
  %a.addr = alloca ptr, align 8
  %b.addr = alloca ptr, align 8
  %n.addr = alloca i32, align 4
  %k.addr = alloca i32, align 4
  %i = alloca i32, align 4
  store ptr %a, ptr %a.addr, align 8
  store ptr %b, ptr %b.addr, align 8
  store i32 %n, ptr %n.addr, align 4
  store i32 %k, ptr %k.addr, align 4
  store i32 0, ptr %i, align 4
  br label %for.cond

for.cond:
  %0 = load i32, ptr %i, align 4
  %1 = load i32, ptr %n.addr, align 4
  %cmp = icmp slt i32 %0, %1
  br i1 %cmp, label %for.body, label %for.end

for.body:
  %2 = load ptr, ptr %a.addr, align 8
  %3 = load i32, ptr %i, align 4
  %idxprom = sext i32 %3 to i64
  %arrayidx = getelementptr inbounds i32, ptr %2, i64 %idxprom
  %4 = load i32, ptr %arrayidx, align 4
  %5 = load i32, ptr %k.addr, align 4
  %6 = load i32, ptr %k.addr, align 4
  %mul = mul nsw i32 %5, %6
  %mul1 = mul nsw i32 %4, %mul
  %7 = load ptr, ptr %b.addr, align 8
  %8 = load i32, ptr %7, align 4
  %add = add nsw i32 %mul1, %8
  %9 = load ptr, ptr %a.addr, align 8
  %10 = load i32, ptr %i, align 4
  %idxprom2 = sext i32 %10 to i64
  %arrayidx3 = getelementptr inbounds i32, ptr %9, i64 %idxprom2
  store i32 %add, ptr %arrayidx3, align 4
  br label %for.inc

for.inc:
  %11 = load i32, ptr %i, align 4
  %inc = add nsw i32 %11, 1
  store i32 %inc, ptr %i, align 4
  br label %for.cond

for.end:
  ret void
}
"""

STRIDED = """
; void strided(int *a, long n, long s) { for (long i = 0; i < n; i++) a[i * s] = (int)(i * 3); }
define void @strided(ptr noundef %a, i64 noundef %n, i64 noundef %s) {
entry:
  %a.addr = alloca ptr, align 8
  %n.addr = alloca i64, align 8
  %s.addr = alloca i64, align 8
  %i = alloca i64, align 8
  store ptr %a, ptr %a.addr, align 8
  store i64 %n, ptr %n.addr, align 8
  store i64 %s, ptr %s.addr, align 8
  store i64 0, ptr %i, align 8
  br label %for.cond

for.cond:
  %0 = load i64, ptr %i, align 8
  %1 = load i64, ptr %n.addr, align 8
  %cmp = icmp slt i64 %0, %1
  br i1 %cmp, label %for.body, label %for.end

for.body:
  %2 = load i64, ptr %i, align 8
  %mul = mul nsw i64 %2, 3
  %conv = trunc i64 %mul to i32
  %3 = load ptr, ptr %a.addr, align 8
  %4 = load i64, ptr %i, align 8
  %5 = load i64, ptr %s.addr, align 8
  %mul1 = mul nsw i64 %4, %5
  %arrayidx = getelementptr inbounds i32, ptr %3, i64 %mul1
  store i32 %conv, ptr %arrayidx, align 4
  br label %for.inc

for.inc:
  %6 = load i64, ptr %i, align 8
  %inc = add nsw i64 %6, 1
  store i64 %inc, ptr %i, align 8
  br label %for.cond

for.end:
  ret void
}
"""

SAXPY = """
; void {name}(float *{restrict}y, const float *{restrict}x, float a, int n) { for (int i = 0; i < n; i++) y[i] = a * x[i] + y[i]; }
define void @{name}(ptr {noalias}noundef %y, ptr {noalias}noundef %x, float noundef %a, i32 noundef %n) {
entry:
  %y.addr = alloca ptr, align 8
  %x.addr = alloca ptr, align 8
  %a.addr = alloca float, align 4
  %n.addr = alloca i32, align 4
  %i = alloca i32, align 4
  store ptr %y, ptr %y.addr, align 8
  store ptr %x, ptr %x.addr, align 8
  store float %a, ptr %a.addr, align 4
  store i32 %n, ptr %n.addr, align 4
  store i32 0, ptr %i, align 4
  br label %for.cond

for.cond:
  %0 = load i32, ptr %i, align 4
  %1 = load i32, ptr %n.addr, align 4
  %cmp = icmp slt i32 %0, %1
  br i1 %cmp, label %for.body, label %for.end

for.body:
  %2 = load float, ptr %a.addr, align 4
  %3 = load ptr, ptr %x.addr, align 8
  %4 = load i32, ptr %i, align 4
  %idxprom = sext i32 %4 to i64
  %arrayidx = getelementptr inbounds float, ptr %3, i64 %idxprom
  %5 = load float, ptr %arrayidx, align 4
  %mul = fmul float %2, %5
  %6 = load ptr, ptr %y.addr, align 8
  %7 = load i32, ptr %i, align 4
  %idxprom1 = sext i32 %7 to i64
  %arrayidx2 = getelementptr inbounds float, ptr %6, i64 %idxprom1
  %8 = load float, ptr %arrayidx2, align 4
  %add = fadd float %mul, %8
  store float %add, ptr %arrayidx2, align 4
  br label %for.inc

for.inc:
  %9 = load i32, ptr %i, align 4
  %inc = add nsw i32 %9, 1
  store i32 %inc, ptr %i, align 4
  br label %for.cond

for.end:
  ret void
}
"""

REDUCE = """
; {ty} {name}(const {ty} *a, int n) { {ty} s = 0; for (int i = 0; i < n; i++) s += a[i]; return s; }
define {lty} @{name}(ptr noundef %a, i32 noundef %n) {
entry:
  %a.addr = alloca ptr, align 8
  %n.addr = alloca i32, align 4
  %s = alloca {lty}, align 4
  %i = alloca i32, align 4
  store ptr %a, ptr %a.addr, align 8
  store i32 %n, ptr %n.addr, align 4
  store {lty} {zero}, ptr %s, align 4
  store i32 0, ptr %i, align 4
  br label %for.cond

for.cond:
  %0 = load i32, ptr %i, align 4
  %1 = load i32, ptr %n.addr, align 4
  %cmp = icmp slt i32 %0, %1
  br i1 %cmp, label %for.body, label %for.end

for.body:
  %2 = load ptr, ptr %a.addr, align 8
  %3 = load i32, ptr %i, align 4
  %idxprom = sext i32 %3 to i64
  %arrayidx = getelementptr inbounds {lty}, ptr %2, i64 %idxprom
  %4 = load {lty}, ptr %arrayidx, align 4
  %5 = load {lty}, ptr %s, align 4
  %add = {add} %5, %4
  store {lty} %add, ptr %s, align 4
  br label %for.inc

for.inc:
  %6 = load i32, ptr %i, align 4
  %inc = add nsw i32 %6, 1
  store i32 %inc, ptr %i, align 4
  br label %for.cond

for.end:
  %7 = load {lty}, ptr %s, align 4
  ret {lty} %7
}
"""

TWICE_HALF = """
; int {name}(int i) { return i * 2 / 2; }      ({flag})
define i32 @{name}(i32 noundef %i) {
entry:
  %i.addr = alloca i32, align 4
  store i32 %i, ptr %i.addr, align 4
  %0 = load i32, ptr %i.addr, align 4
  %mul = mul {nsw}i32 %0, 2
  %div = sdiv i32 %mul, 2
  ret i32 %div
}
"""

DEREF_CHECK = """
; int {name}(int *p) { int x = *p; if (p == 0) return -1; return x; }      ({flag})
define i32 @{name}(ptr noundef %p) {attrs}{
entry:
  %retval = alloca i32, align 4
  %p.addr = alloca ptr, align 8
  %x = alloca i32, align 4
  store ptr %p, ptr %p.addr, align 8
  %0 = load ptr, ptr %p.addr, align 8
  %1 = load i32, ptr %0, align 4
  store i32 %1, ptr %x, align 4
  %2 = load ptr, ptr %p.addr, align 8
  %cmp = icmp eq ptr %2, null
  br i1 %cmp, label %if.then, label %if.end

if.then:
  store i32 -1, ptr %retval, align 4
  br label %return

if.end:
  %3 = load i32, ptr %x, align 4
  store i32 %3, ptr %retval, align 4
  br label %return

return:
  %4 = load i32, ptr %retval, align 4
  ret i32 %4
}
"""

OFFSET_COPY = """
; void {name}(float *restrict y, const float *restrict x, {cty} n, {cty} k) { for ({cty} i = 0; i < n; i++) y[i] = x[i + k] + 1.0f; }
define void @{name}(ptr noalias noundef %y, ptr noalias noundef %x, i32 noundef %n, i32 noundef %k) {
entry:
  %y.addr = alloca ptr, align 8
  %x.addr = alloca ptr, align 8
  %n.addr = alloca i32, align 4
  %k.addr = alloca i32, align 4
  %i = alloca i32, align 4
  store ptr %y, ptr %y.addr, align 8
  store ptr %x, ptr %x.addr, align 8
  store i32 %n, ptr %n.addr, align 4
  store i32 %k, ptr %k.addr, align 4
  store i32 0, ptr %i, align 4
  br label %for.cond

for.cond:
  %0 = load i32, ptr %i, align 4
  %1 = load i32, ptr %n.addr, align 4
  %cmp = icmp {lt} i32 %0, %1
  br i1 %cmp, label %for.body, label %for.end

for.body:
  %2 = load ptr, ptr %x.addr, align 8
  %3 = load i32, ptr %i, align 4
  %4 = load i32, ptr %k.addr, align 4
  %add = add {nsw}i32 %3, %4
  %idxprom = {ext} i32 %add to i64
  %arrayidx = getelementptr inbounds float, ptr %2, i64 %idxprom
  %5 = load float, ptr %arrayidx, align 4
  %add1 = fadd float %5, 1.000000e+00
  %6 = load ptr, ptr %y.addr, align 8
  %7 = load i32, ptr %i, align 4
  %idxprom2 = {ext} i32 %7 to i64
  %arrayidx3 = getelementptr inbounds float, ptr %6, i64 %idxprom2
  store float %add1, ptr %arrayidx3, align 4
  br label %for.inc

for.inc:
  %8 = load i32, ptr %i, align 4
  %inc = add {nsw}i32 %8, 1
  store i32 %inc, ptr %i, align 4
  br label %for.cond

for.end:
  ret void
}
"""


def fill(template, **kw):
    """填模板里的 {占位符}；IR 本身的花括号（函数体）原样保留。"""
    return re.sub(r"\{(\w+)\}", lambda m: kw[m.group(1)] if m.group(1) in kw else m.group(0), template)


def sum_to(nsw=True, cmp="slt", name=None):
    ir = fill(SUM_TO, nsw="nsw " if nsw else "", cmp=cmp)
    if cmp == "sle":
        ir = ir.replace("i < n", "i <= n")
    if name:
        ir = ir.replace("@sum_to", "@" + name).replace("int sum_to", "int " + name)
    return ir


def scale(restrict=False):
    name = "scale_restrict" if restrict else "scale"
    return fill(SCALE, name=name, restrict="restrict " if restrict else "", noalias="noalias " if restrict else "")


def saxpy(restrict=True):
    name = "saxpy" if restrict else "saxpy_alias"
    return fill(SAXPY, name=name, restrict="restrict " if restrict else "", noalias="noalias " if restrict else "")


def reduce_sum(kind):
    """kind: "int"（整数求和）、"float"（严格的浮点求和）、"float_fast"（fadd 带 fast 标志，即 -ffast-math）。"""
    if kind == "int":
        return fill(REDUCE, name="isum", ty="int", lty="i32", zero="0", add="add nsw i32")
    fast = kind == "float_fast"
    name = "fsum_fast" if fast else "fsum"
    return fill(REDUCE, name=name, ty="float", lty="float", zero="0.000000e+00", add="fadd fast float" if fast else "fadd float")


def twice_half(nsw=True):
    name = "twice_half" if nsw else "twice_half_wrapv"
    return fill(TWICE_HALF, name=name, nsw="nsw " if nsw else "", flag="signed: mul nsw" if nsw else "-fwrapv: plain mul")


def deref_check(keep_null_checks=False):
    name = "deref_check_kept" if keep_null_checks else "deref_check"
    attrs = "#0 " if keep_null_checks else ""
    ir = fill(DEREF_CHECK, name=name, attrs=attrs,
              flag="-fno-delete-null-pointer-checks: null_pointer_is_valid" if keep_null_checks else "default")
    if keep_null_checks:
        ir += "\nattributes #0 = { null_pointer_is_valid }\n"
    return ir


def offset_copy(signed=True):
    """y[i] = x[i + k] + 1：int 下标（add nsw + sext）与 unsigned 下标（回绕有定义：add + zext）。"""
    if signed:
        return fill(OFFSET_COPY, name="offset_copy", cty="int", lt="slt", nsw="nsw ", ext="sext")
    return fill(OFFSET_COPY, name="offset_copy_u", cty="unsigned", lt="ult", nsw="", ext="zext")


# --8<-- [start:passes]
def target_machine(cpu=CPU, triple=TRIPLE, opt=3):
    """优化用的目标机器：向量化的代价模型（TargetTransformInfo）从它读出向量宽度与指令代价。"""
    return llvm.Target.from_triple(triple).create_target_machine(cpu=cpu, features="", opt=opt)


def parse(ir, tm=None):
    tm = tm or target_machine()
    mod = llvm.parse_assembly(ir)
    mod.triple = tm.triple
    mod.data_layout = str(tm.target_data)
    mod.verify()
    return mod


def tuning(level=2, vectorize=True, interleave=False, unroll=True):
    """PipelineTuningOptions：clang 在 -O2/-O3 打开循环与 SLP 向量化；交错（interleave）默认关掉，记录更短。"""
    pto = llvm.create_pipeline_tuning_options(speed_level=level)
    pto.loop_vectorization = vectorize
    pto.slp_vectorization = vectorize
    pto.loop_interleaving = interleave
    pto.loop_unrolling = unroll
    return pto


def run_passes(ir, passes, tm=None):
    """按顺序单独运行几个遍，例如 ["sroa", "sccp"]；名字是 llvmlite 的 add_<名字>_pass。"""
    tm = tm or target_machine()
    mod = parse(ir, tm)
    pb = llvm.create_pass_builder(tm, tuning())
    mpm = llvm.create_new_module_pass_manager()
    for p in passes:
        getattr(mpm, f"add_{p}_pass")()
    mpm.run(mod, pb)
    mod.verify()
    return str(mod)


def run_pipeline(ir, level=2, tm=None, **opts):
    """clang -O<level> 的中端流水线（PassBuilder::buildPerModuleDefaultPipeline）。"""
    tm = tm or target_machine()
    mod = parse(ir, tm)
    pb = llvm.create_pass_builder(tm, tuning(level, **opts))
    pb.getModulePassManager().run(mod, pb)
    mod.verify()
    return str(mod)
# --8<-- [end:passes]


# --8<-- [start:around]
_DUMP = re.compile(r"^(?:; )?\*\*\* IR Dump (Before|After) (\w+) on (.*?)( \(invalidated\))? \*\*\*$", re.M)


def around_pass(ir, pass_name, level=2, options=(), cpu=CPU, **opts):
    """流水线里名为 pass_name 的遍（如 "licm"、"indvars"、"loop-vectorize"）每次运行前后的整个模块。

    在子进程里打开 LLVM 的 -print-before/-print-after/-print-module-scope（它们是进程内的全局开关，
    输出到 stderr），运行 -O<level> 流水线，再把 stderr 切成 [{遍, 对象, 之前, 之后}, …]。
    """
    options = [f"-print-before={pass_name}", f"-print-after={pass_name}", "-print-module-scope", *options]
    parts = _DUMP.split(_child(ir, level, options, opts, cpu))
    dumps = [parts[k:k + 5] for k in range(1, len(parts), 5)]  # (Before/After, 类名, 对象, 是否失效, 模块文本)
    runs = []
    for (w1, p1, on1, _, before), (w2, p2, on2, _, after) in zip(dumps[::2], dumps[1::2]):
        assert (w1, w2, p1, on1) == ("Before", "After", p2, on2), (w1, w2, p1, p2, on1, on2)
        runs.append({"pass": p1, "on": on1, "before": before.strip(), "after": after.strip()})
    return runs


def first_change(runs, function):
    """第一次真正改变了 function 的那次运行（同一个遍在流水线里常出现多次，前几次可能什么也没做）。"""
    for r in runs:
        if function in r["on"] and function_text(r["before"], function) != function_text(r["after"], function):
            return r
    return None


def changed_passes(ir, function, level=2, **opts):
    """-O<level> 流水线里真正改变了 function 的遍，按运行顺序（LLVM 的 -print-changed=quiet）。"""
    err = _child(ir, level, ["-print-changed=quiet", f"-filter-print-funcs={function}"], opts)
    return [(m.group(2), m.group(3)) for m in _DUMP.finditer(err) if m.group(1) == "After"]


def remarks(ir, level=3, options=(), cpu=CPU, **opts):
    """循环向量化器的优化备注（-pass-remarks*=loop-vectorize）：向量化了没有、宽度与交错数、放弃的理由。"""
    flags = [f"-pass-remarks{kind}=loop-vectorize" for kind in ("", "-missed", "-analysis")]
    err = _child(ir, level, [*flags, *options], opts, cpu)
    return [ln.split(": ", 2)[-1] for ln in err.splitlines() if ln.startswith("remark:")]


def _child(ir, level, options, opts, cpu=CPU):
    job = json.dumps({"ir": ir, "level": level, "options": list(options), "opts": opts, "cpu": cpu})
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    code = "import sys, llvm_opt; llvm_opt._child_main(sys.stdin.read())"
    res = subprocess.run([sys.executable, "-c", code], input=job, capture_output=True, text=True, env=env, check=True)
    return res.stderr


def _child_main(job):
    job = json.loads(job)
    for opt in job["options"]:
        llvm.set_option("llvm_opt", opt)
    arch, _, cpu = job["cpu"].rpartition(":")  # "haswell"，或换一个架构："aarch64:neoverse-v1"
    triple = f"{arch}-unknown-linux-gnu" if arch else TRIPLE
    run_pipeline(job["ir"], job["level"], tm=target_machine(cpu=cpu, triple=triple), **job["opts"])
# --8<-- [end:around]


def function_text(module_text, name=None):
    """从模块文本里取出一个函数的定义（define … }）；name 为 None 时取全部函数。"""
    funcs = re.findall(r"^define .*?^}$", module_text, re.M | re.S)
    if name is None:
        return "\n\n".join(funcs)
    for f in funcs:
        if re.match(rf"define [^@]*@{re.escape(name)}\(", f):
            return f
    raise KeyError(name)


def blocks(func_text):
    """函数里基本块的标签（入口块 entry 也算）。"""
    return re.findall(r"^([\w.]+):", func_text, re.M)


def block_text(func_text, first, last=None):
    """从标签 first 到标签 last（含）的连续几个基本块。"""
    lines = func_text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(first + ":"))
    stop = next(i for i, ln in enumerate(lines) if ln.startswith((last or first) + ":"))
    end = next((i for i in range(stop + 1, len(lines)) if lines[i] == "" or lines[i] == "}"), len(lines))
    return "\n".join(lines[start:end])


# ---- 每个程序的 O0 IR，与每个变换前后的整个模块 ----
PROGRAMS = {
    "sum_to": sum_to(), "abs_diff": ABS_DIFF, "sccp_demo": SCCP_DEMO, "adce_demo": ADCE_DEMO,
    "scale": scale(), "scale_restrict": scale(restrict=True), "strided": STRIDED,
    "saxpy": saxpy(), "saxpy_alias": saxpy(restrict=False),
    "isum": reduce_sum("int"), "fsum": reduce_sum("float"), "fsum_fast": reduce_sum("float_fast"),
    "twice_half": twice_half(), "twice_half_wrapv": twice_half(nsw=False),
    "deref_check": deref_check(), "deref_check_kept": deref_check(keep_null_checks=True),
    "sum_le": sum_to(True, "sle", "sum_le"), "sum_le_wrapv": sum_to(False, "sle", "sum_le_wrapv"),
    "offset_copy": offset_copy(), "offset_copy_u": offset_copy(signed=False),
}


# --8<-- [start:stages]
def stages():
    """{(程序, 阶段): 模块文本}。阶段名说明它怎样得到：单独的遍、流水线里某个遍的前后、或整条流水线。"""
    P, st = PROGRAMS, {}
    for prog in PROGRAMS:
        st[prog, "o0"] = str(parse(P[prog]))
    for prog in ("sum_to", "abs_diff", "sccp_demo", "adce_demo"):
        st[prog, "sroa"] = run_passes(P[prog], ["sroa"])  # mem2reg：alloca 变成 SSA 值与 φ
    st["sccp_demo", "instcombine"] = run_passes(P["sccp_demo"], ["sroa", "instruction_combine"])
    st["sccp_demo", "sccp"] = run_passes(P["sccp_demo"], ["sroa", "sccp"])
    st["adce_demo", "dce"] = run_passes(P["adce_demo"], ["sroa", "dead_code_elimination"])
    st["adce_demo", "adce"] = run_passes(P["adce_demo"], ["sroa", "aggressive_dce"])
    for prog, pass_name, stage, level in (("scale", "licm", "licm", 2), ("scale_restrict", "licm", "licm", 2),
                                          ("sum_to", "indvars", "indvars", 2),
                                          ("saxpy", "loop-vectorize", "vec", 3), ("saxpy_alias", "loop-vectorize", "vec", 3),
                                          ("isum", "loop-vectorize", "vec", 3), ("fsum_fast", "loop-vectorize", "vec", 3),
                                          ("offset_copy", "loop-vectorize", "vec", 3),
                                          ("offset_copy_u", "loop-vectorize", "vec", 3)):
        r = first_change(around_pass(P[prog], pass_name, level), prog)
        st[prog, stage + "-before"], st[prog, stage + "-after"] = r["before"], r["after"]
    st["fsum", "o3"] = run_pipeline(P["fsum"], 3, unroll=False)  # 严格浮点：向量化器放弃，循环仍是标量
    r = first_change(around_pass(P["fsum"], "loop-vectorize", 3, options=["-force-ordered-reductions"]), "fsum")
    st["fsum", "ordered-after"] = r["after"]  # 强制“有序归约”：向量化了，但仍按原顺序逐个相加
    st["strided", "o2"] = run_pipeline(P["strided"], 2, vectorize=False, unroll=False)
    st["strided", "lsr"] = run_passes(st["strided", "o2"], ["loop_strength_reduce"])
    for prog in ("twice_half", "twice_half_wrapv"):
        st[prog, "instcombine"] = run_passes(P[prog], ["sroa", "instruction_combine"])
    for prog in ("sum_to", "deref_check", "deref_check_kept", "sum_le", "sum_le_wrapv"):
        st[prog, "o2"] = run_pipeline(P[prog], 2)
    return st
# --8<-- [end:stages]


# ---- 记录：code/compiler/records/llvm-*.txt ----
# 文件 → (记录第一行写的来历, [(片段名, 程序, 阶段, 只取的基本块)])
RECORDS = {
    "llvm-ssa.txt": ("sroa alone (llvmlite new pass manager): allocas promoted to SSA values and phis", [
        ("o0", "sum_to", "o0", None), ("sroa", "sum_to", "sroa", None),
        ("o0-if", "abs_diff", "o0", None), ("sroa-if", "abs_diff", "sroa", None)]),
    "llvm-sccp.txt": ("sroa, then instcombine alone or sccp alone", [
        ("sroa", "sccp_demo", "sroa", None), ("instcombine", "sccp_demo", "instcombine", None),
        ("sccp", "sccp_demo", "sccp", None)]),
    "llvm-dce.txt": ("sroa, then dce alone or adce alone", [
        ("sroa", "adce_demo", "sroa", None), ("dce", "adce_demo", "dce", None), ("adce", "adce_demo", "adce", None)]),
    "llvm-licm.txt": ("the module before/after the first LICMPass of the -O2 pipeline that changed each function "
                      "(-print-before/-print-after=licm)", [
        ("scale-before", "scale", "licm-before", None), ("scale-after", "scale", "licm-after", None),
        ("scale_restrict-before", "scale_restrict", "licm-before", None),
        ("scale_restrict-after", "scale_restrict", "licm-after", None)]),
    "llvm-indvars.txt": ("before/after IndVarSimplifyPass in the -O2 pipeline (-print-before/-print-after=indvars); "
                         "the whole -O2 result; the passes that changed sum_to (-print-changed=quiet)", [
        ("before", "sum_to", "indvars-before", None), ("after", "sum_to", "indvars-after", None),
        ("o2", "sum_to", "o2", None)]),
    "llvm-lsr.txt": ("-O2 without vectorization and unrolling, then loop-reduce (LSR) alone", [
        ("o2", "strided", "o2", None), ("lsr", "strided", "lsr", None)]),
    "llvm-vectorize.txt": ("before/after LoopVectorizePass in the -O3 pipeline, loop interleaving off", [
        ("saxpy-before", "saxpy", "vec-before", ("for.body", None)),
        ("saxpy-after", "saxpy", "vec-after", None),
        ("saxpy-vector", "saxpy", "vec-after", ("vector.ph", "vector.body")),
        ("saxpy_alias-memcheck", "saxpy_alias", "vec-after", ("vector.memcheck", None)),
        ("saxpy_alias-vector", "saxpy_alias", "vec-after", ("vector.body", None))]),
    "llvm-reduction.txt": ("after LoopVectorizePass in -O3 (interleaving off); fsum: the whole -O3 result (unrolling off), "
                           "and after LoopVectorizePass with -force-ordered-reductions", [
        ("isum", "isum", "vec-after", ("vector.body", "middle.block")),
        ("fsum", "fsum", "o3", ("for.body", None)),
        ("fsum_fast", "fsum_fast", "vec-after", ("vector.body", "middle.block")),
        ("fsum_ordered", "fsum", "ordered-after", ("vector.body", None))]),
    "llvm-ub.txt": ("twice_half: sroa + instcombine; deref_check, sum_le: -O2; offset_copy: after LoopVectorizePass "
                    "in -O3 (interleaving off)", [
        ("twice_half", "twice_half", "instcombine", None), ("twice_half_wrapv", "twice_half_wrapv", "instcombine", None),
        ("deref_check", "deref_check", "o2", None), ("deref_check_kept", "deref_check_kept", "o2", None),
        ("sum_le", "sum_le", "o2", None), ("sum_le_wrapv", "sum_le_wrapv", "o2", None),
        ("sum_le_wrapv-guard", "sum_le_wrapv", "o2", ("for.body.preheader", None)),
        ("sum_le_wrapv-loop", "sum_le_wrapv", "o2", ("for.body", None)),
        ("offset_copy", "offset_copy", "vec-after", ("vector.ph", "vector.body")),
        ("offset_copy_u", "offset_copy_u", "vec-after", ("vector.scevcheck", None))]),
}


# 向量化器的决定：(目标 CPU, 程序, 额外的 LLVM 选项, 流水线选项)。clang 在 -O2/-O3 默认打开交错（interleave）。
REMARK_CASES = [
    ("haswell", "saxpy", [], {}), ("haswell", "saxpy", [], {"interleave": False}),
    ("x86-64", "saxpy", [], {}), ("skylake-avx512", "saxpy", [], {}),
    ("haswell", "saxpy_alias", [], {}), ("haswell", "isum", [], {}),
    ("haswell", "fsum", [], {}), ("haswell", "fsum", ["-force-ordered-reductions"], {}),
    ("haswell", "fsum_fast", [], {}), ("aarch64:neoverse-v1", "fsum", [], {}),
]


def record_texts(st=None):
    """{文件名: (来历, 正文)}；片段用 `; --8<-- [start:名字]` 标出，页面按名字嵌入。"""
    st = st or stages()
    out = {}
    for fname, (how, items) in RECORDS.items():
        body = []
        for sec, prog, stage, only in items:
            text = function_text(st[prog, stage], prog)
            if only:
                text = block_text(text, *only)
            body += [f"; --8<-- [start:{sec}]", text, f"; --8<-- [end:{sec}]"]
        out[fname] = (how, "\n".join(body))
    lines = []
    for cpu, prog, options, opts in REMARK_CASES:
        tag = " ".join([cpu, prog, *options] + [f"{k}={v}" for k, v in opts.items()])
        lines += [f"; {tag}: {msg}" for msg in remarks(PROGRAMS[prog], 3, options, cpu, **{"interleave": True, **opts})]
    out["llvm-remarks.txt"] = ("optimization remarks of LoopVectorizePass in -O3 (-pass-remarks*=loop-vectorize), "
                               "loop interleaving on as in clang unless interleave=False", "\n".join(lines))
    trace = changed_passes(PROGRAMS["sum_to"], "sum_to")
    how, body = out["llvm-indvars.txt"]
    out["llvm-indvars.txt"] = (how, body + "\n; --8<-- [start:trace]\n"
                               + "\n".join(f"; {p} on {on}" for p, on in trace) + "\n; --8<-- [end:trace]")
    return out


def write_records():
    # record_ir 写出三行出处；按名字载入，实验的依赖扫描就不会把它（及它按需导入的 torch、tvm、jax）算进来
    record_ir = importlib.import_module("record_ir")
    for name, (how, body) in record_texts().items():
        record_ir.write(name, f"{TOOL}; {how}", "python code/compiler/llvm_opt.py", body)


# --8<-- [start:jit]
class Jit:
    """用 MCJIT 把一个模块编译成本机代码，按名字取 ctypes 函数。opt=0：代码生成也不优化，执行的就是给定的 IR。"""

    def __init__(self, module_text, opt=0):
        target = llvm.Target.from_default_triple()
        self.tm = target.create_target_machine(cpu=llvm.get_host_cpu_name(),
                                               features=llvm.get_host_cpu_features().flatten(), opt=opt)
        self.engine = llvm.create_mcjit_compiler(parse(module_text, self.tm), self.tm)
        self.engine.finalize_object()

    def __call__(self, name):
        restype, argtypes = SIGNATURES[name]
        f = ctypes.CFUNCTYPE(restype, *argtypes)(self.engine.get_function_address(name))
        f.jit = self  # 机器码属于执行引擎：函数活着，引擎就不能被回收
        return f
# --8<-- [end:jit]


I32, I64, F32, PTR = ctypes.c_int32, ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
SIGNATURES = {
    "sum_to": (I32, [I32]), "abs_diff": (I32, [I32, I32]), "sccp_demo": (I32, [I32]), "adce_demo": (I32, [I32]),
    "scale": (None, [PTR, PTR, I32, I32]), "scale_restrict": (None, [PTR, PTR, I32, I32]),
    "strided": (None, [PTR, I64, I64]),
    "saxpy": (None, [PTR, PTR, F32, I32]), "saxpy_alias": (None, [PTR, PTR, F32, I32]),
    "isum": (I32, [PTR, I32]), "fsum": (F32, [PTR, I32]), "fsum_fast": (F32, [PTR, I32]),
    "twice_half": (I32, [I32]), "twice_half_wrapv": (I32, [I32]),
    "deref_check": (I32, [PTR]), "deref_check_kept": (I32, [PTR]),
    "sum_le": (I32, [I32]), "sum_le_wrapv": (I32, [I32]),
    "offset_copy": (None, [PTR, PTR, I32, I32]), "offset_copy_u": (None, [PTR, PTR, I32, I32]),
}


# ---- Python 参照：按 C 的语义，只在行为有定义的输入上比较 ----
def wrap32(v):
    """把整数按 32 位补码回绕（unsigned 运算与 -fwrapv 的语义）。"""
    return (int(v) + 2**31) % 2**32 - 2**31


def _ptr(a):
    return a.ctypes.data_as(ctypes.c_void_p)




# --8<-- [start:check]
def check(name, fn, rng, trials=40):
    """在行为有定义的随机输入上调用 JIT 出来的 fn，与 Python 参照逐个比较（浮点要求逐位相等，fsum_fast 除外）。

    返回比较的次数。有符号溢出、越界、restrict 被违反等未定义行为的输入不在这里：那些输入上优化前后可以不同，
    由测试单独演示。
    """
    import numpy as np

    calls = 0
    if name in ("sum_to", "adce_demo", "sum_le", "sum_le_wrapv", "sccp_demo"):
        top = 65535 if name != "sum_le_wrapv" else 10**6  # s 不溢出；sum_le_wrapv 的回绕有定义（n = INT_MAX 时是死循环）
        for n in [-3, -1, 0, 1, 2, 3, 10, 100, top] + [int(v) for v in rng.integers(-1000, top, trials)]:
            m = max(0, n + 1 if name.startswith("sum_le") else n)  # 循环执行的次数
            want = 1 if name == "sccp_demo" else wrap32(m * (m - 1) // 2)
            assert fn(n) == want, (name, n, fn(n), want)
            calls += 1
    elif name == "abs_diff":
        for a, b in rng.integers(-2**30, 2**30, (trials, 2)):
            assert fn(int(a), int(b)) == abs(int(a) - int(b))
            calls += 1
    elif name in ("twice_half", "twice_half_wrapv"):
        lo, hi = (-2**30, 2**30) if name == "twice_half" else (-2**31, 2**31)  # 有符号版本：i * 2 不溢出
        for i in [lo, hi - 1, 0, -1, 1] + [int(v) for v in rng.integers(lo, hi, trials)]:
            want = i if name == "twice_half" else int(wrap32(2 * i) / 2)  # C 的除法向零取整
            assert fn(i) == want, (name, i, fn(i), want)
            calls += 1
    elif name in ("deref_check", "deref_check_kept"):
        for v in rng.integers(-2**31, 2**31, trials, dtype=np.int64):
            box = np.array([v], dtype=np.int32)
            assert fn(_ptr(box)) == v
            calls += 1
    elif name in ("scale", "scale_restrict"):
        for _ in range(trials):
            n, k = int(rng.integers(0, 40)), int(rng.integers(-20, 20))
            a = rng.integers(-1000, 1000, n + 1, dtype=np.int32)
            alias = name == "scale" and n > 0 and rng.random() < 0.5  # b 指向 a 的某个元素：只有不带 restrict 的版本允许
            j = int(rng.integers(0, n)) if alias else None
            b = np.array([rng.integers(-1000, 1000)], dtype=np.int32)
            want = a.astype(np.int64).copy()
            for i in range(n):
                want[i] = want[i] * k * k + (want[j] if alias else b[0])
            fn(_ptr(a), _ptr(a[j:]) if alias else _ptr(b), n, k)
            assert np.array_equal(a, want.astype(np.int32)), (name, n, k, j)
            calls += 1
    elif name == "strided":
        for _ in range(trials):
            n, s = int(rng.integers(0, 30)), int(rng.integers(1, 6))
            a = np.full(n * s + 1, -7, dtype=np.int32)
            want = a.copy()
            want[: n * s : s] = 3 * np.arange(n)
            fn(_ptr(a), n, s)
            assert np.array_equal(a, want)
            calls += 1
    elif name in ("saxpy", "saxpy_alias"):
        for _ in range(trials):
            n, alpha = int(rng.integers(0, 70)), np.float32(rng.standard_normal())
            off = int(rng.integers(-3, 4)) if name == "saxpy_alias" else None  # y = x + off：重叠的数组
            buf = rng.standard_normal(n + 8).astype(np.float32)
            if off is None:
                x, y = buf[:n].copy(), rng.standard_normal(n).astype(np.float32)
            else:
                x, y = buf[4 : 4 + n], buf[4 + off : 4 + off + n]
            want_buf, want_y = (None, y.copy()) if off is None else (buf.copy(), None)
            for i in range(n):  # 逐个元素、按原循环的顺序：读到的 x[i]、y[i] 可能已被前面的迭代改写
                if off is None:
                    want_y[i] = np.float32(alpha * x[i]) + want_y[i]
                else:
                    want_buf[4 + off + i] = np.float32(alpha * want_buf[4 + i]) + want_buf[4 + off + i]
            fn(_ptr(y), _ptr(x), alpha, n)
            assert np.array_equal(y, want_y) if off is None else np.array_equal(buf, want_buf), (name, n, off)
            calls += 1
    elif name == "isum":
        for _ in range(trials):
            a = rng.integers(-10**6, 10**6, int(rng.integers(0, 100)), dtype=np.int32)
            assert fn(_ptr(a), len(a)) == int(a.sum())
            calls += 1
    elif name in ("fsum", "fsum_fast"):
        for _ in range(trials):
            a = rng.standard_normal(int(rng.integers(0, 200))).astype(np.float32)
            s = np.float32(0)
            for v in a:  # 严格按源程序的顺序逐次舍入
                s = np.float32(s + v)
            got = fn(_ptr(a), len(a))
            if name == "fsum":
                assert np.float32(got) == s, (got, s)
            else:  # 重结合后舍入不同：与 float64 的和比较，容差按 n 个 float32 加法的误差界
                assert abs(got - a.astype(np.float64).sum()) <= len(a) * 2**-23 * np.abs(a).sum() + 1e-6
            calls += 1
    elif name in ("offset_copy", "offset_copy_u"):
        for _ in range(trials):
            n, k = int(rng.integers(0, 60)), int(rng.integers(0, 20))
            x = rng.standard_normal(n + k).astype(np.float32)
            y = np.zeros(n, dtype=np.float32)
            fn(_ptr(y), _ptr(x), n, k)
            assert np.array_equal(y, x[k : k + n] + np.float32(1))
            calls += 1
    else:
        raise KeyError(name)
    return calls
# --8<-- [end:check]


if __name__ == "__main__":
    write_records()
