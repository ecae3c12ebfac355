"""The DeepSeek-V3 training system, computed: a discrete-event simulator for 1F1B, ZB1P and DualPipe (the
DualPipe op order is a port of deepseek-ai/DualPipe's `DualPipe.step`), the bytes of the cross-node
all-to-all with and without node-limited routing, the low-precision and memory savings of §3.2.3/§3.3.3 of
the report (arXiv 2412.19437), Megatron-Core's three token dispatchers and MoE parallel folding.
Checked by tests/test_framework_dsv3_system.py; embedded by docs/framework/deepseek-v3-system.md; used by
notebooks/framework/dualpipe-lab.ipynb."""
from __future__ import annotations

import itertools
import math
from collections import deque
from dataclasses import dataclass

import numpy as np


# ============================================================================ schedule simulator
# --8<-- [start:simulator]
@dataclass(frozen=True)
class Cost:
    """Times of one chunk (one PP stage, one micro-batch): F forward, B full backward, W the weight-gradient
    part of B (so the input-gradient part is B - W), FB a forward and a backward chunk run overlapped."""
    F: float = 1.0
    B: float = 2.0
    W: float = 1.0
    FB: float = 2.5


def simulate(programs: list[list[tuple]], cost: Cost) -> dict:
    """Run one program per rank. A program is a list of actions, the way the real code drives NCCL:
    ("send", key) queues a message, ("recv", key) queues a receive, ("commit",) posts the queued sends
    (they arrive at the current time: zero-latency links) and waits for the queued receives, ("run", kind,
    label) computes for cost.<kind> (kind "Bi" = B - W). Ranks advance in round-robin until blocked."""
    dur = {"F": cost.F, "B": cost.B, "Bi": cost.B - cost.W, "W": cost.W, "FB": cost.FB}
    n = len(programs)
    pc, clock = [0] * n, [0.0] * n
    sends, recvs = [[] for _ in range(n)], [[] for _ in range(n)]
    arrived: dict = {}
    timeline = [[] for _ in range(n)]
    progress = True
    while progress:
        progress = False
        for r in range(n):
            while pc[r] < len(programs[r]):
                act = programs[r][pc[r]]
                if act[0] == "send":
                    sends[r].append(act[1])
                elif act[0] == "recv":
                    recvs[r].append(act[1])
                elif act[0] == "commit":
                    for key in sends[r]:
                        arrived[key] = clock[r]
                    sends[r] = []
                    if any(k not in arrived for k in recvs[r]):
                        break                      # blocked: the sender has not reached its commit yet
                    clock[r] = max([clock[r]] + [arrived[k] for k in recvs[r]])
                    recvs[r] = []
                else:
                    _, kind, label = act
                    timeline[r].append((kind, label, clock[r], clock[r] + dur[kind]))
                    clock[r] += dur[kind]
                pc[r] += 1
                progress = True
    assert all(pc[r] == len(programs[r]) for r in range(n)), "deadlock"
    end = max(clock)
    busy = [sum(e - s for *_, s, e in t) for t in timeline]
    return {"timeline": timeline, "makespan": end, "busy": busy, "idle": [end - b for b in busy]}
# --8<-- [end:simulator]


class _Rank:
    """Builds one rank's action list for a pipeline with two possible directions. Direction 0 flows
    rank 0 -> P-1 (this rank is stage r); direction 1 flows P-1 -> 0 (this rank is stage P-1-r).
    Message keys are (kind, direction, micro-batch, sending stage); FIFO counters give the micro-batch."""

    def __init__(self, rank: int, p: int):
        self.r, self.p, self.acts = rank, p, []
        self.n = {(what, d): 0 for what in ("F", "B", "rf", "rb", "sf", "sb") for d in (0, 1)}
        self.wq: deque = deque()              # deferred weight-gradient chunks (zero bubble)

    def stage(self, d):
        return self.r if d == 0 else self.p - 1 - self.r

    def _next(self, what, d):
        i = self.n[(what, d)]
        self.n[(what, d)] += 1
        return i

    def recv_forward(self, d):
        if self.stage(d) > 0:
            self.acts.append(("recv", ("F", d, self._next("rf", d), self.stage(d) - 1)))

    def recv_backward(self, d):
        if self.stage(d) < self.p - 1:
            self.acts.append(("recv", ("B", d, self._next("rb", d), self.stage(d) + 1)))

    def send_forward(self, d):
        if self.stage(d) < self.p - 1:
            self.acts.append(("send", ("F", d, self._next("sf", d), self.stage(d))))

    def send_backward(self, d):
        if self.stage(d) > 0:
            self.acts.append(("send", ("B", d, self._next("sb", d), self.stage(d))))

    def commit(self):
        self.acts.append(("commit",))

    def compute_f(self, d):
        self.acts.append(("run", "F", (("F", d, self._next("F", d)),)))

    def compute_b(self, d, zb=False):
        i = self._next("B", d)
        if zb:
            self.wq.append((d, i))
        self.acts.append(("run", "Bi" if zb else "B", (("B", d, i),)))

    def compute_fb(self, df, db):
        self.acts.append(("run", "FB", (("F", df, self._next("F", df)), ("B", db, self._next("B", db)))))

    def compute_w(self):
        self.acts.append(("run", "W", (("W",) + self.wq.popleft(),)))


# --8<-- [start:dualpipe]
def dualpipe_program(rank: int, p: int, m: int) -> list[tuple]:
    """DualPipe's op order on one rank, ported from deepseek-ai/DualPipe `DualPipe.step` (same eight steps,
    same deferred sends). m micro-batches in total, m/2 fed from each end; needs p even and m >= 2p.
    Local phase 0 is direction 0 on the first half of the ranks and direction 1 on the second half."""
    assert p % 2 == 0 and m % 2 == 0 and m >= 2 * p
    R, half = _Rank(rank, p), p // 2
    h = min(rank, p - 1 - rank)                       # position counted from the nearer end
    second = rank >= half
    middle = rank in (half - 1, half)
    ph = lambda x: x ^ second                         # local phase -> global direction

    def fwd(x, recv=True, send=True):
        if recv:
            R.recv_forward(ph(x))
        R.commit(); R.compute_f(ph(x))
        if send:
            R.send_forward(ph(x))

    def bwd(x, zb=False, recv=True, send=True):
        if recv:
            R.recv_backward(ph(x))
        R.commit(); R.compute_b(ph(x), zb)
        if send:
            R.send_backward(ph(x))

    def fwd_bwd(x0, x1, recv0=True):                  # one forward and one backward chunk, overlapped
        if recv0:
            R.recv_forward(ph(x0))
        R.recv_backward(ph(x1))
        R.commit(); R.compute_fb(ph(x0), ph(x1))
        R.send_forward(ph(x0)); R.send_backward(ph(x1))

    def weight():
        R.commit(); R.compute_w()

    for _ in range((half - h - 1) * 2):               # step 1: nF0
        fwd(0)
    R.recv_forward(ph(0))                             # step 2: nF0F1
    for i in range(h + 1):
        fwd(0, recv=False, send=middle)
        R.recv_forward(ph(0))
        fwd(1, send=(not middle) or (i < h))
        if not middle:
            R.send_forward(ph(0))
    for _ in range(half - h - 1):                     # step 3: nB1W1F1 (zero bubble)
        bwd(1, zb=True); R.recv_forward(ph(1)); weight(); fwd(1, recv=False)
    for i in range(m // 2 - p + h + 1):               # step 4: nF0B1F1B0, the steady state
        if i == 0 and middle:                         # not overlapped, to shorten the bubble
            fwd(0, recv=False, send=False); R.send_forward(ph(1))
            bwd(1, send=False); R.send_forward(ph(0)); R.send_backward(ph(1))
        else:
            fwd_bwd(0, 1, recv0=(i != 0))
        fwd_bwd(1, 0)
    for _ in range(half - h - 1):                     # step 5: nB1F1B0
        bwd(1); fwd_bwd(1, 0)
    zb = False                                        # step 6: nB1B0, second half with zero bubble
    for i in range(h + 1):
        if i == (h + 1) // 2 and h % 2 == 1:
            zb = True
        bwd(1, zb=zb)
        if i == (h + 1) // 2 and h % 2 == 0:
            zb = True
        bwd(0, zb=zb)
    for _ in range(half - h - 1):                     # step 7: nWB0
        weight(); bwd(0, zb=True)
    for _ in range(h + 1):                            # step 8: nW
        weight()
    assert not R.wq
    R.commit()
    return R.acts
# --8<-- [end:dualpipe]


def one_f_one_b_program(rank: int, p: int, m: int) -> list[tuple]:
    """1F1B (same op order as code/framework/pipeline.py one_f_one_b_order), one direction, full backward."""
    R = _Rank(rank, p)
    warm = min(p - 1 - rank, m)
    order = ["F"] * warm
    f = warm
    for _ in range(m):
        if f < m:
            order.append("F")
            f += 1
        order.append("B")
    for op in order:
        if op == "F":
            R.recv_forward(0); R.commit(); R.compute_f(0); R.send_forward(0)
        else:
            R.recv_backward(0); R.commit(); R.compute_b(0); R.send_backward(0)
    R.commit()
    return R.acts


def zb1p_program(rank: int, p: int, m: int) -> list[tuple]:
    """ZB-H1 (Qi et al. 2024), written 'ZB1P' in the DeepSeek-V3 report: 1F1B's order with the backward
    split into B (input gradient, on the critical path) and W (weight gradient). Rank r runs its first W
    after r extra B's, i.e. it keeps r weight gradients pending through the steady state, and runs them at
    the end; the in-flight activations stay at 1F1B's p - r."""
    R = _Rank(rank, p)
    warm = min(p - 1 - rank, m)
    order = ["F"] * warm
    f = b = 0
    f = warm
    lag = min(rank, m)                                # W's held back to fill the cooldown bubble
    while b < m:
        if f < m:
            order.append("F")
            f += 1
        order.append("B")
        b += 1
        if b > lag:
            order.append("W")
    order += ["W"] * lag
    for op in order:
        if op == "F":
            R.recv_forward(0); R.commit(); R.compute_f(0); R.send_forward(0)
        elif op == "B":
            R.recv_backward(0); R.commit(); R.compute_b(0, zb=True); R.send_backward(0)
        else:
            R.commit(); R.compute_w()
    R.commit()
    return R.acts


SCHEDULES = {"1f1b": one_f_one_b_program, "zb1p": zb1p_program, "dualpipe": dualpipe_program}


# --8<-- [start:table2]
def table2_bubble(schedule: str, p: int, c: Cost) -> float:
    """Table 2 of the DeepSeek-V3 report (also the DualPipe README): bubble per device."""
    return {"1f1b": (p - 1) * (c.F + c.B),
            "zb1p": (p - 1) * (c.F + c.B - 2 * c.W),
            "dualpipe": (p / 2 - 1) * (c.FB + c.B - 3 * c.W)}[schedule]


def run_schedule(schedule: str, p: int, m: int, c: Cost) -> dict:
    res = simulate([SCHEDULES[schedule](r, p, m) for r in range(p)], c)
    res["bubble"] = bubble(res, schedule, p, m, c)
    res["peak_activations"] = peak_in_flight(res["timeline"])
    return res


def bubble(res: dict, schedule: str, p: int, m: int, c: Cost) -> float:
    """Measured bubble: the largest per-rank idle time, makespan minus that rank's compute (an overlapped
    F&B pair counts as FB). For DualPipe the middle ranks idle longest; for 1F1B and ZB1P all ranks tie."""
    return max(res["idle"])


# --8<-- [end:table2]


def peak_in_flight(timeline_by_rank) -> list[int]:
    """Per rank, the most chunks whose forward has run and whose weight gradient has not (activations held)."""
    peaks = []
    for tl in timeline_by_rank:
        live, peak = set(), 0
        for kind, parts, _, _ in tl:
            for part in parts:
                if part[0] == "F":
                    live.add(part[1:])
                    peak = max(peak, len(live))
                elif part[0] == "B" and kind in ("B", "FB"):
                    live.discard(part[1:])
                elif part[0] == "W":
                    live.discard(part[1:])
        peaks.append(peak)
    return peaks


# ============================================================================ the model and its parameters
@dataclass(frozen=True)
class V3Config:
    """DeepSeek-V3 as in §4.2 of the report; vocabulary, dense FFN width and routing groups from the released
    config.json (vocab_size 129280, intermediate_size 18432, n_group 8, topk_group 4)."""
    layers: int = 61
    dense_layers: int = 3            # "all FFNs except for the first three layers" are MoE
    h: int = 7168
    heads: int = 128
    d_head: int = 128
    d_rope: int = 64
    d_c: int = 512                   # KV compression
    d_cq: int = 1536                 # query compression
    routed: int = 256
    shared: int = 1
    topk: int = 8
    f_expert: int = 2048
    f_dense: int = 18432
    vocab: int = 129280
    nodes: int = 8                   # routed experts of a layer live on 64 GPUs in 8 nodes
    gpus_per_node: int = 8
    max_nodes: int = 4               # node-limited routing, M


def attention_params(c: V3Config) -> int:
    q = c.h * c.d_cq + c.d_cq + c.d_cq * c.heads * (c.d_head + c.d_rope)
    kv = c.h * (c.d_c + c.d_rope) + c.d_c + c.d_c * c.heads * 2 * c.d_head
    return q + kv + c.heads * c.d_head * c.h + c.h          # + output projection + the layer's input norm


def expert_params(c: V3Config, f: int | None = None) -> int:
    return 3 * c.h * (f or c.f_expert)                        # SwiGLU: gate, up, down


def model_params(c: V3Config = V3Config()) -> dict:
    moe_layers = c.layers - c.dense_layers
    routed = moe_layers * c.routed * expert_params(c)
    dense_ffn = c.dense_layers * expert_params(c, c.f_dense)
    shared = moe_layers * (c.shared * expert_params(c) + c.routed * c.h + c.routed)   # + router and bias
    attn = c.layers * (attention_params(c) + c.h)                                       # + pre-FFN norm
    emb_head = 2 * c.vocab * c.h + c.h
    total = routed + dense_ffn + shared + attn + emb_head
    active = total - routed + moe_layers * c.topk * expert_params(c)
    return {"total": total, "active": active, "routed": routed, "non_routed": total - routed,
            "emb_head": emb_head}


# ============================================================================ cross-node all-to-all
# --8<-- [start:a2a]
def fp8_bytes(elements: int, tile: int = 128, scale_bytes: int = 4) -> int:
    """E4M3 payload plus one FP32 scale per 1x128 tile (the report's activation quantisation)."""
    return elements + math.ceil(elements / tile) * scale_bytes


def token_bytes(c: V3Config = V3Config()) -> dict:
    """One token's hidden vector on the wire: FP8 dispatch, BF16 combine (§3.3.3)."""
    return {"dispatch_fp8": fp8_bytes(c.h), "dispatch_bf16": 2 * c.h, "combine_bf16": 2 * c.h}


def nvlink_fanout(ib_gbs: float = 50.0, nvlink_gbs: float = 160.0, max_nodes: int = 4) -> dict:
    """Each token crosses IB once per target node and is forwarded inside the node over NVLink. While a GPU
    receives one token per IB time slot, its NVLink can forward nvlink/ib copies in the same time, so a token
    may pick that many experts per node at no extra cost: 3.2, and max_nodes x 3.2 = 12.8 ~ 13 experts."""
    per_node = nvlink_gbs / ib_gbs
    return {"experts_per_node": per_node, "max_experts": round(max_nodes * per_node)}


def sm_budget(comm_sms: int = 20, total_sms: int = 132, channels: int = 10) -> dict:
    return {"fraction": comm_sms / total_sms, "sms_per_channel": comm_sms // channels,
            "compute_sms": total_sms - comm_sms}
# --8<-- [end:a2a]


# ============================================================================ node-limited routing
# --8<-- [start:routing]
def route(scores: np.ndarray, c: V3Config = V3Config(), limit: bool = True) -> np.ndarray:
    """Top-k experts per token (rows of scores, shape (T, routed)). With the limit, as in §2.1.2 and the
    released inference code: score each node by the sum of its top k/M affinities, keep the best M nodes,
    then take the top-k experts among them. Experts are laid out node by node."""
    T, E = scores.shape
    if limit:
        per_node = scores.reshape(T, c.nodes, E // c.nodes)
        node_score = np.sort(per_node, axis=-1)[..., -(c.topk // c.max_nodes):].sum(-1)
        keep = np.argsort(-node_score, axis=-1)[:, :c.max_nodes]
        mask = np.full((T, c.nodes), -np.inf)
        np.put_along_axis(mask, keep, 0.0, axis=-1)
        scores = scores + np.repeat(mask, E // c.nodes, axis=-1)
    return np.argsort(-scores, axis=-1)[:, :c.topk]


def expected_distinct(groups: int, per_group: int, k: int) -> float:
    """k distinct experts drawn uniformly from groups x per_group: expected number of groups hit =
    groups (1 - C(E - per_group, k) / C(E, k))."""
    E = groups * per_group
    return groups * (1 - math.comb(E - per_group, k) / math.comb(E, k))


def routing_stats(experts: np.ndarray, c: V3Config = V3Config(), seed: int = 0) -> dict:
    """Per token: distinct nodes, distinct nodes other than the token's own (each costs one IB copy), and
    NVLink copies (each distinct target GPU other than the relay GPU that received the IB copy)."""
    rng = np.random.default_rng(seed)
    T = experts.shape[0]
    per_gpu = c.routed // (c.nodes * c.gpus_per_node)
    gpu = experts // per_gpu                                   # 0..63
    node = gpu // c.gpus_per_node
    src_gpu = rng.integers(0, c.nodes * c.gpus_per_node, T)    # where the token lives
    src_node, local = src_gpu // c.gpus_per_node, src_gpu % c.gpus_per_node
    rows = np.arange(T)[:, None]
    hit_node = np.zeros((T, c.nodes), bool)
    hit_node[rows, node] = True
    nodes = hit_node.sum(1)
    remote = nodes - hit_node[np.arange(T), src_node]
    hit_gpu = np.zeros((T, c.nodes * c.gpus_per_node), bool)
    hit_gpu[rows, gpu] = True
    relay = np.where(hit_node, np.arange(c.nodes) * c.gpus_per_node + local[:, None], -1)  # IB lands here
    relay[np.arange(T), src_node] = np.where(hit_node[np.arange(T), src_node], src_gpu, -1)
    relay_hit = np.take_along_axis(hit_gpu, np.maximum(relay, 0), 1) & (relay >= 0)
    nvl = hit_gpu.sum(1) - relay_hit.sum(1)
    return {"nodes": nodes.mean(), "remote_nodes": remote.mean(), "max_nodes": int(nodes.max()),
            "nvlink_copies": nvl.mean(), "naive_remote_copies": (node != src_node[:, None]).sum(1).mean()}
# --8<-- [end:routing]


def ib_time_per_layer(tokens_per_gpu: int, copies_per_token: float, c: V3Config = V3Config(),
                      ib_gbs: float = 50.0) -> float:
    """Seconds of one MoE layer's forward dispatch (FP8) + combine (BF16) on one GPU's IB link."""
    b = token_bytes(c)
    return tokens_per_gpu * copies_per_token * (b["dispatch_fp8"] + b["combine_bf16"]) / (ib_gbs * 1e9)


# ============================================================================ low-precision storage
# --8<-- [start:lowprec]
def optimizer_bytes_per_param(moment_bytes: int) -> int:
    """FP32 master weight + FP32 gradient (both kept in FP32 by the report) + two AdamW moments."""
    return 4 + 4 + 2 * moment_bytes


def low_precision_savings(c: V3Config = V3Config()) -> dict:
    n = model_params(c)["total"]
    tb = token_bytes(c)
    swiglu_in = 2 * c.f_expert                           # gate and up outputs of one expert for one token
    return {
        "adam_bytes_saved_total": n * (optimizer_bytes_per_param(4) - optimizer_bytes_per_param(2)),
        "adam_fraction_saved": 1 - optimizer_bytes_per_param(2) / optimizer_bytes_per_param(4),
        "dispatch_fraction_saved": 1 - tb["dispatch_fp8"] / tb["dispatch_bf16"],
        # per token per routed expert: BF16 SwiGLU input and output cached, vs FP8 input only (output recomputed)
        "swiglu_bf16": 2 * swiglu_in + 2 * c.f_expert,
        "swiglu_fp8": fp8_bytes(swiglu_in),
    }
# --8<-- [end:lowprec]


# ============================================================================ memory saving, §3.2.3
# --8<-- [start:memory]
def recompute_bytes_per_token_layer(c: V3Config = V3Config()) -> dict:
    """Activations not kept because they are recomputed in the backward pass, per token per layer.
    RMSNorm outputs (two on the hidden state, one on each compressed latent) feed FP8 linears, so caching
    them would cost FP8 bytes; the MLA up-projections' q, k, v feed attention and would be BF16."""
    norms = 2 * c.h + c.d_c + c.d_cq
    up = c.heads * (c.d_head + c.d_rope) + c.heads * 2 * c.d_head
    return {"norm_elems": norms, "up_elems": up, "norm_bytes": fp8_bytes(2 * c.h) + fp8_bytes(c.d_c)
            + fp8_bytes(c.d_cq), "up_bytes": 2 * up}


def per_gpu_params(c: V3Config = V3Config(), pp: int = 16, ep: int = 64) -> float:
    """Average parameters one GPU owns (one copy): non-routed weights split by PP, routed experts by PP x EP."""
    mp = model_params(c)
    return mp["non_routed"] / pp + mp["routed"] / (pp * ep)


def memory_savings(c: V3Config = V3Config(), pp: int = 16, ep: int = 64, seq: int = 4096) -> dict:
    r = recompute_bytes_per_token_layer(c)
    per_token_layer = r["norm_bytes"] + r["up_bytes"]
    layers_per_chunk = c.layers / pp
    return {
        "recompute_per_token_layer": per_token_layer,
        # DualPipe's peak: PP + 1 chunks in flight, each a micro-batch (assumed one 4K sequence) through
        # layers/PP layers
        "recompute_at_peak": per_token_layer * seq * layers_per_chunk * (pp + 1),
        "ema_fp32_per_gpu": 4 * per_gpu_params(c, pp, ep),
        # without co-location the deepest stage (output head + MTP) needs its own copy of the embedding
        # for MTP's lookups: BF16 weights + FP32 gradients of one vocab x h matrix
        "mtp_sharing": c.vocab * c.h * (2 + 4),
    }
# --8<-- [end:memory]


# ============================================================================ Megatron-Core token dispatchers
# --8<-- [start:dispatchers]
def dispatcher_bytes(tokens: int, k: int, h: int, ep: int, bytes_per: int = 2,
                     remote_nodes: float | None = None) -> dict:
    """Bytes one GPU sends in one MoE layer's forward (dispatch + combine), for T tokens per GPU.
    allgather: gather every token of the EP group, then reduce-scatter the outputs: 2 (ep-1) T h, no k.
    alltoall: each token's k copies, the (ep-1)/ep of them that live elsewhere: 2 T k h (ep-1)/ep.
    flex (DeepEP): one copy per remote target node on IB, fanned out on NVLink (remote_nodes per token)."""
    out = {"allgather": 2 * (ep - 1) * tokens * h * bytes_per,
           "alltoall": 2 * tokens * k * h * bytes_per * (ep - 1) / ep}
    if remote_nodes is not None:
        out["flex_ib"] = 2 * tokens * remote_nodes * h * bytes_per
    return out
# --8<-- [end:dispatchers]


# ============================================================================ MoE parallel folding
# --8<-- [start:folding]
def folding(world: int, attn: dict, moe: dict) -> dict:
    """Megatron-Core MoE parallel folding: attention uses TP x CP x DP x PP, the MoE layers ETP x EP x EDP x PP,
    over the same GPUs. Both products must equal the world size and PP is shared. Ranks are numbered with TP
    (or ETP) innermost and PP outermost, so the two meshes agree on every rank's pipeline stage."""
    a = attn["tp"] * attn["cp"] * attn["dp"] * attn["pp"]
    e = moe["etp"] * moe["ep"] * moe["edp"] * moe["pp"]
    if a != world or e != world or attn["pp"] != moe["pp"]:
        raise ValueError(f"invalid folding: attention {a}, experts {e}, world {world}")

    def groups(dims: list[tuple[str, int]], name: str):
        sizes = [n for _, n in dims]
        out = {}
        for rank in range(world):
            coord, rest = [], rank
            for n in sizes:
                coord.append(rest % n)
                rest //= n
            i = [d for d, _ in dims].index(name)
            members = []
            for j in range(sizes[i]):
                cc = coord.copy()
                cc[i] = j
                members.append(sum(x * math.prod(sizes[:t]) for t, x in enumerate(cc)))
            out[rank] = tuple(members)
        return sorted(set(out.values()))

    attn_dims = [("tp", attn["tp"]), ("cp", attn["cp"]), ("dp", attn["dp"]), ("pp", attn["pp"])]
    moe_dims = [("etp", moe["etp"]), ("ep", moe["ep"]), ("edp", moe["edp"]), ("pp", moe["pp"])]
    return {"tp": groups(attn_dims, "tp"), "ep": groups(moe_dims, "ep"), "pp": groups(attn_dims, "pp"),
            "pp_moe": groups(moe_dims, "pp")}


def expert_params_per_gpu(experts: int, moe_layers: int, h: int, f: int, pp: int, ep: int, etp: int) -> float:
    """Routed-expert parameters on one GPU: (experts / EP) whole experts per MoE layer, each split ETP ways,
    over the MoE layers of one pipeline stage."""
    if experts % ep:
        raise ValueError("experts must divide evenly among EP ranks")
    return moe_layers / pp * (experts // ep) * 3 * h * f / etp
# --8<-- [end:folding]
