"""``selfjudge autojudge-label``: AutoJudge labels (one answer-checked regeneration per mismatch)."""

from __future__ import annotations

from selfjudge.cli.common import (add_command, add_device_arguments, add_drafter_arguments, add_lookup_arguments,
                                  add_model_arguments, finite_float, load_target_and_drafter, lookup_suffix,
                                  positive_int)


def register(subparsers) -> None:
    p = add_command(subparsers, "autojudge-label", "mine AutoJudge labels (answer-checking regenerations)")
    p.add_argument("--task", required=True, choices=["gsm8k", "humaneval"], help="a task with an answer checker")
    add_model_arguments(p)
    p.add_argument("--split", default="train", help="the task's split (train: what verifiers are trained on)")
    p.add_argument("--limit", type=positive_int, default=None, help="number of prompts")
    p.add_argument("--offset", type=int, default=0, help="skip this many prompts of the split first")
    p.add_argument("--out", required=True, help="label dir")
    p.add_argument("--max-new-tokens", type=positive_int, default=None, help="response cap (default: the task's)")
    p.add_argument("--max-labels-per-prompt", type=positive_int, default=None,
                   help="stop a prompt's walk after this many labels (default: every mismatch reached)")
    p.add_argument("--label-fraction", type=finite_float, default=1.0,
                   help="label each reached mismatch with this probability (others are stepped over unswapped)")
    p.add_argument("--target-id", default=None, help="model id stored in the manifest (default: --target)")
    p.add_argument("--draft-id", default=None, help="drafter id stored in the manifest (default: from --draft/--drafter)")
    p.add_argument("--batch-size", type=positive_int, default=1,
                   help="walk this many prompts in lock step (batched regenerations; same labels)")
    p.add_argument("--threads", type=positive_int, default=1, help="torch intra-op threads (1 is fastest on a busy CPU)")
    p.add_argument("--no-resume", action="store_true", help="start over instead of skipping finished prompts")
    add_drafter_arguments(p, "whose teacher-forced proposals define the mismatches")
    add_lookup_arguments(p)
    add_device_arguments(p)
    p.set_defaults(func=run)


def run(args) -> int:
    import torch

    from selfjudge.engine import SpeculativeEngine
    from selfjudge.labelling.autojudge import mine_task
    from selfjudge.models.generation import eos_token_ids
    from selfjudge.tasks import load_task

    torch.set_num_threads(args.threads)
    target, drafter, tokenizer = load_target_and_drafter(args)
    task = load_task(args.task)
    examples = task.examples(args.split, limit=None if args.limit is None else args.offset + args.limit)
    examples = examples[args.offset:]
    # lock-step walks regenerate through the engine's batched target-only path
    eos = sorted(eos_token_ids(target, tokenizer))
    engine = SpeculativeEngine(target, None, None, policy="autoregressive", eos_token_id=eos)

    def generate_batch(prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        return [r.token_ids for r in engine.generate(prompts, max_new_tokens=max_new_tokens)]

    summary = mine_task(
        target,
        drafter,
        tokenizer,
        task,
        examples,
        args.out,
        max_new_tokens=args.max_new_tokens or task.max_new_tokens,
        max_labels_per_prompt=args.max_labels_per_prompt,
        label_fraction=args.label_fraction,
        resume=not args.no_resume,
        # same ids as the labelling pipeline's manifests (and what verifiers are checked against)
        target_id=args.target_id or args.target,
        draft_id=args.draft_id or args.draft or f"{args.target}:" + ("draft" if args.drafter == "model" else args.drafter)
        + lookup_suffix(drafter),
        task_name=args.task,
        command=args.command_line,
        split=args.split,
        batch_size=args.batch_size,
        generate_batch=generate_batch,
    )
    print({k: summary[k] for k in ("n_prompts", "n_labels", "positive_rate", "seconds_per_label",
                                    "target_forward_tokens_per_label", "cache_shared_forward_tokens_per_label")})
    return 0
