"""The verify op's parameter objects: what a relaxed acceptance rule and the random numbers are,
each in one place, so the public calls take a few named objects instead of a long keyword list
(vLLM's rejection sampler takes ``SpecDecodeMetadata`` and ``SamplingMetadata`` the same way).

Tensor shapes are given for both layouts: padded ``[B, K, ...]`` (:func:`~selfjudge.kernels.verify.verify`)
and flat ``[T, ...]`` (:func:`~selfjudge.kernels.verify.verify_flat`, T drafts of all requests).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["JudgeInputs", "Randomness", "RelaxedRules"]


@dataclass(frozen=True)
class JudgeInputs:
    """A linear judge over the target's final hidden state: position i is acceptable when
    ``h_i . weight + phi_i . phi_weight + bias > threshold`` (logit space), ``phi_i`` being the
    target's probability features of the draft token at temperature 1
    (:mod:`selfjudge.kernels.judge_features`), which the op computes in its own pass."""

    hidden_states: torch.Tensor  # [B, K, H] or [T, H]: the state after reading each draft token
    weight: torch.Tensor  # [H]
    bias: float | torch.Tensor = 0.0  # float, 0-d or [B]
    phi_weight: torch.Tensor | None = None  # [F], None: the hidden state alone
    threshold: float = 0.0


@dataclass(frozen=True)
class RelaxedRules:
    """Relaxations beside the judge, OR-ed with it and reported in ``judge_accepted``.

    ``accept``: positions a rule decided outside the op accepts (e.g. top-k); ``blocked``:
    positions where neither the judge nor ``accept`` may accept (e.g. digits on arithmetic tasks;
    the lossless rule alone decides there). ``fly_window`` > 0 turns on FLy's deferred acceptance
    (``csrc_docs/lossy_rules.md``): a rejection at position i is accepted when the entropy over the
    top ``fly_entropy_top_k`` target probabilities there is >= ``fly_entropy_threshold``, the draft
    token has a non-zero target probability, and the next ``fly_window`` drafts are accepted by the
    lossless rule (with the op's own uniforms), i + window < n_b."""

    accept: torch.Tensor | None = None  # [B, K] or [T] bool
    blocked: torch.Tensor | None = None  # [B, K] or [T] bool
    fly_window: int = 0
    fly_entropy_threshold: float = 0.3
    fly_entropy_top_k: int = 3


@dataclass(frozen=True)
class Randomness:
    """Where one call's random numbers come from: ``(seed, offset)`` seeds a fresh generator (a
    replayable cycle), ``generator`` uses the caller's, neither torch's default; ``noise`` replays the
    ``(uniforms [B, K], exponentials [B, V])`` of an earlier :func:`~selfjudge.kernels.verify.draw_noise`
    (the same tokens from either backend, or from both layouts). Greedy rows draw nothing."""

    seed: int | None = None
    offset: int = 0
    generator: torch.Generator | None = None
    noise: tuple[torch.Tensor, torch.Tensor] | None = None  # ([B, K] uniforms, [B, V] exponentials)


def judge_tensors(judge: JudgeInputs | None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The judge's hidden states and weights (what the launchers read), or (None, None) without a judge."""
    return (judge.hidden_states, judge.weight) if judge is not None else (None, None)


def unpack(judge, rules, randomness) -> tuple[JudgeInputs | None, RelaxedRules, Randomness]:
    """The three objects checked for their type (a ``ValueError`` naming the argument), defaults
    filled in."""
    for name, value, kind in (("judge", judge, JudgeInputs), ("rules", rules, RelaxedRules),
                              ("randomness", randomness, Randomness)):
        if value is not None and not isinstance(value, kind):
            raise ValueError(f"{name} must be a {kind.__name__} or None, got {type(value).__name__}")
    return judge, rules or RelaxedRules(), randomness or Randomness()
