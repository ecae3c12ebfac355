"""MLIR 用起来：用 jaxlib 自带的 MLIR Python 绑定建 IR、验证、解析文本、跑遍管线、用 Python 写重写模式与方言转换，
再把每一级的结果执行出来对照 NumPy。

两条线：
- 张量线：Python 构造 StableHLO + CHLO 的函数 → 自写的内联 + canonicalize/cse/symbol-dce → 自写的窥孔模式
  → chlo-legalize-to-stablehlo → stablehlo-legalize-to-linalg；StableHLO 交给 XLA 编译、交给 StableHLO 参考解释器，
  linalg 交给本文件里几十行的解释器，三者都对照 NumPy。
- Toy 线（仿 MLIR 的 Toy 教程）：解析一段 toy 方言的文本 → 内联 → 形状推断 → 部分转换 → 完全转换，最后执行。

页面 docs/compiler/mlir.md 嵌入这里的片段；实验 notebooks/compiler/mlir-lab.ipynb 与测试 tests/test_compiler_mlir.py
使用它。`python code/compiler/mlir_demo.py` 重写 code/compiler/records/mlir-*.txt。
只用 jax 0.10.2 的 jaxlib 已经带的绑定；下划线开头的模块（_jax_mlir_ext、_mlir.rewrite）是 jaxlib 的内部路径，换版本要复查。
"""

import jax  # 先于 jaxlib.mlir 导入：反过来时 XLA 的 CPU 客户端初始化会往 stderr 打日志
import jax.extend.backend
import numpy as np
from jaxlib.mlir import ir, passmanager
from jaxlib.mlir._mlir_libs import _jax_mlir_ext
from jaxlib.mlir._mlir_libs._mlir import rewrite
from jaxlib.mlir.dialects import chlo, func, stablehlo

SHAPE = (4, 8)


# --8<-- [start:context]
def make_context():
    """一个 MLIR 上下文：注册方言（它们的操作、类型、属性、接口），再注册 StableHLO 的遍。"""
    registry = ir.DialectRegistry()
    _jax_mlir_ext.register_dialects(registry)  # 上游方言：func、arith、math、scf、tensor、memref、vector、llvm……
    ctx = ir.Context()
    ctx.append_dialect_registry(registry)
    ctx.load_all_available_dialects()
    stablehlo.register_dialect(ctx)
    chlo.register_dialect(ctx)
    stablehlo.register_stablehlo_passes()  # 让 PassManager.parse 认得 stablehlo-legalize-to-linalg 等
    return ctx
# --8<-- [end:context]


# --8<-- [start:build]
def build_module(ctx):
    """用 Python 构造 IR：私有函数 @scale_shift(x, b) = x * 2 + b，@main 调它两次，
    再乘 1、取 tanh、按行求和。故意留下冗余（两次相同的调用、乘 1），看后面的遍怎样去掉它们。"""
    with ctx, ir.Location.unknown():
        f32 = ir.F32Type.get()
        mat, vec, row, scalar = (ir.RankedTensorType.get(s, f32) for s in ([4, 8], [8], [4], []))

        def splat(ty, v):
            return stablehlo.constant(ir.DenseElementsAttr.get_splat(ty, ir.FloatAttr.get(f32, v)))

        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            @func.FuncOp.from_py_func(mat, vec, name="scale_shift")
            def scale_shift(x, b):
                # chlo.broadcast_add 带隐式广播：b 沿第 1 维铺开，StableHLO 本身要求显式的 broadcast_in_dim
                dims = ir.DenseI64ArrayAttr.get([1])
                return chlo.broadcast_add(stablehlo.multiply(x, splat(mat, 2.0)), b, broadcast_dimensions=dims)

            scale_shift.func_op.attributes["sym_visibility"] = ir.StringAttr.get("private")

            @func.FuncOp.from_py_func(mat, vec, name="main")
            def main(x, b):
                callee = ir.FlatSymbolRefAttr.get("scale_shift")
                u = func.call([mat], callee, [x, b])
                v = func.call([mat], callee, [x, b])
                w = stablehlo.tanh(stablehlo.multiply(stablehlo.multiply(u, v), splat(mat, 1.0)))
                total = stablehlo.ReduceOp([row], [w], [splat(scalar, 0.0)], ir.DenseI64ArrayAttr.get([1]))
                body = total.body.blocks.append(scalar, scalar)  # 归约的合并函数是一个区域
                with ir.InsertionPoint(body):
                    stablehlo.ReturnOp([stablehlo.add(*body.arguments)])
                return total.result
    assert module.operation.verify()
    return module
# --8<-- [end:build]


def reference(x, b):
    """同一个函数的 NumPy 版本。"""
    u = x * 2 + b
    return np.tanh(u * u * 1.0).sum(axis=1)


def example_inputs(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-0.5, 0.5, SHAPE).astype(np.float32)
    b = rng.uniform(-0.5, 0.5, SHAPE[1:]).astype(np.float32)
    return x, b


# --8<-- [start:pipeline]
def run_pipeline(module, pipeline):
    """在模块的副本上跑一条文本形式的遍管线（与 mlir-opt --pass-pipeline 的写法相同），返回新模块。"""
    with module.context:
        out = ir.Module.parse(str(module))  # 打印再解析：顺便检验打印出的文本能原样读回
        passmanager.PassManager.parse(f"builtin.module({pipeline})").run(out.operation)
    return out
# --8<-- [end:pipeline]


def clone(module):
    with module.context:
        return ir.Module.parse(str(module))


# --8<-- [start:inline]
def inline_calls(module):
    """用 Python 写的内联：一个以 func.call 为根的重写模式，把调用换成被调函数体的副本。
    （这份 jaxlib 没有注册 func 方言的内联接口扩展，`inline` 遍认为调用不可内联、原样保留。）
    只改写克隆出的操作自己的操作数；被调函数里嵌套区域直接引用形参的情形（本页的例子没有）不处理。"""
    module = clone(module)
    symbols = ir.SymbolTable(module.operation)

    def inline_one(call, rewriter):
        callee = symbols[ir.FlatSymbolRefAttr(call.attributes["callee"]).value]
        block = callee.regions[0].blocks[0]
        mapping = dict(zip(block.arguments, call.operands))  # 形参 → 实参
        for op in block.operations:
            if op.name == "func.return":
                rewriter.replace_op(call, [mapping[v] for v in op.operands])
                return False  # 返回假值 = 匹配成功并已改写
            new = op.operation.clone(rewriter.ip).operation
            for old in op.operands:
                if old in mapping:
                    new.replace_uses_of_with(old, mapping[old])
            mapping.update(zip(op.results, new.results))
        return True

    patterns = rewrite.RewritePatternSet(module.context)
    patterns.add("func.call", inline_one)
    rewrite.apply_patterns_and_fold_greedily(module, patterns.freeze())
    return module
# --8<-- [end:inline]


# --8<-- [start:peephole]
def splat_constant(value):
    """value 若由 stablehlo.constant 的“所有元素相同”常量产生，返回那个数，否则 None。"""
    owner = value.owner
    if not isinstance(owner, ir.OpView) or owner.name != "stablehlo.constant":
        return None
    attr = ir.DenseElementsAttr(owner.attributes["value"])
    return ir.FloatAttr(attr.get_splat_value()).value if attr.is_splat else None


def peephole(module):
    """两条窥孔规则：x * 1 → x，x * 2 → x + x（乘法的两个操作数都看，乘法可交换）。"""
    module = clone(module)

    def multiply(op, rewriter):
        for x, c in [(op.operands[0], op.operands[1]), (op.operands[1], op.operands[0])]:
            k = splat_constant(c)
            if k == 1.0:
                rewriter.replace_op(op, [x])
                return False
            if k == 2.0:
                with rewriter.ip, op.location:  # 新操作插在旧操作之前，沿用它的源码位置
                    rewriter.replace_op(op, [stablehlo.add(x, x)])
                return False
        return True  # 不匹配

    patterns = rewrite.RewritePatternSet(module.context)
    patterns.add("stablehlo.multiply", multiply)
    rewrite.apply_patterns_and_fold_greedily(module, patterns.freeze())  # 驱动器顺带删掉没人用的常量
    return module
# --8<-- [end:peephole]


# --8<-- [start:stages]
def tensor_stages():
    """张量线的每一级，名字 → 模块。"""
    ctx = make_context()
    st = {"built": build_module(ctx)}
    st["inlined"] = run_pipeline(inline_calls(st["built"]), "canonicalize,cse,symbol-dce")
    st["peephole"] = peephole(st["inlined"])
    st["stablehlo"] = run_pipeline(st["peephole"], "func.func(chlo-legalize-to-stablehlo),canonicalize,cse")
    st["linalg"] = run_pipeline(st["stablehlo"], "stablehlo-legalize-to-linalg,canonicalize,cse")
    st["vhlo"] = run_pipeline(st["stablehlo"], "stablehlo-legalize-to-vhlo")
    return st
# --8<-- [end:stages]


# --8<-- [start:execute]
def run_xla(module, *args):
    """把 StableHLO 模块的文本交给 XLA 的 CPU 后端编译并执行（jax.jit 最后也走这一步）。"""
    backend = jax.extend.backend.get_backend("cpu")
    exe = backend.compile_and_load(str(module), backend.devices()[:1])
    return [np.asarray(r) for r in exe.execute([jax.device_put(a, backend.devices()[0]) for a in args])]


def run_reference_interpreter(module, *args):
    """StableHLO 规范附带的参考解释器：逐个操作按规范求值，不经过 XLA。"""
    with module.context:
        out = stablehlo.eval_module(module, [ir.DenseElementsAttr.get(np.ascontiguousarray(a)) for a in args])
    return [np.asarray(r) for r in out]
# --8<-- [end:execute]


# --8<-- [start:interpreter]
def _index(amap, point):
    return tuple(point[e.position] if isinstance(e, ir.AffineDimExpr) else ir.AffineConstantExpr(e).value
                 for e in amap.results)


def _scalar_op(op, a):
    """linalg 区域里的标量操作。numpy 的 float32 标量按 f32 运算。"""
    name = op.name
    table = {"arith.addf": lambda: a[0] + a[1], "arith.subf": lambda: a[0] - a[1], "arith.mulf": lambda: a[0] * a[1],
             "arith.divf": lambda: a[0] / a[1], "arith.negf": lambda: -a[0], "math.tanh": lambda: np.tanh(a[0]),
             "math.exp": lambda: np.exp(a[0]), "arith.maximumf": lambda: np.maximum(a[0], a[1])}
    if name not in table:
        raise NotImplementedError(name)
    return table[name]()


def _generic(op, env):
    """linalg.generic 的语义：按字典序走遍迭代空间，每个点按索引映射取输入、跑区域、把 yield 写到输出。"""
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    n_in = len(op.operands) - len(op.results)  # 张量语义下，outs 与结果一一对应
    arrays = [env[v] for v in op.operands]
    outs = [np.array(a, copy=True) for a in arrays[n_in:]]
    sizes = [None] * maps[0].n_dims
    for amap, arr in zip(maps, arrays):
        for e, n in zip(amap.results, np.shape(arr)):
            if isinstance(e, ir.AffineDimExpr):
                sizes[e.position] = n
    block = op.regions[0].blocks[0]
    for point in np.ndindex(*sizes):
        local = dict(env)
        vals = [a[_index(m, point)] for m, a in zip(maps[:n_in], arrays[:n_in])]
        vals += [o[_index(m, point)] for m, o in zip(maps[n_in:], outs)]
        local.update(zip(block.arguments, vals))
        for inner in block.operations:
            if inner.name == "linalg.yield":
                for m, o, v in zip(maps[n_in:], outs, inner.operands):
                    o[_index(m, point)] = local[v]
            else:
                local[inner.result] = _scalar_op(inner, [local[v] for v in inner.operands])
    return outs


def interpret_linalg(module, *args, entry="main"):
    """几十行的解释器：只认 func、arith.constant、tensor.empty、linalg.fill/generic 与上面的标量操作。"""
    fn = ir.SymbolTable(module.operation)[entry]
    block = fn.regions[0].blocks[0]
    env = dict(zip(block.arguments, args))
    for op in block.operations:
        if op.name == "func.return":
            return [env[v] for v in op.operands]
        if op.name == "arith.constant":
            attr = op.attributes["value"]
            env[op.result] = (np.float32(ir.FloatAttr(attr).value) if isinstance(attr, ir.FloatAttr)
                              else np.asarray(ir.DenseElementsAttr(attr)))
        elif op.name == "tensor.empty":
            ty = ir.RankedTensorType(op.result.type)
            env[op.result] = np.full(ty.shape, np.nan, np.float32)  # 内容未定义：用 NaN，读到就会露馅
        elif op.name == "linalg.fill":
            env[op.result] = np.full_like(env[op.operands[1]], env[op.operands[0]])
        elif op.name == "linalg.generic":
            env.update(zip(op.results, _generic(op, env)))
        else:
            raise NotImplementedError(op.name)
    raise ValueError("no func.return")
# --8<-- [end:interpreter]


# --8<-- [start:vhlo]
def portable_roundtrip(module, version="1.0.0"):
    """StableHLO 的兼容性：把模块降成按版本命名的 VHLO（vhlo.add_v1、vhlo.tanh_v2……），按目标版本存成
    MLIR 字节码（可移植产物），再读回 StableHLO。返回（字节数，读回的模块）。"""
    blob = stablehlo.serialize_portable_artifact_str(str(module), version)
    with module.context:
        return len(blob), ir.Module.parse(stablehlo.deserialize_portable_artifact_str(blob))


def portable_error(module, version="1.0.0"):
    """含 CHLO 的模块不能序列化：CHLO 不在兼容性契约里，StableHLO → VHLO 的类型转换把 tensor 换成
    !vhlo.tensor_v1，而没被转换的 chlo 操作还要旧类型，留下一个消不掉的物化（materialization）。"""
    messages = []

    def collect(diagnostic):
        messages.append(str(diagnostic.message))
        return True  # 已处理：不再打印到 stderr

    module = clone(module)
    handler = module.context.attach_diagnostic_handler(collect)
    try:
        stablehlo.serialize_portable_artifact(module, version)
    except ValueError:
        return messages[0]
    finally:
        handler.detach()
    raise AssertionError("serialization should have failed")


# --8<-- [end:vhlo]


def op_names(module):
    """模块里出现的全部操作名（不含 builtin.module）。"""
    names = set()

    def visit(op):
        names.add(op.name)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return names - {"builtin.module"}


def dialects(module):
    return {n.split(".")[0] for n in op_names(module)}


# --8<-- [start:toy]
TOY_SOURCE = """
func.func private @multiply_transpose(%a: tensor<*xf64>, %b: tensor<*xf64>) -> tensor<*xf64> {
  %0 = "toy.transpose"(%a) : (tensor<*xf64>) -> tensor<*xf64>
  %1 = "toy.transpose"(%b) : (tensor<*xf64>) -> tensor<*xf64>
  %2 = "toy.mul"(%0, %1) : (tensor<*xf64>, tensor<*xf64>) -> tensor<*xf64>
  return %2 : tensor<*xf64>
}
func.func @main(%a: tensor<2x3xf64>, %b: tensor<2x3xf64>) -> tensor<3x2xf64> {
  %0 = "toy.cast"(%a) : (tensor<2x3xf64>) -> tensor<*xf64>
  %1 = "toy.cast"(%b) : (tensor<2x3xf64>) -> tensor<*xf64>
  %2 = call @multiply_transpose(%0, %1) : (tensor<*xf64>, tensor<*xf64>) -> tensor<*xf64>
  %3 = "toy.constant"() {value = dense<[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]> : tensor<3x2xf64>} : () -> tensor<3x2xf64>
  %4 = "toy.add"(%2, %3) : (tensor<*xf64>, tensor<3x2xf64>) -> tensor<*xf64>
  "toy.print"(%4) : (tensor<*xf64>) -> ()
  %5 = "toy.cast"(%4) : (tensor<*xf64>) -> tensor<3x2xf64>
  return %5 : tensor<3x2xf64>
}
"""


def toy_reference(a, b):
    return a.T * b.T + np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])


def parse_toy(ctx):
    """toy 方言没有注册：允许未注册的方言后，它的操作以通用形式 "toy.mul"(...) 解析与打印，验证器只查
    SSA 与类型的基本规则。Toy 教程用 C++ 的 ODS 定义这个方言，这里省掉了那一步。"""
    ctx.allow_unregistered_dialects = True
    with ctx:
        return ir.Module.parse(TOY_SOURCE)
# --8<-- [end:toy]


# --8<-- [start:shapes]
def infer_shapes(module):
    """形状推断（Toy 教程第 4 章）：内联之后，从已知形状的参数出发逐个操作算出结果形状，再删掉变成恒等的 toy.cast。"""
    module = clone(module)
    casts = []

    def visit(op):
        if not op.name.startswith("toy."):
            return ir.WalkResult.ADVANCE
        ins = [v.type for v in op.operands]
        if op.name == "toy.transpose" and isinstance(ins[0], ir.RankedTensorType):
            op.results[0].set_type(ir.RankedTensorType.get(list(reversed(ins[0].shape)), ins[0].element_type))
        elif op.name in ("toy.mul", "toy.add") and all(isinstance(t, ir.RankedTensorType) for t in ins):
            assert ins[0] == ins[1], f"{op.name}: operand shapes differ"
            op.results[0].set_type(ins[0])
        elif op.name == "toy.cast":
            if isinstance(ins[0], ir.RankedTensorType):
                op.results[0].set_type(ins[0])
            casts.append(op)
        return ir.WalkResult.ADVANCE

    with module.context, ir.Location.unknown():
        module.operation.walk(visit)  # 同一个块里按顺序访问：定义先于使用
    for op in casts:
        if op.operands[0].type == op.results[0].type:
            op.results[0].replace_all_uses_with(op.operands[0])
            op.erase()
    assert module.operation.verify()
    return module
# --8<-- [end:shapes]


# --8<-- [start:conversion]
def _keep(t):
    return t  # 类型转换器：这一级的类型（内置 tensor）原样合法


_TYPE_FUNCTIONS = [_keep]  # 绑定不替 Python 持有转换函数的引用，放在模块级免得被回收


def toy_patterns(ctx, lower_print=False):
    """每个 toy 操作一个转换模式：fn(op, adaptor, type_converter, rewriter)，adaptor 给出已转换的操作数。"""
    converter = rewrite.TypeConverter()
    converter.add_conversion(_TYPE_FUNCTIONS[0])

    def lower(build):
        def pattern(op, adaptor, type_converter, rewriter):
            with rewriter.ip, op.location:
                rewriter.replace_op(op, [build(op, list(adaptor.operands))])
        return pattern

    rules = {
        "toy.transpose": lambda op, v: stablehlo.transpose(v[0], ir.DenseI64ArrayAttr.get([1, 0])),
        "toy.mul": lambda op, v: stablehlo.multiply(*v),
        "toy.add": lambda op, v: stablehlo.add(*v),
        "toy.constant": lambda op, v: stablehlo.constant(ir.DenseElementsAttr(op.attributes["value"])),
    }
    patterns = rewrite.RewritePatternSet(ctx)
    for name, build in rules.items():
        patterns.add_conversion(name, lower(build), converter)
    if lower_print:  # Toy 第 6 章把 print 降成 printf；这里的“运行时”直接打印返回值，于是删掉它
        patterns.add_conversion("toy.print", lambda op, adaptor, tc, rewriter: rewriter.erase_op(op), converter)
    return patterns.freeze(), converter


def lower_toy(module, full, lower_print=False):
    """方言转换：目标里 stablehlo、func、builtin 合法，四个 toy 计算操作非法。
    部分转换只要求非法的都被转换，未声明的 toy.print 可以留下；完全转换要求每个操作都合法。"""
    module = clone(module)
    ctx = module.context
    target = rewrite.ConversionTarget(ctx)
    target.add_legal_dialect("stablehlo", "func", "builtin")
    target.add_illegal_op("toy.transpose", "toy.mul", "toy.add", "toy.constant")
    patterns, converter = toy_patterns(ctx, lower_print)
    with ctx:
        (rewrite.apply_full_conversion if full else rewrite.apply_partial_conversion)(module.operation, target, patterns)
    return module
# --8<-- [end:conversion]


def full_conversion_error(module):
    """没有 toy.print 的模式时完全转换的诊断（只取第一行：失败后的 IR 不再有意义）。"""
    try:
        lower_toy(module, full=True)
    except ir.MLIRError as e:
        return str(e).splitlines()[1].strip()
    raise AssertionError("full conversion should have failed")


def toy_stages():
    ctx = make_context()
    st = {"toy": parse_toy(ctx)}
    st["toy-inlined"] = run_pipeline(inline_calls(st["toy"]), "symbol-dce")
    st["toy-shapes"] = infer_shapes(st["toy-inlined"])
    st["toy-partial"] = lower_toy(st["toy-shapes"], full=False)
    st["toy-full"] = lower_toy(st["toy-shapes"], full=True, lower_print=True)
    return st


def verifier_error():
    """验证器的作用：类型不一致的 IR 在解析时就被拒绝。返回错误诊断的第一行。"""
    bad = """func.func @f(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %0 = stablehlo.add %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}"""
    with make_context():
        try:
            ir.Module.parse(bad)
        except ir.MLIRError as e:
            return bad, str(e).splitlines()[1].strip()
    raise AssertionError("the verifier should have rejected this")


RECORDS = {  # 记录文件名 → (级, 说明)
    "mlir-built.txt": ("built", "built with the Python bindings, verified"),
    "mlir-inlined.txt": ("inlined", "after a Python inlining pattern, then canonicalize,cse,symbol-dce"),
    "mlir-peephole.txt": ("peephole", "after Python patterns x*1 -> x, x*2 -> x+x (greedy driver)"),
    "mlir-stablehlo.txt": ("stablehlo", "after func.func(chlo-legalize-to-stablehlo),canonicalize,cse"),
    "mlir-linalg.txt": ("linalg", "after stablehlo-legalize-to-linalg,canonicalize,cse"),
    "mlir-vhlo.txt": ("vhlo", "the stablehlo stage after stablehlo-legalize-to-vhlo"),
    "mlir-toy.txt": ("toy", "toy ops parsed as an unregistered dialect"),
    "mlir-toy-inlined.txt": ("toy-inlined", "after the Python inlining pattern, then symbol-dce"),
    "mlir-toy-shapes.txt": ("toy-shapes", "after shape inference written in Python"),
    "mlir-toy-partial.txt": ("toy-partial", "after apply_partial_conversion to stablehlo"),
    "mlir-toy-full.txt": ("toy-full", "after apply_full_conversion, with a pattern for toy.print"),
}


def record_bodies():
    """每个记录的正文（不含三行出处头）。"""
    st = {**tensor_stages(), **toy_stages()}
    bodies = {name: str(st[stage]) for name, (stage, _) in RECORDS.items()}
    bodies["mlir-generic.txt"] = st["built"].operation.get_asm(print_generic_op_form=True)
    toy = st["toy-shapes"]
    bad, err = verifier_error()
    bodies["mlir-errors.txt"] = "\n".join([
        "// 1. 验证器：类型不一致的 IR 在解析时被拒绝", bad, "// 诊断：", "// " + err, "",
        "// 2. 完全转换：toy.print 既不合法、也没有转换模式", "// 诊断：", "// " + full_conversion_error(toy), "",
        "// 3. 含 chlo.broadcast_add 的模块序列化为可移植产物（StableHLO → VHLO 的类型转换）", "// 诊断：",
        "// " + portable_error(st["built"])])
    return bodies


def tool():
    import jaxlib

    return f"jaxlib {jaxlib.__version__} (MLIR Python bindings in jaxlib.mlir)"


def write_records():
    """写出记录，开头三行与 record_ir.write 相同（工具、机器、命令）。不导入 record_ir：它的其他目标会把
    torch、tvm、islpy、triton 带进实验的包清单。"""
    import datetime
    import platform
    from pathlib import Path

    records = Path(__file__).resolve().parent / "records"
    notes = {**{name: note for name, (_, note) in RECORDS.items()},
             "mlir-generic.txt": "the built module in the generic op form",
             "mlir-errors.txt": "diagnostics: verifier, failed full conversion, failed portable serialization"}
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    for name, text in record_bodies().items():
        head = [f"# tool: {tool()}; {notes[name]}",
                f"# machine: {platform.machine()} {platform.system()}, Python {platform.python_version()}",
                f"# produced: {today} by `python code/compiler/mlir_demo.py`"]
        (records / name).write_text("\n".join(head + [text.rstrip(), ""]))
        print("wrote", f"code/compiler/records/{name}")


if __name__ == "__main__":
    write_records()
