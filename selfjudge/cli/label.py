"""``selfjudge label``: SelfJudge labels from the target's own responses (resumable shards)."""

from __future__ import annotations

import json

from selfjudge.cli.common import (add_command, add_device_arguments, add_drafter_arguments, add_lookup_arguments,
                                  add_model_arguments, finite_float, load_target_and_drafter, lookup_suffix,
                                  non_negative_int, positive_int)


def register(subparsers) -> None:
    p = add_command(subparsers, "label", "SelfJudge labels: one-pass swap scores of the target's own responses")
    add_model_arguments(p)
    p.add_argument("--task", default="gsm8k", help="the task whose prompts are labelled")
    p.add_argument("--split", default="train", help="the task's split (train: what verifiers are trained on)")
    p.add_argument("--window", type=int, default=20, help="suffix window N (0 = prefix-only ablation)")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--tau", type=finite_float, help="label = score > tau")
    g.add_argument("--tau-quantile", type=finite_float, help="tau = this quantile of all scores of the run")
    p.add_argument("--out", required=True, help="output directory (resumed if it exists)")
    p.add_argument("--limit", type=positive_int, default=None, help="number of prompts")
    p.add_argument("--skip", type=non_negative_int, default=0,
                   help="skip the split's first SKIP prompts (those an n-gram store was built from, say)")
    p.add_argument("--batch-size", type=positive_int, default=8, help="prompts per generate call and per shard")
    p.add_argument("--max-new-tokens", type=positive_int, default=None, help="response length cap (default: the task's)")
    p.add_argument("--max-tokens-per-forward", type=positive_int, default=2048, help="memory budget of one scoring forward")
    p.add_argument("--backend", default="auto", choices=("auto", "torch", "triton"),
                   help="the scorer op: Triton kernel, its PyTorch twin, or auto (Triton on a GPU)")
    add_drafter_arguments(p, "whose teacher-forced proposals define the mismatches")
    add_lookup_arguments(p)
    add_device_arguments(p)
    p.add_argument("--score", choices=["likelihood", "confidence"], default="likelihood",
                   help="likelihood: SPEC's suffix log-likelihood difference; confidence: SelfJudge's released code "
                        "(mean top-1 log-probability difference; use a negative tau, e.g. -0.056 at N = 20)")
    p.set_defaults(func=run)


def run(args) -> int:
    from selfjudge.labelling.pipeline import label

    pair = load_target_and_drafter(args)
    draft_id = None  # a draft model: label() names it from --draft
    if args.drafter != "model":
        draft_id = f"{args.target}:{args.drafter}" + (f":{args.eagle}" if args.eagle else "") + lookup_suffix(pair[1])
    summary = label(
        args.target,
        args.draft,
        args.task,
        out=args.out,
        window=args.window,
        tau=args.tau,
        tau_quantile=args.tau_quantile,
        limit=args.limit,
        skip=args.skip,
        split=args.split,
        batch_size=args.batch_size,
        max_new_tokens=args.max_new_tokens,
        max_tokens_per_forward=args.max_tokens_per_forward,
        backend=args.backend,
        command=args.command_line,
        pair=pair,
        draft_id=draft_id,
        score=args.score,
    )
    print(json.dumps(summary, indent=2))
    return 0
