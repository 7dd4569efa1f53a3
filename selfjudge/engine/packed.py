"""Packed forwards: the target runs on only the real tokens of a ragged batch.

A verify forward over B rows of which some propose fewer drafts than others is padded to
``[B, S]``: every row pays the projections and MLP of S positions, although row b has only
``n_b`` real ones. Here the real tokens go through the model as one sequence ``[1, N]``
(N = sum n_b), so the projections and MLP cost N positions. Attention is the one part that
needs the rows apart: each layer's new keys and values are scattered into the ragged cache's
padded ``[B, heads, L + S, head_dim]`` layout (the cache stays as it is, so rollback and
compaction are unchanged), and the queries are scattered into ``[B, heads, S, head_dim]`` for
one batched scaled-dot-product attention under the usual ragged mask, then gathered back.
Attention is a small share of a decode forward at these lengths; the rest shrinks from B·S to
N positions (on this CPU one row proposing 3 drafts of 8 rows: 145 ms instead of 231 ms).

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
PACKING_KWARG = "selfjudge_packing"  # (rows [N], cols [N], S): where each packed token sits in [B, S]


def packed_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Attention for packed queries (``query`` [1, heads, N, d]) over the padded cache (``key``,
    ``value`` [B, kv_heads, L + S, d]) under ``attention_mask`` [B, 1, S, L + S] (bool);
    returns [1, N, heads, d] as Hugging Face attention functions do."""
    rows, cols, S = kwargs[PACKING_KWARG]
    B, H, d = key.shape[0], query.shape[1], query.shape[3]
    q = query.new_zeros(B, S, H, d)
    q[rows, cols] = query[0].transpose(0, 1)  # [N, H, d] into their rows and columns
    out = F.scaled_dot_product_attention(q.transpose(1, 2), key, value, attn_mask=attention_mask, scale=scaling,
                                         enable_gqa=key.shape[1] != H)  # [B, H, S, d]
    return out.transpose(1, 2)[rows, cols][None], None


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
