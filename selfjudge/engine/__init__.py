"""selfjudge.engine: batched speculative decoding over Hugging Face causal LMs.

``SpeculativeEngine(target, draft, tokenizer, policy=...)`` (adaptive speculation: each
cycle's drafts per row chosen from measured costs; ``num_draft_tokens=K`` fixes K) with the
policies of ``POLICY_NAMES`` (``autoregressive``, ``standard``, ``topk``, ``judge``, ``typical``,
``relaxed``, ``fly``, ``judge+fly``; built by ``make_policy``); see
:mod:`selfjudge.engine.engine` for the cycle's steps, :mod:`selfjudge.engine.drafter`
for the propose seam and :mod:`selfjudge.engine.cache` for the batched KV-cache
handling (design note: ``csrc_docs/engine.md``).
"""

from selfjudge.engine.drafter import Drafter, ModelDrafter, Proposal, frequent_token_ids
from selfjudge.engine.drafter_factory import DRAFTER_NAMES, make_drafter
from selfjudge.engine.eagle_drafter import EagleDrafter
from selfjudge.engine.prompt_lookup import PromptLookupDrafter
from selfjudge.engine.engine import GenerationResult, SpeculativeEngine
from selfjudge.engine.policies import (
    POLICY_NAMES,
    AutoregressivePolicy,
    CycleInputs,
    Relaxation,
    JudgePolicy,
    Policy,
    StandardPolicy,
    TopKPolicy,
    digit_token_ids,
    make_policy,
)
from selfjudge.engine.stats import GenerationStats, aggregate_stats

__all__ = [
    "SpeculativeEngine",
    "GenerationResult",
    "Drafter",
    "ModelDrafter",
    "Proposal",
    "EagleDrafter",
    "PromptLookupDrafter",
    "make_drafter",
    "DRAFTER_NAMES",
    "frequent_token_ids",
    "GenerationStats",
    "aggregate_stats",
    "Policy",
    "CycleInputs",
    "Relaxation",
    "AutoregressivePolicy",
    "StandardPolicy",
    "TopKPolicy",
    "JudgePolicy",
    "make_policy",
    "digit_token_ids",
    "POLICY_NAMES",
]
