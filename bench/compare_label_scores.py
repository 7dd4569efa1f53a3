"""SelfJudge trained on SPEC's likelihood labels against SelfJudge trained on the released code's
confidence labels: the same label run (both scores stored), the same tau quantile, the same bench.

Reads two bench folders (``selfjudge bench ... --judges SelfJudge --selfjudge-verifier V``, one per
verifier) and writes a Markdown table: per task, each verifier's points (m, semantic fidelity,
ROUGE-L, task score) and the Pareto gap of confidence minus likelihood over the m range both reach.

    python bench/compare_label_scores.py --likelihood bench/results/rules-sj-likelihood \
        --confidence bench/results/rules-sj-confidence --out bench/results/label_scores.md
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from selfjudge.bench.report import _fmt, pareto_gap, read_blocks


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--likelihood", type=Path, required=True)
    ap.add_argument("--confidence", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
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
                                 f"{_fmt(r['mean_accepted_length'], '.2f')} | {_fmt(r.get('semantic_fidelity'), '.3f')} | "
                                 f"{_fmt(r.get('rouge_l_vs_target'), '.3f')} | {_fmt(r['task_score'], '.3f')} |")
                elif name == "likelihood" and r["family"] == "standard":
                    merged.append(r)
        for y in ("semantic_fidelity", "rouge_l_vs_target", "task_score"):
            g = pareto_gap(merged, "SelfJudge (confidence)", "SelfJudge (likelihood)", y=y)
            if g:
                gaps.append(f"| {key[0]} | {key[1]} | {y} | {g['m_from']:.2f}–{g['m_to']:.2f} | {g['mean']:+.3f} | "
                            f"{g['min']:+.3f} | {g['max']:+.3f} |")
    args.out.write_text("\n".join(lines + gaps) + "\n")
    print("\n".join(lines + gaps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
