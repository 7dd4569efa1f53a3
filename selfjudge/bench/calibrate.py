"""Validation curves from a bench run on validation prompts, stored in a verifier.

``selfjudge bench --split val`` measures every method's operating points on the task's
validation prompts; :func:`validation_curves` turns one (task, batch) block into the curves a
quality budget reads (:mod:`selfjudge.judge.budget`): per family, each point's m, semantic
fidelity and how to reproduce it (SelfJudge: the threshold's name and logit; a training-free
rule: its settings; top-k: its k). :func:`calibrate` writes them into a copy of the verifier
the block measured (its sha256 must match) under ``metadata["validation"]``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from selfjudge.bench.report import read_blocks
from selfjudge.bench.block_schema import file_digest

_SKIP = ("target-only", "standard", "HF")


def _point(row: dict[str, Any], verifier) -> dict[str, Any]:
    point = {"name": row["name"], "m": row["mean_accepted_length"], "semantic_fidelity": row.get("semantic_fidelity"),
             "rouge_l": row.get("rouge_l_vs_target"), "tokens_per_s_vs_standard": row.get("speedup_vs_standard")}
    if row["family"] == "SelfJudge":
        point.update(threshold=row["threshold"], logit=verifier.threshold(row["threshold"]))
    elif row["family"] == "top-k":
        point["params"] = {"k": row["top_k"]}
    else:
        point["params"] = {k: v for k, v in row.get("params") or ()}
        if row.get("threshold") is not None:
            point["params"]["threshold"] = row["threshold"]
    return point


def validation_curves(blocks: list[dict[str, Any]], verifier, verifier_path: str | Path,
                      batch: int | None = None) -> dict[str, Any]:
    """The ``metadata["validation"]`` record of one validation block (``batch``: which, default the
    largest); ``ValueError`` naming the problem for eval blocks, several tasks or another verifier."""
    val = [b for b in blocks if b.get("split") == "val"]
    if not val:
        raise ValueError("bench: no block measured on validation prompts (run `selfjudge bench --split val`); "
                         "thresholds are never chosen on the evaluation split")
    tasks = sorted({b["task"] for b in val})
    if len(tasks) > 1:
        raise ValueError(f"bench: validation blocks of several tasks {tasks}; a verifier is calibrated on one")
    batch = batch if batch is not None else max(b["batch"] for b in val)
    block = next((b for b in val if b["batch"] == batch), None)
    if block is None:
        raise ValueError(f"batch: no validation block at batch {batch} (have {sorted(b['batch'] for b in val)})")
    digest = file_digest(verifier_path)
    measured = (block.get("verifier_sha256") or {}).get("SelfJudge")
    if measured != digest:
        raise ValueError(f"verifier: {verifier_path} (sha256 {digest}) is not the SelfJudge verifier the block "
                         f"measured (sha256 {measured})")
    ks = sorted({r["K"] for r in block["rows"] if r["family"] == "SelfJudge"})
    if not ks:
        raise ValueError("bench: the validation block has no SelfJudge configuration")
    K = ks[0]
    curves: dict[str, list] = {}
    for row in block["rows"]:
        if row["K"] == K and row["family"] not in _SKIP:
            curves.setdefault(row["family"], []).append(_point(row, verifier))
    for points in curves.values():
        points.sort(key=lambda p: p["m"])
    standard = next(r for r in block["rows"] if r["family"] == "standard" and r["K"] == K)
    return {"task": block["task"], "split": "val", "batch": batch, "K": K, "drafter": block.get("drafter"),
            "prompt_ids": block.get("prompt_ids"), "command": block.get("command"),
            "standard": {"m": standard["mean_accepted_length"], "semantic_fidelity": standard.get("semantic_fidelity")},
            "curves": curves}


def calibrate(bench_folder: str | Path, verifier_path: str | Path, out: str | Path, batch: int | None = None,
              command: str | None = None) -> dict[str, Any]:
    """Write ``verifier_path`` with its validation curves from ``bench_folder`` to ``out``; returns the record."""
    from selfjudge.judge.verifier import load_verifier, save_verifier

    verifier = load_verifier(verifier_path)
    record = validation_curves(read_blocks(Path(bench_folder)), verifier, verifier_path, batch)
    record["calibrate_command"] = command
    verifier.metadata = {**verifier.metadata, "validation": record}
    save_verifier(verifier, out)
    return record
