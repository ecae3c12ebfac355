"""Prefill and decode step times of a 1B Llama-shaped decoder (random bf16 weights) on one GPU."""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

TITLE = "1B Llama 形状解码器的 prefill 与 decode 单步耗时（bf16，decode 用 CUDA Graph）"
USED_BY = ["docs/framework/llm-inference.md"]

PREFILL = [(1, 128), (1, 512), (1, 1024), (1, 2048), (1, 4096), (1, 8192), (4, 512), (4, 2048), (16, 512)]
DECODE_BATCH = [1, 4, 16, 64, 128, 256]
DECODE_CONTEXT = [512, 2048, 8192]
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
        times = _time_ms(torch, lambda: model.prefill(ids), 10)
        body = cfg.params - 2 * cfg.vocab * cfg.hidden  # the layers' weights (no embedding, no head)
        flops = 2 * batch * tokens * body + 2 * batch * cfg.vocab * cfg.hidden \
            + 2 * batch * cfg.layers * cfg.hidden * tokens * tokens  # head on the last token; QK^T and PV, causal half of 4*h*T^2
        ms = statistics.median(times)
        prefill.append({"batch": batch, "tokens": tokens, "median_ms": ms, "min_ms": min(times),
                        "tflops": flops / ms / 1e9})
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
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    model.decode(ids, pos)
            torch.cuda.current_stream().wait_stream(s)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static_out = model.decode(ids, pos)
            graph.replay()
            torch.cuda.synchronize()
            if not torch.allclose(static_out.float(), eager.float(), rtol=2e-2, atol=2e-2):
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
            "timing": "CUDA events around one step, median of 10 (prefill) or 30 (decode graph replays)",
            "prefill": prefill, "decode": decode}
