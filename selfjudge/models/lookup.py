"""Prompt lookup's settings, as the draft slot of a model pair holds them.

Prompt lookup drafts without a model: it copies what followed the last n-gram of
prompt + output where it appeared before (the drafting loop is
:class:`selfjudge.engine.prompt_lookup.PromptLookupDrafter`). ``load_pair(...,
drafter="prompt-lookup")`` puts an :class:`NgramLookup` in the pair's draft slot and
:class:`~selfjudge.engine.SpeculativeEngine` turns it into that drafter, as it wraps
a draft model or an EAGLE head.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["NgramLookup", "lookup_match", "first_proposal", "teacher_forced_first_tokens", "lookup_id_suffix"]

def lookup_match(history: list[int], k: int, max_ngram: int, min_ngram: int) -> tuple[list[int], int]:
    """Up to ``k`` tokens that followed the most recent earlier occurrence of the longest
    suffix n-gram of ``history`` (``min_ngram <= n <= max_ngram``), and that n; ([], 0) without a match."""
    L = len(history)
    for n in range(min(max_ngram, L - 1), min_ngram - 1, -1):
        suffix = history[L - n:]
        for start in range(L - n - 1, -1, -1):  # most recent earlier occurrence first
            if history[start:start + n] == suffix:
                return history[start + n:start + n + k], n  # never empty: start + n < L
    return [], 0


def first_proposal(lookup, history: list[int], k: int, ask_store: bool) -> tuple[list[int], str]:
    """Up to ``k`` tokens prompt lookup proposes after ``history``: the context's continuation, else
    (``ask_store`` and a store) the store's; and its source: ``"context:n"`` for an n-gram match,
    ``"store"``, or ``""`` for no proposal. ``lookup``: anything with ``max_ngram``, ``min_ngram``
    and ``store`` (an :class:`NgramLookup` or the engine's drafter)."""
    found, n = lookup_match(history, k, lookup.max_ngram, lookup.min_ngram)
    if not found and ask_store and lookup.store is not None:
        found = lookup.store.continuation(history, k)
        return found, "store" if found else ""
    return found, f"context:{n}" if found else ""


def teacher_forced_first_tokens(lookup, prompt_ids: list[int], response_ids: list[int]) -> list[int | None]:
    """Prompt lookup's first proposal after each true prefix of the response (None where it proposes
    nothing). Teacher-forced, every position may ask the store, so the mismatches of any gated run
    are among these."""
    history = list(prompt_ids) + list(response_ids)
    p = len(prompt_ids)
    return [next(iter(first_proposal(lookup, history[: p + i], 1, True)[0]), None) for i in range(len(response_ids))]


def lookup_id_suffix(lookup) -> str:
    """What a label run's draft id adds for prompt lookup: its n-gram lengths (e.g. ``":ngrams3-2"``)
    and its n-gram store, if any (``":store-<fingerprint>"``). A run resumed with other settings is
    then refused, since its mismatches differ."""
    suffix = f":ngrams{lookup.max_ngram}-{lookup.min_ngram}"
    if lookup.store is not None:
        suffix += f":store-{lookup.store.fingerprint()}"
    return suffix


@dataclass(frozen=True)
class NgramLookup:
    """What prompt lookup needs: the target's vocabulary size, the n-gram lengths tried,
    longest first (vLLM's ``prompt_lookup_max`` / ``prompt_lookup_min``), and optionally an
    :class:`~selfjudge.models.ngram_store.NgramStore` asked where the context has no match."""

    vocab_size: int
    max_ngram: int = 3
    min_ngram: int = 1
    store: Any = field(default=None, compare=False)
    store_min_accepted: float | None = None  # a row stops asking a store that keeps fewer tokens per proposal

    def __post_init__(self):
        if int(self.vocab_size) < 1:
            raise ValueError(f"vocab_size must be >= 1, got {self.vocab_size}")
        if not 1 <= int(self.min_ngram) <= int(self.max_ngram):
            raise ValueError(f"min_ngram and max_ngram must satisfy 1 <= min_ngram <= max_ngram, "
                             f"got {self.min_ngram}, {self.max_ngram}")

    def teacher_forced_top1(self, prompt_ids: list[int], response_ids: list[int]) -> list[int | None]:
        """Prompt lookup's teacher-forced first proposals (:func:`teacher_forced_first_tokens`), so a
        pair's lookup drafts labels as the engine's prompt-lookup drafter does."""
        return teacher_forced_first_tokens(self, prompt_ids, response_ids)
