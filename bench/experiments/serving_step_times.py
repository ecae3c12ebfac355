"""Prefill and decode step times of a 1B Llama-shaped decoder (random bf16 weights) on one GPU."""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

TITLE = "1B Llama 形状解码器的 prefill 与 decode 单步耗时（bf16，CUDA Graph 回放，另记逐算子启动的 eager 耗时）"
USED_BY = ["docs/framework/llm-inference.md"]

PREFILL = [(1, 128), (1, 512), (1, 1024), (1, 2048), (1, 4096), (1, 8192), (4, 512), (4, 2048), (16, 512)]
DECODE_BATCH = [1, 4, 16, 64, 128, 256]
DECODE_CONTEXT = [512, 2048, 8192]
CHUNKS = [(512, 512), (512, 2048), (512, 6144), (2048, 2048)]  # (chunk tokens, cached prefix) of one sequence
MAX_CACHED_TOKENS = 2**20  # batch x context; 32 KiB of KV per token -> at most 32 GiB of cache


def _time_ms(torch, fn, reps: int) -> list[float]:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end))
    return out


def _rel_err(a, b) -> float:
    """Relative L2 error of logits (bf16 paths differ in rounding, not in meaning)."""
    return float((a.float() - b.float()).norm() / b.float().norm())


def _capture(torch, step):
    """Warm up on a side stream, capture one step in a CUDA Graph, replay it once."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    graph.replay()
    torch.cuda.synchronize()
    return graph, out


def run(torch) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "code" / "framework"))
    import serving_model as sm

    cfg = sm.LLAMA_1B
    torch.manual_seed(0)
    weight_bytes_read = 2 * (cfg.params - cfg.vocab * cfg.hidden)  # every weight but the embedding table
    prefill, decode = [], []
    model = sm.Decoder(cfg, device="cuda")  # random weights made on the GPU once; a new cache per shape
    for batch, tokens in PREFILL:
        model.allocate_cache(batch, tokens)
        ids = torch.randint(0, cfg.vocab, (batch, tokens), device="cuda")
        for _ in range(3):
            model.prefill(ids)
        eager = _time_ms(torch, lambda: model.prefill(ids), 10)
        graph, static_out = _capture(torch, lambda: model.prefill(ids))
        times = _time_ms(torch, graph.replay, 10)
        body = cfg.params - 2 * cfg.vocab * cfg.hidden  # the layers' weights (no embedding, no head)
        flops = 2 * batch * tokens * body + 2 * batch * cfg.vocab * cfg.hidden \
            + 2 * batch * cfg.layers * cfg.hidden * tokens * tokens  # head on the last token; QK^T and PV, causal half of 4*h*T^2
        ms = statistics.median(times)
        prefill.append({"batch": batch, "tokens": tokens, "median_ms": ms, "min_ms": min(times),
                        "eager_median_ms": statistics.median(eager), "tflops": flops / ms / 1e9})
        del graph, static_out
        model.allocate_cache(0, 0)
        torch.cuda.empty_cache()
    chunked = []
    for chunk, prefix in CHUNKS:  # a prefill chunk after a cached prefix, as chunked prefill runs it
        model.allocate_cache(1, prefix + chunk)
        ids = torch.randint(0, cfg.vocab, (1, prefix + chunk), device="cuda")
        whole = model.prefill(ids)
        model.prefill(ids[:, :prefix])
        graph, static_out = _capture(torch, lambda: model.prefill(ids[:, prefix:], start=prefix))
        if _rel_err(static_out, whole) > 2e-2:
            raise AssertionError(f"chunk after a prefix of {prefix} differs from the whole prefill")
        times = _time_ms(torch, graph.replay, 10)
        chunked.append({"chunk": chunk, "prefix": prefix, "median_ms": statistics.median(times), "min_ms": min(times)})
        del graph, static_out
        model.allocate_cache(0, 0)
        torch.cuda.empty_cache()
    for context in DECODE_CONTEXT:
        for batch in DECODE_BATCH:
            if batch * context > MAX_CACHED_TOKENS:
                continue
            model.allocate_cache(batch, context + 1)
            ids = torch.randint(0, cfg.vocab, (batch,), device="cuda")
            pos = context  # the cache holds `context` tokens (random values: time does not depend on them)
            eager = model.decode(ids, pos)
            graph, static_out = _capture(torch, lambda: model.decode(ids, pos))
            if _rel_err(static_out, eager) > 2e-2:
                raise AssertionError(f"graph replay differs from eager at batch {batch}, context {context}")
            eager_ms = statistics.median(_time_ms(torch, lambda: model.decode(ids, pos), 10))
            times = _time_ms(torch, graph.replay, 30)
            ms = statistics.median(times)
            bytes_read = weight_bytes_read + batch * context * cfg.kv_bytes_per_token()
            decode.append({"batch": batch, "context": context, "median_ms": ms, "min_ms": min(times),
                           "eager_median_ms": eager_ms, "bytes_read": bytes_read,
                           "gbps": bytes_read / ms / 1e6, "tokens_per_s": batch / ms * 1e3})
            del graph, static_out
            model.allocate_cache(0, 0)
            torch.cuda.empty_cache()
    return {"model": {"config": "Llama-3.2-1B shape, untied head, random bf16 weights", "params": cfg.params,
                      "weight_bytes_read_per_step": weight_bytes_read,
                      "kv_bytes_per_token": cfg.kv_bytes_per_token()},
            "attention": "torch.nn.functional.scaled_dot_product_attention (enable_gqa=True)",
            "timing": "CUDA events around one CUDA Graph replay of a step, median of 10 (prefill) or 30 (decode); eager_median_ms: the same step launched op by op",
            "prefill": prefill, "chunked_prefill": chunked, "decode": decode}
