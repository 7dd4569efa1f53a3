"""What the engine drafts with: a pair's draft slot wrapped in a drafter (:func:`as_drafter`),
and drafters by name for the command line and the benchmarks (``model``, ``eagle``,
``prompt-lookup``)."""

from __future__ import annotations

from dataclasses import replace

import torch

from selfjudge.engine.drafter import Drafter, ModelDrafter
from selfjudge.engine.eagle_drafter import EagleDrafter
from selfjudge.engine.prompt_lookup import PromptLookupDrafter
from selfjudge.models.eagle import EagleHead
from selfjudge.models.lookup import NgramLookup
from selfjudge.models.pair import DRAFTER_KINDS as DRAFTER_NAMES
from selfjudge.models.pair import default_lookup

__all__ = ["DRAFTER_NAMES", "as_drafter", "make_drafter"]


def as_drafter(draft, device: torch.device, draft_vocab: torch.Tensor | None = None, target=None) -> Drafter:
    """A :class:`Drafter` for what a pair's draft slot holds: a drafter as it is; an
    :class:`~selfjudge.models.eagle.EagleHead` (needs ``target``) in an EAGLE drafter, with the
    sub-vocabulary :func:`~selfjudge.models.eagle.load_eagle_draft` attached; an
    :class:`~selfjudge.models.lookup.NgramLookup` in a prompt-lookup drafter; a Hugging Face
    causal LM in a :class:`ModelDrafter`."""
    if isinstance(draft, (Drafter, EagleHead, NgramLookup)) and draft_vocab is not None:
        raise ValueError("draft_vocab applies to a draft model; give the drafter its own sub-vocabulary")
    if isinstance(draft, Drafter):
        return draft
    if isinstance(draft, EagleHead):
        if target is None:
            raise ValueError("target: an EAGLE head drafts from the target's hidden states; pass the target")
        return EagleDrafter(draft, target, draft_vocab=getattr(draft, "draft_vocab", None))
    if isinstance(draft, NgramLookup):
        return PromptLookupDrafter(draft.vocab_size, max_ngram=draft.max_ngram, min_ngram=draft.min_ngram,
                                   store=draft.store, store_min_accepted=draft.store_min_accepted)
    return ModelDrafter(draft, device, draft_vocab)


def make_drafter(name: str, target, draft=None, *, eagle_dir=None, pair: str | None = None,
                 max_ngram: int | None = None, min_ngram: int | None = None, lookup_store=None,
                 store_min_accepted: float | None = None):
    """What to give :class:`~selfjudge.engine.SpeculativeEngine` as its draft.

    ``model``: the standalone ``draft`` model itself (the engine wraps it); ``eagle``: the
    EAGLE head in ``eagle_dir`` (published layout; default: the head shipped for the default
    pair, ``selfjudge/assets/drafters/smollm2-135m-eagle``) over ``target``, drafting from the
    head folder's sub-vocabulary if it ships one; ``prompt-lookup``: n-gram matches, no model,
    with ``pair``'s settings (:func:`selfjudge.models.pair.default_lookup`: the built-in pair's
    swept best; None: the :class:`NgramLookup` defaults) unless ``max_ngram``/``min_ngram`` say.
    ``lookup_store``: the n-gram store asked where the context has no match
    (:mod:`selfjudge.models.ngram_store`): None keeps the pair's (the built-in pair records one),
    ``"none"`` asks none, a path loads that file; ``store_min_accepted``: see
    :class:`~selfjudge.engine.prompt_lookup.PromptLookupDrafter` (None: the pair's).
    """
    if lookup_store is not None and name != "prompt-lookup":
        raise ValueError(f"lookup_store: only prompt lookup asks an n-gram store, got drafter {name!r}")
    if name == "model":
        if draft is None:
            raise ValueError("drafter: 'model' needs a draft model")
        return draft
    if name == "prompt-lookup":
        vocab_size = int(target.config.vocab_size)
        lookup = default_lookup(vocab_size, pair)  # pair None or not built in: the class defaults
        given = {k: v for k, v in (("max_ngram", max_ngram), ("min_ngram", min_ngram),
                                   ("store_min_accepted", store_min_accepted)) if v is not None}
        if lookup_store is not None and str(lookup_store) == "none":
            given["store"] = None
        elif lookup_store is not None:
            from selfjudge.models.fingerprint import model_fingerprint
            from selfjudge.models.ngram_store import load_ngram_store

            given["store"] = load_ngram_store(lookup_store, vocab_size, model_fingerprint(target))
        return as_drafter(replace(lookup, **given), None)
    if name == "eagle":
        if eagle_dir is None:  # the head shipped for the default pair (refused by load_eagle_head for another target)
            from selfjudge.models.eagle import SHIPPED_EAGLE_DIR as eagle_dir
        from selfjudge.models.eagle import load_eagle_draft

        return as_drafter(load_eagle_draft(eagle_dir, target), next(target.parameters()).device, target=target)
    raise ValueError(f"drafter must be one of {DRAFTER_NAMES}, got {name!r}")
