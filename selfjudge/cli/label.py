"""``selfjudge label``: SelfJudge labels from the target's own responses (resumable shards)."""

from __future__ import annotations

import json

from selfjudge.cli.common import (add_command, add_device_arguments, add_drafter_arguments, add_lookup_arguments,
                                  drafter_name, finite_float, lookup_lengths, lookup_suffix, non_negative_int,
                                  positive_int)

DEFAULT_PAIR = "smollm2-135m"


def register(subparsers) -> None:
    p = add_command(subparsers, "label", "SelfJudge labels: one-pass swap scores of the target's own responses")
    p.add_argument("--target", default=DEFAULT_PAIR, help='"smollm2-135m" (default pair) or a local model folder')
    p.add_argument("--draft", default=None, help="local draft folder (default: the pair's draft)")
    p.add_argument("--task", default="gsm8k")
    p.add_argument("--split", default="train")
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
    p.add_argument("--backend", default="auto", choices=("auto", "torch", "triton"))
    add_drafter_arguments(p, "whose teacher-forced proposals define the mismatches")
    add_lookup_arguments(p)
    add_device_arguments(p)
    p.add_argument("--score", choices=["likelihood", "confidence"], default="likelihood",
                   help="likelihood: SPEC's suffix log-likelihood difference; confidence: SelfJudge's released code "
                        "(mean top-1 log-probability difference; use a negative tau, e.g. -0.056 at N = 20)")
    p.set_defaults(func=run)


def run(args) -> int:
    from selfjudge.labelling.pipeline import label

    from selfjudge.models import load_pair

    args.drafter = drafter_name(args.drafter, args.target, args.draft)
    lengths = lookup_lengths(args)  # refused before any model loads when they do not apply
    pair, draft_id = load_pair(args.target, args.draft, device=args.device, dtype=args.dtype, drafter="model"), None
    if args.drafter != "model":
        from selfjudge.engine.drafters import make_drafter

        target, draft, tokenizer = pair
        pair = (target, make_drafter(args.drafter, target, draft, eagle_dir=args.eagle, pair=args.target,
                                           **lengths), tokenizer)
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
