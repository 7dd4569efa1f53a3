"""SelfJudge trained on SPEC's likelihood labels against SelfJudge trained on the released code's
confidence labels: the same label run (both scores stored), the same tau quantile, the same bench.

Reads two bench folders (``selfjudge bench ... --judges SelfJudge --selfjudge-verifier V``, one per
verifier) and writes a Markdown table: per task, each verifier's points (m, semantic fidelity,
ROUGE-L, task score) and the Pareto gap of confidence minus likelihood over the m range both reach.

    python bench/studies/compare_label_scores.py --likelihood bench/results/rules-sj-likelihood \
        --confidence bench/results/rules-sj-confidence --out bench/results/label_scores.md \
        [--rivals bench/results/eval24]

``--rivals DIR``: a rules-harness folder run with the same tasks, prompts, K, batch and
max_new_tokens. Greedy decoding is deterministic, so its rows and the two verifiers' rows
are points of one comparison; the script checks that first (target-only, standard and top-k
rows must agree exactly in m and semantic fidelity) and then adds, for each verifier, the
Pareto gap against every training-free rule and AutoJudge, and the m each reaches at
semantic fidelity >= 0.97 (the two figures that decide between the scores).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from selfjudge.evaluation.report import RIVALS, format_cell, m_at_fidelity, pareto_gap, read_blocks

SHARED = ("target-only", "standard", "top-k")  # families every bench folder has: the determinism check


def check_same_run_settings(a: dict, b: dict, where: str) -> None:
    """Refuse to merge two blocks whose shared configurations did not produce the same outputs."""
    ra = {r["name"]: r for r in a["rows"] if r["family"] in SHARED}
    rb = {r["name"]: r for r in b["rows"] if r["family"] in SHARED}
    for name in sorted(set(ra) & set(rb)):
        for key in ("mean_accepted_length", "semantic_fidelity", "tokens"):
            if ra[name].get(key) != rb[name].get(key):
                raise SystemExit(f"{where}: {name} differs between the folders ({key}: {ra[name].get(key)} vs "
                                 f"{rb[name].get(key)}); they are not the same settings")
    if not set(ra) & set(rb):
        raise SystemExit(f"{where}: no shared configuration to check the folders against each other")


def rival_tables(blocks: dict, rivals: dict) -> list[str]:
    """Each verifier's Pareto gap against the rules of ``rivals`` and its m at semantic >= 0.97."""
    gaps = ["", "## Each verifier against the training-free rules and AutoJudge (semantic fidelity)", "",
            "| task | labels | vs | m range | mean gap | min | max |", "|---|---|---|---|---|---|---|"]
    at = ["", "| task | standard m | labels | SelfJudge m at semantic >= 0.97 | × standard | best rival (m) |",
          "|---|---|---|---|---|---|"]
    for key in sorted(set(rivals) & set(blocks["likelihood"]) & set(blocks["confidence"])):
        base = [r for r in rivals[key]["rows"] if r["family"] in RIVALS or r["family"] in SHARED]
        K = min(r["K"] for r in base if r["K"])
        std = next(r["mean_accepted_length"] for r in base if r["family"] == "standard" and r["K"] == K)
        best = max(((m_at_fidelity(base, f, K) or 0.0, f) for f in RIVALS if any(r["family"] == f for r in base)))
        for name in ("likelihood", "confidence"):
            check_same_run_settings(rivals[key], blocks[name][key], f"{key[0]} batch {key[1]} ({name})")
            rows = base + [r for r in blocks[name][key]["rows"] if r["family"] == "SelfJudge"]
            for other in RIVALS:
                g = pareto_gap(rows, "SelfJudge", other, y="semantic_fidelity", K=K)
                if g:
                    gaps.append(f"| {key[0]} | {name} | {other} | {g['m_from']:.2f}–{g['m_to']:.2f} | {g['mean']:+.3f} | "
                                f"{g['min']:+.3f} | {g['max']:+.3f} |")
            m = m_at_fidelity(rows, "SelfJudge", K)
            at.append(f"| {key[0]} | {std:.2f} | {name} | {format_cell(m, '.2f')} | {format_cell(m / std if m else None, '.2f')} | "
                      f"{best[1]} ({best[0]:.2f}) |")
    return gaps + at


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--likelihood", type=Path, required=True)
    ap.add_argument("--confidence", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rivals", type=Path, default=None, help="a rules-harness folder with the same settings")
    args = ap.parse_args(argv)
    blocks = {name: {(b["task"], b["batch"]): b for b in read_blocks(folder)}
              for name, folder in (("likelihood", args.likelihood), ("confidence", args.confidence))}
    lines = ["# SelfJudge: likelihood labels (SPEC) against confidence labels (released code)", "",
             f"Folders: `{args.likelihood}`, `{args.confidence}`.", "",
             "| task | batch | labels | threshold | m | semantic | ROUGE-L | task score |", "|---|---|---|---|---|---|---|---|"]
    gaps = ["", "| task | batch | y | m range | mean gap (confidence − likelihood) | min | max |", "|---|---|---|---|---|---|---|"]
    for key in sorted(set(blocks["likelihood"]) & set(blocks["confidence"])):
        merged = []
        for name in ("likelihood", "confidence"):
            for r in blocks[name][key]["rows"]:
                if r["family"] == "SelfJudge":
                    merged.append({**r, "family": f"SelfJudge ({name})"})
                    lines.append(f"| {key[0]} | {key[1]} | {name} | {r['threshold']} | "
                                 f"{format_cell(r['mean_accepted_length'], '.2f')} | {format_cell(r.get('semantic_fidelity'), '.3f')} | "
                                 f"{format_cell(r.get('rouge_l_vs_target'), '.3f')} | {format_cell(r['task_score'], '.3f')} |")
                elif name == "likelihood" and r["family"] == "standard":
                    merged.append(r)
        for y in ("semantic_fidelity", "rouge_l_vs_target", "task_score"):
            g = pareto_gap(merged, "SelfJudge (confidence)", "SelfJudge (likelihood)", y=y)
            if g:
                gaps.append(f"| {key[0]} | {key[1]} | {y} | {g['m_from']:.2f}–{g['m_to']:.2f} | {g['mean']:+.3f} | "
                            f"{g['min']:+.3f} | {g['max']:+.3f} |")
    if args.rivals is not None:
        gaps += rival_tables(blocks, {(b["task"], b["batch"]): b for b in read_blocks(args.rivals)})
    args.out.write_text("\n".join(lines + gaps) + "\n")
    print("\n".join(lines + gaps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
