"""Back-of-the-envelope planner for dense decoder-only LLM training on H200-class GPUs: per-GPU memory and
step time (compute at an assumed kernel efficiency + TP/DP communication + pipeline bubble), MFU.
Every number on docs/framework/parallelism-planning.md comes from here and is asserted by
tests/test_framework_parallel.py. Assumptions are parameters, not facts."""
from __future__ import annotations

from dataclasses import dataclass

PEAK_BF16 = 989e12  # H200 SXM dense bf16 FLOP/s (NVIDIA datasheet)
NVLINK_BW = 450e9  # bytes/s per direction per GPU (900 GB/s bidirectional)
NIC_BW = 50e9  # bytes/s, one 400 Gb/s NIC per GPU
HBM = 141e9  # bytes per GPU


@dataclass(frozen=True)
class LLM:
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int  # SwiGLU intermediate size (three matrices)
    vocab: int

    @property
    def params(self) -> int:
        h, hk = self.hidden, self.hidden * self.kv_heads // self.heads
        per_layer = 2 * h * h + 2 * h * hk + 3 * h * self.ffn + 2 * h
        return self.layers * per_layer + 2 * self.vocab * h  # untied embedding and LM head


LLAMA2_7B = LLM("Llama-2-7B", 32, 4096, 32, 32, 11008, 32000)
LLAMA3_70B = LLM("Llama-3-70B", 80, 8192, 64, 8, 28672, 128256)


# --8<-- [start:plan]
def plan(m: LLM, gpus: int, tp: int, pp: int, zero: int, seq: int = 4096, micro: int = 1,
         global_tokens: float = 4 * 2**20, eff: float = 0.7, gpus_per_node: int = 8) -> dict:
    """One configuration. dp = gpus / (tp pp). ZeRO stage over the DP group; TP with sequence parallelism;
    1F1B pipeline; selective recomputation (FlashAttention): activations 34 s b h per layer / tp.
    eff = fraction of peak the kernels reach (an assumption). Communication not overlapped is charged:
    TP all-reduces fully, DP only the part that exceeds the backward time."""
    dp = gpus // (tp * pp)
    psi = m.params / (tp * pp)  # parameters held by one model-parallel shard
    shard = dp if zero else 1
    mem = {"params": 2 * psi / (shard if zero >= 3 else 1), "grads": 2 * psi / (shard if zero >= 2 else 1),
           "optim": 12 * psi / (shard if zero >= 1 else 1)}
    layers_per_stage = m.layers / pp
    in_flight = pp  # 1F1B: stage 0 holds p micro-batches
    mem["activations"] = in_flight * layers_per_stage * 34 * seq * micro * m.hidden / tp
    mem["total"] = sum(mem.values())

    tokens_per_replica = global_tokens / dp
    n_micro = tokens_per_replica / (seq * micro)
    flops_per_token = 6 * m.params + 12 * m.layers * m.hidden * seq  # model FLOPs (PaLM's formula)
    t_compute = tokens_per_replica * flops_per_token / (tp * pp) / (PEAK_BF16 * eff)
    bw_tp = NVLINK_BW if tp <= gpus_per_node else NIC_BW
    tp_bytes = (4 * 2 * (tp - 1) / tp * seq * micro * m.hidden * 2 * layers_per_stage * n_micro) if tp > 1 else 0.0
    t_tp = tp_bytes / bw_tp
    t_bubble = (pp - 1) / n_micro * (t_compute + t_tp)
    # DP traffic per GPU (bf16 gradients, 2 psi bytes per replica). Across nodes, the g = 8 / (tp pp) members of
    # a DP group that share a node reduce inside it first, so each NIC carries 2 (M-1)/M * S / g (M nodes).
    g = max(1, gpus_per_node // (tp * pp)) if gpus > gpus_per_node else dp
    nodes = dp // g
    if nodes > 1:
        dp_bytes, bw_dp = 2 * (nodes - 1) / nodes * 2 * psi / g, NIC_BW
    else:
        dp_bytes, bw_dp = 2 * (dp - 1) / dp * 2 * psi, NVLINK_BW
    if zero >= 3:  # parameters all-gathered in forward and backward and gradients reduce-scattered, EVERY micro-batch
        dp_bytes *= 1.5 * n_micro
    t_dp = dp_bytes / bw_dp
    t_dp_exposed = max(0.0, t_dp - (2 / 3) * t_compute)  # overlappable with backward (2/3 of compute)
    t_step = t_compute + t_tp + t_bubble + t_dp_exposed
    mfu = global_tokens * flops_per_token / (gpus * PEAK_BF16 * t_step)
    return {"dp": dp, "mem": mem, "fits": mem["total"] < 0.85 * HBM, "n_micro": n_micro,
            "t_compute": t_compute, "t_tp": t_tp, "t_bubble": t_bubble, "t_dp": t_dp, "t_step": t_step, "mfu": mfu}
# --8<-- [end:plan]
