"""code/algorithm/bpe.py against Hugging Face `tokenizers` trained on the same text with the same
settings (docs/algorithm/tokenization.md, notebooks/algorithm/bpe-lab.ipynb): pre-tokenisation,
merge list and token ids, encodings, the assistant mask of a chat template, and the vocabulary
cost formulas against parameter counts of models built from configs on the meta device."""
from __future__ import annotations

import codecs
import contextlib
import io
import json

import pytest
import torch

from algorithm_helpers import load_listing

bpe = load_listing("algorithm_bpe", "bpe.py")

with contextlib.redirect_stdout(io.StringIO()):
    import this  # noqa: E402  (prints the Zen of Python on import)
ZEN = codecs.decode(this.s, "rot13")
CORPUS = [ZEN, json.__doc__, contextlib.__doc__, codecs.__doc__, torch.nn.Module.__doc__,
          "It's a dog's life; they'll say we've done 1234 things.\n\n\tTabs  and   spaces   \n"]
HELD_OUT = ("Byte-level BPE has no unknown token: naïve café, 字节级分词, emoji 🙂🚀, "
            "numbers 3.14159 and 1000000, CamelCaseWords, snake_case_words,\r\n\ttrailing   \n")


def hf_bpe(texts, vocab_size, specials=("<|endoftext|>",)):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=list(specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    return tok


def hf_merges(tok):
    return [tuple(m) for m in json.loads(tok.to_str())["model"]["merges"]]


def test_byte_alphabet_is_gpt2s():
    table = bpe.bytes_to_unicode()
    from tokenizers import pre_tokenizers

    assert sorted(table) == list(range(256)) and len(set(table.values())) == 256
    assert set(table.values()) == set(pre_tokenizers.ByteLevel.alphabet())
    assert table[ord(" ")] == "Ġ" and table[ord("\n")] == "Ċ" and table[ord("A")] == "A"


@pytest.mark.parametrize("text", CORPUS + [HELD_OUT, "", "   ", "a  b", "x\n\n  y", "'S 'll 'LL"])
def test_pretokenize_matches_bytelevel(text):
    from tokenizers import pre_tokenizers

    ours = [bpe.to_display(chunk.encode()) for chunk in bpe.pretokenize(text)]
    theirs = [piece for piece, _ in pre_tokenizers.ByteLevel(add_prefix_space=False).pre_tokenize_str(text)]
    assert ours == theirs
    assert "".join(bpe.pretokenize(text)) == text


def test_gpt4_pattern_splits_digits_and_keeps_contractions():
    chunks = bpe.pretokenize("We'LL pay 1234567 now\n\n", bpe.GPT4_PATTERN)
    assert "'LL" in chunks and ["123", "456", "7"] == [c for c in chunks if c.strip().isdigit()]
    assert "".join(chunks) == "We'LL pay 1234567 now\n\n"


@pytest.mark.parametrize("vocab_size", [300, 420, 700])
def test_merges_and_ids_equal_tokenizers(vocab_size):
    hf = hf_bpe(CORPUS, vocab_size)
    vocab, merges = bpe.train(CORPUS, vocab_size, special_tokens=["<|endoftext|>"])
    assert bpe.hf_style_merges(vocab, merges) == hf_merges(hf)
    hf_vocab = hf.get_vocab()
    assert len(hf_vocab) == len(vocab)
    assert all(hf_vocab["<|endoftext|>" if i == 0 else bpe.to_display(t)] == i for i, t in enumerate(vocab))
    # the plain algorithm with the same tie rule learns the same list
    v2, m2, ties = bpe.train_simple(CORPUS, vocab_size, special_tokens=["<|endoftext|>"])
    assert (v2, m2) == (vocab, merges) and ties > 0


def test_other_tie_rule_diverges():
    v_ids, m_ids, _ = bpe.train_simple([ZEN], 330, tie="ids")
    v_first, m_first, _ = bpe.train_simple([ZEN], 330, tie="first")
    assert bpe.hf_style_merges(v_ids, m_ids) == hf_merges(hf_bpe([ZEN], 330, specials=()))
    assert bpe.hf_style_merges(v_first, m_first) != bpe.hf_style_merges(v_ids, m_ids)


def test_encodings_equal_and_round_trip():
    hf = hf_bpe(CORPUS, 600)
    vocab, merges = bpe.train(CORPUS, 600, special_tokens=["<|endoftext|>"])
    enc = bpe.ByteBPE(vocab, merges, special_tokens=["<|endoftext|>"])
    for text in [HELD_OUT, HELD_OUT + "<|endoftext|>" + ZEN[:200], "🙂", "\x00\x7f\u00a0"]:
        ids = enc.encode(text)
        assert ids == hf.encode(text).ids
        assert enc.decode(ids) == text
    # no UNK: an unseen 4-byte character becomes its 4 bytes
    assert [enc.vocab[i] for i in enc.encode("🙂")] == [bytes([b]) for b in "🙂".encode()]
    # offsets cover the text in order
    ids, spans = enc.encode_with_offsets(HELD_OUT)
    assert spans[0][0] == 0 and spans[-1][1] == len(HELD_OUT)
    assert all(a[1] <= b[1] and a[0] <= b[0] for a, b in zip(spans, spans[1:]))


def test_merge_prefix_is_smaller_vocabulary():
    vocab, merges = bpe.train(CORPUS, 700, special_tokens=["<|endoftext|>"])
    assert bpe.hf_style_merges(vocab, merges)[:300 - 257] == hf_merges(hf_bpe(CORPUS, 300))
    sizes = [257, 300, 400, 700]
    bpt = []
    for size in sizes:
        e = bpe.ByteBPE(vocab[:size], merges[:size - 257])
        bpt.append(len(HELD_OUT.encode()) / len(e.encode(HELD_OUT)))
    assert bpt[0] == 1.0 and all(a < b for a, b in zip(bpt, bpt[1:]))


def test_chat_template_assistant_mask():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab, merges = bpe.train(CORPUS, 500, special_tokens=["<|endoftext|>"])
    core = Tokenizer(models.BPE(vocab={bpe.to_display(t) if i else "<|endoftext|>": i for i, t in enumerate(vocab)},
                                merges=bpe.hf_style_merges(vocab, merges)))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<|endoftext|>")
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tok.chat_template = (
        "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' }}"
        "{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] + '<|im_end|>' }}{% endgeneration %}"
        "{% else %}{{ m['content'] + '<|im_end|>' }}{% endif %}{{ '\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
    mine = bpe.ByteBPE(vocab, merges, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    messages = [{"role": "user", "content": "Is flat better than nested?"},
                {"role": "assistant", "content": "Yes, flat is better."},
                {"role": "user", "content": "Why?"},
                {"role": "assistant", "content": "Readability counts 🙂"}]
    text, spans = "", []
    for m in messages:
        text += f"<|im_start|>{m['role']}\n"
        if m["role"] == "assistant":
            spans.append((len(text), len(text) + len(m["content"]) + len("<|im_end|>")))
        text += m["content"] + "<|im_end|>\n"
    assert tok.apply_chat_template(messages, tokenize=False) == text
    out = tok.apply_chat_template(messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    ids, tok_spans = mine.encode_with_offsets(text)
    mask = [int(any(s < e2 and s2 < e for s2, e2 in spans)) for s, e in tok_spans]
    assert out["input_ids"] == ids and out["assistant_masks"] == mask
    answers = mine.decode([i for i, m in zip(ids, mask) if m])
    assert answers == "Yes, flat is better.<|im_end|>Readability counts 🙂<|im_end|>"
    prompt = tok.apply_chat_template(messages[:1], add_generation_prompt=True, tokenize=True,
                                     return_dict=True)["input_ids"]
    assert ids[:len(prompt)] == prompt


def test_unigram_viterbi_matches_tokenizers():
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.train_from_iterator(CORPUS, trainers.UnigramTrainer(vocab_size=300, unk_token="<unk>",
                                                            special_tokens=["<unk>"], show_progress=False))
    logp = {piece: score for piece, score in json.loads(tok.to_str())["model"]["vocab"]}
    words = [w for w, _ in tok.pre_tokenizer.pre_tokenize_str(" ".join(CORPUS))]
    checked = 0
    for w in set(words):
        if all(c in logp for c in w):
            assert bpe.unigram_viterbi(w, logp) == [t.value for t in tok.model.tokenize(w)]
            checked += 1
    assert checked > 200


def _count(cls, cfg):
    with torch.device("meta"):
        model = cls(cfg)
    return sum(p.numel() for p in model.parameters())


def test_vocab_cost_formulas_against_models():
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    gpt2 = GPT2Config(vocab_size=50257, n_embd=768, n_layer=12, n_head=12)
    total = _count(GPT2LMHeadModel, gpt2)
    assert total == 124_439_808                                   # GPT-2 small, tied embeddings
    gpt2.vocab_size = 1
    assert total - (_count(GPT2LMHeadModel, gpt2) - 768) == bpe.vocab_params(50257, 768, tied=True)

    llama = LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                        num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=False)
    total = _count(LlamaForCausalLM, llama)
    assert total == 8_030_261_248                                 # Llama-3-8B
    llama.vocab_size = 1
    assert total - (_count(LlamaForCausalLM, llama) - 2 * 4096) == bpe.vocab_params(128256, 4096, tied=False)
    assert bpe.lm_head_flops_per_token(128256, 4096) == 2 * 128256 * 4096


def test_lm_head_flops_equal_a_matmul_count():
    """2 V d: one multiply and one add per weight of the (d x V) head, counted by torch's FLOP counter."""
    from torch.utils.flop_counter import FlopCounterMode

    head = torch.nn.Linear(64, 1000, bias=False)
    with FlopCounterMode(display=False) as counter:
        head(torch.randn(7, 64))
    assert counter.get_total_flops() == 7 * bpe.lm_head_flops_per_token(1000, 64)


def test_page_worked_example_and_tie_rule():
    """The four merges the page derives from Sennrich et al.'s low/lower/newest/widest counts (ties broken
    by the smallest id pair: 'e s' before 's t', 'l o' before 'o w'), and 'lowest' encoded with them."""
    words = ["low"] * 5 + ["lower"] * 2 + ["newest"] * 6 + ["widest"] * 3
    vocab, merges, ties = bpe.train_simple(words, 256 + 4)
    assert bpe.hf_style_merges(vocab, merges) == [("e", "s"), ("es", "t"), ("l", "o"), ("lo", "w")]
    assert ties == 2
    assert [vocab[i] for i in bpe.ByteBPE(vocab, merges).encode("lowest")] == [b"low", b"est"]
    assert bpe.hf_style_merges(vocab, merges) == hf_merges(hf_bpe(words, 256 + 4, specials=()))


def test_page_zen_tie_counts():
    """The page: 48 of the first 60 merges on the Zen of Python are ties; minbpe's first-seen rule departs
    from tokenizers at the 7th merge."""
    _, _, ties = bpe.train_simple([ZEN], 257 + 60, special_tokens=["<|endoftext|>"])
    assert ties == 48
    v1, m1, _ = bpe.train_simple([ZEN], 257 + 60, special_tokens=["<|endoftext|>"])
    v2, m2, _ = bpe.train_simple([ZEN], 257 + 60, special_tokens=["<|endoftext|>"], tie="first")
    a, b = bpe.hf_style_merges(v1, m1), bpe.hf_style_merges(v2, m2)
    assert next(i for i, (x, y) in enumerate(zip(a, b)) if x != y) == 6


def test_bpe_is_not_longest_match():
    """Merges 'b c', 'a b', 'ab c': BPE encodes 'abc' as a + bc although 'abc' is in the vocabulary."""
    vocab = [bytes([b]) for b in range(256)] + [b"bc", b"ab", b"abc"]
    a, b, c = ord("a"), ord("b"), ord("c")
    merges = [((b, c), 256), ((a, b), 257), ((257, c), 258)]
    enc = bpe.ByteBPE(vocab, merges)
    assert [enc.vocab[i] for i in enc.encode("abc")] == [b"a", b"bc"]
    assert [enc.vocab[i] for i in enc.encode("abcd")] == [b"a", b"bc", b"d"]
    assert [enc.vocab[i] for i in enc.encode("abab")] == [b"ab", b"ab"]


@pytest.mark.parametrize("name,vocab_share,head_share", [
    ("gpt2", 0.310, 0.312), ("qwen", 0.276, 0.276), ("llama", 0.131, 0.070)])
def test_page_vocab_table(name, vocab_share, head_share):
    """The table on the page: vocabulary parameters over all parameters, and 2Vd over the forward FLOPs
    of one token (2 FLOPs per non-embedding parameter plus the head; attention's length term left out)."""
    from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, Qwen2Config,
                              Qwen2ForCausalLM)

    cls, cfg, tied, d = {
        "gpt2": (GPT2LMHeadModel, GPT2Config(vocab_size=50257, n_embd=768, n_layer=12, n_head=12), True, 768),
        "qwen": (Qwen2ForCausalLM, Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864,
                 num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True),
                 True, 896),
        "llama": (LlamaForCausalLM, LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                  num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                  tie_word_embeddings=False), False, 4096),
    }[name]
    V = cfg.vocab_size
    total = _count(cls, cfg)
    cfg.vocab_size = 1
    rest = _count(cls, cfg) - bpe.vocab_params(1, d, tied)
    assert total - rest == bpe.vocab_params(V, d, tied)
    positions = 1024 * d if name == "gpt2" else 0
    head = bpe.lm_head_flops_per_token(V, d)
    assert round(bpe.vocab_params(V, d, tied) / total, 3) == vocab_share
    assert round(head / (head + 2 * (rest - positions)), 3) == head_share
    assert round(total / 1e6, 1) == {"gpt2": 124.4, "qwen": 494.0, "llama": 8030.3}[name]
