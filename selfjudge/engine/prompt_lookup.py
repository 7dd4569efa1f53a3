"""Prompt lookup: draft by copying what followed the last n-gram where it appeared before.

As Hugging Face's ``prompt_lookup_num_tokens`` and vLLM's ``ngram`` proposer: for
each row, take the last ``n`` tokens of prompt + output (``n`` from ``max_ngram``
down to ``min_ngram``); if that n-gram occurred earlier, propose the tokens that
followed its most recent earlier occurrence (at most ``k``). No model runs, the
draft has no distribution (``draft_probs=None``: the verify op treats it as
one-hot, so standard sampling stays lossless), and a row with no match proposes
nothing, which costs nothing: when no row has a proposal the engine takes a plain
target step.

Input-grounded generations (summaries, code edits, quotes, answers that repeat
the question's numbers) are where it pays; on free text it mostly proposes nothing.
An optional :class:`~selfjudge.models.ngram_store.NgramStore` of the target's own
phrases proposes where the context has no match. With ``store_min_accepted`` a row
stops asking the store once its proposals have been tried ``store_min_tries`` times
and kept fewer than that many tokens on average (a store made from other tasks' text
is mostly wrong there, and a wrong proposal costs a verify forward).
"""

from __future__ import annotations

import torch

from selfjudge.engine.drafter import Drafter, Proposal
from selfjudge.models.lookup import first_proposal, lookup_match, teacher_forced_first_tokens

__all__ = ["PromptLookupDrafter", "lookup", "lookup_match"]


def lookup(history: list[int], k: int, max_ngram: int, min_ngram: int) -> list[int]:
    """The tokens of :func:`lookup_match` alone."""
    return lookup_match(history, k, max_ngram, min_ngram)[0]


class PromptLookupDrafter(Drafter):
    """The n-gram drafter (see module doc).

    Args:
        vocab_size: the target's vocabulary size.
        max_ngram, min_ngram: the n-gram lengths tried, longest first (vLLM's
            ``prompt_lookup_max`` / ``prompt_lookup_min``; Hugging Face matches
            ``max_matching_ngram_size`` = 2 by default).
        store: an :class:`~selfjudge.models.ngram_store.NgramStore` asked where the
            context has no match (None: propose nothing there).
        store_min_accepted: the fewest draft tokens a row's store proposals must keep on
            average for the row to go on asking it (None: always ask).
        store_min_tries: store proposals a row makes before that average is judged.
    """

    name = "prompt-lookup"

    def __init__(self, vocab_size: int, max_ngram: int = 3, min_ngram: int = 1, store=None,
                 store_min_accepted: float | None = None, store_min_tries: int = 4):
        if not 1 <= int(min_ngram) <= int(max_ngram):
            raise ValueError(f"min_ngram and max_ngram must satisfy 1 <= min_ngram <= max_ngram, "
                             f"got {min_ngram}, {max_ngram}")
        self.vocab_size = int(vocab_size)
        self.max_ngram, self.min_ngram = int(max_ngram), int(min_ngram)
        if store is not None and store.max_token_id >= self.vocab_size:
            raise ValueError(f"store: proposes token {store.max_token_id}, outside the vocabulary of {self.vocab_size}")
        self.store = store
        if store_min_accepted is not None and not float(store_min_accepted) >= 0:
            raise ValueError(f"store_min_accepted must be >= 0 or None, got {store_min_accepted}")
        if int(store_min_tries) < 1:
            raise ValueError(f"store_min_tries must be >= 1, got {store_min_tries}")
        self.store_min_accepted = None if store_min_accepted is None else float(store_min_accepted)
        self.store_min_tries = int(store_min_tries)
        self._history: list[list[int]] = []  # per row: prompt + emitted tokens
        self._asked_store: list[bool] = []  # per row: the last proposal came from the store
        self._store_tries: list[int] = []  # per row: store proposals verified
        self._store_kept: list[int] = []  # per row: draft tokens those proposals kept
        self._device = None

    def prefill(self, input_ids: torch.Tensor, valid: torch.Tensor, target_hidden: torch.Tensor | None = None) -> int:
        self._device = input_ids.device
        self._history = [[t for t, ok in zip(row, mask) if ok]
                         for row, mask in zip(input_ids.tolist(), valid.tolist())]
        B = len(self._history)
        self._asked_store, self._store_tries, self._store_kept = [False] * B, [0] * B, [0] * B
        return 0

    def store_open(self, row: int) -> bool:
        """Whether row ``row`` still asks the store (see ``store_min_accepted``)."""
        if self.store is None:
            return False
        tries = self._store_tries[row]
        if self.store_min_accepted is None or tries < self.store_min_tries:
            return True
        return self._store_kept[row] >= self.store_min_accepted * tries

    def propose(self, num_tokens: int, temperature: float, generator) -> Proposal:
        proposals = [first_proposal(self, h, num_tokens, self.store_open(b)) for b, h in enumerate(self._history)]
        found = [f for f, _ in proposals]
        sources = [source for _, source in proposals]
        self._asked_store = [source == "store" for source in sources]
        width = max((len(f) for f in found), default=0)
        ids = torch.zeros(len(found), width, dtype=torch.long)  # [B, k'] padded with 0 past each row's count
        for b, f in enumerate(found):
            ids[b, : len(f)] = torch.tensor(f, dtype=torch.long)
        return Proposal(ids.to(self._device), None, [len(f) for f in found], forwards=0, sources=sources)

    def rollback(self, num_accepted: torch.Tensor, keep_max: int, emitted: torch.Tensor,
                 emitted_host: list[list[int]], target_hidden: torch.Tensor | None = None) -> None:
        for b, (history, new) in enumerate(zip(self._history, emitted_host)):
            history.extend(new)
            if self._asked_store[b]:
                self._store_tries[b] += 1
                self._store_kept[b] += len(new) - 1  # kept drafts; the last token is the target's
        self._asked_store = [False] * len(self._history)

    def select(self, rows: torch.Tensor) -> None:
        keep = rows.tolist()
        self._history = [self._history[r] for r in keep]
        self._asked_store = [self._asked_store[r] for r in keep]
        self._store_tries = [self._store_tries[r] for r in keep]
        self._store_kept = [self._store_kept[r] for r in keep]

    def teacher_forced_top1(self, prompt_ids: list[int], response_ids: list[int]) -> list[int | None]:
        return teacher_forced_first_tokens(self, prompt_ids, response_ids)
