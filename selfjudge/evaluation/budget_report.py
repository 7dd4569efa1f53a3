"""Every method at one quality budget, like for like: the setting each method's validation curve
picks (the loosest that kept semantic fidelity >= the budget on validation prompts), measured on the
block's evaluation prompts.

SelfJudge's setting is its ``quality:B`` threshold; a training-free rule's is the point of its own
validation curve that the verifier stores beside SelfJudge's (``selfjudge calibrate``), so neither
method is tuned on the prompts it is reported on.
"""

from __future__ import annotations

import os
from typing import Any

from selfjudge.evaluation.block_schema import file_digest
from selfjudge.evaluation.pareto import mean_interval, speed_ratio_interval


def semantic_interval(row: dict[str, Any], n_boot: int = 1000, seed: int = 0) -> tuple[float, float] | None:
    """95 % percentile bootstrap interval over prompts of a row's mean semantic fidelity."""
    values = (row.get("per_prompt") or {}).get("semantic") or []
    if len(values) < 2:
        return None
    ci = mean_interval(values, n_boot, seed)
    return ci["low"], ci["high"]


def _curves(block: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The validation curves stored in the block's SelfJudge verifier ({} when it has none, is gone, or
    is no longer the file the block measured)."""
    from selfjudge.judge import load_verifier

    path = (block.get("verifiers") or {}).get("SelfJudge")
    recorded = (block.get("verifier_sha256") or {}).get("SelfJudge")
    if not path or not os.path.isfile(path) or (recorded is not None and file_digest(path) != recorded):
        return {}
    return (load_verifier(path).metadata.get("validation") or {}).get("curves") or {}


def budget_choices(block: dict[str, Any], budget: float) -> list[tuple[str, str | None]]:
    """``(family, row name or None)``: SelfJudge's ``quality:B`` row and each rule's point within the
    budget on its validation curve (None: no setting of that rule kept the budget on validation)."""
    from selfjudge.judge.budget import point_within_budget

    curves = _curves(block)
    if not curves:
        return []
    picks = [("SelfJudge", f"SelfJudge-quality:{budget:g}")]
    for family, points in sorted(curves.items()):
        if family != "SelfJudge":
            point = point_within_budget(points, budget)
            picks.append((family, point["name"] if point else None))
    return picks


def budget_table(blocks: list[dict[str, Any]], budget: float = 0.97) -> str:
    """Markdown: per block, standard SD and every method at the budget (m, semantic fidelity with its
    interval over prompts, tokens/s against standard with its interval over prompt groups)."""
    lines = [f"| task | batch | method | setting (validation, semantic >= {budget:g}) | m | × standard m | "
             "semantic (95 % CI) | tok/s × standard (95 % CI) | judge-only tokens |",
             "|---|---|---|---|---|---|---|---|---|"]
    for b in blocks:
        picks = budget_choices(b, budget)
        by_name = {r["name"]: r for r in b["rows"]}
        std = by_name.get("standard")
        if not picks or std is None:
            continue
        for family, name in [("standard", "standard")] + picks:
            r = by_name.get(name) if name else None
            if r is None:
                lines.append(f"| {b['task']} | {b['batch']} | {family} | {name or 'none within the budget'} "
                             "| – | – | – | – | – |")
                continue
            sem = semantic_interval(r)
            speed = speed_ratio_interval(r, std, n_boot=500) if r is not std else None
            lines.append(
                f"| {b['task']} | {b['batch']} | {family} | {name} | {r['mean_accepted_length']:.2f} | "
                f"{r['mean_accepted_length'] / std['mean_accepted_length']:.2f} | {r.get('semantic_fidelity', float('nan')):.3f}"
                + (f" [{sem[0]:.3f}, {sem[1]:.3f}]" if sem else "") + f" | {r['speedup_vs_standard']:.2f}"
                + (f" [{speed['low']:.2f}, {speed['high']:.2f}]" if speed else "") + f" | {r['judge_accepted_tokens']} |")
    return "\n".join(lines) if len(lines) > 2 else ""
