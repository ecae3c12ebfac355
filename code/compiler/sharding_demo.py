"""分片编译器（GSPMD / Shardy）在 CPU 上：8 个虚拟设备，矩阵乘的几种切法，读编译后的 HLO 里插入了哪些集合通信。

页面 docs/compiler/sharding.md 嵌入这里的片段；实验 notebooks/compiler/sharding-lab.ipynb 与测试
tests/test_compiler_sharding.py 调用这些函数。

XLA 的 CPU 后端默认只有 1 个设备，`--xla_force_host_platform_device_count=8` 让它假装有 8 个；这个开关必须在
jax 初始化后端之前设好，所以本模块在导入 jax 之前写 XLA_FLAGS（jax 已经导入时只检查设备数）。同时让 XLA 把
`megatron_mlp` 这一个模块在 Shardy 传播前后的 IR 写进一个临时目录，用来看传播的结果。

    python code/compiler/sharding_demo.py records   # 写 code/compiler/records/sharding-*.txt
"""
from __future__ import annotations

import atexit
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

N_DEVICES = 8
DUMP_DIR = Path(tempfile.mkdtemp(prefix="xla-dump-"))
atexit.register(shutil.rmtree, DUMP_DIR, ignore_errors=True)
# --8<-- [start:flags]
if "jax" not in sys.modules:
    os.environ["JAX_PLATFORMS"] = "cpu"  # 在有 GPU 的机器上（如 Colab）也用 CPU 平台的 8 个虚拟设备
    os.environ["XLA_FLAGS"] = " ".join([
        os.environ.get("XLA_FLAGS", ""),
        f"--xla_force_host_platform_device_count={N_DEVICES}",  # CPU 上假装有 8 个设备
        f"--xla_dump_to={DUMP_DIR}", "--xla_dump_hlo_module_re=.*megatron_mlp.*",  # 只转储这一个模块
        "--xla_dump_hlo_pass_re=shardy|spmd-partitioning",  # Shardy 传播与 SPMD 分割前后
    ]).strip()
# --8<-- [end:flags]

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402
from jaxlib import _hlo  # noqa: E402

HERE = Path(__file__).resolve().parent
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
M, K, N = 16, 32, 64  # X[M, K] @ W[K, N]


def check_devices():
    if jax.device_count() < N_DEVICES:
        raise RuntimeError(f"需要 {N_DEVICES} 个设备，只有 {jax.device_count()} 个：jax 在本模块之前已被导入，"
                           f"XLA_FLAGS 来不及设置；在导入 jax 之前 import sharding_demo，或在新进程里运行")


# --8<-- [start:meshes]
def meshes():
    """一维网格 x=8，二维网格 data=2 × model=4。AxisType.Auto：分片交给编译器传播（GSPMD/Shardy 的方式）。"""
    check_devices()
    return {
        "1d": jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,)),
        "2d": jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2),
    }
# --8<-- [end:meshes]


def operands(seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((M, K), dtype=np.float32), rng.standard_normal((K, N), dtype=np.float32)


# --8<-- [start:cases]
def matmul(x, w):
    return x @ w


# 名字: (网格, X 的分片, W 的分片, 输出的分片)
CASES = {
    "data-parallel": ("1d", P("x", None), P(), P("x", None)),
    "row-parallel, output replicated": ("1d", P(None, "x"), P("x", None), P()),
    "row-parallel, output sharded": ("1d", P(None, "x"), P("x", None), P("x", None)),
    "column-parallel, output sharded": ("1d", P(), P(None, "x"), P(None, "x")),
    "column-parallel, output replicated": ("1d", P(), P(None, "x"), P()),
    "2-D, K over model": ("2d", P("data", "model"), P("model", None), P("data", None)),
    "2-D, K over data": ("2d", P("model", "data"), P("data", None), P("model", None)),
    "2-D, no contraction split": ("2d", P("data", None), P(None, "model"), P("data", "model")),
}


def compile_case(name, x, w):
    """按 CASES[name] 的分片编译矩阵乘，返回 (jit 函数, 编译后的 HLO 文本)。"""
    mesh = meshes()[CASES[name][0]]
    xs, ws, outs = (NamedSharding(mesh, s) for s in CASES[name][1:])
    fn = jax.jit(matmul, in_shardings=(xs, ws), out_shardings=outs)
    return fn, optimized_hlo(fn.lower(x, w).compile())
# --8<-- [end:cases]


def optimized_hlo(compiled):
    """编译后的（分割成每个设备的程序之后的）HLO，不带源码位置元数据。"""
    options = _hlo.HloPrintOptions.short_parsable()
    options.print_metadata = False
    return compiled.runtime_executable().hlo_modules()[0].to_string(options)


# --8<-- [start:parse]
def expand_groups(text, n=N_DEVICES):
    """把 replica_groups 的三种写法展开成显式的设备组：{{0,1},{2,3}}、iota 的 [G,S]<=[dims]T(perm)、
    以及按网格轴写的 mesh['axis_0'=2,'axis_1'=4] {'axis_1'}（设备按行主序排在网格上，花括号里是组内变化的轴）。"""
    text = text.strip()
    if text.startswith("{"):
        return [[int(d) for d in g.split(",") if d] for g in re.findall(r"\{([\d,]*)\}", text)]
    m = re.fullmatch(r"\[(\d+),(\d+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?", text)
    if m:
        groups, size = int(m[1]), int(m[2])
        ids = np.arange(n).reshape([int(d) for d in m[3].split(",")])
        if m[4]:
            ids = ids.transpose([int(p) for p in m[4].split(",")])
        return ids.reshape(groups, size).tolist()
    m = re.fullmatch(r"mesh\[([^\]]*)\]\s*\{([^}]*)\}", text)
    if m:
        axes = re.findall(r"'(\w+)'=(\d+)", m[1])
        names, sizes = [a for a, _ in axes], [int(s) for _, s in axes]
        inside = re.findall(r"'(\w+)'", m[2])
        ids = np.arange(n).reshape(sizes)
        order = [names.index(a) for a in names if a not in inside] + [names.index(a) for a in inside]
        group_size = int(np.prod([sizes[names.index(a)] for a in inside]))
        return ids.transpose(order).reshape(-1, group_size).tolist()
    raise ValueError(f"unknown replica_groups format: {text}")


def collectives(hlo_text):
    """编译后 HLO 里的每条集合通信：(种类, 结果形状, 显式的设备组)。"""
    found = []
    for line in hlo_text.splitlines():
        m = re.search(r"= (.+?) (" + "|".join(COLLECTIVES) + r")\(", line)
        if not m:
            continue
        groups = re.search(r"replica_groups=(\{\{[^=]*?\}\}|\[[\d,]+\]<=\[[\d,]+\](?:T\([\d,]+\))?|mesh\[[^\]]*\]\s*\{[^}]*\})", line)
        found.append((m[2], m[1], expand_groups(groups[1]) if groups else None))
    return found
# --8<-- [end:parse]


def shape_bytes(shape_text):
    """f32[16,64]{1,0} 或元组 (f32[2,1,8], ...) 的总字节数。"""
    width = {"f32": 4, "f16": 2, "bf16": 2, "s32": 4, "f64": 8}
    total = 0
    for dtype, dims in re.findall(r"(\w+)\[([\d,]*)\]", shape_text):
        total += width[dtype] * int(np.prod([int(d) for d in dims.split(",") if d] or [1]))
    return total


def ring_bytes(kind, shape_text, group_size):
    """环算法下每个设备发送的字节数（见 runtime/collectives.md）：S 是结果的字节数。"""
    s, p = shape_bytes(shape_text), group_size
    if kind == "all-reduce":
        return 2 * (p - 1) * s // p
    if kind == "reduce-scatter":
        return (p - 1) * s  # 结果是 S，输入是 p·S
    return (p - 1) * s // p  # all-gather（结果 S）、all-to-all


def local_shapes(hlo_text):
    """入口计算的参数与根的每设备形状。"""
    entry = hlo_text[hlo_text.index("ENTRY") :]
    params = re.findall(r"= (\w+\[[\d,]*\])\{[^}]*\} parameter\((\d)\)", entry)
    root = re.search(r"ROOT \S+ = (\w+\[[\d,]*\])", entry)
    return [s for s, _ in sorted(params, key=lambda p: p[1])], root[1] if root else None


def run_cases():
    """逐个切法：编译、运行、与 NumPy 比较，汇总集合通信。"""
    x, w = operands()
    ref = x @ w
    rows = []
    for name, (mesh, xs, ws, outs) in CASES.items():
        fn, hlo = compile_case(name, x, w)
        out = fn(x, w)
        err = float(np.abs(np.asarray(out) - ref).max())
        params, root = local_shapes(hlo)
        rows.append({"case": name, "mesh": mesh, "x": str(xs), "w": str(ws), "out": str(outs), "local_x": params[0],
                     "local_w": params[1], "local_out": root, "collectives": collectives(hlo),
                     "dynamic_slice": "dynamic-slice" in hlo, "max_abs_err": err, "hlo": hlo})
    return rows


def summary(rows):
    lines = [f"# X[{M},{K}] @ W[{K},{N}] float32 on {N_DEVICES} CPU devices; mesh 1d = (x=8), 2d = (data=2, model=4)",
             "# per-device shapes are those of the compiled (partitioned) program; bytes = ring algorithm, sent per device"]
    for r in rows:
        lines.append("")
        lines.append(f"{r['case']}: mesh {r['mesh']}, X {r['x']}, W {r['w']} -> out {r['out']}")
        lines.append(f"  per device: X {r['local_x']}, W {r['local_w']} -> out {r['local_out']}")
        if not r["collectives"]:
            lines.append("  collectives: none")
        for kind, shape, groups in r["collectives"]:
            size = len(groups[0]) if groups else N_DEVICES
            lines.append(f"  {kind} {shape}, groups {groups}, {ring_bytes(kind, shape, size)} bytes")
        if r["dynamic_slice"]:
            lines.append("  then dynamic-slice: each device keeps its rows of the all-reduced result")
    return "\n".join(lines)


# --8<-- [start:shard-map]
def explicit_versions(x, w):
    """同一个行并行矩阵乘，用 shard_map 手写每个设备的程序：psum 对应 all-reduce，psum_scatter 对应 reduce-scatter。"""
    from jax import shard_map

    mesh = meshes()["1d"]

    def local_psum(xb, wb):  # xb: [M, K/8], wb: [K/8, N]，每个设备算部分和
        return jax.lax.psum(xb @ wb, "x")

    def local_scatter(xb, wb):
        return jax.lax.psum_scatter(xb @ wb, "x", scatter_dimension=0, tiled=True)

    psum = jax.jit(shard_map(local_psum, mesh=mesh, in_specs=(P(None, "x"), P("x", None)), out_specs=P()))
    scatter = jax.jit(shard_map(local_scatter, mesh=mesh, in_specs=(P(None, "x"), P("x", None)), out_specs=P("x", None)))
    return {name: (f, optimized_hlo(f.lower(x, w).compile())) for name, f in [("psum", psum), ("psum_scatter", scatter)]}
# --8<-- [end:shard-map]


# --8<-- [start:explicit-mode]
def explicit_mode_error(x, w):
    """jax 0.10 的 make_mesh 默认是显式（Explicit）轴：分片是类型的一部分，追踪时就要决定。
    两边的收缩维都切在 x 上，输出该怎样分片有歧义，JAX 直接报错，而不是交给编译器去猜。"""
    mesh = jax.make_mesh((8,), ("x",))
    xs = jax.device_put(x, NamedSharding(mesh, P(None, "x")))
    ws = jax.device_put(w, NamedSharding(mesh, P("x", None)))
    try:
        jax.jit(matmul)(xs, ws)
    except Exception as e:  # noqa: BLE001
        return type(e).__name__, str(e).splitlines()[0]
    return None
# --8<-- [end:explicit-mode]


# --8<-- [start:propagation]
def megatron_mlp(x, w1, w2):
    """relu(x @ w1) @ w2：只注解输入，中间的 h 与输出都不注解，由 Shardy 传播。"""
    h = jax.nn.relu(x @ w1)
    return h @ w2


def megatron_mlp_forced(x, w1, w2):
    """同一个 MLP，但强行把 h 按行（批）切：与传播得到的列切冲突，编译器只好插入重分布。"""
    h = jax.nn.relu(x @ w1)
    h = jax.lax.with_sharding_constraint(h, NamedSharding(meshes()["1d"], P("x", None)))
    return h @ w2


def propagate(fn, seed=0, hidden=64):
    mesh = meshes()["1d"]
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((M, K), dtype=np.float32)
    w1 = rng.standard_normal((K, hidden), dtype=np.float32)
    w2 = rng.standard_normal((hidden, K), dtype=np.float32)
    shardings = [NamedSharding(mesh, s) for s in (P(), P(None, "x"), P("x", None))]
    jitted = jax.jit(fn, in_shardings=shardings)  # 不给 out_shardings
    compiled = jitted.lower(x, w1, w2).compile()
    out = np.asarray(jitted(x, w1, w2))
    ref = np.maximum(x @ w1, 0) @ w2
    return {"hlo": optimized_hlo(compiled), "out_sharding": compiled.output_shardings,
            "max_abs_err": float(np.abs(out - ref).max()), "scale": float(np.abs(ref).max())}
# --8<-- [end:propagation]


def shardy_dump(stage="after_propagation"):
    """Shardy 在 XLA 里运行时写下的 MLIR：01.before_propagation、02.after_propagation 等（只有 megatron_mlp 一个模块）。"""
    files = sorted(DUMP_DIR.glob(f"shardy/*.jit_megatron_mlp/*.{stage}.mlir"))
    if not files:
        raise FileNotFoundError(f"no Shardy dump for {stage}: was megatron_mlp compiled in this process, "
                                "with XLA_FLAGS set by this module?")
    return files[-1].read_text()


def shardings_in(mlir):
    """Shardy IR 里每个运算结果的分片：[(运算, 分片)]。"""
    out = []
    for line in mlir.splitlines():
        m = re.search(r"= (?:stablehlo|sdy)\.(\w+).*sdy\.sharding = #sdy\.sharding_per_value<\[<@mesh, (\[[^\]]*\])>\]>", line)
        if m:
            out.append((m[1], m[2]))
    return out


def entry(hlo_text):
    return hlo_text[hlo_text.index("ENTRY") :].strip()


def write_records():
    import importlib

    sys.path.insert(0, str(HERE))
    # 只有写记录的命令行用到 record_ir（它按需导入本章所有的演示模块）；按名字导入，实验的文件清单就不会带上它
    write = importlib.import_module("record_ir").write

    import jaxlib

    tool = f"jax {jax.__version__}, jaxlib {jaxlib.__version__}, XLA CPU backend, {N_DEVICES} host devices"
    cmd = "python code/compiler/sharding_demo.py records"
    rows = run_cases()
    write("sharding-cases.txt", tool + " (collectives in the partitioned HLO of each sharding)", cmd, summary(rows))
    row = next(r for r in rows if r["case"] == "row-parallel, output sharded")
    write("sharding-row-parallel.txt", tool + " (row-parallel matmul, output sharded over rows: ENTRY)", cmd, entry(row["hlo"]))
    x, w = operands()
    explicit = explicit_versions(x, w)
    write("sharding-shard-map.txt", tool + " (shard_map with psum and psum_scatter: ENTRY)", cmd,
          "# psum\n" + entry(explicit["psum"][1]) + "\n\n# psum_scatter\n" + entry(explicit["psum_scatter"][1]))
    auto = propagate(megatron_mlp)
    forced = propagate(megatron_mlp_forced)
    write("sharding-propagation.txt", tool + " (Shardy after propagation, then the partitioned ENTRY)", cmd,
          "# Shardy 传播之后（02.after_propagation.mlir）\n" + strip_mlir(shardy_dump()) +
          "\n\n# 分割后每个设备的程序（ENTRY）\n" + entry(auto["hlo"]) +
          "\n\n# 强行把 h 按行切之后（ENTRY）\n" + entry(forced["hlo"]))


def strip_mlir(text):
    """去掉模块属性里的噪声，只留函数体。"""
    start = text.index("func.func")
    return text[start : text.rindex("}", 0, text.rindex("}"))].rstrip()


if __name__ == "__main__":
    if (sys.argv[1:] or ["records"])[0] == "records":
        write_records()
