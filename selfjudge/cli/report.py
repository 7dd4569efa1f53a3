"""``selfjudge report DIR``: rebuild a wall-clock matrix's tables and plots from its finished blocks."""

from __future__ import annotations

from pathlib import Path

from selfjudge.cli.common import add_command


def register(subparsers) -> None:
    p = add_command(subparsers, "report", "rebuild results.json / results.md / plots of a bench folder")
    p.add_argument("folder", type=Path, help="a `selfjudge bench --out` folder (with blocks/)")
    p.set_defaults(func=run)


def run(args) -> int:
    from selfjudge.evaluation.report import write_report

    write_report(args.folder)
    print(f"wrote {args.folder}/results.json, results.md, pareto.png, speed_vs_fidelity.png")
    return 0
