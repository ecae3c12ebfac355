"""The Stanford Alpaca supervised fine-tuning recipe, rebuilt piece by piece
(docs/algorithm/hands-on-finetuning.md, notebooks/algorithm/alpaca-sft-lab.ipynb).

Written from a reading of tatsu-lab/stanford_alpaca train.py (commit 761dc5b): the two prompt
templates, source-length label masking with -100, right padding in the collator, adding a pad
token with the new embedding rows set to the mean, and the warmup + cosine learning rate.
Tested in tests/test_algorithm_finetuning.py.
"""
from __future__ import annotations

import math

import torch

# --8<-- [start:template]
IGNORE = -100   # PyTorch cross_entropy skips targets equal to ignore_index (default -100)

# The two Alpaca prompts, word for word: one for examples with an input, one without.
WITH_INPUT = (
    "Below is an instruction that describes a task, paired with an input that provides further context. "
    "Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:"
)
NO_INPUT = (
    "Below is an instruction that describes a task. "
    "Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{instruction}\n\n### Response:"
)


def source_and_target(example: dict, eos: str) -> tuple[str, str]:
    """Prompt (what the model is given) and target (what it must learn to write, EOS included)."""
    template = WITH_INPUT if example.get("input") else NO_INPUT
    return template.format(**example), example["output"] + eos
# --8<-- [end:template]


# --8<-- [start:labels]
def encode_example(source: str, target: str, tokenizer, max_len: int):
    """input_ids of prompt + answer, and labels equal to them except the prompt positions (-100).

    Like Alpaca, the prompt length is found by encoding the prompt on its own. That is only right
    when those ids are a prefix of the ids of the whole text, which `prompt_is_prefix` checks."""
    ids = tokenizer(source + target, truncation=True, max_length=max_len)["input_ids"]
    n_prompt = len(tokenizer(source, truncation=True, max_length=max_len)["input_ids"])
    labels = list(ids)
    labels[:n_prompt] = [IGNORE] * min(n_prompt, len(ids))
    return torch.tensor(ids), torch.tensor(labels)


def prompt_is_prefix(source: str, target: str, tokenizer) -> bool:
    whole = tokenizer(source + target)["input_ids"]
    alone = tokenizer(source)["input_ids"]
    return whole[:len(alone)] == alone
# --8<-- [end:labels]


# --8<-- [start:collate]
def collate(batch, pad_id: int) -> dict:
    """Right-pad a list of (input_ids, labels): ids with the pad id, labels with -100; the
    attention mask is 1 wherever the id is not the pad id (so pad must differ from every real id)."""
    width = max(len(ids) for ids, _ in batch)
    input_ids = torch.full((len(batch), width), pad_id)
    labels = torch.full((len(batch), width), IGNORE)
    for row, (ids, lab) in enumerate(batch):
        input_ids[row, :len(ids)] = ids
        labels[row, :len(lab)] = lab
    return {"input_ids": input_ids, "labels": labels, "attention_mask": (input_ids != pad_id).long()}
# --8<-- [end:collate]


# --8<-- [start:resize]
def add_tokens_mean_init(tokenizer, model, special_tokens: dict) -> int:
    """Add special tokens; grow the input and output embeddings and set every new row to the mean
    of the old rows. With the mean as output row, a new token's logit is the mean of the others'
    logits, so an untrained token is neither favoured nor ruled out when sampling."""
    n_new = tokenizer.add_special_tokens(special_tokens)
    # transformers would otherwise sample the new rows near the mean (mean_resizing, and log that
    # it did); we set them exactly, as Alpaca does.
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    if n_new:
        with torch.no_grad():
            for emb in (model.get_input_embeddings().weight, model.get_output_embeddings().weight):
                emb[-n_new:] = emb[:-n_new].mean(dim=0, keepdim=True)
    return n_new
# --8<-- [end:resize]


# --8<-- [start:loss]
def response_only_loss(logits, labels):
    """Mean cross-entropy of the next token over positions whose label is not -100: the logits at
    position t predict the token at t + 1, so labels shift left by one."""
    pred = logits[:, :-1].reshape(-1, logits.shape[-1]).float()
    gold = labels[:, 1:].reshape(-1)
    keep = gold != IGNORE
    return torch.nn.functional.cross_entropy(pred[keep], gold[keep])
# --8<-- [end:loss]


# --8<-- [start:schedule]
def warmup_cosine(step: int, warmup: int, total: int) -> float:
    """Learning-rate multiplier: linear from 0 over `warmup` steps, then half a cosine to 0."""
    if step < warmup:
        return step / max(1, warmup)
    progress = (step - warmup) / max(1, total - warmup)
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))


def alpaca_steps(n_examples=52_000, per_device=4, gpus=4, accumulation=8, epochs=3, warmup_ratio=0.03,
                 last_partial=False):
    """Optimizer steps of the README command under the Trainer of the time (transformers 4.28): each GPU
    sees ceil(n / (per_device * gpus)) micro-batches an epoch and steps once every `accumulation` of them
    (rounded down); warmup is ceil(ratio * total). last_partial=True also counts an epoch's last,
    incomplete window as a step (rounded up), as newer Trainers do (4.57, 5.x)."""
    micro = math.ceil(n_examples / (per_device * gpus))
    per_epoch = -(-micro // accumulation) if last_partial else micro // accumulation
    total = per_epoch * epochs
    return {"global_batch": per_device * gpus * accumulation, "per_epoch": per_epoch,
            "total": total, "warmup": math.ceil(warmup_ratio * total)}
# --8<-- [end:schedule]


# --8<-- [start:pack]
def pack(examples):
    """Concatenate (input_ids, labels) pairs into one row without padding. Positions restart at 0
    for each example; the first label of each example is -100 so no example learns to predict
    across the boundary. transformers reads the restarts in position_ids as document boundaries
    (masking_utils.find_packed_sequence_indices) when no attention_mask is given."""
    ids = torch.cat([i for i, _ in examples])[None]
    labels = torch.cat([torch.cat([torch.tensor([IGNORE]), lab[1:]]) for _, lab in examples])[None]
    positions = torch.cat([torch.arange(len(i)) for i, _ in examples])[None]
    return {"input_ids": ids, "labels": labels, "position_ids": positions}
# --8<-- [end:pack]


# --8<-- [start:tokenizer]
def train_tokenizer(corpus, vocab_size=400):
    """A byte-level BPE tokenizer trained on `corpus` (no download), wrapped for transformers.
    Like the LLaMA tokenizer Alpaca used, it has <s>, </s>, <unk>, prepends <s>, and has no pad token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   padding_side="right", model_max_length=256)
# --8<-- [end:tokenizer]
