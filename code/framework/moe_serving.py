"""Serving MoE models at scale, computed: lock-step data-parallel ranks and their dummy batches (vLLM's data
parallel deployment), per-GPU memory of DP attention against TP attention for DeepSeek-V3's MLA (SGLang), an
alpha-beta model of DeepEP's normal and low-latency modes, the DeepSeek EPLB algorithm (deepseek-ai/EPLB)
written anew in NumPy with a brute-force optimum to check it against, the arithmetic of wide EP (TensorRT-LLM),
a two-micro-batch overlap simulator against its closed form (vLLM DBO, SGLang TBO), and the deployment units of
the DeepSeek-V3 report (arXiv 2412.19437, section 3.4). Checked by tests/test_framework_moe_serving.py;
embedded by docs/framework/moe-serving.md."""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from dsv3_system import V3Config, attention_params, expert_params, fp8_bytes

V3 = V3Config()
MOE_LAYERS = V3.layers - V3.dense_layers            # 58


# ============================================================================ data-parallel deployment
# --8<-- [start:lockstep]
def dp_lockstep(tokens: list[int], t_fixed: float, t_token: float, dummy_tokens: int = 1) -> dict:
    """One engine step of D data-parallel ranks of an MoE model. Every rank must enter every MoE layer's
    collective, so a rank with no requests runs a dummy batch of `dummy_tokens`, and the step lasts as long as
    the busiest rank. A rank's forward costs t_fixed (reading the weights: it does not shrink with the batch)
    plus t_token per token. Useful work is the forward passes of ranks that have requests."""
    d = len(tokens)
    run = [n if n > 0 else dummy_tokens for n in tokens]
    t_rank = [t_fixed + t_token * n for n in run]
    step = max(t_rank)
    useful = sum(t for t, n in zip(t_rank, tokens) if n > 0)
    dummy = sum(t for t, n in zip(t_rank, tokens) if n == 0)
    waiting = sum(step - t for t in t_rank)
    return {"step": step, "useful": useful, "dummy": dummy, "waiting": waiting,
            "efficiency": useful / (d * step), "imbalance": max(tokens) / (sum(tokens) / d)}
# --8<-- [end:lockstep]


# ============================================================================ DP attention vs TP attention
# --8<-- [start:dp-attention]
def mla_kv_bytes_per_token(c: V3Config = V3, bytes_per_elem: float = 2) -> float:
    """MLA caches one latent (d_c) and one shared RoPE key (d_rope) per layer: a single 'KV head'."""
    return c.layers * (c.d_c + c.d_rope) * bytes_per_elem


def attention_weights_per_gpu(attn_tp: int, c: V3Config = V3, bytes_per_param: float = 1) -> float:
    """MLA weights one GPU holds. TP splits the per-head matrices (q and kv up-projections, output
    projection) over attn_tp ranks; the down-projections to the latents and the norms are replicated."""
    down = c.h * c.d_cq + c.d_cq + c.h * (c.d_c + c.d_rope) + c.d_c + c.h
    per_head = attention_params(c) - down
    return c.layers * (down + per_head / attn_tp) * bytes_per_param


def attention_memory(gpus: int, attn_tp: int, tokens: int, c: V3Config = V3) -> dict:
    """A group of `gpus` GPUs serving `tokens` cached tokens in total, attention split as attn_tp-way TP
    inside dp = gpus / attn_tp data-parallel attention groups (SGLang's attn_tp_size = tp_size / dp_size).
    The latent has no head dimension to split, so every rank of a TP group stores the whole latent of every
    token its group serves: the KV is replicated attn_tp times."""
    dp = gpus // attn_tp
    assert dp * attn_tp == gpus
    kv = mla_kv_bytes_per_token(c) * tokens / dp
    w = attention_weights_per_gpu(attn_tp, c)
    return {"dp": dp, "kv_per_gpu": kv, "weights_per_gpu": w, "total_per_gpu": kv + w}


def kv_capacity(gpus: int, attn_tp: int, budget_per_gpu: float, c: V3Config = V3) -> float:
    """Tokens the whole group can cache when each GPU has `budget_per_gpu` bytes for attention."""
    dp = gpus // attn_tp
    free = budget_per_gpu - attention_weights_per_gpu(attn_tp, c)
    return dp * free / mla_kv_bytes_per_token(c)
# --8<-- [end:dp-attention]


# ============================================================================ DeepEP's two modes, alpha-beta
# --8<-- [start:deepep]
@dataclass(frozen=True)
class Link:
    alpha_us: float          # fixed cost of one dispatch (or combine), microseconds
    beta_gbs: float          # bottleneck bandwidth, GB/s (1e9 B/s)


def a2a_us(tokens: int, copies: float, bytes_per_copy: float, link: Link) -> float:
    """alpha-beta time of one dispatch: `copies` messages of `bytes_per_copy` per token cross the bottleneck."""
    return link.alpha_us + tokens * copies * bytes_per_copy / (link.beta_gbs * 1e3)


def deepep_modes(tokens: int, normal: Link, low_latency: Link, k: int = 8, nodes: int = 8,
                 remote_nodes: float = 3.47, bytes_per_copy: float = fp8_bytes(V3.h)) -> dict:
    """Dispatch time of one MoE layer, per GPU. Normal mode sends one copy per remote *node* over RDMA and
    fans out over NVLink (node-limited routing: <= 4 nodes, 3.47 remote on average for random affinities,
    see deepseek-v3-system.md), but pays a count exchange and a CPU wait before it can size its buffers.
    Low-latency mode writes every (token, expert) copy straight into a fixed slot on the remote GPU over
    RDMA: no count exchange, no NVLink hop, but k * (1 - 1/nodes) copies per token on the network."""
    ll_copies = k * (1 - 1 / nodes)
    return {"normal_us": a2a_us(tokens, remote_nodes, bytes_per_copy, normal),
            "low_latency_us": a2a_us(tokens, ll_copies, bytes_per_copy, low_latency),
            "crossover_tokens": (normal.alpha_us - low_latency.alpha_us) * normal.beta_gbs * 1e3
            / (bytes_per_copy * (ll_copies - remote_nodes))}


def ll_buffer_bytes(max_tokens: int, hidden: int, ranks: int, experts: int) -> int:
    """DeepEP V1's LowLatencyLayout (csrc/config.hpp; csrc/legacy/config.hpp since V2): every (local expert,
    source rank) pair owns a slot region of max_tokens messages, twice (odd/even buffers), for send and
    receive, so the registered RDMA buffer grows with experts x max_tokens whatever the real routing is.
    `ranks` does not enter the size (num_experts already counts local experts x ranks)."""
    scales = hidden // 128
    dispatch_msg = 16 + max(2 * hidden, hidden + 4 * scales)      # int4 header + BF16 or FP8 + scales
    combine_msg = 4 * scales + 2 * hidden
    send = max(max_tokens * dispatch_msg, experts * max_tokens * combine_msg)
    recv = experts * max_tokens * max(dispatch_msg, combine_msg)
    signal = -(-experts * 4 // 128) * 128                            # one int per expert, 128-byte aligned
    return 2 * (send + recv + signal)


# DeepEP V1 README (docs/legacy.md): low-latency dispatch of 128 tokens, top-8, FP8, on H800 + CX7 400 Gb/s
LL_DISPATCH_US = {16: 118, 32: 155, 64: 173, 128: 192, 256: 194}


def ll_alpha(ep: int, latency_us: float, tokens: int = 128, k: int = 8, gpus_per_node: int = 8,
             beta_gbs: float = 50.0) -> float:
    """The fixed cost left after removing the RDMA bytes (copies bound for other nodes) from a published
    low-latency dispatch time."""
    nodes = ep // gpus_per_node
    return latency_us - tokens * k * (1 - 1 / nodes) * fp8_bytes(V3.h) / (beta_gbs * 1e3)


def fit_alpha_beta(nbytes: list[float], time_us: list[float]) -> tuple[float, float]:
    """Least-squares t = alpha + bytes / beta; returns (alpha in us, beta in GB/s)."""
    slope, alpha = np.polyfit(np.asarray(nbytes, float), np.asarray(time_us, float), 1)
    return float(alpha), float(1 / slope / 1e3)
# --8<-- [end:deepep]


# ============================================================================ EPLB
# --8<-- [start:eplb]
def replicate(load: np.ndarray, slots: int) -> np.ndarray:
    """Replica count per expert: start with one each, then give each spare slot to the expert whose load
    per replica is the largest (ties: lowest index). Returns counts, summing to `slots`."""
    count = np.ones(len(load), dtype=np.int64)
    for _ in range(slots - len(load)):
        count[np.argmax(load / count)] += 1
    return count


def balanced_packing(weight: np.ndarray, packs: int) -> np.ndarray:
    """Put n items into `packs` packs of exactly n / packs items: heaviest item first, each into the lightest
    pack that still has room. Returns the pack index of each item."""
    n = len(weight)
    per = n // packs
    assert per * packs == n
    where = np.full(n, -1, dtype=np.int64)
    total, items = np.zeros(packs), np.zeros(packs, dtype=np.int64)
    for i in np.argsort(-weight, kind="stable"):
        open_ = np.flatnonzero(items < per)
        p = open_[np.argmin(total[open_])]
        where[i], total[p], items[p] = p, total[p] + weight[i], items[p] + 1
    return where


def eplb(load: np.ndarray, slots: int, gpus: int, groups: int = 1, nodes: int = 1) -> dict:
    """DeepSeek's EPLB for one layer. Hierarchical when groups % nodes == 0: (1) pack expert groups onto nodes
    (so node-limited routing still sends a token to few nodes), (2) replicate inside each node, (3) pack the
    node's replicas onto its GPUs. With groups = nodes = 1 it is the global policy. Returns the logical expert
    of each physical slot (GPU-major), the replica counts and the load of each GPU."""
    e = len(load)
    assert e % groups == 0 and groups % nodes == 0 and gpus % nodes == 0 and slots % gpus == 0
    gsize, per_gpu = e // groups, slots // gpus
    group_node = balanced_packing(load.reshape(groups, gsize).sum(1), nodes)
    slot_expert, count = [], np.zeros(e, dtype=np.int64)
    for node in range(nodes):
        experts = np.concatenate([np.arange(g * gsize, (g + 1) * gsize) for g in np.flatnonzero(group_node == node)])
        cnt = replicate(load[experts], slots // nodes)
        count[experts] = cnt
        replicas = np.repeat(experts, cnt)                                  # one entry per physical expert
        gpu = balanced_packing(load[replicas] / count[replicas], gpus // nodes)
        for g in range(gpus // nodes):
            slot_expert.extend(replicas[gpu == g])
    slot_expert = np.array(slot_expert)
    per_slot = load[slot_expert] / count[slot_expert]
    return {"slot_expert": slot_expert, "count": count,
            "gpu_load": per_slot.reshape(gpus, per_gpu).sum(1)}


def contiguous_load(load: np.ndarray, gpus: int) -> np.ndarray:
    """Without EPLB: expert i on GPU i // (E / gpus), one copy each."""
    return load.reshape(gpus, -1).sum(1)


def imbalance(gpu_load: np.ndarray) -> float:
    """max / mean: the step waits for the busiest GPU (vLLM logs the inverse, 'balancedness')."""
    return float(gpu_load.max() / gpu_load.mean())


def brute_force(load: np.ndarray, slots: int, gpus: int) -> float:
    """The smallest possible max GPU load over every replica count vector and every placement of the
    replicas (each GPU exactly slots / gpus of them, a token's load split evenly over its expert's
    replicas). Exponential: only for a handful of experts."""
    e, per = len(load), slots // gpus
    best = math.inf
    for extra in itertools.product(range(slots - e + 1), repeat=e):
        if sum(extra) != slots - e:
            continue
        cnt = np.array(extra) + 1
        w = np.repeat(load / cnt, cnt)
        best = min(best, _best_partition(sorted(w, reverse=True), gpus, per))
    return best


def _best_partition(w: list[float], gpus: int, per: int) -> float:
    best = math.inf

    def place(i, bins, sizes):
        nonlocal best
        if max(bins) >= best:
            return
        if i == len(w):
            best = max(bins)
            return
        seen = set()
        for g in range(gpus):
            key = (bins[g], sizes[g])
            if sizes[g] < per and key not in seen:          # symmetric bins: try one of each
                seen.add(key)
                bins[g] += w[i]
                sizes[g] += 1
                place(i + 1, bins, sizes)
                bins[g] -= w[i]
                sizes[g] -= 1

    place(0, [0.0] * gpus, [0] * gpus)
    return best
# --8<-- [end:eplb]


def zipf_load(experts: int = V3.routed, s: float = 1.0, tokens: float = 1e6, seed: int = 0) -> np.ndarray:
    """Expert loads that follow Zipf's law with exponent s, randomly assigned to expert ids."""
    w = 1.0 / np.arange(1, experts + 1) ** s
    rng = np.random.default_rng(seed)
    return tokens * rng.permutation(w) / w.sum()


# ============================================================================ wide EP
# --8<-- [start:wide-ep]
def expert_bytes(fmt: str, c: V3Config = V3) -> float:
    """One SwiGLU expert (3 x h x 2048 weights). fp8: 1 byte + one FP32 scale per 128 x 128 block;
    nvfp4: 4 bits + one FP8 scale per 16 elements."""
    n = expert_params(c)
    return {"bf16": 2 * n, "fp8": n + 4 * n / (128 * 128), "nvfp4": n / 2 + n / 16}[fmt]


def updates_per_iter(slots_per_gpu: int, iters: int, layers: int = MOE_LAYERS) -> int:
    """Online EPLB rewrites a GPU's expert slots layer by layer; to refresh all of them within `iters` decode
    iterations a GPU must receive this many experts per iteration (TensorRT-LLM tech blog 4)."""
    return math.ceil(layers * slots_per_gpu / iters)


def decode_expert_read_us(slots_per_gpu: int, hbm_gbs: float, fmt: str = "fp8") -> float:
    """Time to stream one layer's experts of one GPU from HBM once (a decode step whose batch touches every
    expert): fewer experts per GPU, less time. This is the aggregate-bandwidth argument for wide EP."""
    return slots_per_gpu * expert_bytes(fmt) / (hbm_gbs * 1e3)
# --8<-- [end:wide-ep]


# ============================================================================ two-micro-batch overlap
# --8<-- [start:dbo]
def overlap_sim(segments: list[tuple[str, float]], layers: int) -> float:
    """Two micro-batches A and B run the same per-layer segments, each on resource 'comp' or 'comm'. Each
    resource executes one segment at a time, in ping-pong order (A's k-th segment on it, then B's), and a
    segment starts once its own micro-batch finished the previous one. Returns the makespan."""
    free = {"comp": 0.0, "comm": 0.0}
    done = {"A": 0.0, "B": 0.0}
    for _ in range(layers):
        for res, t in segments:
            for mb in ("A", "B"):
                start = max(free[res], done[mb])
                free[res] = done[mb] = start + t
    return max(done.values())


def dbo_closed_form(x: float, y: float, layers: int) -> float:
    """Two stages per layer, X on compute then Y on communication (DeepSeek's decode split: attention, then
    dispatch + MoE + combine). A's X runs alone, then 2L - 1 slots in which one micro-batch computes while the
    other communicates, then B's last Y alone."""
    return x + y + (2 * layers - 1) * max(x, y)


def dbo_step(n: int, layers: int, comp_fixed: float, comp_token: float, comm_fixed: float,
             comm_token: float) -> dict:
    """A batch of n tokens without overlap, and split into two halves of n / 2 with overlap. Fixed costs (weight
    reads, kernel and network latency) do not halve; per-token costs do."""
    x_full, y_full = comp_fixed + comp_token * n, comm_fixed + comm_token * n
    x, y = comp_fixed + comp_token * n / 2, comm_fixed + comm_token * n / 2
    serial, overlap = layers * (x_full + y_full), dbo_closed_form(x, y, layers)
    return {"serial": serial, "overlap": overlap, "speedup": serial / overlap}


def dbo_pays(n: int, comp_fixed: float, comp_token: float, comm_fixed: float, comm_token: float) -> bool:
    """Many layers: overlap costs 2 max(x, y) per layer against X + Y serial. When communication dominates
    (y >= x) this is comm_fixed < X(n): the compute that gets hidden must exceed the fixed cost that splitting
    pays twice; symmetrically comp_fixed < Y(n) when compute dominates."""
    x, y = comp_fixed + comp_token * n / 2, comm_fixed + comm_token * n / 2
    if y >= x:
        return comm_fixed < comp_fixed + comp_token * n
    return comp_fixed < comm_fixed + comm_token * n


def decode_layer_costs(context: int, hbm_gbs: float, ib_gbs: float = 50.0, alpha_us: float = 45.0,
                       nodes: int = 40, c: V3Config = V3) -> dict:
    """Per layer, per GPU, in microseconds, for DeepSeek's decode split. Compute stage X = DP attention:
    read the MLA weights once (fixed) and each token's latent KV of `context` tokens. Communication stage Y =
    low-latency dispatch (FP8) + combine (BF16) of 9 copies per token to GPUs on other nodes, each with a
    fixed alpha. The expert GEMM itself (one expert per GPU) is left out."""
    kv_token = (c.d_c + c.d_rope) * 2 * context
    copies = (c.topk + c.shared) * (1 - 1 / nodes)
    return {"comp_fixed": attention_weights_per_gpu(1, c) / c.layers / (hbm_gbs * 1e3),
            "comp_token": kv_token / (hbm_gbs * 1e3),
            "comm_fixed": 2 * alpha_us,
            "comm_token": copies * (fp8_bytes(c.h) + 2 * c.h) / (ib_gbs * 1e3)}
# --8<-- [end:dbo]


# ============================================================================ DeepSeek-V3 deployment units
# --8<-- [start:deployment]
def deployment_units(c: V3Config = V3) -> dict:
    """Section 3.4 of the DeepSeek-V3 report (minimum units), and the online system of DeepSeek's 2025-03
    inference overview. Everything not quoted is derived here and asserted by the test."""
    gpus_per_node = 8
    prefill = {"nodes": 4, "attn_tp": 4, "attn_dp": 8, "ep": 32, "redundant": 32}
    decode = {"nodes": 40, "attn_tp": 4, "attn_dp": 80, "ep": 320, "experts_per_gpu": 1}
    for u in (prefill, decode):
        u["gpus"] = u["nodes"] * gpus_per_node
        assert u["attn_tp"] * u["attn_dp"] == u["gpus"] == u["ep"]          # TP4 x DP = EP = all GPUs
    prefill["routed_per_gpu"] = c.routed // prefill["ep"]                    # 8 original experts
    prefill["slots"] = c.routed + prefill["redundant"]
    prefill["slots_per_gpu"] = prefill["slots"] // prefill["gpus"]           # 9 = 8 + 1 redundant
    decode["routed_gpus"] = c.routed                                         # one expert per GPU
    decode["redundant_and_shared_gpus"] = decode["gpus"] - c.routed          # 64
    decode["experts_per_token"] = c.topk + c.shared                          # shared treated as routed: 9
    online = {"prefill": {"nodes": 4, "ep": 32, "redundant": 32},
              "decode": {"nodes": 18, "ep": 144, "redundant": 32}}
    for u in online.values():
        u["gpus"] = u["nodes"] * gpus_per_node
        u["routed_per_gpu"] = (c.routed + u["redundant"]) // u["ep"]        # 9 and 2, plus 1 shared each
        u["expert_gb_per_gpu"] = MOE_LAYERS * (u["routed_per_gpu"] + 1) * expert_bytes("fp8") / 1e9
    return {"prefill": prefill, "decode": decode, "online": online}


def decode_tokens_per_gpu(batch_per_attn_group: int, c: V3Config = V3) -> float:
    """Tokens one decode GPU's expert receives per step when the 80 attention groups each run
    `batch_per_attn_group` requests and load is balanced: 80 B tokens x 9 copies over 320 GPUs."""
    u = deployment_units(c)["decode"]
    return u["attn_dp"] * batch_per_attn_group * u["experts_per_token"] / u["gpus"]
# --8<-- [end:deployment]
