"""``selfjudge generate``: speculative decoding from the command line.

    selfjudge generate --prompt "What is 12 times 7?"
    selfjudge generate --target path/to/model --drafter prompt-lookup --prompt ...
    selfjudge generate --policy judge --verifier v.safetensors --threshold F --prompt ...
    selfjudge generate --policy relaxed --relaxed-top-n 2 --relaxed-delta 0.05 --prompt ...
"""

from __future__ import annotations

import json

from selfjudge.cli.common import (add_command, add_device_arguments, add_drafter_arguments, add_lookup_arguments,
                                  add_model_arguments, finite_float, load_target_and_drafter, parse_threshold,
                                  positive_int)

#: ``selfjudge.engine.policies.POLICY_NAMES``, spelled out: importing it would load torch for --help
POLICIES = ("autoregressive", "standard", "topk", "judge", "typical", "relaxed", "fly", "judge+fly")


def register(subparsers) -> None:
    p = add_command(subparsers, "generate", "generate with speculative decoding (engine)")
    p.add_argument("--prompt", nargs="+", required=True, help="user message(s); one batch")
    p.add_argument("--raw", action="store_true", help="prompts are already chat-formatted text")
    add_model_arguments(p)
    p.add_argument("--policy", default="standard", choices=POLICIES,
                   help="what is accepted: standard (lossless), topk, judge (a verifier), or a training-free "
                        "lossy rule (typical, relaxed, fly, judge+fly); autoregressive: no speculation")
    p.add_argument("-k", type=positive_int, default=None,
                   help="a fixed number of draft tokens per cycle (default: adaptive, 0..--max-k per row each "
                        "cycle, chosen from this machine's measured step costs)")
    p.add_argument("--max-k", type=positive_int, default=4, help="the most draft tokens per row when adaptive")
    add_drafter_arguments(p, "what drafts: the draft model, an EAGLE head or prompt lookup (no model)")
    add_lookup_arguments(p)
    _add_policy_parameters(p)
    p.add_argument("--max-new-tokens", type=positive_int, default=128, help="new-token cap per prompt")
    p.add_argument("--temperature", type=finite_float, default=0.0, help="0: greedy")
    p.add_argument("--seed", type=int, default=None, help="random seed for sampling")
    p.add_argument("--stop", nargs="*", default=None, help="strings that end a response")
    p.add_argument("--json", action="store_true", help="one JSON line per prompt")
    add_device_arguments(p)
    p.set_defaults(func=run)


def _add_policy_parameters(p) -> None:
    """Each policy's parameters (defaults: the engine's, i.e. the rules' published defaults)."""
    p.add_argument("--top-k", type=positive_int, default=2, help="topk: accept a draft token in the target's top-k")
    p.add_argument("--verifier", default=None, help="judge, judge+fly: the verifier .safetensors")
    p.add_argument("--threshold", default=None, help="judge, judge+fly: a stored threshold name (F, R, quality:0.97, "
                                                     "...) or a logit value (default: the verifier's)")
    p.add_argument("--top-n-gate", type=positive_int, default=None,
                   help="judge, judge+fly: the judge may accept only draft tokens in the target's top-N")
    p.add_argument("--typical-epsilon", type=finite_float, default=0.09, help="typical: the probability floor")
    p.add_argument("--typical-delta", type=finite_float, default=0.3, help="typical: the entropy factor")
    p.add_argument("--relaxed-top-n", type=positive_int, default=3, help="relaxed: the candidate set's size")
    p.add_argument("--relaxed-delta", type=finite_float, default=0.1, help="relaxed: the probability gap to top-1")
    p.add_argument("--fly-window", type=positive_int, default=2, help="fly, judge+fly: the deferral window")
    p.add_argument("--fly-entropy-threshold", type=finite_float, default=0.3, help="fly, judge+fly: the entropy gate")
    p.add_argument("--fly-top-k", type=positive_int, default=3, help="fly, judge+fly: the entropy's top-k")


def make_cli_policy(args, target):
    """The policy ``--policy`` and its parameters name, built by the engine's factory."""
    from selfjudge.engine.policies import make_policy

    judged = args.policy in ("judge", "judge+fly")
    if judged != (args.verifier is not None):
        raise ValueError("--verifier is required with --policy judge or judge+fly, and used by nothing else")
    if args.top_n_gate is not None and not judged:
        raise ValueError("--top-n-gate applies to --policy judge or judge+fly only")
    verifier = None
    if judged:
        from selfjudge.judge import load_verifier
        from selfjudge.models.fingerprint import target_fingerprint

        verifier = load_verifier(args.verifier, expect_model=args.target, expect_hidden_size=target.config.hidden_size,
                                 expect_fingerprint=target_fingerprint(args.target))
    return make_policy(
        args.policy, verifier=verifier, threshold=parse_threshold(args.threshold), top_k=args.top_k,
        top_n_gate=args.top_n_gate, typical=dict(epsilon=args.typical_epsilon, delta=args.typical_delta),
        relaxed=dict(top_n=args.relaxed_top_n, delta=args.relaxed_delta),
        fly=dict(window=args.fly_window, entropy_threshold=args.fly_entropy_threshold, top_k=args.fly_top_k))


def run(args) -> int:
    from selfjudge.engine import SpeculativeEngine

    if args.policy == "autoregressive" and args.drafter is None and args.draft is None:
        args.drafter = "prompt-lookup"  # nothing drafts: load the target alone
    target, drafter, tokenizer = load_target_and_drafter(args)
    policy = make_cli_policy(args, target)
    engine = SpeculativeEngine(  # the engine wraps a draft model, an EAGLE head or prompt lookup
        target, drafter if policy.uses_draft else None, tokenizer, num_draft_tokens=args.k,
        max_draft_tokens=args.max_k, policy=policy,
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
