"""Ragged KV cache: one Hugging Face ``DynamicCache`` shared by rows of different lengths.

Every row of a batch lives in the same physical ``[B, heads, L, head_dim]``
tensors. A boolean ``valid`` mask ``[B, L]`` says which physical columns hold a
real token of that row; ``next_pos`` ``[B]`` is the row's own (logical) length,
i.e. the position id of its next token. Each forward appends the same number of
columns S to every row, passes ``attention_mask = valid`` (2-D, Hugging Face turns
it into the causal + padding mask) and explicit per-row ``position_ids``, so
rotary embeddings see each row's own positions while the physical layout stays
rectangular.

Rolling back after verification: of the S columns a cycle appended, row b keeps
its first ``keep[b]`` columns and marks the rest invalid ("holes"); the trailing
columns that are invalid for *every* row are cropped off with
``DynamicCache.crop``. At batch 1 this is an exact crop. At batch > 1 the holes
of rows that accepted fewer tokens than the best row stay in the middle of the
cache and are masked out; :meth:`RaggedCache.compact` gathers every row's valid
columns to the right (left padding) when enough columns can be reclaimed.
See ``csrc_docs/engine.md`` for the reasoning and the alternatives.
"""

from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache

__all__ = ["RaggedCache"]


def _cache_kwarg(model) -> str:
    """Name of the cache argument of ``model.forward`` (``cache`` in transformers 5.x)."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _runs(valid: torch.Tensor) -> tuple[list[int], list[int]]:
    """Each row's count of valid columns and first valid column (``valid`` [B, S] bool; a host
    sync); refuses a row whose valid columns are not one contiguous run."""
    counts = valid.sum(1)
    starts = valid.int().argmax(1)
    ends = valid.shape[1] - valid.flip(1).int().argmax(1)
    if bool(((ends - starts != counts) & (counts > 0)).any()):
        raise ValueError("feed_packed: each row's valid columns must be one contiguous run")
    return counts.tolist(), starts.tolist()


class RaggedCache:
    """KV cache of one model for a batch of rows with different lengths.

    Args:
        model: a Hugging Face causal LM (decoder-only, full attention).
        batch_size: number of rows B.
        device: where the masks live (the model's device).
    """

    def __init__(self, model, batch_size: int, device: torch.device, *, decoder_only: bool = False):
        # decoder_only: run the model without its LM head and return the final-norm
        # hidden states (the engine then applies a restricted head itself)
        self.model = model.get_decoder() if decoder_only else model
        self.decoder_only = decoder_only
        self.cache = DynamicCache(config=model.config)
        self.valid = torch.zeros(batch_size, 0, dtype=torch.bool, device=device)  # [B, L]
        self.next_pos = torch.zeros(batch_size, dtype=torch.long, device=device)  # [B]
        self._cache_kw = _cache_kwarg(model)

    @property
    def length(self) -> int:
        """Physical number of columns L."""
        return self.valid.shape[1]

    def feed(
        self,
        input_ids: torch.Tensor,  # [B, S] int64
        input_valid: torch.Tensor | None = None,  # [B, S] bool (None = all valid)
        *,
        logits_to_keep: int = 1,
        output_hidden_states: bool = False,
        **model_kwargs,
    ):
        """Run the model on S new columns per row, appending them to the cache.

        Invalid input columns (padding) are written to the cache but masked out
        for every later query. Returns the model output (``logits`` holds the last
        ``logits_to_keep`` columns; ``hidden_states[-1]`` is the final-norm state;
        with ``decoder_only`` only ``last_hidden_state`` ``[B, S, H]``). ``model_kwargs``
        go to the model as they are (e.g. an EAGLE head's ``features`` ``[B, S, H]``).
        """
        B, S = input_ids.shape
        if input_valid is None:
            input_valid = torch.ones(B, S, dtype=torch.bool, device=input_ids.device)
        # position of each valid token = row length before it; padding gets a harmless id
        pos = (self.next_pos[:, None] + input_valid.long().cumsum(1) - 1).clamp_min(0)  # [B, S]
        mask = torch.cat([self.valid, input_valid], dim=1)  # [B, L+S]
        kw = {} if self.decoder_only else {"logits_to_keep": logits_to_keep}
        if output_hidden_states:
            kw["output_hidden_states"] = True
        out = self.model(
            input_ids=input_ids,
            attention_mask=mask,
            position_ids=pos,
            use_cache=True,
            **kw,
            **model_kwargs,
            **{self._cache_kw: self.cache},
        )
        self.valid = mask
        self.next_pos = self.next_pos + input_valid.sum(1)
        return out

    def feed_packed(
        self,
        input_ids: torch.Tensor,  # [B, S] int64
        input_valid: torch.Tensor,  # [B, S] bool, each row's valid columns one contiguous run
        *,
        output_hidden_states: bool = False,
        counts: list[int] | None = None,
        starts: list[int] | None = None,
        logits: bool = True,
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """:meth:`feed` of S columns per row, computing only the valid ones (see
        :mod:`selfjudge.engine.packed`): the cache ends as :meth:`feed` leaves it.

        ``counts`` / ``starts``: each row's number of valid columns and its first valid column, on
        the host, where the caller has them (else read from ``input_valid``, which is then also
        checked to hold one run per row). Returns ``logits`` [B, S, V] (None with ``logits=False``,
        e.g. a prefill) and, with ``output_hidden_states``, the final-norm states [B, S, H], zero
        at the invalid columns."""
        from selfjudge.engine.packed import PACKING_KWARG, PackedCacheView, make_packing, packed_attention_for

        if self.decoder_only:
            raise ValueError("feed_packed: needs the full model (the cache was made decoder_only)")
        B, S = input_ids.shape
        if counts is None or starts is None:
            counts, starts = _runs(input_valid)
        if len(counts) != B or len(starts) != B or min(counts) < 1:
            raise ValueError(f"feed_packed: counts must give each of the {B} rows >= 1 valid column, got {counts}")
        rows, cols = input_valid.nonzero(as_tuple=True)  # [N] each, row-major
        pos = (self.next_pos[:, None] + input_valid.long().cumsum(1) - 1).clamp_min(0)  # [B, S]
        mask = torch.cat([self.valid, input_valid], dim=1)  # [B, L+S]
        L = self.length
        causal = torch.ones(S, L + S, dtype=torch.bool, device=mask.device).tril(L)  # [S, L+S]
        view = PackedCacheView(self.cache, rows, cols, B, S)
        attention_mask = (mask[:, None, :] & causal)[:, None]  # [B, 1, S, L+S]
        packing = make_packing(rows, cols, S, counts, starts, attention_mask)
        with packed_attention_for(self.model):
            out = self.model(input_ids=input_ids[rows, cols][None], attention_mask=attention_mask,
                             position_ids=pos[rows, cols][None], use_cache=True,
                             logits_to_keep=int(rows.numel()) if logits else 1,
                             output_hidden_states=output_hidden_states,
                             **{self._cache_kw: view, PACKING_KWARG: packing})
        self.valid = mask
        self.next_pos = self.next_pos + input_valid.sum(1)
        padded_logits = hidden = None
        if logits:
            padded_logits = out.logits.new_zeros(B, S, out.logits.shape[-1])
            padded_logits[rows, cols] = out.logits[0]
        if output_hidden_states:
            last = out.hidden_states[-1]  # [1, N, H]
            hidden = last.new_zeros(B, S, last.shape[-1])
            hidden[rows, cols] = last[0]
        return padded_logits, hidden

    def rollback(self, keep: torch.Tensor, num_new: int, keep_max: int) -> None:
        """Keep only the first ``keep[b]`` of the last ``num_new`` columns of row b.

        Args:
            keep: ``[B]`` int64 columns to keep per row, in [0, num_new].
            num_new: how many columns the caller appended since its last rollback.
            keep_max: ``max(keep)`` as a Python int (the caller already has it on
                the host; passing it avoids a second device sync).
        """
        if num_new <= 0:
            return
        if not 0 <= keep_max <= num_new:
            raise ValueError(f"keep_max must be in [0, {num_new}], got {keep_max}")
        L = self.length
        col = torch.arange(num_new, device=keep.device)
        drop = col[None, :] >= keep[:, None]  # [B, num_new]
        tail = self.valid[:, L - num_new :]
        self.next_pos = self.next_pos - (tail & drop).sum(1)
        self.valid = torch.cat([self.valid[:, : L - num_new], tail & ~drop], dim=1)
        cut = num_new - keep_max
        if cut > 0:
            self.cache.crop(-cut)
            self.valid = self.valid[:, : L - cut]

    def select(self, rows: torch.Tensor) -> None:
        """Keep only batch rows ``rows`` ([B'] int64), e.g. to drop finished requests."""
        self.cache.batch_select_indices(rows)
        self.valid = self.valid[rows]
        self.next_pos = self.next_pos[rows]

    def reclaimable(self) -> int:
        """Columns :meth:`compact` would free: L - max over rows of valid columns (host sync)."""
        if self.length == 0:
            return 0
        return self.length - int(self.valid.sum(1).max())

    def maybe_compact(self, min_columns: int) -> int:
        """:meth:`compact` when at least ``min_columns`` columns and a quarter of the cache can be
        freed, so its O(B·L) gather is amortised over many cycles (costs a host sync)."""
        free = self.reclaimable()
        if free >= min_columns and 4 * free >= self.length:
            return self.compact()
        return 0

    def compact(self) -> int:
        """Move every row's valid columns to the right end, drop all-invalid columns.

        Costs one gather of the whole cache, so the engine calls it only when
        :meth:`reclaimable` is large. Returns the number of columns freed.
        """
        n_valid = self.valid.sum(1)  # [B]
        new_len = int(n_valid.max()) if self.length else 0
        freed = self.length - new_len
        if freed <= 0:
            return 0
        # stable sort puts invalid columns first, valid columns after in their order
        order = torch.sort(self.valid.to(torch.int8), dim=1, stable=True).indices  # [B, L]
        idx = order[:, self.length - new_len :]  # [B, new_len]
        for layer in self.cache.layers:
            if not getattr(layer, "is_initialized", False) or layer.keys is None or layer.keys.numel() == 0:
                continue
            Bk, Hk, _, Dk = layer.keys.shape
            gi = idx[:, None, :, None].expand(Bk, Hk, new_len, Dk)
            layer.keys = torch.gather(layer.keys, 2, gi)
            gv = idx[:, None, :, None].expand(Bk, layer.values.shape[1], new_len, layer.values.shape[3])
            layer.values = torch.gather(layer.values, 2, gv)
        self.valid = torch.gather(self.valid, 1, idx)
        return freed
