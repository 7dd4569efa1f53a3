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

from contextlib import contextmanager

import torch
import torch.nn.functional as F
from transformers import AttentionInterface

__all__ = ["PACKED_ATTENTION", "PACKING_KWARG", "packed_attention", "PackedCacheView", "packed_attention_for"]

PACKED_ATTENTION = "selfjudge_packed"
PACKING_KWARG = "selfjudge_packing"  # (rows [N], cols [N], S, counts, starts): where each packed token sits in [B, S]


def _sdpa(query, key, value, mask, scaling):
    return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scaling,
                                          enable_gqa=key.shape[1] != query.shape[1])


def packed_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Attention for packed queries (``query`` [1, heads, N, d]) over the padded cache (``key``,
    ``value`` [B, kv_heads, L + S, d]) under ``attention_mask`` [B, 1, S, L + S] (bool);
    returns [1, N, heads, d] as Hugging Face attention functions do.

    Padding every row to S queries costs B·S·(L + S) of attention, which at long contexts
    outweighs what packing saved elsewhere when a few rows verify many drafts (or a prefill's
    prompts differ in length). So unless padding adds under a quarter of N, only the real queries
    are computed: one batched call for every row's first query, then one call per row for its
    further queries over that row's own keys (views, no copy); a call per row costs more than a
    quarter of padding saves."""
    rows, cols, S, counts, starts = kwargs[PACKING_KWARG]
    B, H, N, d = key.shape[0], query.shape[1], query.shape[2], query.shape[3]
    if 4 * (B * S - N) < N:  # little padding: one batched call over [B, H, S, d]
        q = query.new_zeros(B, S, H, d)
        q[rows, cols] = query[0].transpose(0, 1)  # [N, H, d] into their rows and columns
        out = _sdpa(q.transpose(1, 2), key, value, attention_mask, scaling)  # [B, H, S, d]
        return out.transpose(1, 2)[rows, cols][None], None
    offsets = [0]  # where each row's queries start in N (row-major)
    for n in counts[:-1]:
        offsets.append(offsets[-1] + n)
    at = torch.arange(B, device=key.device), torch.tensor(starts, device=key.device)
    first_mask = attention_mask[at[0], :, at[1]][:, :, None]  # [B, 1, 1, L+S]: each row's first query
    first = query[0][:, offsets].transpose(0, 1)[:, :, None]  # [B, H, 1, d]
    out = query.new_empty(1, H, N, d)
    out[0, :, offsets] = _sdpa(first, key, value, first_mask, scaling)[:, :, 0].transpose(0, 1)
    for b, (offset, n, c) in enumerate(zip(offsets, counts, starts)):
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
