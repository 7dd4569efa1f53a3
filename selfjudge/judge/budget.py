"""Quality-budget operating points: ``"quality:0.97"`` = the loosest setting whose validation
curve keeps semantic fidelity >= 0.97.

A *validation curve* is a method's operating points measured in the engine on validation
prompts (``selfjudge calibrate`` writes them into a verifier's metadata under
``"validation"``): for each point its mean accepted length ``m``, its ``semantic_fidelity``
to the target's own output and how to reproduce it (a judge threshold's ``logit``, a rule's
``params``). Points are read from strict to loose in order of increasing ``m``, and the
budget is met by the last point before the first one that falls below it: one lucky loose
point after a violation is not trusted. When even the strictest point misses the budget there
is no point (the judge then accepts nothing: standard decoding).
"""

from __future__ import annotations

import math
from typing import Any

QUALITY_PREFIX = "quality:"
#: the quality measure a budget reads
BUDGET_MEASURE = "semantic_fidelity"


def parse_budget(name: Any) -> float | None:
    """The budget of a ``"quality:<b>"`` name (0 < b <= 1), None for any other value."""
    if not isinstance(name, str) or not name.startswith(QUALITY_PREFIX):
        return None
    text = name[len(QUALITY_PREFIX):]
    try:
        budget = float(text)
    except ValueError:
        raise ValueError(f"threshold {name!r}: the budget after {QUALITY_PREFIX!r} must be a number in (0, 1]") from None
    if not 0.0 < budget <= 1.0:
        raise ValueError(f"threshold {name!r}: the budget must lie in (0, 1], got {budget}")
    return budget


def point_within_budget(points: list[dict[str, Any]], budget: float) -> dict[str, Any] | None:
    """The loosest point of a curve that keeps ``semantic_fidelity`` >= ``budget`` with every
    stricter point also keeping it (points ordered by increasing ``m``); None if the strictest fails."""
    chosen = None
    for p in sorted(points, key=lambda p: p["m"]):
        y = p.get(BUDGET_MEASURE)
        if y is None or not math.isfinite(y) or y < budget:
            break
        chosen = p
    return chosen


def check_validation_record(record: Any) -> None:
    """``TypeError`` unless a ``metadata["validation"]`` record has the shape the budget reads:
    ``{"curves": {family: [{"m": number, "semantic_fidelity": number | None, and "logit": number
    (SelfJudge) or "params": object (a rule)}, ...]}}``."""
    curves = record.get("curves") if isinstance(record, dict) else None
    if not isinstance(curves, dict):
        raise TypeError("validation must be an object holding curves")
    for family, points in curves.items():
        if not isinstance(points, list) or not all(isinstance(p, dict) for p in points):
            raise TypeError(f"validation curve {family!r} must be a list of objects")
        for p in points:
            if not _number(p.get("m")) or not (p.get(BUDGET_MEASURE) is None or _number(p[BUDGET_MEASURE])):
                raise TypeError(f"validation curve {family!r}: m and semantic_fidelity must be numbers")
            if family == "SelfJudge" and not _number(p.get("logit")):
                raise TypeError("validation curve 'SelfJudge': every point needs a logit")
            if family != "SelfJudge" and not isinstance(p.get("params", {}), dict):
                raise TypeError(f"validation curve {family!r}: params must be an object")


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def validation_curve(metadata: dict[str, Any], family: str) -> list[dict[str, Any]]:
    """A family's validation points from a verifier's metadata (``ValueError`` naming the fix when
    the verifier has none)."""
    curves = (metadata.get("validation") or {}).get("curves") or {}
    if family not in curves or not curves[family]:
        have = sorted(curves) or "none"
        raise ValueError(f"threshold: a quality budget needs a validation curve of {family!r} in the verifier "
                         f"(have: {have}); measure one with `selfjudge bench --split val` and store it with "
                         "`selfjudge calibrate`")
    return curves[family]


def judge_threshold_at_budget(metadata: dict[str, Any], budget: float, family: str = "SelfJudge") -> float:
    """The judge threshold (logit) of the loosest validation point within ``budget``; +inf (accept
    nothing) when no point is."""
    point = point_within_budget(validation_curve(metadata, family), budget)
    return math.inf if point is None else float(point["logit"])


def rule_params_at_budget(metadata: dict[str, Any], family: str, budget: float) -> dict[str, Any] | None:
    """A training-free rule's settings at the loosest validation point within ``budget`` (None: none
    is; use standard decoding)."""
    point = point_within_budget(validation_curve(metadata, family), budget)
    return None if point is None else dict(point["params"])
