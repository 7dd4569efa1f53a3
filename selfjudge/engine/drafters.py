"""Drafters by name, for the command line and the benchmarks: ``model``, ``eagle``, ``prompt-lookup``."""

from __future__ import annotations

__all__ = ["DRAFTER_NAMES", "make_drafter"]

DRAFTER_NAMES = ("model", "eagle", "prompt-lookup")


def make_drafter(name: str, target, draft=None, *, eagle_dir=None, max_ngram: int = 3, min_ngram: int = 1):
    """What to give :class:`~selfjudge.engine.SpeculativeEngine` as its draft.

    ``model``: the standalone ``draft`` model itself (the engine wraps it); ``eagle``: the
    EAGLE head in ``eagle_dir`` (published layout; default: the head shipped for the default
    pair, ``selfjudge/assets/drafters/smollm2-135m-eagle``) over ``target``, drafting from the
    head folder's sub-vocabulary if it ships one; ``prompt-lookup``: n-gram matches, no model.
    """
    if name == "model":
        if draft is None:
            raise ValueError("drafter: 'model' needs a draft model")
        return draft
    if name == "prompt-lookup":
        from selfjudge.engine.prompt_lookup import PromptLookupDrafter

        return PromptLookupDrafter(int(target.config.vocab_size), max_ngram=max_ngram, min_ngram=min_ngram)
    if name == "eagle":
        if eagle_dir is None:  # the head shipped for the default pair (refused by load_eagle_head for another target)
            from selfjudge.models.eagle import SHIPPED_EAGLE_DIR as eagle_dir
        from selfjudge.engine.eagle_drafter import EagleDrafter
        from selfjudge.models.eagle import load_draft_vocab, load_eagle_head

        return EagleDrafter(load_eagle_head(eagle_dir, target), target, draft_vocab=load_draft_vocab(eagle_dir))
    raise ValueError(f"drafter must be one of {DRAFTER_NAMES}, got {name!r}")
