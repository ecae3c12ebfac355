"""用 isl（islpy）做多面体分析：依赖、调度的合法性、分块与倾斜，以及让 isl 生成循环代码并编译运行。

页面 docs/compiler/polyhedral.md 嵌入这里的片段；实验 notebooks/compiler/polyhedral-lab.ipynb 与测试
tests/test_compiler_polyhedral.py 断言生成代码的结果与原循环逐位相同。
"""

import ctypes
import subprocess
import tempfile
from pathlib import Path

import islpy as isl
import numpy as np

# --8<-- [start:program]
# 原程序（C）：for (i = 1; i < N; i++) for (j = 1; j < M - 1; j++)
#                 A[i][j] = 0.5 * (A[i-1][j+1] + A[i][j-1]);   // 语句 S
DOMAIN = "[N, M] -> { S[i, j] : 1 <= i < N and 1 <= j < M - 1 }"
WRITES = "[N, M] -> { S[i, j] -> A[i, j] }"
READS = "[N, M] -> { S[i, j] -> A[i - 1, j + 1]; S[i, j] -> A[i, j - 1] }"
ORIGINAL = "[N, M] -> { S[i, j] -> [i, j] }"
TILED = "[N, M] -> { S[i, j] -> [floor(i/4), floor(j/4), i, j] }"
SKEWED_TILED = "[N, M] -> { S[i, j] -> [floor(i/4), floor((i + j)/4), i, i + j] }"
STATEMENT = "A[(i) * M + (j)] = 0.5 * (A[((i) - 1) * M + (j) + 1] + A[(i) * M + (j) - 1])"
# --8<-- [end:program]


# --8<-- [start:deps]
def dependences(domain=DOMAIN, writes=WRITES, reads=READS, schedule=ORIGINAL):
    """流依赖（写后读）：按原调度，哪个迭代写的值被哪个迭代读。返回 {S[源] -> S[汇]}。"""
    d = isl.UnionSet(domain)
    info = isl.UnionAccessInfo.from_sink(isl.UnionMap(reads).intersect_domain(d))
    info = info.set_must_source(isl.UnionMap(writes).intersect_domain(d))
    info = info.set_schedule_map(isl.UnionMap(schedule).intersect_domain(d))
    return info.compute_flow().get_may_dependence()


def violated(dep, schedule, domain=DOMAIN):
    """新调度 θ 下被违反的依赖：源的时间戳不早于汇的，即 θ(s) ⪰ θ(t)。空集表示调度合法。"""
    theta = isl.UnionMap(schedule).intersect_domain(isl.UnionSet(domain))
    return dep.intersect(theta.lex_ge_union_map(theta))


def distances(dep, schedule, domain=DOMAIN):
    """依赖在新调度的时间空间里的距离向量 θ(t) − θ(s)。"""
    theta = isl.UnionMap(schedule).intersect_domain(isl.UnionSet(domain))
    return dep.apply_domain(theta).apply_range(theta).deltas()
# --8<-- [end:deps]


# --8<-- [start:scheduler]
def isl_schedule(dep, domain=DOMAIN):
    """isl 的调度器（Pluto 式算法）：在“满足所有依赖”的约束下找一个依赖距离尽量小、可分块的仿射调度。"""
    sc = isl.ScheduleConstraints.on_domain(isl.UnionSet(domain))
    sc = sc.set_validity(dep).set_proximity(dep).set_coincidence(dep)
    return sc.compute_schedule()
# --8<-- [end:scheduler]


# --8<-- [start:codegen]
def generate_c(schedule, domain=DOMAIN, context="[N, M] -> { : N >= 2 and M >= 3 }"):
    """让 isl 按调度扫描迭代域，生成 C 循环嵌套（调用 S(c2, c3) 的地方就是语句实例）。"""
    build = isl.AstBuild.from_context(isl.Set(context))
    ast = build.node_from_schedule_map(isl.UnionMap(schedule).intersect_domain(isl.UnionSet(domain)))
    return ast.to_C_str()
# --8<-- [end:codegen]


def compile_and_run(loop_c, a, statement=STATEMENT):
    """把生成的循环包成一个 C 函数，编译成共享库，对 a 的副本原地执行，返回结果。"""
    n, m = a.shape
    # isl 生成的 S(…) 的实参已经是原迭代变量 (i, j) 用新循环变量表示的式子（倾斜后是 S(c2, -c2 + c3)）
    src = f"""
#define floord(n, d) (((n) < 0) ? -((-(n) + (d) - 1) / (d)) : (n) / (d))
#define min(x, y) ((x) < (y) ? (x) : (y))
#define max(x, y) ((x) > (y) ? (x) : (y))
#define S(p, q) {{ long i = (p), j = (q); {statement}; }}
void kernel(double *A, long N, long M) {{
{loop_c}
}}
"""
    with tempfile.TemporaryDirectory() as d:
        c, so = Path(d) / "k.c", Path(d) / "k.so"
        c.write_text(src)
        subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(so), str(c)], check=True, capture_output=True)
        lib = ctypes.CDLL(str(so))
        out = np.ascontiguousarray(a, dtype=np.float64).copy()
        lib.kernel(out.ctypes.data_as(ctypes.POINTER(ctypes.c_double)), ctypes.c_long(n), ctypes.c_long(m))
        return out


def reference(a):
    """原循环的 Python 版本，作为对照。"""
    a = a.astype(np.float64).copy()
    n, m = a.shape
    for i in range(1, n):
        for j in range(1, m - 1):
            a[i, j] = 0.5 * (a[i - 1, j + 1] + a[i, j - 1])
    return a
