"""torch.compile inside a serving engine, in miniature (docs/framework/engine-compile.md).

vLLM compiles the model once with the token dimension symbolic, hands Dynamo's FX graph to its own
backend (`VllmBackend` in vllm/compilation/backends.py), splits it at the attention op (`split_graph`,
`splitting_ops`), runs its post-grad passes (vllm/compilation/pass_manager.py) and stores the result
under a directory named by a hash of config, code and compiler. This module does the same steps on CPU
with real torch.compile and a custom backend that never calls Inductor (no code generation), so it is quick:

1. attention is a registered custom op with a fake (meta) implementation: Dynamo sees one opaque node;
2. `mark_dynamic` on the token dimension gives one graph for every batch size (the backend is called
   once); without it, automatic dynamic shapes compile twice (static first, symbolic on the first change);
3. the backend cuts the graph at the attention nodes with `torch.fx.passes.split_module`: 2L + 1 pieces;
4. a toy fusion pass rewrites x * sigmoid(x) into one silu call;
5. `cache_dir` mirrors how vLLM names its compile cache directory.
tests/test_framework_compile.py asserts each step.
"""
from __future__ import annotations

import hashlib
import math
import operator
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import fx, nn
from torch.fx.passes.split_module import split_module


# --8<-- [start:attn_op]
@torch.library.custom_op("handbook::attention", mutates_args=())
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention over the flattened token dimension, [T, H, d] -> [T, H, d].
    Stands in for vLLM's unified attention: Dynamo does not trace inside it."""
    out = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                                         is_causal=True)
    return out.transpose(0, 1).contiguous()


@attention.register_fake
def _fake_attention(q, k, v):
    # the only thing the compiler needs to know: the output has the query's shape
    return q.new_empty(q.shape)
# --8<-- [end:attn_op]


# --8<-- [start:model]
class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.RMSNorm(d), nn.RMSNorm(d)
        self.qkv, self.o = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        self.up, self.down = nn.Linear(d, 4 * d, bias=False), nn.Linear(4 * d, d, bias=False)

    def forward(self, x):                          # x: [T, d], T = tokens of the whole batch
        t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(t, 3, self.heads, d // self.heads).unbind(1)
        x = x + self.o(torch.ops.handbook.attention(q, k, v).reshape(t, d))
        h = self.up(self.norm2(x))
        return x + self.down(h * torch.sigmoid(h))  # SiLU written out: the fusion pass's target


class TinyDecoder(nn.Module):
    def __init__(self, layers: int = 3, d: int = 32, heads: int = 4):
        super().__init__()
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.norm = nn.RMSNorm(d)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.norm(x)
# --8<-- [end:model]


def is_attention(node: fx.Node) -> bool:
    return node.op == "call_function" and node.target in (torch.ops.handbook.attention,
                                                          torch.ops.handbook.attention.default)


# --8<-- [start:backend]
@dataclass
class PiecewiseBackend:
    """A torch.compile backend in the shape of vLLM's VllmBackend: record the graph, run the passes,
    split at attention, return the stitched module (pieces run eagerly here; vLLM compiles each
    non-attention piece with Inductor and wraps it in a CUDA graph per capture size)."""
    passes: list = field(default_factory=list)
    calls: int = 0                                  # how many times Dynamo handed us a graph
    graphs: list = field(default_factory=list)      # the graphs as Dynamo gave them
    split: fx.GraphModule | None = None

    def __call__(self, gm: fx.GraphModule, example_inputs):
        self.calls += 1
        self.graphs.append(gm)
        for p in self.passes:
            p(gm)
        self.split = split_at_attention(gm)
        return self.split


def split_at_attention(gm: fx.GraphModule) -> fx.GraphModule:
    """vLLM's split_graph: every attention node gets a piece of its own, the ops between two
    attentions share one piece. keep_original_order keeps mutations in program order."""
    piece, of = 0, {}
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output"):
            continue
        if is_attention(node):
            of[node] = piece + 1
            piece += 2
        else:
            of[node] = piece
    return split_module(gm, None, lambda n: of[n], keep_original_order=True)


def pieces(split: fx.GraphModule) -> list[tuple[str, bool]]:
    """(name, is_attention_piece) in execution order."""
    subs = sorted((int(n.removeprefix("submod_")), n) for n, _ in split.named_children())
    return [(n, any(is_attention(x) for x in getattr(split, n).graph.nodes)) for _, n in subs]
# --8<-- [end:backend]


def symbolic_inputs(gm: fx.GraphModule) -> list[str]:
    """The placeholders whose value is a SymInt or a tensor with a symbolic size."""
    out = []
    for node in gm.graph.nodes:
        v = node.meta.get("example_value")
        if node.op != "placeholder":
            continue
        if isinstance(v, torch.SymInt) or (isinstance(v, torch.Tensor)
                                            and any(isinstance(s, torch.SymInt) for s in v.shape)):
            out.append(node.name)
    return out


# --8<-- [start:dynamic]
def compile_and_run(model, sizes, *, mark: bool, dynamic=None, d: int = 32, passes=()):
    """Compile `model` with a counting backend (running `passes` on the graph), call it with `sizes`
    tokens, return the backend and the outputs. mark=True marks dim 0 of the first input dynamic, as vLLM's @support_torch_compile
    does for input_ids / positions before the first (and only) compilation."""
    torch._dynamo.reset()
    backend = PiecewiseBackend(passes=list(passes))
    compiled = torch.compile(model, backend=backend, dynamic=dynamic)
    outs = []
    for i, t in enumerate(sizes):
        x = torch.randn(t, d)
        if mark and i == 0:
            torch._dynamo.mark_dynamic(x, 0)
        outs.append((x, compiled(x)))
    return backend, outs
# --8<-- [end:dynamic]


# --8<-- [start:fusion]
def count_silu_pattern(gm: fx.GraphModule) -> int:
    """Number of mul(h, sigmoid(h)) nodes in a Dynamo graph (either operand order)."""
    return sum(1 for n in gm.graph.nodes if _silu_input(n) is not None)


def _silu_input(n: fx.Node):
    if n.op != "call_function" or n.target not in (operator.mul, torch.mul):
        return None
    a, b = n.args[:2]
    for x, s in ((a, b), (b, a)):
        if (isinstance(s, fx.Node) and s.op == "call_function" and s.target in (torch.sigmoid, torch.Tensor.sigmoid)
                and s.args[0] is x):
            return x
    return None


def fuse_silu(gm: fx.GraphModule) -> int:
    """Replace x * sigmoid(x) with one F.silu(x): two elementwise kernels (and one [T, 4d] temporary)
    become one. vLLM's passes do the same with Inductor's pattern matcher on bigger patterns:
    rms_norm + fp8 quant -> one fused kernel, all-reduce + rms_norm -> one FlashInfer kernel."""
    fused = 0
    for n in list(gm.graph.nodes):
        x = _silu_input(n)
        if x is None:
            continue
        with gm.graph.inserting_after(n):
            new = gm.graph.call_function(F.silu, (x,))
        n.replace_all_uses_with(new)
        gm.graph.erase_node(n)
        fused += 1
    gm.graph.eliminate_dead_code()                 # the orphaned sigmoid nodes
    gm.recompile()
    return fused
# --8<-- [end:fusion]


# --8<-- [start:cache]
def hash10(obj) -> str:
    # SHA-256 as in current vLLM (older releases used MD5); 10 hex characters name the directory
    return hashlib.sha256(str(obj).encode()).hexdigest()[:10]


def cache_dir(root: str, env: dict, config: dict, traced_sources: dict[str, str],
              compiler: dict, rank: int = 0, dp_rank: int = 0, prefix: str = "backbone") -> str:
    """How VllmBackend.__call__ names the directory (vllm/compilation/backends.py, caching.py):
    factors = [hash(env vars that change the graph), VllmConfig.compute_hash(),
               hash(path + content of every file Dynamo traced), compiler hash (system + torch)],
    dir = VLLM_CACHE_ROOT/torch_compile_cache/sha256(str(factors))[:10]/rank_{rank}_{dp_rank}/{prefix}."""
    code = hash10([(p, traced_sources[p]) for p in sorted(traced_sources)])
    factors = [hash10(sorted(env.items())), hash10(sorted(config.items())), code,
               hash10(sorted(compiler.items()))]
    return f"{root}/torch_compile_cache/{hash10(factors)}/rank_{rank}_{dp_rank}/{prefix}"
# --8<-- [end:cache]


def reference_attention(q, k, v):
    """Causal attention written out, to check the custom op."""
    t, _, d = q.shape
    s = torch.einsum("thd,shd->hts", q, k) / math.sqrt(d)
    s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    return torch.einsum("hts,shd->thd", s.softmax(-1), v)
