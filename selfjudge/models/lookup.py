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

__all__ = ["NgramLookup", "UNRECORDED_NGRAMS"]

#: the n-gram lengths of every label run and bench block written before the lengths were recorded
UNRECORDED_NGRAMS = {"max_ngram": 3, "min_ngram": 1}


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
