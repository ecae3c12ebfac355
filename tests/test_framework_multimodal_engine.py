"""code/framework/mm_scheduler.py (docs/framework/engine-multimodal.md): placeholder counts equal what
transformers' image processors produce (built from defaults, nothing downloaded); an image whose placeholders
straddle chunk boundaries is encoded once; an image that does not fit the encoder budget or cache cuts the
step just before its placeholders; image hashes keep prefix-cache blocks of different images apart; the cost
figures follow from the configs."""
from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "code" / "framework"))
import block_manager as bm  # noqa: E402
import mm_scheduler as mm  # noqa: E402


def test_placeholder_counts_match_transformers():
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil
    from transformers.models.llava.processing_llava import LlavaProcessor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    rng = np.random.default_rng(0)
    # LLaVA-1.5: llava-hf/llava-1.5-7b-hf processor_config (patch 14, "default", +1 CLS); any image -> 336 x 336
    clip = CLIPImageProcessorPil(size={"shortest_edge": 336}, crop_size={"height": 336, "width": 336})
    pix = clip(rng.integers(0, 255, (480, 640, 3), dtype=np.uint8), return_tensors="np")["pixel_values"]
    proc = SimpleNamespace(patch_size=14, num_additional_image_tokens=1, vision_feature_select_strategy="default",
                           image_token="<image>")
    expanded = LlavaProcessor.replace_image_token(proc, {"pixel_values": pix}, 0)
    assert expanded.count("<image>") == mm.llava_num_image_tokens() == 576
    # Qwen2-VL: dynamic resolution, 14 px patches, 2 x 2 merge -> (H/28)(W/28) after smart_resize
    q = Qwen2VLImageProcessorPil()
    assert (q.patch_size, q.merge_size) == (14, 2)
    for h, w in [(480, 640), (224, 224), (1080, 1920), (28, 500), (3000, 4000)]:
        patches, tokens = mm.qwen2vl_num_image_tokens(h, w)
        assert patches == q.get_number_of_image_patches(h, w, {})
        rh, rw = mm.qwen2vl_smart_resize(h, w)
        assert tokens == (rh // 28) * (rw // 28) and 4 <= tokens <= 1280
    out = q(rng.integers(0, 255, (480, 640, 3), dtype=np.uint8), return_tensors="np")
    assert out["image_grid_thw"].tolist() == [[1, 34, 46]]  # 476 x 644 after smart_resize
    assert mm.qwen2vl_num_image_tokens(480, 640) == (34 * 46, 17 * 23)


def one_image_request(rid, img=b"cat", pre=10, n=576, post=10, base=1):
    ids, items = mm.expand_prompt([list(range(base, base + pre)), (img, n), list(range(base + 50, base + 50 + post))])
    return mm.MMRequest(rid, ids, items, max_tokens=2)


def check_embeddings(s, r):
    """Every placeholder position of r consumed row (pos - offset) of its own image's encoder output."""
    for it in r.items:
        for pos in range(it.offset, it.offset + it.length):
            if pos >= r.cached_tokens:
                assert s.consumed[r.rid][pos] == (it.mm_hash, pos - it.offset)


def test_image_straddling_chunks_is_encoded_once():
    s = mm.MMScheduler(max_num_batched_tokens=256, max_tokens_per_item=576)
    r = one_image_request("a")
    s.add(r)
    s.run()
    assert [step["a"][0] for step in s.log[:3]] == [256, 256, 84]  # 596 prompt tokens in three chunks
    assert s.log[0]["a"][1] == [r.items[0].mm_hash] and s.log[1]["a"][1] == [] == s.log[2]["a"][1]
    assert s.encoder_runs == {r.items[0].mm_hash: 1}
    check_embeddings(s, r)
    # no chunking across an image: the step stops before the placeholders, the next one takes them all
    s2 = mm.MMScheduler(max_num_batched_tokens=600, max_tokens_per_item=576, disable_chunked_mm_input=True)
    s2.add(one_image_request("b", pre=30))
    s2.run()
    assert [step["b"][0] for step in s2.log[:2]] == [30, 586]
    with pytest.raises(ValueError):
        mm.MMScheduler(max_num_batched_tokens=512, max_tokens_per_item=576, disable_chunked_mm_input=True)


def test_two_requests_same_image_one_step_encode_once():
    s = mm.MMScheduler(max_num_batched_tokens=2048, max_tokens_per_item=576, max_num_batched_encoder_embeds=576)
    a, b = one_image_request("a"), one_image_request("b", base=3)
    s.add(a), s.add(b)
    s.step()
    assert s.log[0] == {"a": (596, [a.items[0].mm_hash]), "b": (596, [])}  # b found it in the cache
    s.run()
    assert s.encoder_runs == {a.items[0].mm_hash: 1}
    check_embeddings(s, a), check_embeddings(s, b)


def test_encoder_budget_cuts_before_placeholders():
    # budget 600 embeddings per step: a's image (576) leaves 24, b's does not fit
    s = mm.MMScheduler(max_num_batched_tokens=2048, max_tokens_per_item=576, max_num_batched_encoder_embeds=600,
                       encoder_cache_size=4096)
    a, b = one_image_request("a", b"cat"), one_image_request("b", b"dog", pre=20)
    s.add(a), s.add(b)
    s.step()
    assert s.log[0]["a"] == (596, [a.items[0].mm_hash])
    assert s.log[0]["b"] == (20, [])  # only the text before its placeholders, though 1452 tokens of budget were left
    s.step()
    assert s.log[1]["b"] == (586, [b.items[0].mm_hash])
    s.run()
    assert set(s.encoder_runs.values()) == {1}
    check_embeddings(s, a), check_embeddings(s, b)


def test_encoder_cache_size_makes_a_request_wait():
    # cache of exactly one image: b's image can be encoded only after a's placeholders are all in the KV cache
    s = mm.MMScheduler(max_num_batched_tokens=400, max_tokens_per_item=576, max_num_batched_encoder_embeds=2048,
                       encoder_cache_size=576)
    a, b = one_image_request("a", b"cat"), one_image_request("b", b"dog", pre=20)
    s.add(a), s.add(b)
    s.step()
    assert s.log[0] == {"a": (400, [a.items[0].mm_hash])}
    s.step()  # a's image still referenced (released after this step): b stops before its image
    assert s.log[1] == {"a": (196, []), "b": (20, [])}
    s.step()  # now a's entry is freeable: evicted to make room for b's
    assert s.log[2] == {"a": (1, []), "b": (399, [b.items[0].mm_hash])}  # a decodes its last token
    assert a.items[0].mm_hash not in s.encoder_outputs
    s.run()
    check_embeddings(s, a), check_embeddings(s, b)
    # a waiting head that cannot take a single token blocks the queue (break); a running one is skipped (continue)
    s = mm.MMScheduler(max_num_batched_tokens=400, max_tokens_per_item=576, encoder_cache_size=576)
    c, d, e = (one_image_request(x, x.encode(), pre=0) for x in "cde")
    for r in (c, d, e):
        s.add(r)
    s.step()
    s.step()
    assert "d" not in s.log[1] and "e" not in s.log[1]


def test_image_hash_keeps_prefix_blocks_apart():
    bs = 16
    sys_prompt = list(range(1, 33))  # two full text blocks
    ids_a, items_a = mm.expand_prompt([sys_prompt, (b"cat", 64), [7, 8, 9]])
    ids_b, items_b = mm.expand_prompt([sys_prompt, (b"dog", 64), [7, 8, 9]])
    assert ids_a == ids_b  # identical token ids: the placeholders do not say which image
    plain_a = [bm.block_hash(None, tuple(ids_a[:bs]))]
    for i in range(1, len(ids_a) // bs):
        plain_a.append(bm.block_hash(plain_a[-1], tuple(ids_a[i * bs:(i + 1) * bs])))
    ha, hb = mm.prompt_block_hashes(ids_a, items_a, bs), mm.prompt_block_hashes(ids_b, items_b, bs)
    assert ha[:2] == hb[:2] == plain_a[:2]  # text blocks: same hash as the text-only engine, shared
    assert all(x != y for x, y in zip(ha[2:], hb[2:]))  # every block from the first image block on differs
    # without extra keys the two prompts would share every block: the wrong KV for the other image
    assert mm.prompt_block_hashes(ids_a, [], bs) == plain_a
    # the offset inside the block matters: same image, one token later, different key
    assert mm.mm_extra_keys(items_a, 32, 48) == ((items_a[0].mm_hash, 0),)
    ids_c, items_c = mm.expand_prompt([sys_prompt[:31], (b"cat", 64), [7, 8, 9, 10]])
    assert mm.mm_extra_keys(items_c, 16, 32) == ((items_c[0].mm_hash, 15),)


def test_prefix_cache_with_images_in_the_scheduler():
    s = mm.MMScheduler(max_num_batched_tokens=2048, max_tokens_per_item=576, block_size=16)
    sys_prompt = list(range(1, 33))
    mk = lambda rid, img: mm.MMRequest(rid, *mm.expand_prompt([sys_prompt, (img, 576), [7, 8, 9]]), max_tokens=1)
    a = mk("a", b"cat")
    s.add(a)
    s.run()
    b, c = mk("b", b"cat"), mk("c", b"dog")
    s.add(b)
    s.run()
    assert b.cached_tokens == 32 + 576  # the whole image span hit: no encoder run for b
    s.add(c)
    s.run()
    assert c.cached_tokens == 32  # only the text blocks: its image differs
    assert s.encoder_runs == {a.items[0].mm_hash: 1, c.items[0].mm_hash: 1}
    check_embeddings(s, c)


def test_costs_from_configs():
    llava = mm.llava_image_costs()
    assert llava["tokens"] == 576
    assert llava["kv_bytes"] == 576 * 2 * 32 * 4096 * 2 == 288 * 2**20  # 512 KiB per token
    assert mm.clip_vision_params() == 303_507_456  # ~0.3B
    assert 0.04 < llava["ratio"] < 0.06  # the ViT is ~5% of the LLM prefill over the image tokens
    big = mm.qwen2vl_image_costs(1080, 1920)
    assert big["tokens"] == 26 * 47 and big["patches"] == 4 * 26 * 47  # 1080 x 1920 -> 728 x 1316
    assert big["kv_bytes"] == 26 * 47 * 2 * 28 * 4 * 128 * 2  # GQA: 56 KiB per token
    assert 0.55 < big["ratio"] < 0.7 and big["ratio"] > 5 * llava["ratio"]  # 4 patches per token and full attention over ~4800 patches
    # the published Qwen2-VL-7B-Instruct preprocessor_config.json: max_pixels 12845056 = 28^2 x 16384, so 1080p
    # is not shrunk (1092 x 1932); the 1280-token cap above is transformers' class default
    full = mm.qwen2vl_image_costs(1080, 1920, max_pixels=12845056)
    assert (full["patches"], full["tokens"]) == (4 * 39 * 69, 39 * 69) and 12845056 == 28 * 28 * 16384
    assert 0.8 < full["ratio"] < 1.0


def test_clip_param_count_matches_transformers():
    import torch
    from transformers import CLIPVisionConfig, CLIPVisionModel

    cfg = CLIPVisionConfig(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16,
                           image_size=336, patch_size=14)
    with torch.device("meta"):
        model = CLIPVisionModel(cfg)
    assert sum(p.numel() for p in model.parameters()) == mm.clip_vision_params()
