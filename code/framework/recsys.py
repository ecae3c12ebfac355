"""Jagged embedding lookups and a hot-row cache for recommendation inference
(docs/framework/recsys-inference.md)."""
from __future__ import annotations

import numpy as np
import torch


# --8<-- [start:jagged]
def jagged_pooled_lookup(table: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Sum-pool a variable number of IDs per sample without padding.

    values: all IDs of the batch back to back; lengths[i]: how many belong to sample i
    (the layout of TorchRec's KeyedJaggedTensor for one feature)."""
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(lengths, 0)[:-1]])
    return torch.nn.functional.embedding_bag(values, table, offsets, mode="sum")


def padded_pooled_lookup(table: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The same result the wasteful way: pad to the longest sample and mask."""
    n, longest = len(lengths), int(lengths.max())
    ids = torch.zeros(n, longest, dtype=torch.long)
    mask = torch.arange(longest)[None, :] < lengths[:, None]
    ids[mask] = values
    return (table[ids] * mask[..., None]).sum(1)
# --8<-- [end:jagged]


# --8<-- [start:cache]
def zipf_probs(rows: int, s: float) -> np.ndarray:
    p = 1.0 / np.arange(1, rows + 1) ** s
    return p / p.sum()


def static_cache_hit_rate(probs: np.ndarray, cache_rows: int) -> float:
    """Keep the `cache_rows` most popular rows in HBM: hit rate = their total probability."""
    return float(np.sort(probs)[::-1][:cache_rows].sum())


def lru_hit_rate(ids: np.ndarray, cache_rows: int) -> float:
    """Simulated LRU cache of rows over a stream of lookups."""
    from collections import OrderedDict
    cache: OrderedDict[int, None] = OrderedDict()
    hits = 0
    for i in ids.tolist():
        if i in cache:
            hits += 1
            cache.move_to_end(i)
        else:
            cache[i] = None
            if len(cache) > cache_rows:
                cache.popitem(last=False)
    return hits / len(ids)
# --8<-- [end:cache]
