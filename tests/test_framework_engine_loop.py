"""code/framework/engine_loop.py (docs/framework/engine-architecture.md): the engine loop gives the same
tokens with and without overlap scheduling and wastes exactly one token per EOS stop; the step-loop model
gives max(c, g) with overlap and c + g without; the incremental detokeniser over a byte-level BPE trained
here on Chinese and emoji text streams exactly the full decode and never U+FFFD, like tokenizers'
DecodeStream; offline LLM and the streaming OpenAI-style server return the same text."""
from __future__ import annotations

import json
import random
import sys
from fractions import Fraction
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "code" / "framework"))
import engine_loop as el  # noqa: E402

SPECIAL = ["<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "<|eos|>"]
WORDS = ["the", "engine", "schedules", "tokens", "GPU", "cache", "stream", "推理", "服务", "引擎",
         "显存", "调度", "分词", "流式", "输出", "🚀", "😀", "👍🏽", "🇨🇳", "✨", "é", "naïve", "数据并行"]


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


@pytest.fixture(scope="module")
def tok():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    rng = random.Random(0)
    corpus = [sentence(rng, 12) for _ in range(300)]
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    # a small vocabulary: many CJK characters (3 bytes) and emoji (4 bytes) stay split across tokens
    t.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=300, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    return t


def scripted_model(encode, pairs: dict[str, str], eos: int):
    """A 'model' that continues each prompt with its reference text and then EOS."""
    table = {}
    for prompt, cont in pairs.items():
        seq = encode(prompt)
        for t in encode(cont) + [eos]:
            table[tuple(seq)] = t
            seq = seq + [t]
    return lambda seq: table[tuple(seq)]


def test_process_count_matches_vllm_examples():
    assert el.process_count(tp=4)["total"] == 6  # vllm serve -tp=4
    c = el.process_count(tp=2, dp=4)  # vllm serve -tp=2 -dp=4
    assert (c["api_server"], c["engine_core"], c["gpu_worker"], c["dp_coordinator"], c["total"]) == (4, 4, 8, 1, 17)


def _requests(eos):
    rng = random.Random(1)
    reqs = []
    for i in range(7):
        prompt = [rng.randrange(1, 50) for _ in range(rng.randrange(3, 40))]  # some longer than the budget
        reqs.append(el.EngineCoreRequest(f"r{i}", prompt, max_tokens=rng.randrange(2, 12), eos_token_id=eos))
    return reqs


def _toy(seq):  # deterministic next token; EOS (0) appears now and then
    h = (sum((i + 1) * t for i, t in enumerate(seq)) * 2654435761) % 97
    return 0 if h < 9 else h


def test_overlap_gives_same_tokens_and_wastes_one_token_per_eos_stop():
    serial = el.EngineCore(_toy, max_num_seqs=4, max_num_batched_tokens=16)
    overlap = el.EngineCore(_toy, max_num_seqs=4, max_num_batched_tokens=16)
    for r in _requests(0):
        serial.add_request(el.EngineCoreRequest(**r.__dict__))
        overlap.add_request(el.EngineCoreRequest(**r.__dict__))
    el.run_serial(serial)
    el.run_overlapped(overlap)
    assert {k: v.output for k, v in serial.done.items()} == {k: v.output for k, v in overlap.done.items()}
    reasons = [r.finish_reason for r in overlap.done.values()]
    assert "stop" in reasons and "length" in reasons  # both kinds of stop are exercised
    assert serial.wasted_tokens == 0
    # a request that will reach max_tokens is not scheduled again; one that stops at EOS before that is,
    # because the CPU has not read its EOS yet when it schedules the next step
    early_eos = sum(r.finish_reason == "stop" and len(r.output) < r.req.max_tokens for r in overlap.done.values())
    assert early_eos > 0 and overlap.wasted_tokens == early_eos
    assert overlap.forward_tokens - serial.forward_tokens == overlap.wasted_tokens
    assert all(r.in_flight == 0 for r in overlap.done.values())


@pytest.mark.parametrize("c_sched,gpu,c_post,detok", [(2, 10, 3, 4), (6, 4, 5, 1), (1, 3, 1, 8), (3, 5, 2, 5)])
def test_step_time_is_sum_without_overlap_and_max_with_it(c_sched, gpu, c_post, detok):
    c = c_sched + c_post
    assert el.step_loop_period(c_sched, gpu, c_post, detok, "serial") == c + gpu + detok
    assert el.step_loop_period(c_sched, gpu, c_post, detok, "split") == max(c + gpu, detok)
    assert el.step_loop_period(c_sched, gpu, c_post, detok, "overlap") == max(c, gpu, detok)
    assert isinstance(el.step_loop_period(1, 2, 1, 1, "overlap"), Fraction)


def test_incremental_detokenizer_streams_the_full_decode(tok):
    from tokenizers.decoders import DecodeStream

    decode = tok.decode
    rng = random.Random(2)
    split_chars = 0
    for _ in range(40):
        prompt, text = sentence(rng, 5), sentence(rng, 15)
        pids, ids = tok.encode(prompt).ids, tok.encode(text).ids
        assert decode(ids) == text  # byte-level BPE is lossless
        detok, ref = el.IncrementalDetokenizer(decode, pids), DecodeStream(skip_special_tokens=False)
        for t in pids:
            ref.step(tok, t)
        streamed = ""
        for k, t in enumerate(ids):
            delta = detok.step(t)
            assert delta == (ref.step(tok, t) or "")  # same deltas as the tokenizers library
            streamed += delta
            full = decode(ids[:k + 1])
            assert "\ufffd" not in streamed
            assert full.startswith(streamed)
            assert streamed == full or full.endswith("\ufffd")  # equal unless a character is still incomplete
        assert streamed == text
        split_chars += sum("\ufffd" in decode([t]) for t in ids)
    assert split_chars > 0  # the naive per-token decode would have printed U+FFFD


def test_stop_string_is_never_half_streamed():
    buf = el.StopStringBuffer(["<END>", "##"])
    text, want, streamed = "推理服务 <EN> ok <END> tail", "推理服务 <EN> ok ", ""
    for ch in text:
        streamed += buf.push(ch)
        assert want.startswith(streamed)  # nothing streamed is ever part of the stop string
        if buf.matched:
            break
    assert streamed == want


def test_offline_llm_and_streaming_server_agree(tok):
    eos = tok.token_to_id("<|eos|>")
    encode, decode = (lambda s: tok.encode(s).ids), tok.decode
    rng = random.Random(3)
    chats = {f"c{i}": [{"role": "user", "content": sentence(rng, 4)}] for i in range(5)}
    conts = {rid: sentence(rng, 10) for rid in chats}
    conts["c4"] = "服务 引擎 😀 STOP 🚀 显存"  # a stop string in the middle
    pairs = {el.apply_chat_template(m): conts[rid] for rid, m in chats.items()}
    model = scripted_model(encode, pairs, eos)

    offline = el.LLM(encode, decode, model, max_num_seqs=3, max_num_batched_tokens=24)
    texts = offline.generate([el.apply_chat_template(m) for m in chats.values()], max_tokens=200, eos_token_id=eos)
    assert texts == list(conts.values())

    server = el.OpenAIServer(encode, decode, model, max_num_seqs=3, max_num_batched_tokens=24)
    try:
        streams = server.chat_completions(chats, max_tokens=200, eos_token_id=eos, stop=["STOP"])
        short = server.chat_completions({"s": chats["c0"]}, max_tokens=3, eos_token_id=eos)
    finally:
        server.shutdown()
    assert not server.thread.is_alive()
    for rid, lines in streams.items():
        assert lines[-1] == "data: [DONE]\n\n" and all(x.startswith("data: ") and x.endswith("\n\n") for x in lines)
        chunks = [json.loads(x[6:]) for x in lines[:-1]]
        content = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
        want = conts[rid].split("STOP")[0]
        assert content == want and "\ufffd" not in content
        assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    short_chunks = [json.loads(x[6:]) for x in short["s"][:-1]]
    assert short_chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert conts["c0"].startswith("".join(c["choices"][0]["delta"].get("content", "") for c in short_chunks))


def test_executor_streaming_and_final_results_agree():
    ex = el.Executor(el.EngineCore(_toy, max_num_seqs=4, max_num_batched_tokens=16))
    rng = random.Random(4)
    prompts = [[rng.randrange(1, 50) for _ in range(rng.randrange(3, 20))] for _ in range(3)]
    ids = {ex.enqueue_request(p, 8, streaming=s, eos=0): s for p in prompts for s in (True, False)}
    got = {i: [] for i in ids}
    finals = {i: 0 for i in ids}
    while ex.core.has_unfinished():
        for rid, res in ex.await_responses():
            got[rid] += res.output_token_ids
            finals[rid] += res.is_final
            if not ids[rid]:
                assert res.is_final  # non-streaming: one response, at the end
    assert all(n == 1 for n in finals.values())
    items = sorted(got.items())
    for (a, ta), (b, tb) in zip(items[::2], items[1::2]):  # each prompt was sent streaming and not
        assert ta == tb and ids[a] != ids[b]


def test_spawn_reruns_the_unguarded_main_script(tmp_path):
    calls = []

    def start():
        calls.append(1)
        return el.start_engine_checked()

    unguarded = tmp_path / "serve_unguarded.py"
    unguarded.write_text("llm = start_engine()\n")
    guarded = tmp_path / "serve_guarded.py"
    guarded.write_text("if __name__ == '__main__':\n    llm = start_engine()\n")
    with pytest.raises(RuntimeError, match="bootstrapping phase"):
        el.import_as_spawned_child(str(unguarded), start)
    assert el.import_as_spawned_child(str(guarded), start)["__name__"] == "__mp_main__"
    assert len(calls) == 1  # only the unguarded script started an engine in the child
    import runpy

    g = runpy.run_path(str(guarded), init_globals={"start_engine": start}, run_name="__main__")
    assert len(calls) == 2 and isinstance(g["llm"], dict)  # in the parent the guarded call runs
