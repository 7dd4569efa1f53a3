"""Tables and plots of a wall-clock matrix run: reads the per-block JSON files
of a results folder and writes ``results.json`` (every figure + environment),
``results.md`` (one table per task and batch size) and two PNG figures:
``pareto.png`` (fidelity against mean accepted length, one curve per method) and
``speed_vs_fidelity.png`` (tokens/s against fidelity).

    python -m selfjudge.bench.report bench/results/wallclock
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

BLOCKS = "blocks"
FAMILY_STYLE = {
    "target-only": ("black", "s"),
    "standard": ("tab:blue", "o"),
    "top-k": ("tab:orange", "^"),
    "AutoJudge": ("tab:red", "v"),
    "SelfJudge": ("tab:green", "D"),
}


def read_blocks(folder: Path) -> list[dict[str, Any]]:
    """Every finished block of a results folder, in task/batch order."""
    blocks = [json.loads(p.read_text()) for p in sorted((folder / BLOCKS).glob("*.json"))]
    return sorted(blocks, key=lambda b: (b["task"], b["batch"]))


def _fmt(x: Any, spec: str) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return format(x, spec)


def markdown(blocks: list[dict[str, Any]]) -> str:
    lines = ["# Wall-clock matrix", ""]
    for b in blocks:
        rows = b["rows"]
        if not rows:
            continue
        r0 = rows[0]
        lines += [
            f"## {b['task']}, batch {b['batch']} ({r0['prompts']} prompts, ≤ {b['max_new_tokens']} new tokens, "
            f"{b['environment']['torch_threads']} thread(s))",
            "",
            f"fidelity = {r0['fidelity_name']}; task score = {r0['task_score_name']}",
            "",
            "| policy | K | tok/s | × target-only | × standard | m | judge-accepted | fidelity | task score | draft / target / verify / other |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            shares = " / ".join(f"{100 * r[k]:.0f}%" for k in ("share_draft", "share_target", "share_verify",
                                                                 "share_other"))
            lines.append(
                f"| {r['name']} | {r['K'] or '–'} | {_fmt(r['tokens_per_s'], '.2f')} | "
                f"{_fmt(r['speedup_vs_target_only'], '.2f')} | {_fmt(r['speedup_vs_standard'], '.2f')} | "
                f"{_fmt(r['mean_accepted_length'], '.2f')} | {r['judge_accepted_tokens']} | "
                f"{_fmt(r['fidelity'], '.3f')} | {_fmt(r['task_score'], '.3f')} | {shares} |"
            )
        lines.append("")
    return "\n".join(lines)


_X = {"m": "mean_accepted_length", "tok/s": "tokens_per_s"}
_Y = ("fidelity", "task_score")


def _points(rows: list[dict[str, Any]], K: int | None = None):
    """(family -> [{m, tok/s, fidelity, task_score}]) of one block, target-only included, at one K."""
    out: dict[str, list[dict[str, float]]] = {}
    for r in rows:
        if (K is not None and r["K"] not in (0, K)) or r["family"] == "HF":  # HF reports no m
            continue
        point = {x: r[key] for x, key in _X.items()} | {y: r[y] for y in _Y}
        out.setdefault(r["family"], []).append(point)
    return out


def plot(blocks: list[dict[str, Any]], folder: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = sorted({b["task"] for b in blocks})
    if not tasks:
        return []
    written = []
    for fname, x, xlabel in (("pareto.png", "m", "mean accepted length m"), ("speed_vs_fidelity.png", "tok/s", "tokens/s")):
        # row 0: fidelity to the target's own output; row 1: the task's own score
        fig, axes = plt.subplots(2, len(tasks), figsize=(4.2 * len(tasks), 7.2), squeeze=False)
        for col, task in enumerate(tasks):
            # the block with the sweep: most configurations (ties: smallest batch)
            cands = [b for b in blocks if b["task"] == task]
            b = max(cands, key=lambda b: (len(b["rows"]), -b["batch"]))
            ks = sorted({r["K"] for r in b["rows"] if r["K"]})
            K = max(ks, key=lambda k: sum(r["K"] == k for r in b["rows"])) if ks else None
            for row, y in enumerate(_Y):
                ax = axes[row][col]
                for fam, pts in _points(b["rows"], K).items():
                    color, marker = FAMILY_STYLE.get(fam, ("grey", "x"))
                    pts = sorted(pts, key=lambda p: p[x])
                    ax.plot([p[x] for p in pts], [p[y] for p in pts], marker=marker, color=color, label=fam,
                            linestyle="-" if len(pts) > 1 else "none")
                ax.set_title(f"{task} (batch {b['batch']}, K={K})")
                ax.set_xlabel(xlabel)
                ax.set_ylabel(b["rows"][0][f"{y}_name"])
                ax.grid(alpha=0.3)
        axes[0][0].legend(fontsize=8)
        fig.tight_layout()
        path = folder / fname
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def write_report(folder: Path) -> dict[str, Any]:
    """Merge the blocks of ``folder`` into results.json / results.md / PNGs; returns the merged dict."""
    folder = Path(folder)
    blocks = read_blocks(folder)
    if not blocks:
        raise FileNotFoundError(f"{folder / BLOCKS}: no finished blocks")
    merged = {"blocks": blocks}
    (folder / "results.json").write_text(json.dumps(merged, indent=1))
    (folder / "results.md").write_text(markdown(blocks))
    plot(blocks, folder)
    return merged


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    args = ap.parse_args(argv)
    try:
        write_report(args.folder)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {args.folder}/results.json, results.md, pareto.png, speed_vs_fidelity.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
