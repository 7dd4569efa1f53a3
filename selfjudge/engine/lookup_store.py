"""Prompt lookup's n-gram store for any target: built from the target's own text, its confidence
settings chosen on held-out text of the same target.

The built-in pair's store (``selfjudge/assets/drafters/``) was made this way: the target's greedy
responses to train prompts are the store; its responses to validation prompts score every
(min count, min share) setting teacher-forced -- how often prompt lookup's first proposal, with
and without the store, is the target's own next token -- and the setting with the best agreement
is written. :func:`lookup_agreement` is that score, :func:`build_store` the sweep and the choice.
"""

from __future__ import annotations

from typing import Sequence

from selfjudge.models.ngram_store import NgramStore

from .prompt_lookup import PromptLookupDrafter

#: the settings swept for the built-in store (``bench/results/ngram-store.json``)
SWEEP_COUNTS = (1, 2, 3, 5)
SWEEP_SHARES = (0.0, 0.5, 0.6, 0.75)

Sequences = Sequence[tuple[Sequence[int], int]]  # (prompt + response ids, response start)


def lookup_agreement(seqs: Sequences, max_ngram: int, min_ngram: int, store: NgramStore | None) -> dict:
    """Teacher-forced first proposals of prompt lookup with and without ``store`` (the drafter's own
    rule, :meth:`PromptLookupDrafter.teacher_forced_top1`) against the target's tokens: agreement
    (no proposal = a miss), and where the context proposes and where the store does, how often right."""
    vocab = max(1, store.max_token_id + 1) if store is not None else 1  # teacher forcing reads no vocabulary
    alone = PromptLookupDrafter(vocab, max_ngram, min_ngram)
    both = PromptLookupDrafter(vocab, max_ngram, min_ngram, store=store)
    n = agree = context = context_right = asked = store_proposed = store_right = 0
    for ids, start in seqs:
        prompt, response = list(ids[:start]), list(ids[start:])
        for c, z, t in zip(alone.teacher_forced_top1(prompt, response), both.teacher_forced_top1(prompt, response),
                           response):
            n += 1
            agree += z == t
            if c is not None:
                context += 1
                context_right += c == t
                continue
            asked += 1
            if z is not None:
                store_proposed += 1
                store_right += z == t
    return {"tokens": n, "agreement": agree / max(n, 1), "context_proposes": context / max(n, 1),
            "context_precision": context_right / max(context, 1), "store_asked": asked / max(n, 1),
            "store_proposes": store_proposed / max(n, 1), "store_precision": store_right / max(store_proposed, 1)}


def build_store(train: Sequences, heldout: Sequences | None, *, context: int = 3, max_ngram: int = 3,
                min_ngram: int = 2, min_count: int | None = None, min_share: float | None = None,
                counts: Sequence[int] = SWEEP_COUNTS, shares: Sequence[float] = SWEEP_SHARES,
                source: str = "", lookup_ngrams: tuple[int, int] = (3, 2)) -> tuple[NgramStore, dict]:
    """``(store, report)``: the store of ``train`` (each response with the ``context`` prompt tokens
    before it), written with ``min_count``/``min_share``, or, where those are None, with the swept
    setting whose held-out agreement is best (ties: the sparser store). ``lookup_ngrams``: the
    (max, min) n-gram lengths prompt lookup matches in the context while scoring."""
    if context < 0:
        raise ValueError(f"context must be >= 0, got {context}")
    if (min_count is None or min_share is None) and not heldout:
        raise ValueError("heldout: choosing min_count/min_share needs held-out text (or give both settings)")
    sequences = [list(ids[max(0, start - context):]) for ids, start in train]
    if not sequences:
        raise ValueError("train: no sequences to build the store from")

    def make(count, share):
        return NgramStore(sequences, max_ngram, min_ngram, count, share, source)

    report: dict = {"lookup": {"max_ngram": lookup_ngrams[0], "min_ngram": lookup_ngrams[1]}, "context": context}
    if heldout:
        report["without_store"] = lookup_agreement(heldout, *lookup_ngrams, None)
        report["sweep"] = [{"min_count": c, "min_share": s, **lookup_agreement(heldout, *lookup_ngrams, make(c, s))}
                           for c in counts for s in shares]
    if min_count is None or min_share is None:
        best = max(report["sweep"], key=lambda r: (r["agreement"], r["min_count"], r["min_share"]))
        min_count = best["min_count"] if min_count is None else min_count
        min_share = best["min_share"] if min_share is None else min_share
        report["chosen_by"] = "best held-out agreement of the sweep"
    store = make(min_count, min_share)
    report["written"] = {**store.settings(), "ngrams": len(store)}
    return store, report
