"""``selfjudge train``: fit a verifier (logistic regression) from label shards."""

from __future__ import annotations

import json
from typing import Any

from selfjudge.cli.common import add_command, finite_float
from selfjudge.writes import write_json


def register(subparsers) -> None:
    p = add_command(subparsers, "train", "train a verifier (logistic regression) from label shards")
    p.add_argument("--labels", nargs="+", required=True, help="label shard dir(s) (same target and method)")
    p.add_argument("--out", required=True, help="output verifier .safetensors")
    p.add_argument("--val-fraction", type=finite_float, default=0.2, help="fraction of prompts held out (grouped split)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the train/validation/test split by prompt")
    p.add_argument("--target-recall", type=finite_float, default=0.9, help='recall on the unacceptable class for "R"')
    p.add_argument("--c-grid", default=None, help="comma-separated C values (default logspace(-5, 1, 13))")
    p.add_argument("--report", default=None, help="also write the full JSON report here")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--tau", type=finite_float, default=None, help="SelfJudge: relabel as score > tau before training")
    g.add_argument("--tau-quantile", type=finite_float, default=None, help="SelfJudge: tau = this quantile of the scores")
    p.add_argument("--features", choices=["h", "phi", "h+phi"], default="h",
                   help="what the judge reads: the hidden state, the target's probability features of the draft "
                        "token (log p, margin to the top-1, top-k entropy), or both")
    p.add_argument("--augment", action="store_true",
                   help="the released code's augmentation: each training mismatch also adds the original token as "
                        "an acceptable example")
    p.add_argument("--test-fraction", type=finite_float, default=0.0,
                   help="fraction of prompts held out from fitting and every choice; ROC-/PR-AUC reported there")
    p.add_argument("--score", choices=["likelihood", "confidence"], default=None,
                   help="SelfJudge: relabel from this stored score (default: the one the labels were made with)")
    p.set_defaults(func=run)


def run(args) -> int:
    from selfjudge.judge.train import train_from_labels

    kwargs: dict[str, Any] = dict(val_fraction=args.val_fraction, seed=args.seed, target_recall=args.target_recall,
                                  feature_set=args.features, augment=args.augment, test_fraction=args.test_fraction)
    if args.c_grid:
        try:
            kwargs["c_grid"] = [float(c) for c in args.c_grid.split(",")]
        except ValueError:
            raise ValueError(f"--c-grid must be comma-separated numbers, got {args.c_grid!r}") from None
    verifier, report = train_from_labels(args.labels, args.out, command=args.command_line, tau=args.tau,
                                         tau_quantile=args.tau_quantile, score=args.score, **kwargs)
    print(format_report(report))
    print(f"wrote {args.out} (hidden size {verifier.hidden_size}, thresholds: {', '.join(verifier.thresholds)})")
    if args.report:
        write_json(args.report, report)
    return 0


def format_report(report: dict[str, Any]) -> str:
    lines = [
        f"C={report['C']:.3g}  train ROC-AUC={report['train_roc_auc']:.4f}  val ROC-AUC={report['val_roc_auc']:.4f}"
        f"  val ECE={report['val_ece']:.4f}",
        f"training set: {json.dumps(report['training_set'])}",
        *([f"test: ROC-AUC={t['roc_auc']:.4f}  PR-AUC={t['pr_auc']:.4f}  acceptable accepted at <= 5 % "
           f"unacceptable accepted: {t['acceptable_accepted_at_5pct_unacceptable']:.3f}"]
          if (t := report.get("test")) else []),
        "threshold  logit     accept  prec   rec    F1     unacc_rec harmful_acc",
    ]
    for name, m in report["at_threshold"].items():
        lines.append(
            f"{name:<10} {m['threshold']:+8.3f}  {m['accept_rate']:.3f}  {m['precision']:.3f}  {m['recall']:.3f}  "
            f"{m['f1']:.3f}  {m['unacceptable_recall']:.3f}     {m['harmful_accept_rate']:.3f}"
        )
    lines.append("reliability (val): bin  count  mean_pred  observed")
    for r in report["reliability"]:
        if r["count"]:
            lines.append(
                f"  [{r['lo']:.1f},{r['hi']:.1f})  {r['count']:5d}  {r['mean_predicted']:.3f}  {r['observed_rate']:.3f}"
            )
    return "\n".join(lines)
