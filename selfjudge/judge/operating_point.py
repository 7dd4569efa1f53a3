"""A verifier at one operating point: its weights and the logit threshold it accepts above.

The threshold is given as users type it, read once by :func:`parse_threshold` and resolved to a
logit by :func:`resolve_threshold`:

* None: :data:`DEFAULT_THRESHOLD`, the quality budget ``"quality:0.97"``; a verifier without a
  validation curve to read it from falls back to its stored ``"F"``, then to 0;
* a stored name (``"F"``, ``"R"``, ``"q0.30"``): its logit;
* ``"quality:<b>"``: the loosest point of the verifier's validation curve that keeps semantic
  fidelity >= b (:mod:`selfjudge.judge.budget`; +inf, accept nothing, when none does);
* a number, or a string that reads as one: that logit.

The engine's judge policy, the command line, the bench and the vLLM plugin all take a
:class:`JudgeWeights` from :meth:`selfjudge.judge.Verifier.at`, so one value means one logit
everywhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import torch

from .budget import judge_threshold_at_budget, parse_budget

__all__ = ["DEFAULT_THRESHOLD", "JudgeWeights", "parse_threshold", "resolve_threshold"]

#: the operating point when none is given (see the module doc for its fallback)
DEFAULT_THRESHOLD = "quality:0.97"


def _has_curve(metadata: dict) -> bool:
    return bool(((metadata or {}).get("validation") or {}).get("curves", {}).get("SelfJudge"))


def parse_threshold(value: Any) -> str | float | None:
    """A threshold as typed, read once: None stays None; a number, or a string that reads as one,
    becomes a float (NaN refused); ``"quality:<b>"`` stays a string once its budget is checked; any
    other string is a stored name. ``ValueError`` naming the value otherwise (a bool, another type)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"threshold must be a stored name, a quality budget or a number, got {value!r}")
    if isinstance(value, str):
        if parse_budget(value) is not None:
            return value
        try:
            value = float(value)
        except ValueError:
            return value
    if math.isnan(value):
        raise ValueError("threshold must be a number or a stored name, got nan")
    return float(value)


def resolve_threshold(value: Any, thresholds: dict[str, float] | None = None, metadata: dict | None = None) -> float:
    """The logit threshold ``value`` names for a verifier with stored ``thresholds`` and ``metadata``
    (see the module doc); ``ValueError`` naming the value otherwise (NaN, a bool, an unknown name)."""
    thresholds, metadata = thresholds or {}, metadata or {}
    value = parse_threshold(value)
    if value is None:
        if not _has_curve(metadata):
            return float(thresholds.get("F", 0.0))
        value = DEFAULT_THRESHOLD
    if isinstance(value, float):
        return value
    if value in thresholds:
        return float(thresholds[value])
    budget = parse_budget(value)
    if budget is not None:
        return judge_threshold_at_budget(metadata, budget)
    raise ValueError(f"unknown threshold {value!r}; stored names: {sorted(thresholds)}, or quality:<b>, or a number")


@dataclass(frozen=True)
class JudgeWeights:
    """A linear judge at a resolved operating point: accept where ``weight . h + phi_weight . phi +
    bias > threshold``. ``feature_dtype``: the dtype its training features were computed in (None:
    unknown); ``source``: where it came from (a verifier file), for messages."""

    weight: torch.Tensor  # [H] float32
    bias: float
    phi_weight: torch.Tensor | None = None  # [F] float32, or None
    threshold: float = 0.0
    feature_dtype: str | None = None
    source: str | None = None

    def __post_init__(self) -> None:
        weight = torch.as_tensor(self.weight, dtype=torch.float32)
        if weight.ndim != 1:
            raise ValueError(f"verifier weight must be 1-D [H], got shape {tuple(weight.shape)}")
        object.__setattr__(self, "weight", weight)
        if self.phi_weight is not None:
            object.__setattr__(self, "phi_weight", torch.as_tensor(self.phi_weight, dtype=torch.float32))
        object.__setattr__(self, "bias", float(self.bias))
        if math.isnan(float(self.threshold)):
            raise ValueError("threshold must be a number, got nan")
        object.__setattr__(self, "threshold", float(self.threshold))

    @classmethod
    def from_pair(cls, weight, bias, threshold: float | str | None = None) -> "JudgeWeights":
        """A bare ``(weight [H], bias)`` judge; its threshold a number (None: 0)."""
        return cls(weight, bias, threshold=resolve_threshold(threshold))

    @property
    def hidden_size(self) -> int:
        return int(self.weight.shape[0])

    def to(self, device: torch.device | str) -> "JudgeWeights":
        """The same judge with its tensors on ``device``."""
        phi = None if self.phi_weight is None else self.phi_weight.to(device)
        return replace(self, weight=self.weight.to(device), phi_weight=phi)
