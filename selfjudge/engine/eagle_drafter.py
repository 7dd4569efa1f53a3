"""The EAGLE-style feature head (:class:`selfjudge.models.eagle.EagleHead`) behind the drafter seam.

The head's sequence holds one entry per token the target has read: entry j is
``(f_j, x_{j+1})``, the target's final hidden state after token j and the token
that followed. Per cycle (y_1..y_m = prompt + emitted tokens; the target has read
y_1..y_{m-1}, so the head holds entries up to (f_{m-1}, y_m) or has them pending):

* :meth:`EagleDrafter.propose` runs the pending entries (one forward, ragged
  across rows), takes each row's last output f̂ as the predicted feature of y_m,
  draws d_1 from the target's LM head over f̂, then feeds ``(f̂, d_1)`` to draw
  d_2, and so on: k forwards for k drafts;
* :meth:`EagleDrafter.rollback` drops the k-1 speculative entries (they were built
  from predicted features; cropping them is exact) and makes the real entries of
  this cycle pending: ``(f(y_m), d_1) .. (f(d_{a-1}), d_a), (f(d_a), t)`` from the
  target states the verify forward already computed, ``a`` accepted drafts and
  ``t`` the emitted token (a + 1 entries, a prefix of the k + 1 columns).

So after a partial acceptance the head's cache holds exactly what a fresh prefill
of the same text would (tested). A one-token prompt has no target state yet: the
first cycle proposes nothing and the engine takes a plain target step.
"""

from __future__ import annotations

import torch

from selfjudge.engine.cache import RaggedCache
from selfjudge.engine.drafter import Drafter, Proposal, TokenHead

__all__ = ["EagleDrafter"]


class EagleDrafter(Drafter):
    """Drafts with an EAGLE head over the target's own hidden states.

    Args:
        head: an :class:`~selfjudge.models.eagle.EagleHead` for ``target``.
        target: the target model (its LM head turns predicted features into tokens).
        draft_vocab: ``[Vd]`` token ids to propose from (the head then scores only those
            rows of the target's LM head: much cheaper per step); None = all.
    """

    name = "eagle"
    needs_target_hidden = True

    def __init__(self, head, target, draft_vocab: torch.Tensor | None = None):
        self.head = head.eval()
        self.target = target
        self.device = next(target.parameters()).device
        self.vocab_size = int(target.config.vocab_size)
        self._tokens = TokenHead.from_module(target.get_output_embeddings(), self.vocab_size, self.device, draft_vocab)
        self._cache: RaggedCache | None = None
        self._pending: tuple | None = None  # (tokens [B, S], features [B, S, H], valid [B, S], last [B])
        self._speculative = 0  # entries the last proposal appended beyond the real ones
        self._last_proposal: torch.Tensor | None = None  # [B, k] the drafts of the last proposal
        self._stateless: list[bool] | None = None  # host: rows with no target state yet (None: none)

    @property
    def vocab_ids(self) -> torch.Tensor | None:
        return self._tokens.vocab_ids

    def prefill(self, input_ids: torch.Tensor, valid: torch.Tensor, target_hidden: torch.Tensor | None = None) -> int:
        if target_hidden is None:
            raise ValueError("target_hidden: the EAGLE drafter needs the target's hidden states of the prompt")
        B, P = input_ids.shape
        self._cache = RaggedCache(self.head, B, self.device, decoder_only=True)
        # entry j = (f_j, x_{j+1}) for the P-1 columns the target read; real only where both tokens are
        entry_valid = valid[:, :-1] & valid[:, 1:]
        self._set_pending(input_ids[:, 1:], target_hidden, entry_valid)
        stateless = (~entry_valid.any(1)).tolist()  # one-token prompts (one host read, at prefill only)
        self._stateless = stateless if any(stateless) else None
        self._speculative = 0
        return 0

    def propose(self, num_tokens: int, temperature: float, generator) -> Proposal:
        tokens, features, entry_valid, last = self._pending
        B = tokens.shape[0]
        out = self._cache.feed(tokens, entry_valid, features=features)
        predicted = out.last_hidden_state[torch.arange(B, device=self.device), last]  # [B, H] f̂ of y_m
        self._pending = None
        drafts, probs = [], []
        for i in range(num_tokens):
            token, p = self._tokens.choose(predicted, temperature, generator)
            drafts.append(token)
            if p is not None:
                probs.append(p)
            if i + 1 < num_tokens:  # feed (f̂, d) to predict the next feature
                out = self._cache.feed(token[:, None], None, features=predicted[:, None])
                predicted = out.last_hidden_state[:, -1]
        self._speculative = max(num_tokens - 1, 0)
        ids = torch.stack(drafts, 1)  # [B, k]
        self._last_proposal = ids
        counts = None  # a row without a target state yet (one-token prompt) proposes nothing this cycle
        if self._stateless is not None:
            counts = [0 if none else num_tokens for none in self._stateless]
        return Proposal(ids, torch.stack(probs, 1) if probs else None, counts, forwards=num_tokens)

    def rollback(self, num_accepted: torch.Tensor, keep_max: int, emitted: torch.Tensor,
                 emitted_host: list[list[int]], target_hidden: torch.Tensor | None = None) -> None:
        if target_hidden is None:
            raise ValueError("target_hidden: the EAGLE drafter needs the target's hidden states")
        if self._speculative:
            B = num_accepted.shape[0]
            none = torch.zeros(B, dtype=torch.long, device=self.device)
            self._cache.rollback(none, self._speculative, 0)  # drop every speculative entry (a crop)
            self._speculative = 0
        B, width = target_hidden.shape[:2]  # width = k' + 1 columns the target read
        # tokens of the new entries: d_1..d_a, then the emitted token at column a
        proposed = self._proposed_or_zeros(B, width - 1)
        tokens = torch.cat([proposed, torch.zeros_like(emitted)], 1).scatter(1, num_accepted[:, None], emitted)
        entry_valid = torch.arange(width, device=self.device)[None, :] <= num_accepted[:, None]  # [B, k'+1]
        self._set_pending(tokens, target_hidden, entry_valid)
        self._stateless = None  # every row has read at least one target state now

    def select(self, rows: torch.Tensor) -> None:
        self._cache.select(rows)
        if self._pending is not None:
            self._pending = tuple(t[rows] for t in self._pending)
        if self._last_proposal is not None:
            self._last_proposal = self._last_proposal[rows]
        if self._stateless is not None:
            self._stateless = [self._stateless[r] for r in rows.tolist()]

    def maybe_compact(self, min_columns: int) -> None:
        self._cache.maybe_compact(min_columns)

    @torch.no_grad()
    def teacher_forced_top1(self, prompt_ids: list[int], response_ids: list[int]) -> list[int | None]:
        """One target forward over the text for its features, one head forward over the entries
        ``(f_j, x_{j+1})``: entry t-2 predicts the token at position t (None for t < 2)."""
        if not response_ids:
            return []
        ids = torch.tensor([list(prompt_ids) + list(response_ids)], device=self.device)  # [1, L]
        f = self.target.get_decoder()(input_ids=ids).last_hidden_state  # [1, L, H]
        predicted = self.head(ids[:, 1:-1], f[:, :-2]).last_hidden_state[0]  # [L-2, H]: entry j -> x_{j+2}
        tokens = self._tokens.choose(predicted, 0.0, None)[0].tolist() if predicted.shape[0] else []
        p = len(prompt_ids)
        return [tokens[p + i - 2] if p + i >= 2 else None for i in range(len(response_ids))]

    # ------------------------------------------------------------------ helpers
    def _set_pending(self, tokens, features, entry_valid) -> None:
        """Entries to feed before the next proposal; ``last`` [B] is each row's last real entry."""
        index = torch.arange(tokens.shape[1], device=self.device)
        last = torch.where(entry_valid, index, -1).amax(1).clamp_min(0)  # [B]
        self._pending = (tokens, features, entry_valid, last)

    def _proposed_or_zeros(self, B: int, k: int) -> torch.Tensor:
        """The drafts of the last proposal, [B, k] (k = 0 after a proposal-free target step)."""
        if k == 0:
            return torch.zeros(B, 0, dtype=torch.long, device=self.device)
        return self._last_proposal[:, :k]
