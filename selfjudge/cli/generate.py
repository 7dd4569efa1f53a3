"""``selfjudge generate``: speculative decoding from the command line.

    selfjudge generate --policy standard -k 4 --prompt "What is 12 times 7?"
    selfjudge generate --policy judge --verifier v.safetensors --threshold F --prompt ...
"""

from __future__ import annotations

import json

from selfjudge.cli.common import add_device_arguments, add_command, add_drafter_arguments, drafter_name, finite_float, parse_threshold, positive_int


def register(subparsers) -> None:
    p = add_command(subparsers, "generate", "generate with speculative decoding (engine)")
    p.add_argument("--prompt", nargs="+", required=True, help="user message(s); one batch")
    p.add_argument("--raw", action="store_true", help="prompts are already chat-formatted text")
    p.add_argument("--pair", default="smollm2-135m")
    p.add_argument("--policy", default="standard", choices=["autoregressive", "standard", "topk", "judge"])
    p.add_argument("-k", type=positive_int, default=None,
                   help="a fixed number of draft tokens per cycle (default: adaptive, 0..--max-k per row each "
                        "cycle, chosen from this machine's measured step costs)")
    p.add_argument("--max-k", type=positive_int, default=4, help="the most draft tokens per row when adaptive")
    add_drafter_arguments(p, "what drafts: the draft model, an EAGLE head or prompt lookup (no model)")
    p.add_argument("--top-k", type=positive_int, default=2)
    p.add_argument("--verifier", default=None, help="verifier .safetensors for --policy judge")
    p.add_argument("--threshold", default=None, help="threshold name (F, R, ...) or logit value")
    p.add_argument("--max-new-tokens", type=positive_int, default=128)
    p.add_argument("--temperature", type=finite_float, default=0.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--stop", nargs="*", default=None)
    p.add_argument("--json", action="store_true", help="one JSON line per prompt")
    add_device_arguments(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from selfjudge.engine import SpeculativeEngine
    from selfjudge.models import load_pair

    if args.policy == "judge" and args.verifier is None:
        raise ValueError("--verifier is required with --policy judge")
    name = drafter_name(args.drafter, args.pair)
    target, draft, tokenizer = load_pair(args.pair, args.eagle if name == "eagle" else None, device=args.device,
                                         dtype=args.dtype, drafter=name)
    verifier = None
    if args.policy == "judge":
        from selfjudge.judge import load_verifier

        verifier = load_verifier(args.verifier, expect_model=args.pair, expect_hidden_size=target.config.hidden_size)
    engine = SpeculativeEngine(  # the engine wraps the slot's draft model, EAGLE head or n-gram settings
        target, draft, tokenizer, num_draft_tokens=args.k, max_draft_tokens=args.max_k, policy=args.policy,
        verifier=verifier,
        threshold=parse_threshold(args.threshold), top_k=args.top_k,
    )
    results = engine.generate(
        args.prompt, max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=args.seed,
        stop=args.stop, chat=not args.raw,
    )
    for r in results:
        if args.json:
            print(json.dumps({"text": r.text, "token_ids": r.token_ids, "stats": r.stats.to_dict()}))
            continue
        s = r.stats
        print(r.text)
        print(f"[{s.new_tokens} tokens, {s.cycles} cycles, m={s.mean_accepted_length:.2f}, "
              f"judge-accepted {s.judge_accepted}, {s.wall_time:.2f} s]")
    return 0
