"""Choose a task's SelfJudge verifier (its tau, augmentation, ...) by what it does in the engine.

Each candidate verifier has its own ``selfjudge bench --split val`` block (SelfJudge's named thresholds
and quantile sweep); the training-free rules are measured once in another block on the same
validation prompts (greedy decoding, so a rule's output does not depend on which verifier ran
beside it). Every curve is cut to the prompts all blocks share; each candidate's SelfJudge
envelope is compared with each rule's (semantic fidelity against m, the harness's hull gap with a
95 % bootstrap interval over prompts) and with the m it reaches at semantic fidelity >= 0.97.
The winner is the candidate with the largest mean gap against the weakest-margin rule.

A verifier meant for several tasks (the general one) is chosen on each task's validation prompts:
one rules block per task, each candidate's blocks named alike (``q0.8=A.json q0.8=B.json``), and
the winner is the candidate whose worst task, against its weakest-margin rule, is best.

    python bench/studies/choose_verifier.py --rules runs/val-sharegpt/blocks/sharegpt_b8.json \\
        --candidates q0.8=runs/val-sj-sharegpt-q0.8/blocks/sharegpt_b8.json ... --out bench/results/X.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from selfjudge.evaluation.pareto import gap_interval, resampled_rows
from selfjudge.evaluation.report import m_at_fidelity

RULE_FAMILIES = ("relaxed top-N", "FLy")
Y = "semantic_fidelity"


def _subset(row: dict[str, Any], keep: list[int]) -> dict[str, Any]:
    """``row`` with its per-prompt figures cut to the prompt positions ``keep`` and m / y recomputed."""
    pp = {k: [v[i] for i in keep] for k, v in row["per_prompt"].items() if isinstance(v, list) and len(v) > max(keep)}
    figures = resampled_rows([row], keep, Y)[0]
    out = {**row, "per_prompt": pp, "mean_accepted_length": figures["mean_accepted_length"], Y: figures[Y]}
    if "rouge_l" in pp:
        out["rouge_l_vs_target"] = sum(pp["rouge_l"]) / len(keep)
    return out


def _rows(block: dict[str, Any], prompts: list[str], families: tuple[str, ...]) -> list[dict[str, Any]]:
    index = {p: i for i, p in enumerate(block["prompt_ids"])}
    keep = [index[p] for p in prompts]
    return [_subset(r, keep) for r in block["rows"] if r["family"] in families]


def compare(rules: dict[str, Any], candidates: dict[str, dict[str, Any]],
            peers: tuple[str, ...] = RULE_FAMILIES) -> dict[str, Any]:
    """Gap of each candidate's SelfJudge envelope against each peer family (the rules by default,
    or e.g. AutoJudge) of the ``rules`` block on the shared prompts."""
    shared = [p for p in rules["prompt_ids"] if all(p in c["prompt_ids"] for c in candidates.values())]
    if len(shared) < 2:
        raise ValueError(f"candidates: the blocks share {len(shared)} prompts with the rules block; need >= 2")
    rule_rows = _rows(rules, shared, peers)
    out: dict[str, Any] = {"prompts": shared, "split": rules.get("split", "val"), "peers": list(peers),
                           "candidates": {}}
    for name, block in candidates.items():
        rows = _rows(block, shared, ("standard", "SelfJudge")) + rule_rows
        K = min(r["K"] for r in rows if r["K"])
        gaps = {fam: gap_interval(rows, "SelfJudge", fam, y=Y, K=K) for fam in peers}
        out["candidates"][name] = {
            "gaps": gaps,
            "min_gap": {fam: None if g is None else g["min"] for fam, g in gaps.items()},
            "m_at_0.97": {fam: m_at_fidelity(rows, fam, K) for fam in ("SelfJudge", *peers)},
            "points": sorted((round(r["mean_accepted_length"], 3), round(r[Y], 3), r["name"])
                             for r in rows if r["family"] == "SelfJudge"),
        }
    out["worst_gap"] = {n: min((g["mean"] for g in c["gaps"].values() if g), default=float("-inf"))
                        for n, c in out["candidates"].items()}
    out["winner"] = max(out["worst_gap"], key=out["worst_gap"].get)
    return out


def compare_tasks(rules: dict[str, dict[str, Any]], candidates: dict[str, dict[str, dict[str, Any]]],
                  peers: tuple[str, ...] = RULE_FAMILIES) -> dict[str, Any]:
    """:func:`compare` per task (``rules``: task -> block; ``candidates``: name -> task -> block),
    the winner by its worst task's worst gap. ``ValueError`` when a candidate lacks a task's block."""
    for name, blocks in candidates.items():
        missing = sorted(set(rules) - set(blocks))
        if missing:
            raise ValueError(f"candidates: {name!r} has no block for task(s) {missing}")
    per_task = {t: compare(r, {n: b[t] for n, b in candidates.items()}, peers) for t, r in rules.items()}
    worst = {n: min(res["worst_gap"][n] for res in per_task.values()) for n in candidates}
    return {"tasks": per_task, "worst_gap": worst, "winner": max(worst, key=worst.get)}


def merged_block(rules: dict[str, Any], candidate: dict[str, Any], prompts: list[str]) -> dict[str, Any]:
    """``candidate``'s block cut to ``prompts`` with the rules' rows beside its own, so that
    ``selfjudge calibrate`` stores the rules' validation curves too (their speed columns are those
    of the rules' own run)."""
    families = tuple({r["family"] for r in candidate["rows"]})
    return {**candidate, "prompt_ids": prompts,
            "rows": _rows(candidate, prompts, families) + _rows(rules, prompts, RULE_FAMILIES)}


def markdown(result: dict[str, Any]) -> str:
    if "tasks" in result:
        return "\n".join(f"## {task}\n\n{markdown(res)}" for task, res in result["tasks"].items()) + \
            f"\nChosen over the tasks' worst gaps: **{result['winner']}**\n"
    split = {"val": "validation", "eval": "evaluation"}.get(result.get("split", "val"), result.get("split"))
    peers = result.get("peers", list(RULE_FAMILIES))
    lines = [f"{len(result['prompts'])} {split} prompts; gap = SelfJudge's envelope minus the peer's "
             "(semantic fidelity, mean over the m both reach, 95 % CI over prompts)", "",
             "| candidate | " + " | ".join(f"vs {p}" for p in peers) + f" | min gap ({' / '.join(peers)}) | "
             f"m at semantic >= 0.97 (SJ / {' / '.join(peers)}) |", "|---" * (len(peers) + 3) + "|"]
    for name, c in result["candidates"].items():
        cells = [("–" if g is None else f"{g['mean']:+.3f} [{g['low']:+.3f}, {g['high']:+.3f}]")
                 for g in (c["gaps"][f] for f in peers)]
        ms = " / ".join("–" if v is None else f"{v:.2f}" for v in c["m_at_0.97"].values())
        mins = " / ".join("–" if v is None else f"{v:+.3f}" for v in c["min_gap"].values())
        mark = " **(chosen)**" if name == result["winner"] else ""
        lines.append(f"| {name}{mark} | " + " | ".join(cells) + f" | {mins} | {ms} |")
    return "\n".join(lines) + "\n"


def _read_block(ap: argparse.ArgumentParser, option: str, path: str) -> dict[str, Any]:
    if not Path(path).is_file():
        ap.error(f"{option}: no bench block at {path}")
    return json.loads(Path(path).read_text())


def _read_inputs(ap: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[dict, dict]:
    """``--rules`` as task -> block, ``--candidates`` as name -> task -> block."""
    rules: dict[str, dict[str, Any]] = {}
    for path in args.rules:
        block = _read_block(ap, "--rules", path)
        if block.get("task") in rules:
            ap.error(f"--rules: two blocks for task {block.get('task')!r}")
        rules[block.get("task")] = block
    cands: dict[str, dict[str, dict[str, Any]]] = {}
    for item in args.candidates:
        name, sep, path = item.partition("=")
        if not sep:
            ap.error(f"--candidates: expected NAME=BLOCK, got {item!r}")
        block = _read_block(ap, "--candidates", path)
        cands.setdefault(name, {})[block.get("task")] = block
    return rules, cands


def _write_merged(folder: Path, rules: dict, cands: dict, result: dict[str, Any]) -> None:
    """Each candidate's blocks with the rules' rows on the shared prompts: a bench folder per candidate."""
    for task, rule_block in rules.items():
        shared = result["tasks"][task]["prompts"]
        for name, blocks in cands.items():
            out = folder / name / "blocks"
            out.mkdir(parents=True, exist_ok=True)
            block = blocks[task]
            (out / f"{task}_b{block['batch']}.json").write_text(json.dumps(merged_block(rule_block, block, shared)))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rules", nargs="+", required=True, help="bench blocks (JSON) holding the rules' sweeps, one per task")
    ap.add_argument("--candidates", nargs="+", required=True, metavar="NAME=BLOCK",
                    help="each candidate verifier's bench block on validation prompts (one per task and candidate)")
    ap.add_argument("--peers", nargs="+", default=list(RULE_FAMILIES), metavar="FAMILY",
                    help="the families of the --rules blocks SelfJudge is compared with (e.g. AutoJudge)")
    ap.add_argument("--out", required=True, help="JSON result; a .md table is written beside it")
    ap.add_argument("--merged", default=None, metavar="DIR",
                    help="also write DIR/NAME/blocks/: each candidate's blocks with the rules' rows on the shared "
                         "prompts, a bench folder per candidate for `selfjudge calibrate`")
    args = ap.parse_args(argv)
    rules, cands = _read_inputs(ap, args)
    try:
        result = compare_tasks(rules, cands, tuple(args.peers))
    except ValueError as e:
        ap.error(str(e))
    if args.merged:
        _write_merged(Path(args.merged), rules, cands, result)
    if len(rules) == 1:
        result = next(iter(result["tasks"].values()))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))

if __name__ == "__main__":
    main()
