"""Validation curves from a bench run on validation prompts, stored in a verifier.

``selfjudge bench --split val`` measures every method's operating points on the task's
validation prompts; :func:`validation_curves` turns one (task, batch) block into the curves a
quality budget reads (:mod:`selfjudge.judge.budget`): per family, each point's m, semantic
fidelity and how to reproduce it (SelfJudge: the threshold's name and logit; a training-free
rule: its settings; top-k: its k). :func:`calibrate` writes them into a copy of the verifier
the block measured (its sha256 must match) under ``metadata["validation"]``.

A verifier meant for any task (the general one) is calibrated on several tasks' validation
blocks at once: :func:`pooled_block` joins them prompt by prompt, so each point's m and semantic
fidelity are those of all the tasks' prompts together, every task weighted by its prompts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from selfjudge.evaluation.block_schema import file_digest
from selfjudge.evaluation.pareto import resampled_rows
from selfjudge.evaluation.report import read_blocks

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


def _pooled_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One configuration's rows from several blocks as one row over all their prompts."""
    keys = set.intersection(*(set(r["per_prompt"]) for r in rows))
    per_prompt = {k: [v for r in rows for v in r["per_prompt"][k]] for k in keys}
    pooled = {**rows[0], "per_prompt": per_prompt, "speedup_vs_standard": None}
    idx = list(range(len(per_prompt["cycles"])))
    pooled["mean_accepted_length"] = resampled_rows([pooled], idx, "semantic_fidelity")[0]["mean_accepted_length"]
    for y, key in (("semantic_fidelity", "semantic"), ("rouge_l_vs_target", "rouge_l")):
        pooled[y] = sum(per_prompt[key]) / len(idx) if key in per_prompt else None
    return pooled


def pooled_block(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    """Several tasks' validation blocks (same batch, same verifier) as one block over all their prompts;
    ``ValueError`` when they measured other verifiers or other configurations."""
    digests = {json.dumps(b.get("verifier_sha256"), sort_keys=True) for b in blocks}
    if len(digests) > 1:
        raise ValueError("bench: the tasks' validation blocks measured different verifiers")
    names = [[r["name"] for r in b["rows"]] for b in blocks]
    if any(set(n) != set(names[0]) for n in names):
        raise ValueError("bench: the tasks' validation blocks ran different configurations; pool only like sweeps")
    rows = [_pooled_row([next(r for r in b["rows"] if r["name"] == name) for b in blocks]) for name in names[0]]
    tasks = [b["task"] for b in blocks]
    return {**blocks[0], "task": "+".join(tasks), "tasks": tasks, "rows": rows,
            "prompt_ids": [p for b in blocks for p in b["prompt_ids"]],
            "command": [b.get("command") for b in blocks]}


def validation_curves(blocks: list[dict[str, Any]], verifier, verifier_path: str | Path,
                      batch: int | None = None) -> dict[str, Any]:
    """The ``metadata["validation"]`` record of the validation blocks at ``batch`` (default the largest;
    several tasks' blocks pooled); ``ValueError`` naming the problem for eval blocks or another verifier."""
    val = [b for b in blocks if b.get("split") == "val"]
    if not val:
        raise ValueError("bench: no block measured on validation prompts (run `selfjudge bench --split val`); "
                         "thresholds are never chosen on the evaluation split")
    batch = batch if batch is not None else max(b["batch"] for b in val)
    at_batch = sorted((b for b in val if b["batch"] == batch), key=lambda b: b["task"])
    if not at_batch:
        raise ValueError(f"batch: no validation block at batch {batch} (have {sorted({b['batch'] for b in val})})")
    block = at_batch[0] if len(at_batch) == 1 else pooled_block(at_batch)
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
