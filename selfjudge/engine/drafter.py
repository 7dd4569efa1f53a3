"""The engine's propose seam: a drafter proposes up to K tokens per cycle and rolls back.

:class:`ModelDrafter` is the standalone draft model (a small Hugging Face causal LM
over the target's vocabulary, optionally with its LM head restricted to a
sub-vocabulary). The engine calls, per generation:

* :meth:`ModelDrafter.prefill` once with the left-padded prompts;
* :meth:`ModelDrafter.propose` once per cycle: ``k`` tokens per row (argmax at
  temperature 0, else draws from ``softmax(logits / T)``, whose probabilities the
  verify op needs to stay lossless);
* :meth:`ModelDrafter.rollback` after the verify op: how many drafts each row
  kept and the token the target emitted after them;
* :meth:`ModelDrafter.select` / :meth:`ModelDrafter.maybe_compact` when rows leave.

Cache invariant (per row, y_1..y_m = prompt + emitted tokens): the draft cache
holds y_1..y_{m-2} and the pair (y_{m-1}, y_m) is fed next. Keeping the draft one
token further behind than the target makes the all-accepted (bonus) case free:
the draft never read d_K, and the next cycle's first forward reads (d_K, bonus)
together. Of the K+1 columns a cycle appends (y_{m-1}, y_m, d_1..d_{K-1}) a row
keeps ``num_accepted + 1``, like the target's cache.
"""

from __future__ import annotations

import torch

from selfjudge.engine.cache import RaggedCache

__all__ = ["ModelDrafter", "vocab_size", "frequent_token_ids"]


def vocab_size(model) -> int:
    """Output vocabulary size (config first: a restricted head has fewer weight rows)."""
    v = getattr(model.config, "vocab_size", None)
    return int(v) if v is not None else int(model.get_output_embeddings().weight.shape[0])


def choose(logits: torch.Tensor, temperature: float, generator) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Next token [B] from logits [B, V]: argmax, or a draw at ``temperature`` (then also probs [B, V])."""
    if temperature <= 0:
        return logits.argmax(-1), None
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1), probs


class ModelDrafter:
    """A standalone draft model behind the propose seam (see module doc).

    Args:
        model: Hugging Face causal LM with the target's vocabulary.
        device: where the caches and masks live (the target's device).
        draft_vocab: ``[Vd]`` token ids the draft may propose (its head is then
            applied to those rows only); None = the full vocabulary, or the
            sub-vocabulary of a head already restricted by
            :func:`selfjudge.models.draft.restrict_head`.
    """

    def __init__(self, model, device: torch.device, draft_vocab: torch.Tensor | None = None):
        self.model = model.eval()
        self.device = device
        self.vocab = vocab_size(model)
        head = model.get_output_embeddings()
        self.vocab_ids = None  # [Vd] the sub-vocabulary, or None
        self._head = None  # (weight [Vd, H], bias [Vd] | None) applied to the final hidden state
        if draft_vocab is not None:
            ids = torch.as_tensor(draft_vocab, dtype=torch.long).flatten().unique()
            if ids.numel() == 0 or int(ids.min()) < 0 or int(ids.max()) >= self.vocab:
                raise ValueError(f"draft_vocab must be non-empty token ids in [0, {self.vocab})")
            if hasattr(head, "vocab_ids"):
                raise ValueError("draft_vocab: this draft's LM head is already restricted to a sub-vocabulary")
            self.vocab_ids = ids.to(device)
            bias = getattr(head, "bias", None)
            self._head = (head.weight.detach()[self.vocab_ids].contiguous(),
                          None if bias is None else bias.detach()[self.vocab_ids])
        elif hasattr(head, "vocab_ids"):
            # a head restricted by selfjudge.models: use its sub-vocabulary logits directly
            # instead of the min-filled [B, V] logits it returns
            self.vocab_ids = head.vocab_ids.to(device)
            self._head = (head.weight.detach(), None)
        self._cache: RaggedCache | None = None
        self._next: torch.Tensor | None = None  # [B, 2] the pair (y_{m-1}, y_m) fed next
        self._next_valid: torch.Tensor | None = None  # [B, 2] bool (padding of a 1-token prompt) or None
        self._proposed: torch.Tensor | None = None  # [B, k] the last proposal

    # ------------------------------------------------------------------ seam
    def prefill(self, input_ids: torch.Tensor, valid: torch.Tensor) -> int:
        """Start a generation from left-padded prompts ``input_ids`` [B, P] (``valid`` [B, P] bool,
        P >= 2); returns the number of draft forwards it ran."""
        B, P = input_ids.shape
        self._cache = RaggedCache(self.model, B, self.device, decoder_only=self.vocab_ids is not None)
        forwards = 0
        if P > 2:
            self._cache.feed(input_ids[:, : P - 2], valid[:, : P - 2])
            forwards = 1
        self._next, self._next_valid = input_ids[:, P - 2 :], valid[:, P - 2 :]
        return forwards

    def propose(self, num_tokens: int, temperature: float, generator) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``num_tokens`` draft tokens per row, one forward each: ``(ids [B, k], probs [B, k, V] or None)``
        (probabilities only when sampling; they are the q the verify op tests against)."""
        tokens, probs = [], []
        x, x_valid = self._next, self._next_valid
        for _ in range(num_tokens):
            out = self._cache.feed(x, x_valid)
            token, p = self._choose(out, temperature, generator)
            tokens.append(token)
            if p is not None:
                probs.append(p)
            x, x_valid = token[:, None], None
        self._proposed = torch.stack(tokens, 1)  # [B, k]
        return self._proposed, (torch.stack(probs, 1) if probs else None)

    def rollback(self, num_accepted: torch.Tensor, keep_max: int, emitted: torch.Tensor) -> None:
        """Keep each row's first ``num_accepted`` [B] proposals; ``emitted`` [B, 1] is the token the
        target emitted after them. ``keep_max`` = max(num_accepted) + 1 as a host int (no sync)."""
        k = self._proposed.shape[1]
        self._cache.rollback(num_accepted + 1, k + 1, keep_max)
        fed = torch.cat([self._next[:, 1:], self._proposed], 1)  # [B, k+1] y_m, d_1..d_k
        previous = fed.gather(1, num_accepted[:, None])  # [B, 1] d_a, or y_m when nothing was kept
        self._next, self._next_valid = torch.cat([previous, emitted], 1), None

    def select(self, rows: torch.Tensor) -> None:
        """Keep only batch rows ``rows`` [B'] (finished requests leave)."""
        self._cache.select(rows)
        self._next = self._next[rows]
        if self._next_valid is not None:
            self._next_valid = self._next_valid[rows]

    def maybe_compact(self, min_columns: int) -> None:
        """Compact the cache when at least ``min_columns`` and a quarter of it can be reclaimed (host sync)."""
        self._cache.maybe_compact(min_columns)

    # ------------------------------------------------------------------ helpers
    def _choose(self, out, temperature: float, generator):
        """Draft token [B] (and probs [B, V] when sampling) from one forward's output."""
        if self.vocab_ids is None:
            return choose(out.logits[:, -1], temperature, generator)
        weight, bias = self._head
        logits = torch.nn.functional.linear(out.last_hidden_state[:, -1], weight, bias)  # [B, Vd]
        sub, probs = choose(logits, temperature, generator)
        token = self.vocab_ids[sub]
        if probs is not None:  # scatter the subset distribution back to the full vocabulary
            probs = probs.new_zeros(probs.shape[0], self.vocab).index_copy_(1, self.vocab_ids, probs)
        return token, probs


def frequent_token_ids(tokenizer, texts, n: int, always=None) -> torch.Tensor:
    """The ``n`` most frequent token ids of ``texts`` (plus ``always`` and the special tokens).

    For ``SpeculativeEngine(draft_vocab=...)``: compute it on text like the outputs
    to be generated (e.g. a task's training references), never on the evaluation set.
    Returns a sorted ``[<= n + extras]`` int64 tensor.
    """
    from collections import Counter

    if int(n) < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    counts: Counter = Counter()
    for t in texts:
        counts.update(tokenizer(t, add_special_tokens=False)["input_ids"])
    ids = {i for i, _ in counts.most_common(int(n))}
    ids.update(int(i) for i in (getattr(tokenizer, "all_special_ids", None) or []))
    ids.update(int(i) for i in (always or []))
    return torch.tensor(sorted(ids), dtype=torch.long)
