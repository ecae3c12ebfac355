"""Sharding in code the way TorchTitan does it (docs/framework/dtensor-composable.md).

Distributed parts run on loopback gloo ranks with CPU tensors through dist_launch; the one worker
``worker_all`` does every demonstration in one launch, so the lab pays for spawning four Python
processes once:

- DTensor placements, sharding propagation of a matmul, and the collective that ``redistribute``
  inserts for each placement change, counted with CommDebugMode;
- a 2-D (dp x tp) DeviceMesh: ``parallelize_module`` (Colwise/Rowwise) on the tp sub-mesh, then
  ``fully_shard`` (FSDP2) on the dp sub-mesh; loss, gradients and the updated weights equal the
  single-process model's;
- meta-device initialisation: build on ``torch.device("meta")``, shard, ``to_empty``, then fill the
  local shards from a seed checkpoint, so two different meshes hold identical full weights;
- async tensor parallel's decomposition: all-gather + matmul and matmul + reduce-scatter as a ring of
  per-shard chunks whose point-to-point transfer overlaps the previous chunk's matmul.

Pure functions (no process group): the overlap inequalities of FSDP, TP and PP, the ideal time of
the decomposed all-gather matmul, Adam with bf16 moments and an fp32 master, and a pipeline
partitioner that minimises the largest stage cost.
"""
from __future__ import annotations

import itertools
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

# --8<-- [start:model]
class MLP(nn.Module):
    """A transformer block's MLP with a residual: x + W2 gelu(W1 x)."""

    def __init__(self, h: int):
        super().__init__()
        self.w1 = nn.Linear(h, 4 * h)
        self.w2 = nn.Linear(4 * h, h)

    def forward(self, x):
        return x + self.w2(F.gelu(self.w1(x)))


class Net(nn.Module):
    def __init__(self, h: int = 8, layers: int = 2):
        super().__init__()
        self.layers = nn.ModuleList(MLP(h) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x
# --8<-- [end:model]


H, LAYERS, BATCH = 8, 2, 8
DTYPE = torch.float64  # float64 so that sharded and serial results agree to ~1e-15


def seed_state_dict(seed: int = 0) -> dict:
    """The 'seed checkpoint': the full, unsharded weights one process initialises once."""
    torch.manual_seed(seed)
    return {k: v.to(DTYPE) for k, v in Net(H, LAYERS).state_dict().items()}


def batch(seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(BATCH, H, generator=g, dtype=DTYPE), torch.randn(BATCH, H, generator=g, dtype=DTYPE)


def serial_step(lr: float = 0.1):
    """Reference: one process, the whole batch, one SGD step."""
    model = Net(H, LAYERS).to(DTYPE)
    model.load_state_dict(seed_state_dict())
    x, y = batch()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad
    return loss.item(), grads, {n: p.detach().clone() for n, p in model.named_parameters()}


def _counts(mode) -> dict:
    return {str(k).split(".")[-1]: v for k, v in mode.get_comm_counts().items()}


# --8<-- [start:placements]
def dtensor_placements(mesh):
    """Sharding propagation and redistribute on a 1-D mesh; every collective counted."""
    from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.debug import CommDebugMode

    g = torch.Generator().manual_seed(0)
    A = torch.randn(8, 16, generator=g, dtype=DTYPE)
    B = torch.randn(16, 12, generator=g, dtype=DTYPE)
    out = {}
    dA = distribute_tensor(A, mesh, [Shard(1)])          # A split along k (columns)
    dB = distribute_tensor(B, mesh, [Shard(0)])          # B split along k (rows)
    with CommDebugMode() as cm:
        C = dA @ dB                                       # local A_i @ B_i: a partial sum
    out["matmul"] = (str(C.placements), _counts(cm), list(C.to_local().shape))
    with CommDebugMode() as cm:
        R = C.redistribute(mesh, [Replicate()])           # Partial -> Replicate = all-reduce
    out["partial->replicate"] = (_counts(cm), (R.to_local() - A @ B).abs().max().item())
    with CommDebugMode() as cm:
        S = C.redistribute(mesh, [Shard(0)])              # Partial -> Shard = reduce-scatter
    out["partial->shard0"] = (_counts(cm), (S.full_tensor() - A @ B).abs().max().item())
    with CommDebugMode() as cm:
        dA.redistribute(mesh, [Replicate()])              # Shard -> Replicate = all-gather
    out["shard1->replicate"] = _counts(cm)
    rA = distribute_tensor(A, mesh, [Replicate()])
    with CommDebugMode() as cm:
        rA.redistribute(mesh, [Shard(0)])                 # Replicate -> Shard: take a local slice
    out["replicate->shard0"] = _counts(cm)
    sA, rB = distribute_tensor(A, mesh, [Shard(0)]), distribute_tensor(B, mesh, [Replicate()])
    with CommDebugMode() as cm:
        D = sA @ rB                                       # rows of A times all of B: no communication
    out["rowwise matmul"] = (str(D.placements), _counts(cm))
    out["partial placement is Partial"] = isinstance(C.placements[0], Partial)
    return out
# --8<-- [end:placements]


# --8<-- [start:parallelize]
def build_2d(mesh2d, on_meta: bool = False):
    """TP inside each dp group, then FSDP2 across dp: the TorchTitan order (TP, then FSDP)."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    with torch.device("meta" if on_meta else "cpu"):
        model = Net(H, LAYERS).to(DTYPE)
    for layer in model.layers:
        parallelize_module(layer, mesh2d["tp"], {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
        fully_shard(layer, mesh=mesh2d["dp"])              # one FSDP unit per block
    fully_shard(model, mesh=mesh2d["dp"])
    return model


def train_step_2d(model, mesh2d, lr: float = 0.1):
    x, y = batch()
    dp = mesh2d["dp"].get_local_rank()
    rows = slice(dp * BATCH // 2, (dp + 1) * BATCH // 2)  # each dp group gets half the batch
    loss = F.mse_loss(model(x[rows]), y[rows])            # tp peers see the same rows
    loss.backward()                                       # FSDP reduce-scatters the mean over dp
    grads = {n: p.grad.full_tensor() for n, p in model.named_parameters()}
    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad                              # DTensor op: each rank updates its shard
    loss_t = torch.tensor([loss.item()], dtype=DTYPE)
    torch.distributed.all_reduce(loss_t, group=mesh2d["dp"].get_group())
    return loss_t.item() / 2, grads, {n: p.full_tensor() for n, p in model.named_parameters()}
# --8<-- [end:parallelize]


# --8<-- [start:meta]
def meta_init(mesh, mesh_kind: str, seed_sd: dict):
    """Build on meta (no storage), shard, allocate only local shards, fill them from the seed."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    from torch.distributed.fsdp import fully_shard

    if mesh_kind == "2d":
        model = build_2d(mesh, on_meta=True)
    else:                                                  # 1-D FSDP over all ranks
        with torch.device("meta"):
            model = Net(H, LAYERS).to(DTYPE)
        for layer in model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
    assert all(p.is_meta for p in model.parameters())      # shapes and placements, no bytes
    model.to_empty(device="cpu")                           # allocate each rank's local shard only
    local = sum(p.to_local().numel() for p in model.parameters())
    # every rank holds the full seed state dict and copies out just its own slice: no communication
    set_model_state_dict(model, dict(seed_sd), options=StateDictOptions(full_state_dict=True))
    full = {n: p.full_tensor() for n, p in model.named_parameters()}
    return model, local, full
# --8<-- [end:meta]


def naive_local_init(mesh):
    """The trap: seed the RNG and init each local shard the same way -> repeated blocks."""
    from torch.distributed.fsdp import fully_shard

    with torch.device("meta"):
        model = Net(H, LAYERS).to(DTYPE)
    fully_shard(model, mesh=mesh)
    model.to_empty(device="cpu")
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.to_local().normal_()
    return {n: p.full_tensor() for n, p in model.named_parameters()}


# --8<-- [start:async-tp]
def ag_matmul_fused(x_shard, w_local, group=None):
    """Sequence-parallel input (rows sharded) times a column shard of W: all-gather, then one GEMM."""
    import torch.distributed as dist

    world = dist.get_world_size(group)
    parts = [torch.empty_like(x_shard) for _ in range(world)]
    dist.all_gather(parts, x_shard, group=group)
    return torch.cat(parts) @ w_local


def ag_matmul_decomposed(x_shard, w_local, group=None):
    """Async-TP decomposition: pass row chunks around a ring; start receiving chunk i+1, then
    multiply chunk i, then wait. On a GPU the copy engine moves the chunk while the SMs do the GEMM."""
    import torch.distributed as dist

    world, rank = dist.get_world_size(group), dist.get_rank(group)
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    n = x_shard.shape[0]
    out = x_shard.new_empty(world * n, w_local.shape[1])
    cur, src = x_shard, rank
    for step in range(world):
        if step < world - 1:                               # communication of the next chunk ...
            nxt_buf = torch.empty_like(cur)
            reqs = [dist.isend(cur, dist.get_global_rank(group, nxt) if group else nxt, group=group),
                    dist.irecv(nxt_buf, dist.get_global_rank(group, prv) if group else prv, group=group)]
        out[src * n:(src + 1) * n] = cur @ w_local         # ... overlaps this chunk's matmul
        if step < world - 1:
            for r in reqs:
                r.wait()
            cur, src = nxt_buf, (src - 1) % world
    return out


def matmul_rs_decomposed(x_local, w_local, group=None):
    """Row-parallel GEMM + reduce-scatter on rows as a ring: compute the partial block the next rank
    will own, add the accumulator received, send it on; after world steps each rank holds its block."""
    import torch.distributed as dist

    world, rank = dist.get_world_size(group), dist.get_rank(group)
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    n = x_local.shape[0] // world
    acc = None
    for step in range(world):
        b = (rank - step - 1) % world
        part = x_local[b * n:(b + 1) * n] @ w_local        # compute block b's partial sum
        if acc is not None:
            recv.wait()
            part = part + acc
        if step < world - 1:
            acc = torch.empty_like(part)
            send = dist.isend(part, nxt, group=group)
            recv = dist.irecv(acc, prv, group=group)
            send.wait()
        else:
            return part
# --8<-- [end:async-tp]


def async_tp_check(rank, world):
    import torch.distributed as dist

    g = torch.Generator().manual_seed(3)
    n, k, m = 3, 8, 4 * world
    X = torch.randn(world * n, k, generator=g, dtype=DTYPE)
    W = torch.randn(k, m, generator=g, dtype=DTYPE)
    cols = slice(rank * m // world, (rank + 1) * m // world)
    xs = X[rank * n:(rank + 1) * n].contiguous()
    fused = ag_matmul_fused(xs, W[:, cols].contiguous())
    dec = ag_matmul_decomposed(xs, W[:, cols].contiguous())
    # row-parallel: X split on columns (k), W on rows (k); output rows reduce-scattered
    ks = slice(rank * k // world, (rank + 1) * k // world)
    Wr = torch.randn(k, 5, generator=g, dtype=DTYPE)
    part = X[:, ks] @ Wr[ks]
    rs_fused = torch.empty(n, 5, dtype=DTYPE)
    dist.reduce_scatter(rs_fused, list(part.chunk(world)))
    rs_dec = matmul_rs_decomposed(X[:, ks].contiguous(), Wr[ks].contiguous())
    return {
        "ag_vs_fused": (dec - fused).abs().max().item(),
        "ag_vs_serial": (dec - X @ W[:, cols]).abs().max().item(),
        "rs_vs_fused": (rs_dec - rs_fused).abs().max().item(),
        "rs_vs_serial": (rs_dec - (X @ Wr)[rank * n:(rank + 1) * n]).abs().max().item(),
    }


def worker_all(rank, world, seed_path):
    """Every distributed demonstration of the page, on one set of 4 gloo ranks."""
    from torch.distributed.device_mesh import init_device_mesh

    import logging

    assert world == 4
    # full_tensor() of an FSDP+TP weight gathers twice; torch logs that as a warning on stderr
    logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)
    out = {}
    mesh1d = init_device_mesh("cpu", (world,))
    out["placements"] = dtensor_placements(mesh1d)

    mesh2d = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    seed_sd = torch.load(seed_path, weights_only=True)
    model = build_2d(mesh2d)
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    set_model_state_dict(model, dict(seed_sd), options=StateDictOptions(full_state_dict=True))
    w1 = model.layers[0].w1.weight
    out["2d_placements"] = {"w1.weight": str(w1.placements), "w2.weight": str(model.layers[0].w2.weight.placements),
                            "local_shape": list(w1.to_local().shape), "mesh": str(mesh2d.mesh.tolist())}
    ref_loss, ref_grads, ref_params = serial_step()
    loss, grads, params = train_step_2d(model, mesh2d)
    out["2d_loss_err"] = abs(loss - ref_loss)
    out["2d_grad_err"] = max((grads[k] - ref_grads[k]).abs().max().item() for k in ref_grads)
    out["2d_param_err"] = max((params[k] - ref_params[k]).abs().max().item() for k in ref_params)

    fulls, locals_ = {}, {}
    for kind, mesh in (("1d", mesh1d), ("2d", mesh2d)):
        _, locals_[kind], fulls[kind] = meta_init(mesh, kind, seed_sd)
    out["meta_local_numel"] = locals_
    out["meta_total_numel"] = sum(v.numel() for k, v in seed_sd.items() if k in fulls["1d"])
    out["meta_1d_equals_2d"] = all(torch.equal(fulls["1d"][k], fulls["2d"][k]) for k in fulls["1d"])
    out["meta_equals_seed"] = all(torch.equal(fulls["2d"][k], seed_sd[k]) for k in fulls["2d"])
    naive = naive_local_init(mesh1d)
    out["naive_repeats_blocks"] = torch.equal(*naive["layers.0.w1.weight"].chunk(world)[:2])
    out["async_tp"] = async_tp_check(rank, world)
    return out


# ----------------------------------------------------------------------------- overlap math
# --8<-- [start:overlap]
def fsdp_layer(h, tokens, n, flops, bw, nbytes=2):
    """ZeRO-3/FSDP, one layer's forward: all-gather 12h^2 parameters vs 2 * 12h^2 * tokens FLOPs.
    Hidden by prefetch iff tokens >= (n-1)/n * nbytes * F / (2B): the layer size cancels."""
    p = 12 * h * h
    comm = (n - 1) / n * p * nbytes / bw
    comp = 2 * p * tokens / flops
    return comm, comp, (n - 1) / n * nbytes * flops / (2 * bw)


def tp_layer(h, tokens, t, flops, bw, nbytes=2):
    """Megatron TP, one layer's forward: 2 all-reduces of tokens*h elements (ring: 2(t-1)/t each)
    vs 24 h^2 tokens / t FLOPs. comm/comp = (t-1) nbytes F / (6 h B): independent of tokens."""
    comm = 2 * 2 * (t - 1) / t * tokens * h * nbytes / bw
    comp = 24 * h * h * tokens / t / flops
    return comm, comp, (t - 1) * nbytes * flops / (6 * bw)


def pp_stage(h, tokens, layers, flops, bw, nbytes=2):
    """PP, one micro-batch at a stage boundary: send tokens*h activations vs the stage's
    24 h^2 tokens * layers FLOPs. Hidden iff h * layers >= nbytes F / (24 B)."""
    comm = tokens * h * nbytes / bw
    comp = 24 * h * h * tokens * layers / flops
    return comm, comp, nbytes * flops / (24 * bw)
# --8<-- [end:overlap]


# --8<-- [start:async-time]
def async_tp_time(t_comp, t_comm, t):
    """Finish time of the decomposed all-gather matmul: the local chunk first, then t-1 chunks that
    each arrive after t_comm/(t-1) of transfer; a chunk's GEMM starts when it has arrived and the
    previous GEMM is done."""
    c, m = t_comp / t, t_comm / (t - 1)
    arrive, done = 0.0, c
    for _ in range(1, t):
        arrive += m
        done = max(done, arrive) + c
    return done


def async_tp_time_closed(t_comp, t_comm, t):
    return max(t_comp, t_comm + t_comp / t)


def async_tp_layer_time(h, tokens, t, flops, bw, nbytes=2):
    """The same bound applied per GEMM, as the fused ops pair them (sequence parallel): QKV (3h^2
    parameters) and W1 (4h^2) each consume an all-gather, the attention output projection (h^2) and
    W2 (4h^2) each feed a reduce-scatter; every one of the four collectives moves (t-1)/t of tokens*h
    elements. A collective can only hide behind its own GEMM."""
    comm = (t - 1) / t * tokens * h * nbytes / bw
    gemms = {"qkv": 3, "o": 1, "w1": 4, "w2": 4}
    per = {k: async_tp_time_closed(2 * p * h * h * tokens / t / flops, comm, t) for k, p in gemms.items()}
    return sum(per.values()), per
# --8<-- [end:async-time]


# ----------------------------------------------------------------------------- bf16 optimizer states
# --8<-- [start:bf16-adam]
def adam_bf16_states(params, grads, state, lr, b1=0.9, b2=0.95, eps=1e-8):
    """Adam with fp32 master weights and m, v stored in bf16: load the moments, compute in fp32,
    update the fp32 weights with the fp32 values, store the moments rounded to bf16."""
    state["t"] = t = state.get("t", 0) + 1
    for i, (p, g) in enumerate(zip(params, grads)):
        m = state.setdefault(("m", i), torch.zeros_like(p, dtype=torch.bfloat16)).float()
        v = state.setdefault(("v", i), torch.zeros_like(p, dtype=torch.bfloat16)).float()
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        p -= lr * (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps)
        state[("m", i)], state[("v", i)] = m.to(torch.bfloat16), v.to(torch.bfloat16)


def state_bytes_per_param(master=4, grad=4, moment=4, weight16=0):
    """Bytes per parameter: fp32 training with fp32 moments is 4+4+8=16, with bf16 moments 12."""
    return weight16 + master + grad + 2 * moment
# --8<-- [end:bf16-adam]


def regression(steps=300, moments="bf16", seed=0, lr=1e-2):
    """Fit a linear model with Adam; moments in fp32 (torch.optim.Adam) or bf16 (above)."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(256, 32, generator=g)
    w_true = torch.randn(32, 1, generator=g)
    y = X @ w_true + 0.01 * torch.randn(256, 1, generator=g)
    w = torch.zeros(32, 1, requires_grad=True)
    opt = torch.optim.Adam([w], lr=lr, betas=(0.9, 0.95), eps=1e-8) if moments == "fp32" else None
    state, losses = {}, []
    for _ in range(steps):
        loss = F.mse_loss(X @ w, y)
        losses.append(loss.item())
        (grad,) = torch.autograd.grad(loss, [w])
        if opt is not None:
            w.grad = grad
            opt.step()
        else:
            with torch.no_grad():
                adam_bf16_states([w], [grad], state, lr, b2=0.95)
    return w.detach(), losses


# ----------------------------------------------------------------------------- pipeline layout
# --8<-- [start:partition]
def partition(costs, p):
    """Split costs (in model order) into p contiguous non-empty stages minimising the largest stage
    sum. Dynamic programming over prefixes: best[j][i] = the best max for the first i items on j stages."""
    n = len(costs)
    pre = [0.0]
    for c in costs:
        pre.append(pre[-1] + c)
    INF = float("inf")
    best = [[INF] * (n + 1) for _ in range(p + 1)]
    cut = [[0] * (n + 1) for _ in range(p + 1)]
    best[0][0] = 0.0
    for j in range(1, p + 1):
        for i in range(j, n + 1):
            for k in range(j - 1, i):                      # last stage = items k..i-1
                v = max(best[j - 1][k], pre[i] - pre[k])
                if v < best[j][i]:
                    best[j][i], cut[j][i] = v, k
    bounds, i = [], n
    for j in range(p, 0, -1):
        bounds.append((cut[j][i], i))
        i = cut[j][i]
    return best[p][n], bounds[::-1]


def partition_brute(costs, p):
    n = len(costs)
    return min(max(sum(costs[a:b]) for a, b in zip((0,) + cuts, cuts + (n,)))
               for cuts in itertools.combinations(range(1, n), p - 1))


def layer_costs(L, h, s, V, emb_cost=None):
    """Forward FLOPs per token of each pipeline item: embedding (a lookup, ~0 FLOPs unless given),
    L transformer layers (24h^2 + 4sh), and the output head + loss (2hV)."""
    emb = 0.0 if emb_cost is None else emb_cost
    return [emb] + [24 * h * h + 4 * s * h] * L + [2 * h * V]


def layout_string(bounds, n_items):
    """Megatron-style layout: E = embedding, t = layer, L = loss/head, '|' between stages."""
    names = ["E"] + ["t"] * (n_items - 2) + ["L"]
    return "|".join("".join(names[a:b]) for a, b in bounds)
# --8<-- [end:partition]


def uniform_layers(L, p, h, s, V):
    """The default split: L/p layers each, embedding on the first stage, head on the last."""
    c = layer_costs(L, h, s, V)
    per = [c[1] * (L // p)] * p
    per[0] += c[0]
    per[-1] += c[-1]
    return max(per)


def measured_costs(h=64, s=128, V=2048, layers=6, reps=5):
    """Wall-clock forward+backward of each item of a tiny model on this CPU (median of reps):
    embedding, one residual MLP block (standing for a layer), output head + cross-entropy."""
    import statistics
    import time

    torch.manual_seed(0)
    emb, block, head = nn.Embedding(V, h), MLP(h), nn.Linear(h, V, bias=False)
    ids = torch.randint(0, V, (s,))
    x = torch.randn(s, h, requires_grad=True)

    def t(fn):
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts)

    c_emb = t(lambda: emb(ids).sum().backward())
    c_blk = t(lambda: block(x).sum().backward())
    c_head = t(lambda: F.cross_entropy(head(x), ids).backward())
    return [c_emb] + [c_blk] * layers + [c_head]


def symm_mem_on_cpu() -> str:
    """SymmetricMemory (the buffers async TP reads remote shards from) exists only on GPUs."""
    import torch.distributed._symmetric_memory as symm_mem

    try:
        symm_mem.empty(4, device="cpu")
    except RuntimeError as e:
        return str(e)
    return "allocated"
