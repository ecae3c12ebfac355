"""JAX 作为 XLA 的前端：同一个函数的 StableHLO、优化前的 HLO 与 XLA（CPU）优化后的 HLO，以及其中的融合。

页面 docs/compiler/xla.md 嵌入这里的片段；实验 notebooks/compiler/xla-lab.ipynb 与测试 tests/test_compiler_xla.py 使用它。
"""

import re

import jax
import jax.numpy as jnp


# --8<-- [start:function]
def gelu_softmax(x, s, t):
    """与 torch.compile 页面相同的例子：逐元素链 + 行 softmax。"""
    return jax.nn.softmax(jax.nn.gelu(x * s + t), axis=-1)
# --8<-- [end:function]


# --8<-- [start:stages]
def stages(fn, *args):
    """返回 jit 的三个阶段：StableHLO（JAX 交给 XLA 的）、优化前的 HLO、XLA 优化并调度后的 HLO。"""
    from jaxlib import _hlo

    lowered = jax.jit(fn).lower(*args)
    compiled = lowered.compile()
    options = _hlo.HloPrintOptions.short_parsable()
    options.print_metadata = False  # 去掉源码位置等元数据，其余是 XLA 打印的原文
    optimized = compiled.runtime_executable().hlo_modules()[0].to_string(options)
    return {
        "stablehlo": lowered.as_text(),
        "hlo": lowered.as_text(dialect="hlo"),
        "optimized": optimized,
        "compiled": compiled,
    }
# --8<-- [end:stages]


def fusions(optimized_hlo):
    """从优化后的 HLO 里列出入口计算中的融合指令：(名字, kind, 被调用的计算)。"""
    entry = optimized_hlo[optimized_hlo.index("ENTRY") :]
    return re.findall(r"(\S+) = \S+ fusion\([^)]*\), kind=(\w+), calls=([\w.]+)", entry)


def count_stablehlo_ops(text):
    return len(re.findall(r"= (?:stablehlo|chlo)\.", text))


def example_inputs(rows=64, cols=128, seed=0):
    k1, k2, k3 = jax.random.split(jax.random.key(seed), 3)
    return jax.random.normal(k1, (rows, cols)), jax.random.normal(k2, (cols,)), jax.random.normal(k3, (cols,))


__all__ = ["gelu_softmax", "stages", "fusions", "count_stablehlo_ops", "example_inputs", "jnp"]
