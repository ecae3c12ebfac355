"""ZeRO memory/communication calculator, checked against per-rank bytes measured on gloo ranks:
a replicated baseline, hand-written ZeRO-1 and ZeRO-2 over a flat parameter vector, and PyTorch's FSDP2
``fully_shard`` (ZeRO-3), all trained with Adam and compared with a single-process Adam step.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn


# --8<-- [start:calculator]
def model_state_bytes(P: int, N: int, stage: int, param_b: int = 2, grad_b: int = 2, K: int = 12) -> dict:
    """Per-GPU bytes of parameters, gradients and optimizer state (ZeRO paper notation: K bytes of
    optimizer state per parameter; mixed-precision Adam: 2 + 2 + 12 = 16 bytes). Stage 0 = plain DP."""
    return {
        "params": P * param_b / (N if stage >= 3 else 1),
        "grads": P * grad_b / (N if stage >= 2 else 1),
        "optim": P * K / (N if stage >= 1 else 1),
    }


def comm_elems_per_rank(P: int, N: int, stage: int) -> float:
    """Elements each rank sends per step with ring collectives. DP all-reduce = reduce-scatter + all-gather
    = 2 (N-1)/N P; ZeRO-1/2: reduce-scatter grads + all-gather params, same total; ZeRO-3 all-gathers the
    parameters twice (forward and backward) plus one reduce-scatter: 3 (N-1)/N P."""
    return (3 if stage >= 3 else 2) * (N - 1) / N * P
# --8<-- [end:calculator]


# Adam's first step is lr * g / (|g| + eps): with the usual eps = 1e-8 a gradient that is ~0 on one side
# and 1e-9 on the other flips the update by lr. eps = 1e-3 bounds d(update)/dg by lr/eps, so fp32
# reassociation (~1e-9 in g) moves the parameters by < 1e-7 and equality can be asserted at 1e-6.
EPS = 1e-3


def make_model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64))  # P = 16576, divisible by 4


def _data():
    g = torch.Generator().manual_seed(3)
    return torch.randn(8, 64, generator=g), torch.randn(8, 64, generator=g)


def _loss(model, x, y):
    return ((model(x) - y) ** 2).mean()


def _nbytes(ts):
    return sum(t.numel() * t.element_size() for t in ts)


def _local(t):
    return t.to_local() if hasattr(t, "to_local") else t  # a DTensor's numel() is the GLOBAL size


# torch 2.13 renamed the flat collectives (reduce_scatter_tensor -> reduce_scatter_single, all_gather_into_tensor
# -> all_gather_single) and deprecates the old names; older releases have only the old ones.
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def _opt_bytes(opt):
    return _nbytes(_local(v) for s in opt.state.values() for k, v in s.items() if torch.is_tensor(v) and k != "step")


# --8<-- [start:zero12]
def zero12_step(model, stage, lr, comm):
    """One hand-written ZeRO-1 (stage=1) or ZeRO-2 (stage=2) Adam step after loss.backward().
    Rank r owns slice r of the flat parameter vector: its Adam state, and (stage 2) its gradient."""
    rank, n = dist.get_rank(), dist.get_world_size()
    params = list(model.parameters())
    flat_g = torch.cat([p.grad.reshape(-1) for p in params])
    P = flat_g.numel()
    lo, hi = rank * P // n, (rank + 1) * P // n
    g_shard = torch.empty(hi - lo)
    _reduce_scatter(g_shard, flat_g)  # this rank's slice of the summed gradient (reduce_scatter_single)
    comm["reduce_scatter"] += P
    g_shard /= n
    if stage == 1:  # ZeRO-1: backward still materialises the full gradient on every rank
        kept_grad = flat_g
    else:  # ZeRO-2: only the slice survives (real systems reduce-scatter bucket by bucket during backward)
        kept_grad = g_shard
        for p in params:
            p.grad = None
    if not hasattr(model, "_shard"):  # fp32 master slice + Adam state for this slice only
        shard = nn.Parameter(torch.cat([p.detach().reshape(-1) for p in params])[lo:hi].clone())
        object.__setattr__(model, "_shard", shard)  # plain attribute: not one of model.parameters()
        model._opt = torch.optim.Adam([shard], lr=lr, eps=EPS)
    model._shard.grad = g_shard
    model._opt.step()
    full = torch.empty(P)
    _all_gather(full, model._shard.detach())  # every rank gets the updated parameters (all_gather_single)
    comm["all_gather"] += P
    off = 0
    with torch.no_grad():
        for p in params:
            p.copy_(full[off:off + p.numel()].view_as(p))
            off += p.numel()
    return kept_grad
# --8<-- [end:zero12]


def worker_zero(rank, world, lr=1e-2):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    x, y = _data()
    b = x.shape[0] // world
    xl, yl = x[rank * b:(rank + 1) * b], y[rank * b:(rank + 1) * b]
    ref = make_model()
    opt = torch.optim.Adam(ref.parameters(), lr=lr, eps=EPS)
    _loss(ref, x, y).backward()
    opt.step()
    ref_params = [p.detach().clone() for p in ref.parameters()]
    out = {"P": sum(p.numel() for p in ref.parameters())}

    # stage 0: replicated data parallel (all-reduce, full Adam everywhere)
    m0 = make_model()
    opt0 = torch.optim.Adam(m0.parameters(), lr=lr, eps=EPS)
    _loss(m0, xl, yl).backward()
    for p in m0.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world
    opt0.step()
    out[0] = {"params": _nbytes(m0.parameters()), "grads": _nbytes(p.grad for p in m0.parameters()),
              "optim": _opt_bytes(opt0),
              "err": max(float((a.detach() - b).abs().max()) for a, b in zip(m0.parameters(), ref_params))}

    for stage in (1, 2):
        m = make_model()
        comm = {"reduce_scatter": 0, "all_gather": 0}
        _loss(m, xl, yl).backward()
        kept = zero12_step(m, stage, lr, comm)
        out[stage] = {"params": _nbytes(m.parameters()), "grads": _nbytes([kept]), "optim": _opt_bytes(m._opt),
                      "comm": comm,
                      "err": max(float((a.detach() - b).abs().max()) for a, b in zip(m.parameters(), ref_params))}

    # stage 3: FSDP2, every Linear and the root sharded over a 1-D CPU mesh
    mesh = init_device_mesh("cpu", (world,))
    m3 = make_model()
    for layer in (m3[0], m3[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(m3, mesh=mesh)
    opt3 = torch.optim.Adam(m3.parameters(), lr=lr, eps=EPS)
    _loss(m3, xl, yl).backward()
    opt3.step()
    local = [p.to_local() for p in m3.parameters()]
    out[3] = {"params": _nbytes(local), "grads": _nbytes(p.grad.to_local() for p in m3.parameters()),
              "optim": _opt_bytes(opt3), "type": type(next(m3.parameters())).__name__,
              "placements": str(next(m3.parameters()).placements),
              "err": max(float((p.detach().full_tensor() - r).abs().max()) for p, r in zip(m3.parameters(), ref_params))}
    return out
