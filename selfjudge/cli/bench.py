"""``selfjudge bench`` (= ``python bench/run_wallclock.py``): the wall-clock matrix of decoding policies.

    selfjudge bench --quick                       # ~2 minutes
    selfjudge bench --out runs/wallclock          # a full matrix (states its duration first)
"""

from __future__ import annotations

import argparse
from pathlib import Path

from selfjudge.cli.common import (ArgumentParser, add_command, add_device_arguments, add_drafter_arguments,
                                  add_lookup_store_argument, add_model_arguments, drafter_name, positive_int)

_DEFAULT_OUT = Path("selfjudge-bench")  # in the working folder, never the package


def add_arguments(ap: argparse.ArgumentParser) -> None:
    from selfjudge.evaluation.matrix_spec import DEFAULT_MAX_NEW, JUDGE_FAMILIES, SWEEP

    add_model_arguments(ap, draft=False)
    ap.add_argument("--tasks", nargs="+", default=["gsm8k", "humaneval", "gpqa", "sharegpt"], help="tasks to run")
    ap.add_argument("--limit", type=positive_int, default=8, help="prompts per task")
    ap.add_argument("--split", default="eval", choices=["eval", "val"],
                    help="prompts: eval (what is reported) or val (what thresholds and settings are chosen on)")
    ap.add_argument("--max-new-tokens", type=positive_int, default=None,
                    help=f"new-token cap for every task (default per task: {DEFAULT_MAX_NEW})")
    ap.add_argument("--ks", type=int, nargs="+", default=[4, 8], help="fixed drafts per cycle")
    ap.add_argument("--adaptive-ks", type=positive_int, nargs="*", default=[4],
                    help="adaptive speculation beside the fixed K: at most this many drafts per row "
                         "(standard, top-k and the judges at --thresholds); none: fixed K only")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8], help="rows decoded together")
    ap.add_argument("--top-ks", type=int, nargs="*", default=[2, 5], help="top-k policies (none: no top-k rows)")
    ap.add_argument("--judges", nargs="+", default=list(JUDGE_FAMILIES), choices=list(JUDGE_FAMILIES),
                    help="trained verifiers to run")
    ap.add_argument("--thresholds", nargs="+", default=["F", "R"], help="named judge thresholds")
    ap.add_argument("--sweep", nargs="*", default=SWEEP, help="extra judge thresholds for the Pareto curves")
    ap.add_argument("--sweep-ks", type=int, nargs="*", default=None, help="K values with the sweep (default: first K)")
    ap.add_argument("--sweep-batches", type=int, nargs="*", default=None,
                    help="batch sizes with the sweep (default: the largest)")
    ap.add_argument("--selfjudge-verifier", default=None, help="verifier file (default: shipped, per task)")
    ap.add_argument("--autojudge-verifier", default=None, help="verifier file (default: shipped GSM8K one)")
    ap.add_argument("--rules", nargs="*", default=[],
                    choices=["typical", "relaxed", "fly", "selfjudge+fly", "selfjudge+gate", "oracle"],
                    help="training-free lossy rules to sweep beside the judges (at --sweep-ks and --sweep-batches); "
                         "oracle: the SelfJudge label computed at decode time (headroom; greedy, slow)")
    ap.add_argument("--rules-budget", type=float, default=None, metavar="B",
                    help="each rule of --rules only at the setting its validation curve (stored in the SelfJudge "
                         "verifier by `selfjudge calibrate`) picks within semantic fidelity >= B, as SelfJudge's "
                         "quality:B threshold: every method at one budget")
    ap.add_argument("--protect-digits", action="store_true",
                    help="judges may not accept or replace digit tokens (the lossless rule decides there)")
    add_drafter_arguments(ap, "what drafts for the speculative configurations (HF assisted always uses the draft model)",
                          eagle_dest="eagle_dir")
    add_lookup_store_argument(ap)
    add_device_arguments(ap)
    ap.add_argument("--hf-baselines", action="store_true",
                    help="batch-1 blocks also run Hugging Face generate and assisted generation (same draft)")
    ap.add_argument("--threads", type=positive_int, default=1, help="torch threads (1: steadiest on a shared CPU)")
    ap.add_argument("--timing-rounds", type=positive_int, default=1,
                    help="time every prompt group this many times, configurations in alternating order "
                         "(A B C, C B A; use 2 or more when a block's prompts fit in one batch)")
    ap.add_argument("--out", type=Path, default=_DEFAULT_OUT, help="results folder (default: selfjudge-bench in the working folder)")
    ap.add_argument("--force", action="store_true", help="redo blocks that are already written")
    ap.add_argument("--estimate-only", action="store_true", help="print the expected duration and stop")
    ap.add_argument("--quick", action="store_true",
                    help="GSM8K, 2 prompts, 32 new tokens, K=4, batch 1, top-2, F/R, no sweep (out: OUT-quick)")


def spec_from_args(args: argparse.Namespace):
    """The :class:`~selfjudge.evaluation.matrix_spec.MatrixSpec` of parsed arguments (``--quick`` applied)."""
    from selfjudge.evaluation.matrix_spec import MatrixSpec

    fields = {k: getattr(args, k) for k in (
        "tasks", "limit", "split", "max_new_tokens", "ks", "adaptive_ks", "batch_sizes", "top_ks", "judges", "thresholds", "sweep",
        "sweep_ks", "sweep_batches", "selfjudge_verifier", "autojudge_verifier", "protect_digits", "drafter", "eagle_dir", "lookup_store", "hf_baselines",
        "threads", "timing_rounds", "out", "force", "estimate_only", "device", "dtype", "rules", "rules_budget")}
    fields["pair"] = args.target
    fields["drafter"] = drafter_name(args.drafter, args.target)
    if args.lookup_store is not None and fields["drafter"] != "prompt-lookup":
        raise ValueError(f"--lookup-store only applies to --drafter prompt-lookup, not {fields['drafter']!r}")
    if args.quick:
        fields.update(tasks=["gsm8k"], limit=2, max_new_tokens=32, ks=[4], batch_sizes=[1], top_ks=[2], sweep=[])
        if args.out == _DEFAULT_OUT:
            fields["out"] = Path("selfjudge-bench-quick")
    return MatrixSpec.from_options(**fields)


def parse_args(argv: list[str] | None = None):
    """Parse ``selfjudge bench`` arguments into a MatrixSpec (a bad value exits with status 2)."""
    ap = ArgumentParser(prog="selfjudge bench", description=__doc__.splitlines()[0])
    add_arguments(ap)
    try:
        return spec_from_args(ap.parse_args(argv))
    except ValueError as err:
        ap.error(str(err))


def register(subparsers) -> None:
    p = add_command(subparsers, "bench", "wall-clock matrix of decoding policies (tables, Pareto plots)")
    add_arguments(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from selfjudge.evaluation.wallclock import run_matrix

    out = run_matrix(spec_from_args(args), args.command_line)
    if not args.estimate_only:
        print(f"[wallclock] wrote {out}/results.json, results.md, pareto.png, speed_vs_fidelity.png")
    return 0
