"""code/algorithm/alpaca_sft.py and finetune_budget.py (docs/algorithm/hands-on-finetuning.md)
against hand computations, transformers' own implementations and model shapes built from configs."""
from __future__ import annotations

import copy
import math

import pytest
import torch

from algorithm_helpers import load_listing

al = load_listing("algorithm_alpaca_sft", "alpaca_sft.py")
fb = load_listing("algorithm_finetune_budget", "finetune_budget.py")

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tok():
    corpus = ["".join(al.source_and_target({"instruction": f"Count from {a} to {a + 3}.", "input": "",
                                            "output": " ".join(str(a + i) for i in range(4))}, ""))
              for a in range(6)] * 5
    return al.train_tokenizer(corpus, vocab_size=400)


@pytest.fixture(scope="module")
def tiny_model(tok):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                   tie_word_embeddings=False)
    return transformers.LlamaForCausalLM(cfg)


def test_templates_match_the_readme():
    src, tgt = al.source_and_target({"instruction": "Add.", "input": "1 2", "output": "3"}, "</s>")
    assert src.startswith("Below is an instruction that describes a task, paired with an input that provides")
    assert src.endswith("### Instruction:\nAdd.\n\n### Input:\n1 2\n\n### Response:") and tgt == "3</s>"
    src, _ = al.source_and_target({"instruction": "Add.", "input": "", "output": "3"}, "</s>")
    assert src == ("Below is an instruction that describes a task. Write a response that appropriately completes "
                   "the request.\n\n### Instruction:\nAdd.\n\n### Response:")


def test_labels_mask_the_prompt_and_keep_the_answer(tok):
    ex = {"instruction": "Count from 2 to 5.", "input": "", "output": "2 3 4 5"}
    src, tgt = al.source_and_target(ex, tok.eos_token)
    ids, labels = al.encode_example(src, tgt, tok, 128)
    n = len(tok(src)["input_ids"])
    assert al.prompt_is_prefix(src, tgt, tok)
    assert labels[:n].tolist() == [-100] * n and torch.equal(labels[n:], ids[n:])
    assert tok.decode(ids[n:]) == "2 3 4 5</s>"
    assert not al.prompt_is_prefix(src + " ", tgt, tok)          # trailing space breaks the prefix property
    ids, labels = al.encode_example(src, tgt, tok, 5)              # prompt longer than max_len: nothing learned
    assert len(ids) == 5 and (labels == -100).all()


def test_collate_pads_right_with_pad_and_minus_100():
    batch = al.collate([(torch.tensor([5, 6, 7]), torch.tensor([-100, 6, 7])), (torch.tensor([8]), torch.tensor([8]))], 0)
    assert batch["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0]]
    assert batch["labels"].tolist() == [[-100, 6, 7], [8, -100, -100]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]


def test_new_rows_are_the_mean_and_the_loss_ignores_the_prompt(tok, tiny_model):
    tok, model = copy.deepcopy(tok), copy.deepcopy(tiny_model)     # the fixtures are shared: change copies
    old = model.get_output_embeddings().weight.detach().clone()
    assert al.add_tokens_mean_init(tok, model, {"pad_token": "[PAD]"}) == 1
    new = model.get_output_embeddings().weight
    assert torch.equal(new[:-1], old) and torch.equal(new[-1], old.mean(0))
    exs = [al.encode_example(*al.source_and_target({"instruction": f"Count from {a} to {a + k}.", "input": "",
                                                     "output": " ".join(str(a + i) for i in range(k + 1))},
                                                    tok.eos_token), tok, 128) for a, k in ((1, 2), (0, 5))]
    batch = al.collate(exs, tok.pad_token_id)
    out = model(**batch)
    torch.testing.assert_close(al.response_only_loss(out.logits, batch["labels"]), out.loss, rtol=1e-6, atol=1e-6)
    logits = out.logits.detach()
    prompt_pos = torch.zeros_like(batch["labels"], dtype=torch.bool)
    prompt_pos[:, :-1] = batch["labels"][:, 1:] == -100
    noisy = logits + 100 * torch.randn_like(logits) * prompt_pos[..., None]
    assert al.response_only_loss(noisy, batch["labels"]).item() == al.response_only_loss(logits, batch["labels"]).item()


def test_schedule_matches_transformers_and_alpaca_step_counts():
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = transformers.get_cosine_schedule_with_warmup(opt, num_warmup_steps=37, num_training_steps=1218)
    for k in range(1218):
        assert math.isclose(sched.get_last_lr()[0], al.warmup_cosine(k, 37, 1218), rel_tol=1e-12, abs_tol=1e-15)
        opt.step()
        sched.step()
    assert al.alpaca_steps() == {"global_batch": 128, "per_epoch": 406, "total": 1218, "warmup": 37}
    assert al.alpaca_steps(n_examples=52_002) == al.alpaca_steps()      # alpaca_data.json has 52,002 examples
    assert al.alpaca_steps(last_partial=True) == {"global_batch": 128, "per_epoch": 407, "total": 1221, "warmup": 37}


def test_packing_matches_separate_forwards(tok, tiny_model):
    exs = [al.encode_example(*al.source_and_target({"instruction": f"Count from {a} to {a + 3}.", "input": "",
                                                     "output": " ".join(str(a + i) for i in range(4))},
                                                    tok.eos_token), tok, 128) for a in (0, 3)]
    p = al.pack(exs)
    model = tiny_model.eval()
    with torch.no_grad():
        packed = model(input_ids=p["input_ids"], position_ids=p["position_ids"], use_cache=False).logits[0]
        alone = torch.cat([model(input_ids=i[None], use_cache=False).logits[0] for i, _ in exs])
    torch.testing.assert_close(packed, alone, rtol=0, atol=1e-5)
    assert p["labels"][0, len(exs[0][0])].item() == -100         # no predicting across the boundary


def test_llm_lora_counts_match_a_real_model_on_meta():
    q = fb.QWEN25_05B
    cfg = transformers.Qwen2Config(vocab_size=q["vocab"], hidden_size=q["hidden"], intermediate_size=q["intermediate"],
                                   num_hidden_layers=q["layers"], num_attention_heads=q["heads"],
                                   num_key_value_heads=q["kv_heads"], tie_word_embeddings=True)
    with torch.device("meta"):
        model = transformers.Qwen2ForCausalLM(cfg)
    total = sum(p.numel() for p in model.parameters())
    assert total == 494_032_768                                   # Qwen2.5-0.5B: "0.49B"
    for targets in (fb.ATTN + fb.MLP, ("q_proj", "v_proj")):
        shapes = [(m.in_features, m.out_features) for n, m in model.named_modules()
                  if isinstance(m, torch.nn.Linear) and n.rsplit(".", 1)[-1] in targets]
        assert fb.llm_lora_params(q, 16, targets) == fb.lora_params(shapes, 16)
    assert fb.llm_lora_params(q, 16) == 8_798_208 and fb.llm_lora_params(q, 16, ("q_proj", "v_proj")) == 1_081_344
    assert round(100 * fb.llm_lora_params(q, 16) / total, 2) == 1.78
    lora = fb.llm_lora_params(q, 16)
    assert round(fb.finetune_memory_gib(total, total), 2) == 7.36                      # full fine-tune
    assert round(fb.finetune_memory_gib(total + lora, lora), 2) == 1.05                # LoRA, bf16 base
    # QLoRA: bitsandbytes swaps only nn.Linear for Linear4bit and keeps the (tied) output layer out,
    # so the embedding (28% of this model), norms and biases stay bf16.
    block_linear = sum(m.weight.numel() for n, m in model.named_modules()
                       if isinstance(m, torch.nn.Linear) and n != "lm_head")
    assert block_linear == 357_826_560 and round(100 * (total - block_linear) / total) == 28
    assert round(fb.finetune_memory_gib(total + lora, lora, fb.nf4_bytes_per_param(), block_linear), 2) == 0.56
    assert round(fb.finetune_memory_gib(total + lora, lora, fb.nf4_bytes_per_param()), 2) == 0.37  # if all were NF4
    assert round(fb.nf4_bytes_per_param() * 8 - 4, 3) == 0.127                        # QLoRA paper: 0.127 bits


def test_sd15_unet_lora_count():
    shapes = fb.unet_attention_shapes(**fb.SD15_UNET)
    assert len(shapes) == 16 * 8                                   # 16 transformer blocks, 8 projections each
    channels = [320] * 5 + [640] * 5 + [1280] * 6                  # 2 + 3 blocks per level, 1280 also has 1 mid
    assert fb.lora_params(shapes, 1) == 14 * sum(channels) + 16 * 2 * 768 == 199_296
    assert fb.lora_params(shapes, 4) == 797_184
    assert round(fb.lora_params(shapes, 4) * 4 / 1e6, 2) == 3.19   # MB in fp32
