"""Packed forwards: the target runs on only the real tokens of a ragged batch.

A verify forward over B rows of which some propose fewer drafts than others is padded to
``[B, S]``: every row pays the projections and MLP of S positions, although row b has only
``n_b`` real ones. Here the real tokens go through the model as one sequence ``[1, N]``
(N = sum n_b), so the projections and MLP cost N positions. Attention is the one part that
needs the rows apart: each layer's new keys and values are scattered into the ragged cache's
padded ``[B, heads, L + S, head_dim]`` layout (the cache stays as it is, so rollback and
compaction are unchanged), and attention runs for the real queries only, each over its own
row's keys under the usual ragged mask (:func:`packed_attention`). So the projections, the
MLP, the LM head and attention all cost N positions, not B·S.

Works for Hugging Face decoder models whose attention layers call ``cache.update`` and the
attention function named by ``config._attn_implementation`` (Llama, Qwen2/3, Mistral, ...):
for the length of the call that name points to :func:`packed_attention`.
"""

from __future__ import annotations

import itertools
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import AttentionInterface

__all__ = ["PACKED_ATTENTION", "PACKING_KWARG", "Packing", "make_packing", "packed_attention", "PackedCacheView",
           "packed_attention_for"]

PACKED_ATTENTION = "selfjudge_packed"
PACKING_KWARG = "selfjudge_packing"  # a Packing: where each packed token sits in [B, S]


@dataclass(frozen=True)
class Packing:
    """Where the N packed tokens of a ``[B, S]`` batch sit, and how attention runs over them;
    built once per forward (:func:`make_packing`), read by every layer."""

    rows: torch.Tensor  # [N] row of each packed token (row-major)
    cols: torch.Tensor  # [N] column of each packed token
    width: int  # S
    counts: list[int]  # per row: its tokens (one contiguous run)
    starts: list[int]  # per row: the column of its first token
    offsets: list[int]  # per row: where its tokens start in N
    first_mask: torch.Tensor | None  # [B, 1, 1, L+S] mask of each row's first query; None: one batched call


def make_packing(rows: torch.Tensor, cols: torch.Tensor, width: int, counts: list[int], starts: list[int],
                 mask: torch.Tensor) -> Packing:
    """The :class:`Packing` of tokens at ``rows``, ``cols`` [N] under the attention ``mask``
    [B, 1, S, L+S]. Padding every row to S queries costs B·S·(L + S) of attention, which at long
    contexts outweighs what packing saved elsewhere when a few rows verify many drafts (or a
    prefill's prompts differ in length); so unless padding adds under a quarter of N, attention
    runs per row (a call per row costs more than a quarter of padding saves)."""
    B, N = len(counts), sum(counts)
    offsets = [0, *itertools.accumulate(counts[:-1])]
    first_mask = None
    if 4 * (B * width - N) >= N:
        at = torch.arange(B, device=mask.device), torch.tensor(starts, device=mask.device)
        first_mask = mask[at[0], :, at[1]][:, :, None]  # [B, 1, 1, L+S]
    return Packing(rows, cols, width, list(counts), list(starts), offsets, first_mask)


def _sdpa(query, key, value, mask, scaling):
    return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scaling,
                                          enable_gqa=key.shape[1] != query.shape[1])


def packed_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Attention for packed queries (``query`` [1, heads, N, d]) over the padded cache (``key``,
    ``value`` [B, kv_heads, L + S, d]) under ``attention_mask`` [B, 1, S, L + S] (bool);
    returns [1, N, heads, d] as Hugging Face attention functions do. As the :class:`Packing`
    says: one batched call over every row padded to S queries, or only the real queries (one
    batched call for every row's first query, then one call per row for its further queries over
    that row's own keys: views, no copy)."""
    packing: Packing = kwargs[PACKING_KWARG]
    B, H, N, d = key.shape[0], query.shape[1], query.shape[2], query.shape[3]
    if packing.first_mask is None:  # one batched call over [B, H, S, d]
        rows, cols = packing.rows, packing.cols
        q = query.new_zeros(B, packing.width, H, d)
        q[rows, cols] = query[0].transpose(0, 1)  # [N, H, d] into their rows and columns
        out = _sdpa(q.transpose(1, 2), key, value, attention_mask, scaling)  # [B, H, S, d]
        return out.transpose(1, 2)[rows, cols][None], None
    offsets = packing.offsets
    first = query[0][:, offsets].transpose(0, 1)[:, :, None]  # [B, H, 1, d]
    out = query.new_empty(1, H, N, d)
    out[0, :, offsets] = _sdpa(first, key, value, packing.first_mask, scaling)[:, :, 0].transpose(0, 1)
    for b, (offset, n, c) in enumerate(zip(offsets, packing.counts, packing.starts)):
        if n > 1:  # row b's further queries (columns c+1 .. c+n-1), over its own keys
            out[:, :, offset + 1:offset + n] = _sdpa(query[:, :, offset + 1:offset + n], key[b:b + 1],
                                                     value[b:b + 1], attention_mask[b:b + 1, :, c + 1:c + n], scaling)
    return out.transpose(1, 2), None


AttentionInterface.register(PACKED_ATTENTION, packed_attention)


class PackedCacheView:
    """A Hugging Face cache seen by a packed forward: each layer's new keys and values
    ([1, kv_heads, N, d]) are scattered into ``[B, kv_heads, S, d]`` and appended to ``inner``."""

    def __init__(self, inner, rows: torch.Tensor, cols: torch.Tensor, batch_size: int, width: int):
        self.inner, self.rows, self.cols, self.batch_size, self.width = inner, rows, cols, batch_size, width

    def _padded(self, states: torch.Tensor) -> torch.Tensor:  # [1, h, N, d] -> [B, h, S, d]
        out = states.new_zeros(self.batch_size, self.width, states.shape[1], states.shape[3])
        out[self.rows, self.cols] = states[0].transpose(0, 1)
        return out.transpose(1, 2)

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        return self.inner.update(self._padded(key_states), self._padded(value_states), layer_idx, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@contextmanager
def packed_attention_for(model):
    """Within the block ``model``'s attention layers use :func:`packed_attention`."""
    config = model.config
    old = config._attn_implementation
    config._attn_implementation = PACKED_ATTENTION
    try:
        yield
    finally:
        config._attn_implementation = old
