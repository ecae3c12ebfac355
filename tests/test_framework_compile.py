"""code/framework/compile_demo.py (docs/framework/engine-compile.md): real torch.compile with a custom
backend (no Inductor): one compilation for every batch size when the token dimension is marked dynamic,
automatic dynamic shapes otherwise; the graph split at the attention custom op into 2L + 1 pieces that
together equal eager; a fusion pass that removes every x * sigmoid(x); the compile-cache directory."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "code" / "framework"))
import compile_demo as cd  # noqa: E402

L, D = 3, 32


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    with torch.no_grad():
        yield cd.TinyDecoder(layers=L, d=D).eval()
    torch._dynamo.reset()


def test_custom_op_is_causal_attention():
    torch.manual_seed(1)
    q, k, v = (torch.randn(7, 4, 8) for _ in range(3))
    torch.testing.assert_close(torch.ops.handbook.attention(q, k, v), cd.reference_attention(q, k, v))
    fake = cd._fake_attention(q, k, v)                             # what the compiler sees: shape only
    assert fake.shape == q.shape and fake.dtype == q.dtype


FUSION_COUNTS: list[int] = []


def fuse_and_count(gm):
    FUSION_COUNTS.append(cd.count_silu_pattern(gm))                # before
    FUSION_COUNTS.append(cd.fuse_silu(gm))                         # fused
    FUSION_COUNTS.append(cd.count_silu_pattern(gm))                # after
    FUSION_COUNTS.append(sum(n.target is F.silu for n in gm.graph.nodes))
    FUSION_COUNTS.append(sum(n.target is torch.sigmoid for n in gm.graph.nodes))


@pytest.fixture(scope="module")
def marked(model):
    """One compilation shared by the dynamic-shape, split and fusion tests (compiling is the slow part)."""
    with torch.no_grad():
        return cd.compile_and_run(model, [16, 3, 5, 11], mark=True, d=D, passes=[fuse_and_count])


def same_as_eager(model, outs):
    # silu(h) and h * sigmoid(h) may differ in the last bit, so not torch.equal
    with torch.no_grad():
        for x, y in outs:
            torch.testing.assert_close(y, model(x), rtol=1e-6, atol=1e-6)


def test_marked_dynamic_compiles_once(model, marked):
    backend, outs = marked
    with torch.no_grad():
        assert backend.calls == 1                                  # one graph for every batch size
        assert len(cd.symbolic_inputs(backend.graphs[0])) == 2      # the size symbol s and x: [s, D]
        same_as_eager(model, outs)                                 # four batch sizes, one graph
        # 0/1 specialization: a symbolic size is assumed >= 2, so one token is a new (static) graph;
        # vLLM never lets a request reach Dynamo's guards (all sizes are compiled/captured up front)
        model_compiled = torch.compile(model, backend=backend)
        model_compiled(torch.randn(1, D))
        assert backend.calls == 2 and cd.symbolic_inputs(backend.graphs[1]) == []


def test_automatic_dynamic_recompiles_once(model):
    with torch.no_grad():
        backend, _ = cd.compile_and_run(model, [16, 3, 5, 11], mark=False, d=D)
    assert backend.calls == 2                                      # static 16, then symbolic on 3
    assert cd.symbolic_inputs(backend.graphs[0]) == []
    assert len(cd.symbolic_inputs(backend.graphs[1])) == 2


def test_split_at_attention(model, marked):
    backend, outs = marked
    ps = cd.pieces(backend.split)
    assert len(ps) == 2 * L + 1                                    # L attentions + L + 1 pieces between
    assert [att for _, att in ps] == [False, True] * L + [False]
    # each attention piece holds only the custom op; the middle pieces are the same code
    for name, att in ps:
        ops = [n for n in getattr(backend.split, name).graph.nodes if n.op == "call_function"]
        if att:
            assert len(ops) == 1 and cd.is_attention(ops[0])
    def shape_of(name):
        return [str(n.target) for n in getattr(backend.split, name).graph.nodes if n.op == "call_function"]
    middle = [shape_of(n) for n, att in ps[2:-2] if not att]
    assert len(middle) == L - 1 and all(m == middle[0] for m in middle)
    assert shape_of(ps[0][0]) != middle[0] != shape_of(ps[-1][0])  # 3 distinct pieces, as in vLLM's log
    same_as_eager(model, outs)                                     # the compiled callable IS the split module


def test_fusion_pass(model, marked):
    backend, outs = marked
    assert FUSION_COUNTS[:5] == [L, L, 0, L, 0]                    # before, fused, after, silu, sigmoid
    assert cd.count_silu_pattern(backend.graphs[0]) == 0            # the graph that was split and run
    same_as_eager(model, outs)


def test_cache_dir_changes_with_each_factor():
    base = dict(root="~/.cache/vllm", env={"VLLM_PP_LAYER_PARTITION": None},
                config={"model": "tiny", "dtype": "bfloat16", "max_num_batched_tokens": 8192},
                traced_sources={"models/llama.py": "def forward(...): ..."},
                compiler={"torch": torch.__version__, "system": "cuda-12.8"})
    d0 = cd.cache_dir(**base)
    assert d0 == cd.cache_dir(**base)                              # same factors, same directory: warm start
    assert d0.startswith("~/.cache/vllm/torch_compile_cache/") and d0.endswith("/rank_0_0/backbone")
    changed = [
        {**base, "config": {**base["config"], "dtype": "float16"}},
        {**base, "traced_sources": {"models/llama.py": "def forward(...): ...  # edited"}},
        {**base, "compiler": {**base["compiler"], "torch": "2.99"}},
        {**base, "env": {"VLLM_PP_LAYER_PARTITION": "4,4"}},
    ]
    dirs = {cd.cache_dir(**c).split("/")[-3] for c in changed}
    assert len(dirs) == 4 and d0.split("/")[-3] not in dirs
    assert cd.cache_dir(**base, rank=1).split("/")[-3] == d0.split("/")[-3]   # ranks share the hash dir
