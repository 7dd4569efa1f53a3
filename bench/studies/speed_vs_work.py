"""Does each configuration's speed follow its work? tokens/s against standard SD's, beside what its
accepted length (m) and its target forwards predict.

At batch 8 every cycle is one padded target forward over all rows, so a configuration's time is
about (target forwards) x (cost of one forward); a judge that accepts more tokens needs fewer
forwards for the same tokens. A configuration whose tokens/s ratio falls below its work ratio pays
more per forward than standard does (its own cost, or a shared CPU's drift between configurations
timed one after another); one at its work ratio pays nothing extra.

    python bench/studies/speed_vs_work.py runs/judge-speed/blocks/sharegpt_b8.json [--out FILE.md]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from selfjudge.evaluation.pareto import speed_ratio_interval


def work_rows(block: dict) -> list[dict]:
    """Per row: tokens/s x standard (with its interval over prompt groups where there are enough),
    m x standard, and (tokens per target forward) x standard's."""
    std = next(r for r in block["rows"] if r["name"] == "standard")
    per_forward = lambda r: r["tokens"] / r["target_forwards"]  # noqa: E731
    out = []
    for r in block["rows"]:
        if not r["K"]:
            continue
        ci = speed_ratio_interval(r, std, n_boot=1000) if r is not std else None
        speed = r["tokens_per_s"] / std["tokens_per_s"]
        work = per_forward(r) / per_forward(std)
        out.append({"name": r["name"], "speed": speed, "ci": (ci["low"], ci["high"]) if ci else None,
                    "m": r["mean_accepted_length"] / std["mean_accepted_length"], "work": work,
                    "speed_over_work": speed / work, "judge_tokens": r["judge_accepted_tokens"]})
    return out


def markdown(block: dict) -> str:
    lines = [f"{block['task']}, batch {block['batch']}, {block['rows'][0]['prompts']} prompts, "
             f"timing rounds {block['rows'][0].get('timing_rounds', 1)}", "",
             "| configuration | judge-only tokens | tok/s × standard (95 % CI) | m × standard | "
             "tokens per forward × standard | speed / work |", "|---|---|---|---|---|---|"]
    for w in work_rows(block):
        ci = f" [{w['ci'][0]:.2f}, {w['ci'][1]:.2f}]" if w["ci"] else ""
        lines.append(f"| {w['name']} | {w['judge_tokens']} | {w['speed']:.3f}{ci} | {w['m']:.3f} | {w['work']:.3f} | "
                     f"{w['speed_over_work']:.3f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("blocks", nargs="+", type=Path, help="bench block files (blocks/<task>_b<batch>.json)")
    ap.add_argument("--out", type=Path, default=None, help="write the tables here too")
    args = ap.parse_args(argv)
    text = "\n\n".join(markdown(json.loads(p.read_text())) for p in args.blocks) + "\n"
    sys.stdout.write(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
