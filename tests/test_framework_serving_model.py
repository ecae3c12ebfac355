"""code/framework/serving_model.py: the decoder whose step times the H200 record measures."""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "code" / "framework"))
import serving_model as sm  # noqa: E402

TINY = sm.LlamaConfig(vocab=97, hidden=64, layers=2, heads=4, kv_heads=2, ffn=96, rope_theta=10000.0)


def test_parameter_count_equals_the_model():
    model = sm.Decoder(TINY, batch=1, max_len=8, dtype=torch.float32)
    assert sum(p.numel() for p in model.parameters()) == TINY.params
    # the 1B shape with an untied head: 1.50 B (Llama-3.2-1B ties head and embedding: 1.24 B; a step reads the same bytes)
    assert sm.LLAMA_1B.params == 1_498_482_688
    assert sm.LLAMA_1B.kv_bytes_per_token() == 32 * 1024  # 2 (K,V) x 16 layers x 8 heads x 64 x 2 bytes


def test_cached_decode_and_chunked_prefill_equal_full_recompute():
    torch.manual_seed(0)
    b, t, extra = 2, 6, 3
    tokens = torch.randint(0, TINY.vocab, (b, t + extra))
    ref = sm.Decoder(TINY, batch=b, max_len=t + extra, dtype=torch.float64)
    cached = sm.Decoder(TINY, batch=b, max_len=t + extra, dtype=torch.float64)
    chunked = sm.Decoder(TINY, batch=b, max_len=t + extra, dtype=torch.float64)
    out = cached.prefill(tokens[:, :t])
    torch.testing.assert_close(out, ref.prefill(tokens[:, :t]))
    chunked.prefill(tokens[:, :4])
    torch.testing.assert_close(chunked.prefill(tokens[:, 4:t], start=4), out)
    for j in range(extra):
        step = cached.decode(tokens[:, t + j], pos=t + j)
        full = ref.prefill(tokens[:, : t + j + 1])
        torch.testing.assert_close(step, full)
