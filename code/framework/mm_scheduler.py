"""Multimodal inputs in a serving engine (docs/framework/engine-multimodal.md).

Four pieces, each with the rule vLLM V1 uses:
- how many placeholder tokens an image becomes (LLaVA-1.5's fixed 576, Qwen2-VL's dynamic resolution);
- an encoder cache (vllm/v1/core/encoder_cache_manager.py): one entry per image content hash, reference
  counted by the requests that still need it, unreferenced entries evicted oldest first;
- a token-budget scheduler (the rules of mini_engine.py's scheduler: running requests first, then waiting
  ones first-come first-served) with an encoder compute budget per step: a step schedules an image's encoder
  only if the whole image fits the remaining budget and the cache; otherwise the request's tokens are cut to
  stop just before that image's placeholders (Scheduler._try_schedule_encoder_inputs);
- prefix-cache block hashes with the images' hashes as extra keys (vllm/v1/core/kv_cache_utils.py:
  _gen_mm_extra_hash_keys), built on block_manager.block_hash.
The model is simulated: the "encoder" output of an image is a function of its hash, and the "LLM" records which
encoder row each placeholder position consumed, so a test can check that every position got the right
embedding and count how many times each image was encoded. KV capacity is unbounded here (no preemption;
mini_engine.py has it).
"""
from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from dataclasses import dataclass, field

from block_manager import block_hash


# --8<-- [start:tokens]
def llava_num_image_tokens(image_size: int = 336, patch_size: int = 14, num_additional_image_tokens: int = 1,
                           vision_feature_select_strategy: str = "default") -> int:
    """LlavaProcessor.replace_image_token: every image is resized/cropped to image_size; one token per patch,
    plus the CLS token the ViT adds, minus it again when the strategy is "default" (patch features only)."""
    n = (image_size // patch_size) ** 2 + num_additional_image_tokens
    return n - 1 if vision_feature_select_strategy == "default" else n


def qwen2vl_smart_resize(height: int, width: int, factor: int = 28, min_pixels: int = 56 * 56,
                         max_pixels: int = 28 * 28 * 1280) -> tuple[int, int]:
    """transformers' qwen2_vl smart_resize: both sides a multiple of factor (patch 14 x merge 2), the aspect
    ratio kept, the area clamped into [min_pixels, max_pixels]."""
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar, w_bar = math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def qwen2vl_num_image_tokens(height: int, width: int, patch_size: int = 14, merge_size: int = 2,
                             **resize) -> tuple[int, int]:
    """(ViT patches, LLM tokens): a grid of (H/14) x (W/14) patches; the merger folds each 2 x 2 into one
    token, so the LLM sees (H/28) x (W/28) tokens (Qwen2VLProcessor: grid_thw.prod() // merge_size**2)."""
    h, w = qwen2vl_smart_resize(height, width, patch_size * merge_size, **resize)
    patches = (h // patch_size) * (w // patch_size)
    return patches, patches // merge_size ** 2
# --8<-- [end:tokens]


@dataclass(frozen=True)
class MMItem:
    offset: int  # first placeholder position in the prompt
    length: int  # placeholder tokens (= encoder embeddings here; vLLM allows break tokens in between)
    mm_hash: str  # content hash of the image (vLLM hashes the pixel data, not the URL or file name)


def image_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def expand_prompt(segments: list, image_token: int = 0) -> tuple[list[int], list[MMItem]]:
    """segments: lists of text token ids and (image bytes, n_tokens) pairs, in order. Returns the prompt with
    n_tokens copies of image_token per image (what the processor's prompt update does) and the items."""
    ids, items = [], []
    for seg in segments:
        if isinstance(seg, tuple):
            data, n = seg
            items.append(MMItem(len(ids), n, image_hash(data)))
            ids += [image_token] * n
        else:
            ids += list(seg)
    return ids, items


# --8<-- [start:hash]
def mm_extra_keys(items: list[MMItem], start: int, end: int) -> tuple:
    """_gen_mm_extra_hash_keys: for every image whose placeholders overlap the block [start, end), the pair
    (image hash, its offset relative to the block start)."""
    return tuple((it.mm_hash, it.offset - start) for it in items
                 if it.offset < end and it.offset + it.length > start)


def mm_block_hash(parent: bytes | None, tokens: tuple[int, ...], extra: tuple = ()) -> bytes:
    """block_manager.block_hash with extra keys: a text-only block hashes exactly as before, so text
    prefixes are still shared between text and image requests."""
    return block_hash(parent, tokens if not extra else (tokens, extra))


def prompt_block_hashes(ids: list[int], items: list[MMItem], block_size: int) -> list[bytes]:
    """Chained hashes of the full blocks of a prompt."""
    out: list[bytes] = []
    for s in range(0, len(ids) - block_size + 1, block_size):
        e = s + block_size
        out.append(mm_block_hash(out[-1] if out else None, tuple(ids[s:e]), mm_extra_keys(items, s, e)))
    return out
# --8<-- [end:hash]


# --8<-- [start:cache]
class EncoderCache:
    """EncoderCacheManager's bookkeeping, sized in embeddings: mm_hash -> ids of requests still needing it.
    An entry nobody references goes to `freeable` (oldest first) and is evicted only when space is needed."""

    def __init__(self, size: int):
        self.size = self.num_free = self.num_freeable = size
        self.cached: dict[str, set[str]] = {}
        self.freeable: OrderedDict[str, int] = OrderedDict()
        self.freed: list[str] = []  # evicted since the last step: the worker drops those outputs

    def check_and_update(self, rid: str, it: MMItem) -> bool:
        if it.mm_hash not in self.cached:
            return False
        if not self.cached[it.mm_hash]:  # was unreferenced: no longer evictable
            self.num_freeable -= self.freeable.pop(it.mm_hash)
        self.cached[it.mm_hash].add(rid)
        return True

    def can_allocate(self, it: MMItem, compute_budget: int, already: int) -> bool:
        if it.length > compute_budget:
            return False
        need = it.length + already
        if need <= self.num_free:
            return True
        if need > self.num_freeable:
            return False
        while need > self.num_free:  # evict unreferenced entries, oldest first
            h, n = self.freeable.popitem(last=False)
            del self.cached[h]
            self.freed.append(h)
            self.num_free += n
        return True

    def allocate(self, rid: str, it: MMItem) -> None:
        self.cached.setdefault(it.mm_hash, set()).add(rid)
        self.num_free -= it.length
        self.num_freeable -= it.length

    def release(self, rid: str, it: MMItem) -> None:
        refs = self.cached.get(it.mm_hash)
        if not refs or rid not in refs:
            return
        refs.discard(rid)
        if not refs:
            self.freeable[it.mm_hash] = it.length
            self.num_freeable += it.length
# --8<-- [end:cache]


def encoder_budget_defaults(max_num_batched_tokens: int, max_tokens_per_item: int,
                            max_num_batched_encoder_embeds: int | None = None,
                            encoder_cache_size: int | None = None,
                            disable_chunked_mm_input: bool = False) -> tuple[int, int]:
    """compute_mm_encoder_budget: (compute budget per step, cache size), both in embeddings. Unset values
    default to the token budget; both are raised to at least one whole item, or the largest image could
    never be scheduled."""
    if disable_chunked_mm_input and max_tokens_per_item > max_num_batched_tokens:
        raise ValueError("chunked MM input disabled but an item is larger than max_num_batched_tokens")
    compute = max(max_num_batched_encoder_embeds or max_num_batched_tokens, max_tokens_per_item)
    cache = max(encoder_cache_size or max_num_batched_encoder_embeds or max_num_batched_tokens,
                max_tokens_per_item)
    return compute, cache


@dataclass
class MMRequest:
    rid: str
    prompt: list[int]
    items: list[MMItem]
    max_tokens: int = 1
    output: list[int] = field(default_factory=list)
    num_computed: int = 0
    cached_tokens: int = 0  # prefix-cache hit at admission

    @property
    def tokens(self) -> list[int]:
        return self.prompt + self.output


class MMScheduler:
    def __init__(self, max_num_batched_tokens: int, max_tokens_per_item: int, block_size: int = 16,
                 max_num_batched_encoder_embeds: int | None = None, encoder_cache_size: int | None = None,
                 disable_chunked_mm_input: bool = False):
        self.budget = max_num_batched_tokens
        self.encoder_budget, cache_size = encoder_budget_defaults(
            max_num_batched_tokens, max_tokens_per_item, max_num_batched_encoder_embeds, encoder_cache_size,
            disable_chunked_mm_input)
        self.cache = EncoderCache(cache_size)
        self.no_chunk_mm = disable_chunked_mm_input
        self.block_size = block_size
        self.prefix: set[bytes] = set()  # hashes of blocks whose KV is computed (capacity not modelled)
        self.waiting: list[MMRequest] = []
        self.running: list[MMRequest] = []
        self.finished: dict[str, MMRequest] = {}
        self.encoder_outputs: dict[str, list[tuple[str, int]]] = {}  # the worker's copy, by mm_hash
        self.encoder_runs: dict[str, int] = {}  # how many times each image went through the encoder
        self.consumed: dict[str, dict[int, tuple[str, int]]] = {}  # rid -> position -> encoder row used
        self.log: list[dict] = []  # per step: rid -> (tokens, images encoded)

    def add(self, r: MMRequest) -> None:
        self.waiting.append(r)
        self.consumed[r.rid] = {}

    # --8<-- [start:encoder_rule]
    def try_schedule_encoder(self, r: MMRequest, num_new: int, budget: int) -> tuple[list[MMItem], int, int]:
        """Which images must be encoded for tokens [num_computed, num_computed + num_new) of r; cuts num_new
        to stop just before an image that does not fit the encoder budget or cache."""
        done, to_encode, hashes, already = r.num_computed, [], set(), 0
        for it in r.items:
            if it.offset >= done + num_new:  # not reached in this step
                break
            if it.offset + it.length <= done:  # its KV is already computed (or a prefix-cache hit)
                continue
            if it.mm_hash in hashes or self.cache.check_and_update(r.rid, it):
                continue  # encoded earlier (this or another request) and still cached
            if self.no_chunk_mm and done < it.offset and done + num_new < it.offset + it.length:
                num_new = it.offset - done  # do not split an image's placeholders across steps
                break
            if not self.cache.can_allocate(it, budget, already):
                # the encoder sees the whole image at once (bidirectional attention): no partial encode
                num_new = it.offset - done if done < it.offset else 0
                break
            already += it.length
            budget -= it.length
            hashes.add(it.mm_hash)
            to_encode.append(it)
        return to_encode, num_new, budget
    # --8<-- [end:encoder_rule]

    # --8<-- [start:schedule]
    def schedule(self) -> list[tuple[MMRequest, int, list[MMItem]]]:
        budget, enc_budget, plan = self.budget, self.encoder_budget, []
        for r in self.running:
            n = min(len(r.tokens) - r.num_computed, budget)
            enc, n, new_enc_budget = self.try_schedule_encoder(r, n, enc_budget) if r.items else ([], n, enc_budget)
            if n == 0:
                continue  # vLLM: `continue`, not `break`, so a later running request may still go
            for it in enc:
                self.cache.allocate(r.rid, it)
            plan.append((r, n, enc))
            budget, enc_budget = budget - n, new_enc_budget
        while self.waiting and budget > 0:
            r = self.waiting[0]
            hashes = prompt_block_hashes(r.prompt, r.items, self.block_size)
            hit = next((i for i, h in enumerate(hashes) if h not in self.prefix), len(hashes))
            r.cached_tokens = r.num_computed = min(hit * self.block_size, len(r.prompt) - 1)
            n = min(len(r.tokens) - r.num_computed, budget)
            enc, n, new_enc_budget = self.try_schedule_encoder(r, n, enc_budget)
            if n == 0:
                break  # first-come first-served: the head of the queue waits, nobody overtakes it
            for it in enc:
                self.cache.allocate(r.rid, it)
            self.waiting.pop(0)
            self.running.append(r)
            plan.append((r, n, enc))
            budget, enc_budget = budget - n, new_enc_budget
        return plan
    # --8<-- [end:schedule]

    # --8<-- [start:step]
    def step(self) -> None:
        plan = self.schedule()
        for h in self.cache.freed:  # evicted by this step's allocations: the worker drops them first
            self.encoder_outputs.pop(h, None)
        self.cache.freed = []
        for _, _, enc in plan:  # the encoder runs before the LLM forward, once per image
            for it in enc:
                self.encoder_runs[it.mm_hash] = self.encoder_runs.get(it.mm_hash, 0) + 1
                self.encoder_outputs[it.mm_hash] = [(it.mm_hash, j) for j in range(it.length)]
        for r, n, _ in plan:  # the LLM forward gathers each placeholder's embedding from the encoder cache
            for it in r.items:
                for pos in range(max(it.offset, r.num_computed), min(it.offset + it.length, r.num_computed + n)):
                    self.consumed[r.rid][pos] = self.encoder_outputs[it.mm_hash][pos - it.offset]
        self.log.append({r.rid: (n, [it.mm_hash for it in enc]) for r, n, enc in plan})
        for r, n, _ in plan:
            r.num_computed += n
            hashes = prompt_block_hashes(r.tokens[:r.num_computed], r.items, self.block_size)
            self.prefix.update(hashes)  # blocks whose KV is now computed become prefix-cache hits
            for it in r.items:  # _free_encoder_inputs: the span is in the KV cache, the output is not needed
                if it.offset + it.length <= r.num_computed:
                    self.cache.release(r.rid, it)
            if r.num_computed == len(r.tokens):  # end of the sequence: sample one token
                r.output.append(1000 + len(r.output))
                if len(r.output) >= r.max_tokens:
                    self.running.remove(r)
                    for it in r.items:
                        self.cache.release(r.rid, it)
                    self.finished[r.rid] = r

    def run(self, max_steps: int = 1000) -> None:
        while self.waiting or self.running:
            self.step()
            assert len(self.log) < max_steps, "no progress"
    # --8<-- [end:step]


# --8<-- [start:cost]
LLAVA15_7B = dict(layers=32, hidden=4096, heads=32, kv_heads=32, intermediate=11008)   # Vicuna-7B (LLaMA shape)
CLIP_L14_336 = dict(layers=24, hidden=1024, intermediate=4096, image=336, patch=14)    # CLIP ViT-L/14-336
QWEN2VL_7B = dict(layers=28, hidden=3584, heads=28, kv_heads=4, intermediate=18944)    # Qwen2-VL-7B text
QWEN2VL_VIT = dict(layers=32, hidden=1280, intermediate=5120, patch=14, temporal_patch=2, merge=2, out=3584)


def kv_bytes_per_token(c: dict, dtype_bytes: int = 2) -> int:
    return 2 * c["layers"] * c["kv_heads"] * (c["hidden"] // c["heads"]) * dtype_bytes


def clip_vision_params(c: dict = CLIP_L14_336) -> int:
    """CLIPVisionModel: patch conv (no bias), CLS, positions, pre-LN, layers (q/k/v/o and fc1/fc2 with bias,
    two LNs), post-LN."""
    d, i, n = c["hidden"], c["intermediate"], (c["image"] // c["patch"]) ** 2 + 1
    layer = 4 * (d * d + d) + (d * i + i) + (i * d + d) + 2 * 2 * d
    return 3 * c["patch"] ** 2 * d + d + n * d + 2 * d + c["layers"] * layer + 2 * d


def vit_flops(c: dict, seq: int) -> int:
    """Forward FLOPs of the transformer layers of a ViT over seq patches: 2 per matmul weight per token, plus
    QK^T and PV (2 * 2 * seq^2 * d per layer, full bidirectional attention)."""
    d, i = c["hidden"], c["intermediate"]
    return c["layers"] * (2 * seq * (4 * d * d + 2 * d * i) + 4 * seq * seq * d)


def llm_prefill_flops(c: dict, n: int, ctx_before: int = 0) -> int:
    """FLOPs of n new tokens through the decoder (SwiGLU MLP, GQA), each attending causally to the
    ctx_before earlier tokens and to the new ones before it."""
    d, kv = c["hidden"], c["kv_heads"] * (c["hidden"] // c["heads"])
    per_token = c["layers"] * 2 * (2 * d * d + 2 * d * kv + 3 * d * c["intermediate"])
    keys = n * ctx_before + n * (n + 1) // 2  # sum over new tokens of the keys each one sees
    return n * per_token + c["layers"] * 4 * keys * d


def llava_image_costs() -> dict:
    n = llava_num_image_tokens()                       # 576 LLM tokens
    seq = (CLIP_L14_336["image"] // CLIP_L14_336["patch"]) ** 2 + 1  # 577 ViT tokens with CLS
    d_v, d = CLIP_L14_336["hidden"], LLAVA15_7B["hidden"]
    projector = 2 * n * (d_v * d + d * d)              # two-layer MLP connector
    enc = vit_flops(CLIP_L14_336, seq) + projector
    llm = llm_prefill_flops(LLAVA15_7B, n)
    return dict(tokens=n, kv_bytes=n * kv_bytes_per_token(LLAVA15_7B), encoder_flops=enc, llm_flops=llm,
                ratio=enc / llm)


def qwen2vl_image_costs(height: int, width: int, **resize) -> dict:
    patches, n = qwen2vl_num_image_tokens(height, width, **resize)
    v = QWEN2VL_VIT
    merger = 2 * n * (4 * v["hidden"] * 4 * v["hidden"] + 4 * v["hidden"] * v["out"])
    enc = vit_flops(v, patches) + merger
    llm = llm_prefill_flops(QWEN2VL_7B, n)
    return dict(patches=patches, tokens=n, kv_bytes=n * kv_bytes_per_token(QWEN2VL_7B), encoder_flops=enc,
                llm_flops=llm, ratio=enc / llm)
# --8<-- [end:cost]
