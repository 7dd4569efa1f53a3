"""Tables and plots of a wall-clock matrix run: reads the per-block JSON files
of a results folder and writes ``results.json`` (every figure + environment),
``results.md`` (a headline table, the Pareto comparison of the methods, one table
per task and batch size) and two PNG figures:
``pareto.png`` (fidelity against mean accepted length, one curve per method) and
``speed_vs_fidelity.png`` (tokens/s against fidelity).

    selfjudge report runs/wallclock
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from selfjudge.evaluation.block_schema import check_block
from selfjudge.evaluation.budget_report import budget_table
from selfjudge.evaluation.pareto import gap_interval, pareto_gap, speed_ratio_interval  # noqa: F401 (pareto_gap: the scripts' import)
from selfjudge.json_io import read_json
from selfjudge.writes import own_files, save_figure, write_json, write_text

BLOCKS = "blocks"
FAMILY_STYLE = {
    "target-only": ("black", "s"),
    "standard": ("tab:blue", "o"),
    "top-k": ("tab:orange", "^"),
    "AutoJudge": ("tab:red", "v"),
    "SelfJudge": ("tab:green", "D"),
    "typical": ("tab:purple", "P"),
    "relaxed top-N": ("tab:brown", "X"),
    "FLy": ("tab:pink", "*"),
    "SelfJudge+FLy": ("tab:olive", "d"),
    "SelfJudge top-N gated": ("tab:cyan", "h"),
    "label oracle": ("tab:gray", "8"),
}
#: the methods SelfJudge is compared with, when a block has them
RIVALS = ("AutoJudge", "top-k", "typical", "relaxed top-N", "FLy", "SelfJudge+FLy", "SelfJudge top-N gated",
          "label oracle")
_Y_NAMES = {"semantic_fidelity": "semantic similarity to target (MiniLM)"}


def read_blocks(folder: Path) -> list[dict[str, Any]]:
    """Every finished block of a results folder, in task/batch order."""
    blocks = [check_block(read_json(p), p) for p in own_files(folder / BLOCKS, "*.json")]
    return sorted(blocks, key=lambda b: (b["task"], b["batch"]))


def format_cell(x: Any, spec: str) -> str:
    """A table cell: ``x`` in ``spec``, or "–" for a missing or NaN value."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return format(x, spec)


HEADLINE = ("target-only", "standard", "top-2", "SelfJudge-F", "SelfJudge-R", "AutoJudge-F", "AutoJudge-R")


def headline_k(blocks: list[dict[str, Any]], preferred: int = 4) -> int:
    """The K of the headline table: ``preferred`` when some block measured it, else the smallest K measured
    (a harness run at the default drafter's K = 3 has no K = 4 rows)."""
    ks = {r["K"] for b in blocks for r in b["rows"] if r["K"]}
    return preferred if preferred in ks or not ks else min(ks)


def headline(blocks: list[dict[str, Any]], K: int = 4, names: tuple[str, ...] = HEADLINE) -> str:
    """One Markdown table of the named configurations at one K, every block (task, batch)."""
    lines = [
        "| task | batch | policy | tok/s | × target-only | × standard | m | fidelity | task score |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for b in blocks:
        by_name = {r["name"]: r for r in b["rows"] if r["K"] in (0, K)}
        for name in names:
            r = by_name.get(name)
            if r is None:
                continue
            lines.append(
                f"| {b['task']} | {b['batch']} | {name} | {format_cell(r['tokens_per_s'], '.2f')} | "
                f"{_ratio(r, by_name.get('target-only'), r['speedup_vs_target_only'])} | "
                f"{_ratio(r, by_name.get('standard'), r['speedup_vs_standard'])} | "
                f"{format_cell(r['mean_accepted_length'], '.2f')} | {format_cell(r['fidelity'], '.3f')} | {format_cell(r['task_score'], '.3f')} |"
            )
    return "\n".join(lines)


def _ratio(row: dict[str, Any], base: dict[str, Any] | None, value: float) -> str:
    """A tokens/s ratio, with its 95 % bootstrap interval over prompt groups where the block has enough."""
    ci = (speed_ratio_interval(row, base, n_boot=300)
          if base is not None and base is not row and isinstance(value, (int, float)) and math.isfinite(value) else None)
    return format_cell(value, ".2f") + (f" [{ci['low']:.2f}, {ci['high']:.2f}]" if ci else "")


def _has(rows: list[dict[str, Any]], y: str) -> bool:
    return any(isinstance(r.get(y), float) and not math.isnan(r[y]) for r in rows)


def m_at_fidelity(rows: list[dict[str, Any]], family: str, K: int, y: str = "semantic_fidelity",
                  floor: float = 0.97) -> float | None:
    """The largest m a family reaches at one K with ``y`` >= ``floor`` (its standard point counts)."""
    ms = [r["mean_accepted_length"] for r in rows if r["K"] == K and r["family"] in (family, "standard")
          and r.get(y) is not None and r[y] >= floor]
    return max(ms) if ms else None


def target_table(blocks: list[dict[str, Any]], floor: float = 0.97) -> str:
    """Each method's m at semantic fidelity >= ``floor``, against standard SD's: what a lossy method gains
    at a quality a user would accept."""
    lines = [f"| task | batch | K | method | m at semantic >= {floor} | × standard m |", "|---|---|---|---|---|---|"]
    for b in blocks:
        if not _has(b["rows"], "semantic_fidelity"):
            continue
        for K in sorted({r["K"] for r in b["rows"] if r["K"]}):
            std = next((r["mean_accepted_length"] for r in b["rows"] if r["family"] == "standard" and r["K"] == K), None)
            for fam in ("SelfJudge",) + RIVALS:
                if not any(r["family"] == fam and r["K"] == K for r in b["rows"]):
                    continue
                m = m_at_fidelity(b["rows"], fam, K, floor=floor)
                lines.append(f"| {b['task']} | {b['batch']} | {K} | {fam} | {format_cell(m, '.2f')} | "
                             f"{format_cell(m / std if m and std else None, '.2f')} |")
    return "\n".join(lines)


def pareto_table(blocks: list[dict[str, Any]]) -> str:
    """SelfJudge's Pareto curve against every other method in the block (AutoJudge, top-k and the
    training-free rules), per block, on fidelity, task score and semantic fidelity: the gap of the
    time-sharing envelopes (:mod:`selfjudge.evaluation.pareto`) with its 95 % bootstrap interval over
    prompts where the block records per-prompt figures."""
    lines = [
        "| task | batch | K | SelfJudge vs | y | m range | mean gap | 95 % CI (prompts) | min gap | max gap "
        "| points (SJ / other) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for b in blocks:
        ks = sorted({r["K"] for r in b["rows"] if r["K"]})
        for K in ks:
            for other in RIVALS:
                for y in ("fidelity", "task_score", "semantic_fidelity"):
                    if not _has(b["rows"], y):
                        continue
                    g = pareto_gap(b["rows"], "SelfJudge", other, y=y, K=K)
                    if g is None:
                        continue
                    ci = gap_interval(b["rows"], "SelfJudge", other, y=y, K=K, n_boot=300)
                    ci_text = f"[{ci['low']:+.3f}, {ci['high']:+.3f}]" if ci else "–"
                    lines.append(
                        f"| {b['task']} | {b['batch']} | {K} | {other} | {y} | {g['m_from']:.2f}–{g['m_to']:.2f} | "
                        f"{g['mean']:+.3f} | {ci_text} | {g['min']:+.3f} | {g['max']:+.3f} | "
                        f"{g['points_a']} / {g['points_b']} |"
                    )
    return "\n".join(lines)


def markdown(blocks: list[dict[str, Any]]) -> str:
    K = headline_k(blocks)
    lines = [
        "# Wall-clock matrix", "",
        f"## Headline (K = {K})", "", headline(blocks, K), "",
        "Brackets: 95 % bootstrap interval over prompt groups, paired (one prompt per group at batch 1; none "
        "where a block has fewer than 8 groups).", "",
        "## Pareto curves: SelfJudge against every other method", "",
        "Gap = SelfJudge's upper envelope minus the other method's, over the mean accepted lengths m both reach "
        "(each curve includes the standard point); positive = SelfJudge keeps more at the same m.", "",
        pareto_table(blocks), "",
        "## Accepted length at semantic fidelity >= 0.97", "",
        target_table(blocks), "",
    ]
    at_budget = budget_table(blocks, 0.97)
    if at_budget:
        lines += ["## Every method at the quality budget 0.97, chosen on validation prompts", "",
                  "Each method's setting is the loosest that kept semantic fidelity >= 0.97 on the validation "
                  "curves stored in the SelfJudge verifier (`selfjudge calibrate`); the figures are this block's "
                  "evaluation prompts. Semantic: 95 % bootstrap over prompts; speed: over prompt groups.", "",
                  at_budget, ""]
    for b in blocks:
        rows = b["rows"]
        if not rows:
            continue
        r0 = rows[0]
        lines += [
            f"## {b['task']}, batch {b['batch']} ({r0['prompts']} prompts, ≤ {b.get('max_new_tokens', '?')} new "
            f"tokens, {(b.get('environment') or {}).get('torch_threads', '?')} thread(s))",
            "",
            f"fidelity = {r0['fidelity_name']}; task score = {r0['task_score_name']}",
            "",
            "| policy | K | tok/s | × target-only | × standard | m | judge-accepted | fidelity | semantic | task score | draft / target / verify / other |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            shares = " / ".join(f"{100 * r[k]:.0f}%" for k in ("share_draft", "share_target", "share_verify",
                                                                 "share_other"))
            lines.append(
                f"| {r['name']} | {r['K'] or '–'} | {format_cell(r['tokens_per_s'], '.2f')} | "
                f"{format_cell(r['speedup_vs_target_only'], '.2f')} | {format_cell(r['speedup_vs_standard'], '.2f')} | "
                f"{format_cell(r['mean_accepted_length'], '.2f')} | {r['judge_accepted_tokens']} | "
                f"{format_cell(r['fidelity'], '.3f')} | {format_cell(r.get('semantic_fidelity'), '.3f')} | "
                f"{format_cell(r['task_score'], '.3f')} | {shares} |"
            )
        lines += [""] + _adaptive_lines(rows)
    return "\n".join(lines)


def _adaptive_lines(rows: list[dict]) -> list[str]:
    """Under adaptive speculation: how many drafts rows verified per cycle, and the controller's
    expected kept drafts against the kept ones (none without adaptive rows)."""
    rows = [r for r in rows if r.get("drafts_verified")]
    if not rows:
        return []
    width = max(len(r["drafts_verified"]) for r in rows)
    lines = ["Adaptive speculation: row-cycles by drafts verified (0 = a plain step), expected vs kept drafts",
             "", "| policy | " + " | ".join(str(k) for k in range(width)) + " | expected kept | kept |",
             "|---|" + "---|" * (width + 2)]
    for r in rows:
        counts = list(r["drafts_verified"]) + [0] * (width - len(r["drafts_verified"]))
        lines.append(f"| {r['name']} | " + " | ".join(str(c) for c in counts) +
                     f" | {format_cell(r.get('expected_accepted'), '.1f')} | {r.get('accepted_tokens', '–')} |")
    return lines + [""]


_X = {"m": "mean_accepted_length", "tok/s": "tokens_per_s"}
_Y = ("fidelity", "task_score", "semantic_fidelity")


def _points(rows: list[dict[str, Any]], K: int | None = None):
    """(family -> [{m, tok/s, fidelity, task_score}]) of one block, target-only included, at one K."""
    out: dict[str, list[dict[str, float]]] = {}
    for r in rows:
        if (K is not None and r["K"] not in (0, K)) or r["family"] == "HF":  # HF reports no m
            continue
        point = {x: r[key] for x, key in _X.items()} | {y: r.get(y, math.nan) for y in _Y}
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
        ys = [y for y in _Y if any(_has(b["rows"], y) for b in blocks)]
        fig, axes = plt.subplots(len(ys), len(tasks), figsize=(4.2 * len(tasks), 3.6 * len(ys)), squeeze=False)
        for col, task in enumerate(tasks):
            # the block with the sweep: most configurations (ties: smallest batch)
            cands = [b for b in blocks if b["task"] == task]
            b = max(cands, key=lambda b: (len(b["rows"]), -b["batch"]))
            ks = sorted({r["K"] for r in b["rows"] if r["K"]})
            K = max(ks, key=lambda k: sum(r["K"] == k for r in b["rows"])) if ks else None
            for row, y in enumerate(ys):
                ax = axes[row][col]
                for fam, pts in _points(b["rows"], K).items():
                    color, marker = FAMILY_STYLE.get(fam, ("grey", "x"))
                    pts = sorted(pts, key=lambda p: p[x])
                    ax.plot([p[x] for p in pts], [p[y] for p in pts], marker=marker, color=color, label=fam,
                            linestyle="-" if len(pts) > 1 else "none")
                ax.set_title(f"{task} (batch {b['batch']}, K={K})")
                ax.set_xlabel(xlabel)
                ax.set_ylabel(_Y_NAMES.get(y) or b["rows"][0][f"{y}_name"])
                ax.grid(alpha=0.3)
        axes[0][0].legend(fontsize=8)
        fig.tight_layout()
        path = folder / fname
        save_figure(fig, path, dpi=110)
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
    write_json(folder / "results.json", merged)
    write_text(folder / "results.md", markdown(blocks))
    plot(blocks, folder)
    return merged
