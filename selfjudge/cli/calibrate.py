"""``selfjudge calibrate``: store a verifier's validation curves (for ``--threshold quality:B``)."""

from __future__ import annotations

from pathlib import Path

from selfjudge.cli.common import add_command, positive_int


def register(subparsers) -> None:
    p = add_command(subparsers, "calibrate",
                    "store the validation curves of a `selfjudge bench --split val` run in a verifier file "
                    "(thresholds quality:B read them)")
    p.add_argument("--bench", type=Path, required=True, help="the bench folder (blocks/ on validation prompts)")
    p.add_argument("--verifier", type=Path, required=True, help="the SelfJudge verifier that bench run used")
    p.add_argument("--out", type=Path, required=True, help="the verifier file to write (may be --verifier)")
    p.add_argument("--batch", type=positive_int, default=None, help="which block (default: the largest batch)")
    p.set_defaults(func=run)


def run(args) -> int:
    from selfjudge.evaluation.calibrate import calibrate

    record = calibrate(args.bench, args.verifier, args.out, args.batch, command=args.command_line)
    sizes = ", ".join(f"{family} {len(points)}" for family, points in record["curves"].items())
    print(f"wrote {args.out}: validation curves of {record['task']} (batch {record['batch']}, K {record['K']}, "
          f"{len(record['prompt_ids'] or [])} prompts): {sizes}")
    return 0
