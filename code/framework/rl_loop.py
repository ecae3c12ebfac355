"""A miniature RL post-training system: a GRPO trainer and a separate generation worker (docs/framework/rl-systems.md).

Two gloo ranks on loopback, started by dist_launch: rank 0 is the trainer (it owns the policy and the
optimizer), rank 1 is the generation worker (rollout engine: it samples answers, calls the checker for the
reward and sends the batch back). After every update the trainer broadcasts the new weights in bf16 buckets,
the way a trainer pushes weights into an inference engine; the worker copies them into its own copy of the
model. ``lag=0`` is the synchronous loop (generate, then train, then sync); ``lag=1`` runs generation one
step ahead, so each batch comes from the previous version of the weights: the trainer checks the staleness
bound and corrects with a clipped importance weight (the decoupled PPO objective of AReaL).

The task is verifiable: the prompt is L digits, the answer must be the same digits sorted; the reward is the
fraction of answer positions that are right, computed by a checker, not by a learned model. The policy is a
tiny MLP that reads the prompt, the answer so far and the position, and outputs the next digit.

Also here: the placement, weight-sync and generation-vs-training cost models the page derives, checked by
tests/test_framework_rl_loop.py.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F


# --8<-- [start:task]
@dataclass(frozen=True)
class Config:
    length: int = 4          # L digits in a prompt, L digits in the answer
    vocab: int = 6           # digits 0 .. vocab-1
    hidden: int = 64
    prompts: int = 16        # prompts per batch
    group: int = 8           # G answers sampled per prompt (the GRPO group)
    iters: int = 60
    lr: float = 3e-3
    epochs: int = 2          # optimizer steps per batch (so the PPO clip can act)
    clip: float = 0.2        # PPO clip on pi_theta / pi_prox
    iw_cap: float = 2.0      # cap on the behaviour importance weight pi_prox / pi_behav
    lag: int = 0             # 0: synchronous; 1: generation runs one version ahead
    max_staleness: int = 1   # the trainer refuses a batch older than this many versions
    bucket_bytes: int = 4096 # weight-sync bucket size
    seed: int = 0


def checker(prompts: torch.Tensor, answers: torch.Tensor) -> torch.Tensor:
    """Verifiable reward: the fraction of positions where the answer equals the sorted prompt."""
    return (answers == prompts.sort(dim=-1).values).float().mean(-1)


def make_policy(cfg: Config) -> torch.nn.Module:
    d_in = 2 * cfg.length * cfg.vocab + cfg.length      # one-hot prompt, one-hot answer so far, position
    return torch.nn.Sequential(
        torch.nn.Linear(d_in, cfg.hidden), torch.nn.Tanh(),
        torch.nn.Linear(cfg.hidden, cfg.hidden), torch.nn.Tanh(),
        torch.nn.Linear(cfg.hidden, cfg.vocab))


def param_count(cfg: Config) -> int:
    """Closed form for make_policy: each Linear(i, o) has i*o weights and o biases."""
    d_in = 2 * cfg.length * cfg.vocab + cfg.length
    dims = [(d_in, cfg.hidden), (cfg.hidden, cfg.hidden), (cfg.hidden, cfg.vocab)]
    return sum(i * o + o for i, o in dims)
# --8<-- [end:task]


def _features(cfg: Config, prompts: torch.Tensor, answers: torch.Tensor) -> torch.Tensor:
    """Inputs for every answer position at once (teacher forcing): row (n, j) sees answers[n, :j]."""
    n, L, V = prompts.shape[0], cfg.length, cfg.vocab
    p = F.one_hot(prompts, V).float().reshape(n, 1, L * V).expand(n, L, L * V)
    a = F.one_hot(answers, V).float()                                   # (n, L, V)
    mask = torch.tril(torch.ones(L, L), diagonal=-1)                    # position j sees answers < j
    prev = (mask[None, :, :, None] * a[:, None, :, :]).reshape(n, L, L * V)
    pos = torch.eye(L).expand(n, L, L)
    return torch.cat([p, prev, pos], dim=-1)


def token_logprobs(cfg: Config, policy, prompts, answers) -> torch.Tensor:
    """log pi(answer_j | prompt, answer_<j) for every position: (n, L)."""
    logits = policy(_features(cfg, prompts, answers))
    return torch.log_softmax(logits, -1).gather(-1, answers[..., None])[..., 0]


@torch.no_grad()
def generate(cfg: Config, policy, prompts: torch.Tensor, gen: torch.Generator):
    """Autoregressive sampling, one position at a time: L sequential forward passes (the decode loop)."""
    n, L = prompts.shape
    answers = torch.zeros(n, L, dtype=torch.long)
    logps = torch.zeros(n, L)
    for j in range(L):
        logits = policy(_features(cfg, prompts, answers)[:, j])
        logp = torch.log_softmax(logits, -1)
        tok = torch.multinomial(logp.exp(), 1, generator=gen)[:, 0]
        answers[:, j] = tok
        logps[:, j] = logp.gather(-1, tok[:, None])[:, 0]
    return answers, logps


# --8<-- [start:grpo]
def grpo_advantages(rewards: torch.Tensor, group: int, eps: float = 1e-6) -> torch.Tensor:
    """rewards: (prompts * group,) laid out prompt-major. Each answer's advantage is its reward standardised
    within its own group (sample std, as in code/algorithm/lora_dpo.py); a group whose answers all score the
    same gets advantage 0 and contributes no gradient."""
    r = rewards.reshape(-1, group)
    adv = (r - r.mean(-1, keepdim=True)) / (r.std(-1, keepdim=True) + eps)
    return adv.reshape(-1)


def policy_loss(logp, logp_prox, logp_behav, adv, clip: float, iw_cap: float):
    """Decoupled PPO-clip loss per token (AReaL): the trust region is taken around the proximal policy
    pi_prox (the trainer's weights before this update), and the gap between pi_prox and the stale
    behaviour policy pi_behav that generated the tokens is corrected by an importance weight, capped.
    With fresh data pi_behav = pi_prox, the weight is 1 and this is ordinary GRPO/PPO-clip."""
    ratio = torch.exp(logp - logp_prox)
    iw = torch.exp(logp_prox - logp_behav).clamp(max=iw_cap)
    a = adv[:, None]
    surrogate = torch.minimum(ratio * a, ratio.clamp(1 - clip, 1 + clip) * a)
    return -(iw * surrogate).mean(), iw
# --8<-- [end:grpo]


# --8<-- [start:sync]
def flat_buckets(params, bucket_bytes: int, dtype=torch.bfloat16):
    """Cast to the engine's dtype and pack consecutive tensors into flat buckets of at most bucket_bytes
    (a tensor larger than a bucket gets one of its own): one collective per bucket, not per tensor."""
    esize = torch.empty((), dtype=dtype).element_size()
    buckets, cur, size = [], [], 0
    for p in params:
        nbytes = p.numel() * esize
        if cur and size + nbytes > bucket_bytes:
            buckets.append(cur)
            cur, size = [], 0
        cur.append(p)
        size += nbytes
    if cur:
        buckets.append(cur)
    return buckets


def sync_weights(policy, cfg: Config, src: int = 0) -> dict:
    """Trainer (src) broadcasts every parameter in bf16 buckets; the worker unpacks them into its model.
    Returns the bytes this rank moved and the wall time."""
    import torch.distributed as dist

    t0 = time.perf_counter()
    nbytes = 0
    with torch.no_grad():
        for bucket in flat_buckets(list(policy.parameters()), cfg.bucket_bytes):
            flat = torch.cat([p.detach().reshape(-1) for p in bucket]).to(torch.bfloat16)
            dist.broadcast(flat, src=src)
            nbytes += flat.numel() * flat.element_size()
            if dist.get_rank() != src:
                off = 0
                for p in bucket:
                    p.copy_(flat[off:off + p.numel()].view_as(p).float())
                    off += p.numel()
    return {"bytes": nbytes, "s": time.perf_counter() - t0}
# --8<-- [end:sync]


def _pack(batch: dict) -> torch.Tensor:
    """One message per batch: digits, log-probs, rewards and the version in one float32 tensor
    (small integers are exact in float32), so a batch costs one send instead of five."""
    n = batch["prompts"].shape[0]
    return torch.cat([batch["prompts"].float(), batch["answers"].float(), batch["logp"],
                      batch["reward"][:, None], batch["version"].float().expand(n)[:, None]], dim=1)


def _unpack(cfg: Config, flat: torch.Tensor) -> dict:
    L = cfg.length
    return {"prompts": flat[:, :L].long(), "answers": flat[:, L:2 * L].long(), "logp": flat[:, 2 * L:3 * L],
            "reward": flat[:, 3 * L], "version": flat[0, 3 * L + 1].long().reshape(1)}


def _send_batch(batch: dict, dst: int):
    import torch.distributed as dist

    dist.send(_pack(batch), dst=dst)


def _recv_batch(cfg: Config, src: int) -> dict:
    import torch.distributed as dist

    flat = torch.zeros(cfg.prompts * cfg.group, 3 * cfg.length + 2)
    dist.recv(flat, src=src)
    return _unpack(cfg, flat)


# --8<-- [start:workers]
def generation_worker(cfg: Config, crash_at: int | None = None) -> dict:
    """Rank 1: the rollout engine. lag=0: wait for weights v_k, generate batch k, send it.
    lag=1: send batch k (made with v_{k-1}), then generate batch k+1 with v_k while the trainer
    trains, then take v_{k+1}."""
    import os

    torch.manual_seed(cfg.seed)                   # same initial weights as the trainer (then overwritten)
    policy = make_policy(cfg)
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    version, gen_s, sync = 0, [], []

    def rollout():
        t0 = time.perf_counter()
        prompts = torch.randint(0, cfg.vocab, (cfg.prompts, cfg.length), generator=gen)
        prompts = prompts.repeat_interleave(cfg.group, dim=0)          # G answers per prompt
        answers, logp = generate(cfg, policy, prompts, gen)
        out = {"prompts": prompts, "answers": answers, "logp": logp,
               "reward": checker(prompts, answers), "version": torch.tensor([version])}
        gen_s.append(time.perf_counter() - t0)
        return out

    sync.append(sync_weights(policy, cfg))                              # v_0
    batch = rollout() if cfg.lag else None
    for k in range(cfg.iters):
        if crash_at is not None and k == crash_at:
            os._exit(3)                                                  # a worker dying mid-run
        if cfg.lag == 0:
            batch = rollout()                                            # with v_k
        _send_batch(batch, dst=0)
        if k + 1 < cfg.iters:
            if cfg.lag:
                batch = rollout()                                        # batch k+1 with v_k, overlapping training
            sync.append(sync_weights(policy, cfg))                      # v_{k+1}
            version += 1
    return {"gen_s": gen_s, "sync": sync}


def trainer(cfg: Config) -> dict:
    """Rank 0: owns the policy and the optimizer; receives batches, checks staleness, runs GRPO, pushes weights."""
    torch.manual_seed(cfg.seed)
    policy = make_policy(cfg)
    opt = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    log = {"reward": [], "staleness": [], "iw_max": [], "iw_clipped": [], "iter_s": [], "wait_s": [],
           "train_s": [], "sync": [], "adv_check": None}
    log["sync"].append(sync_weights(policy, cfg))                       # v_0
    t_iter = time.perf_counter()
    for k in range(cfg.iters):
        t0 = time.perf_counter()
        batch = _recv_batch(cfg, src=1)
        log["wait_s"].append(time.perf_counter() - t0)
        staleness = k - int(batch["version"])
        if not 0 <= staleness <= cfg.max_staleness:
            raise RuntimeError(f"batch {k} made by version {int(batch['version'])}: staleness {staleness} "
                               f"exceeds the bound {cfg.max_staleness}")
        t0 = time.perf_counter()
        adv = grpo_advantages(batch["reward"], cfg.group)
        if k == 0:
            log["adv_check"] = {"reward": batch["reward"].tolist(), "adv": adv.tolist()}
        with torch.no_grad():                                           # pi_prox: the weights before this update
            logp_prox = token_logprobs(cfg, policy, batch["prompts"], batch["answers"])
        for _ in range(cfg.epochs):
            logp = token_logprobs(cfg, policy, batch["prompts"], batch["answers"])
            loss, iw = policy_loss(logp, logp_prox, batch["logp"], adv, cfg.clip, cfg.iw_cap)
            opt.zero_grad()
            loss.backward()
            opt.step()
        log["train_s"].append(time.perf_counter() - t0)
        raw_iw = torch.exp(logp_prox - batch["logp"])
        log["iw_max"].append(float(raw_iw.max()))
        log["iw_clipped"].append(float((raw_iw > cfg.iw_cap).float().mean()))
        log["reward"].append(float(batch["reward"].mean()))
        log["staleness"].append(staleness)
        if k + 1 < cfg.iters:
            log["sync"].append(sync_weights(policy, cfg))               # v_{k+1}
        now = time.perf_counter()
        log["iter_s"].append(now - t_iter)
        t_iter = now
    log["n_params"] = sum(p.numel() for p in policy.parameters())
    return log


def worker(rank: int, world_size: int, cfg_dicts: list, crash_at: int | None = None) -> list:
    """Entry point for dist_launch: rank 0 trains, rank 1 generates; one run per config, in the same two
    processes (starting processes costs more than this whole miniature run)."""
    import torch.distributed as dist

    logs = []
    for d in cfg_dicts:
        cfg = Config(**d)
        logs.append(trainer(cfg) if rank == 0 else generation_worker(cfg, crash_at))
        dist.barrier()
    return logs
# --8<-- [end:workers]


def run(cfgs: list, crash_at: int | None = None, timeout: float = 120.0) -> list:
    """Run each config on a trainer + generation-worker pair; returns [(trainer_log, worker_log), ...]."""
    import dist_launch

    trainer_logs, worker_logs = dist_launch.launch(worker, 2, [asdict(c) for c in cfgs], crash_at,
                                                   timeout=timeout)
    return list(zip(trainer_logs, worker_logs))


# ---------------------------------------------------------------------------------------------------------
# Cost models of the page (tests/test_framework_rl_loop.py asserts the numbers the page quotes).

# --8<-- [start:gen_cost]
def rollout_vs_train_s(lengths, psi: float, prompt_len: int, kv_bytes_per_token: float, hbm_bw: float,
                       flops: float, mfu: float = 0.4, train_flops_per_token_per_param: float = 10.0) -> dict:
    """One GPU, one iteration: decode its share of responses, then train on them.
    Decode: every step reads the bf16 weights (2*psi bytes) plus the KV cache of the still-running sequences,
    and makes one token per running sequence; it is memory-bound, so a step costs bytes / hbm_bw (or the FLOPs
    2*psi*batch / flops if that is larger). Training touches each generated token once with
    6*psi (forward + backward of the update) + 2*psi (pi_prox log-probs) + 2*psi (reference) FLOPs."""
    import numpy as np

    lengths = np.sort(np.asarray(lengths, dtype=np.int64))
    steps = int(lengths[-1])
    s = np.arange(1, steps + 1)
    running = len(lengths) - np.searchsorted(lengths, s, side="left")          # sequences with length >= s
    # KV read at step s: each running sequence holds prompt_len + s - 1 tokens
    kv_bytes = running * (prompt_len + s - 1) * kv_bytes_per_token
    mem_s = (2 * psi + kv_bytes) / hbm_bw
    comp_s = 2 * psi * running / (flops * mfu)
    gen = float(np.maximum(mem_s, comp_s).sum())
    train = float(lengths.sum() * train_flops_per_token_per_param * psi / (flops * mfu))
    return {"gen_s": gen, "train_s": train, "gen_share": gen / (gen + train),
            "mean_batch": float(running.mean()), "tail_steps": int((running < len(lengths) / 4).sum()),
            "steps": steps, "peak_kv_gb": float(kv_bytes.max() / 1e9)}
# --8<-- [end:gen_cost]


# --8<-- [start:placement]
def placement_memory_gb(psi: float, n_gpus: int, n_gen: int, tp_gen: int, gpu_gb: float,
                        reserve_gb: float = 10.0) -> dict:
    """Per-GPU memory (GB, 1e9 bytes) of the three placements, activations not counted (reserve_gb for them,
    the allocator and CUDA graphs). Trainer: mixed-precision Adam, 16 bytes/param, sharded ZeRO-3/FSDP over
    its GPUs, plus a frozen bf16 reference sharded the same way (2 bytes/param). Engine: bf16 weights
    split tp_gen ways (2 bytes/param); what is left is the KV-cache budget."""
    gb = 1e9
    train_state = lambda n: (16 + 2) * psi / n / gb                    # noqa: E731  trainer + reference
    engine_w = 2 * psi / tp_gen / gb
    resident = train_state(n_gpus) + engine_w                           # colocated, nothing offloaded
    n_train = n_gpus - n_gen
    return {
        "colocated": {"static": resident, "kv": gpu_gb - reserve_gb - resident},
        # sleep mode: during generation the trainer's states sit in host memory, during training the
        # engine's weights are offloaded and its KV cache freed
        "colocated_offload": {"train_phase": train_state(n_gpus), "gen_phase_static": engine_w,
                              "kv": gpu_gb - reserve_gb - engine_w,
                              "host_bytes_per_switch_gb": train_state(n_gpus)},
        "disaggregated": {"train_gpu": train_state(n_train), "gen_gpu_static": engine_w,
                          "kv": gpu_gb - reserve_gb - engine_w, "n_train": n_train, "n_gen": n_gen},
    }


def response_lengths(n: int, mean: float, cap: int):
    """n response lengths, deterministic: the quantiles of an exponential with this mean, cut at cap
    (the max_response_length); reasoning traces have such a long tail."""
    import numpy as np

    q = (np.arange(n) + 0.5) / n
    return np.minimum(np.ceil(-mean * np.log1p(-q)), cap).astype(np.int64)


def placement_time(gen_s, train_s: float, n_gpus: int, n_gen: int, switch_s: float = 0.0,
                   sync_s: float = 0.0) -> dict:
    """Iteration time (s) and idle GPU share of the three placements for one batch of responses.
    gen_s(n): generation time when n GPUs share the batch (decode does not scale linearly: fewer GPUs
    means a bigger batch per GPU, and a memory-bound step costs about the same). train_s: training time on
    all n_gpus (scales linearly: n_gpus / n_train longer on n_train GPUs).
    colocated: generation then training on the same GPUs, plus the switch (offload and reload).
    disaggregated, synchronous: each pool waits for the other. disaggregated, one step off: the pools
    overlap and the slower one sets the pace. Idle = GPU-seconds with nothing to run / (n_gpus * T)."""
    n_train = n_gpus - n_gen
    g_all, g_pool, t_pool = gen_s(n_gpus), gen_s(n_gen), train_s * n_gpus / n_train
    t_col = g_all + train_s + switch_s
    t_sync = g_pool + t_pool + sync_s
    t_async = max(g_pool, t_pool) + sync_s
    return {
        "colocated": {"t": t_col, "idle": switch_s / t_col},
        "disaggregated_sync": {"t": t_sync, "idle": (n_gen * (t_pool + sync_s) + n_train * (g_pool + sync_s))
                               / (n_gpus * t_sync)},
        "disaggregated_async": {"t": t_async, "idle": (n_gen * (t_async - g_pool) + n_train * (t_async - t_pool))
                                / (n_gpus * t_async)},
    }
# --8<-- [end:placement]


# --8<-- [start:sync_cost]
def weight_sync_cost(psi: float, bytes_per_param: int, link_gbps: float, train_split: int = 1,
                     tp_gen: int = 1) -> dict:
    """Bytes and time of one weight sync at link bandwidth link_gbps (GB/s, one direction).
    Every engine GPU must end up with its 1/tp_gen slice: psi * bytes_per_param / tp_gen bytes.
    Colocated, 3D-HybridEngine style (HybridFlow section 5): training splits the weights train_split = p*t
    ways (pipeline x tensor parallel), the generation groups are laid out so that a GPU's engine slice
    contains its own training slice, and it gathers only the rest. Disaggregated: the whole slice crosses
    from the trainer's GPUs."""
    total = psi * bytes_per_param
    need = total / tp_gen
    colocated = need - min(need, total / train_split)
    return {"total_bytes": total, "per_engine_gpu_bytes": need,
            "disaggregated_s": need / (link_gbps * 1e9),
            "colocated_gather_bytes": colocated, "colocated_s": colocated / (link_gbps * 1e9)}
# --8<-- [end:sync_cost]
