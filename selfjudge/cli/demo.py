"""``selfjudge demo``: target-only, standard SD, SelfJudge at a quality budget and the best training-free
rule within it, on an open-ended task's prompts, one table."""

from __future__ import annotations

from pathlib import Path

from selfjudge.cli.common import (add_command, add_device_arguments, add_drafter_arguments, add_model_arguments,
                                  drafter_name, finite_float, parse_threshold, positive_int)
from selfjudge.writes import write_json

JUDGE_MARK = ("\033[1;32m", "\033[0m")  # green: accepted by the judge only


def register(subparsers) -> None:
    p = add_command(subparsers, "demo", "compare target-only, standard SD, SelfJudge and the best training-free "
                                        "rule at one quality budget on summarisation prompts")
    add_model_arguments(p, draft=False)
    p.add_argument("--task", default="summarize", choices=["summarize", "sharegpt"],
                   help="an open-ended task with a shipped, calibrated verifier")
    p.add_argument("--prompts", type=positive_int, default=6, help="evaluation prompts of the task")
    p.add_argument("--max-new-tokens", type=positive_int, default=96, help="new-token cap per prompt")
    p.add_argument("-k", type=positive_int, default=None,
                   help="a fixed number of draft tokens per cycle (default: adaptive, 0..4 per row each cycle)")
    p.add_argument("--budget", type=finite_float, default=0.97,
                   help="quality budget: the semantic similarity to the target's own output that SelfJudge's "
                        "threshold and the rule's setting keep on validation prompts")
    p.add_argument("--threshold", default=None,
                   help="verifier threshold instead of the budget's: a name (R, F, quality:0.95, ...) or a logit")
    p.add_argument("--loose-threshold", default="R",
                   help="also run SelfJudge at this looser threshold (a name or a logit; 'none': not run), to show "
                        "what the judge buys without the budget and at what semantic cost")
    p.add_argument("--verifier", default=None, help="verifier file (default: the shipped SelfJudge one)")
    p.add_argument("--out", type=Path, default=Path("selfjudge-demo"), help="folder for demo.json and demo.png")
    p.add_argument("--no-color", action="store_true", help="mark judge-only tokens with [[...]] instead of colour")
    add_drafter_arguments(p, "what drafts for standard SD and SelfJudge")
    add_device_arguments(p)
    p.set_defaults(func=run)


def marked(pieces: list[tuple[str, bool]], color: bool) -> str:
    """The completion with the judge-only tokens marked (green, or [[...]] without colour)."""
    on, off = JUDGE_MARK if color else ("[[", "]]")
    return "".join(f"{on}{piece}{off}" if judge and piece else piece for piece, judge in pieces)


def _loose(value: str):
    """``--loose-threshold``: None for 'none', else a threshold as ``--threshold`` reads it."""
    return None if str(value).lower() == "none" else parse_threshold(value)


def run(args) -> int:
    from selfjudge.evaluation.demo import plot_demo, run_demo
    from selfjudge.folders import lock_folder

    lock = lock_folder(args.out, args.command_line)  # noqa: F841 - held until the demo's files are written
    report = run_demo(args.target, task=args.task, prompts=args.prompts, max_new_tokens=args.max_new_tokens, k=args.k,
                      budget=args.budget, threshold=parse_threshold(args.threshold), verifier_path=args.verifier,
                      drafter=drafter_name(args.drafter, args.target), eagle_dir=args.eagle, device=args.device,
                      dtype=args.dtype, loose_threshold=_loose(args.loose_threshold))
    report["command"] = args.command_line
    rows = report["rows"]
    width = max(14, max(len(r["policy"]) for r in rows))
    print()
    print(f"{'policy':<{width}} {'tok/s':>7} {'speed-up':>8} {'m':>6} {'judge tok':>9} {'semantic':>8} {'ROUGE-L':>7}")
    for r in rows:
        print(f"{r['policy']:<{width}} {r['tokens_per_s']:7.2f} {r['speedup_vs_target_only']:7.2f}x "
              f"{r['mean_accepted_length']:6.2f} {r['judge_accepted_tokens']:9d} "
              f"{r['semantic_fidelity']:8.3f} {r['rouge_l_vs_target']:7.3f}")
    logit = report["judge_threshold_logit"]
    print(f"(semantic and ROUGE-L: closeness to the target-only output; budget {report['budget']:g} on validation "
          f"prompts; threshold {report['threshold']} = "
          f"{'logit %.3g' % logit if logit is not None else 'none within the budget: the judge accepts nothing'})")
    if report["rule_at_budget"] is None:
        print(f"(no training-free rule keeps semantic fidelity >= {report['budget']:g} on the validation prompts "
              "at any of its swept settings: none is shown)")
    sample = report["sample"]
    how = "in [[...]]" if args.no_color else "in green"
    any_marked = any(judge for _, judge in sample["pieces"])
    print(f"\nSample ({sample['prompt_id']}), {sample['policy']}, {sample['judge_accepted']} tokens accepted by "
          f"the judge only{' (' + how + ')' if any_marked else ''}:\n")
    print(marked(sample["pieces"], color=not args.no_color))

    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "demo.json", report, indent=2)
    plot_demo(rows, args.out / "demo.png")
    print(f"\nwrote {args.out / 'demo.json'} and {args.out / 'demo.png'} ({report['total_s']:.0f} s in all)")
    return 0
