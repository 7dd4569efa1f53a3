"""``selfjudge train-eagle``: train an EAGLE feature head for the default target (resumable)."""

from __future__ import annotations

import json

from selfjudge.cli.common import (DEFAULT_PAIR, add_command, add_device_arguments, add_model_arguments, finite_float,
                                  positive_int)


def register(subparsers) -> None:
    p = add_command(subparsers, "train-eagle", "train an EAGLE feature head on the target's own text (resumable)")
    p.add_argument("--out", default="runs/eagle-smollm2", help="run folder (rerun the same command to resume)")
    add_model_arguments(p, draft=False)
    p.add_argument("--data", choices=("self", "reference"), default="self",
                   help="the target's own greedy responses (default) or the tasks' reference answers")
    p.add_argument("--gsm8k", type=int, default=200, help="GSM8K train prompts")
    p.add_argument("--sharegpt", type=int, default=200, help="ShareGPT train prompts")
    p.add_argument("--heldout", type=positive_int, default=32, help="val prompts whose target responses are the held-out text")
    p.add_argument("--max-new-tokens", type=positive_int, default=256, help="cap of each target response")
    p.add_argument("--head-vocab", choices=("draft", "full"), default="draft",
                   help="draft from the built-in draft's sub-vocabulary (cheap head; the built-in target only) or "
                        "the full vocabulary")
    p.add_argument("--steps", type=positive_int, default=3000, help="training steps")
    p.add_argument("--batch-size", type=positive_int, default=8, help="sequences per step")
    p.add_argument("--lr", type=finite_float, default=5e-4, help="learning rate")
    p.add_argument("--token-weight", type=finite_float, default=0.1, help="weight of the token loss (feature loss: 1)")
    p.add_argument("--noise", type=finite_float, default=0.2, help="uniform noise on the input features (EAGLE)")
    p.add_argument("--eval-every", type=positive_int, default=200, help="steps between held-out evaluations")
    p.add_argument("--max-minutes", type=finite_float, default=60.0, help="stop after this many minutes (rerun to resume)")
    p.add_argument("--ckpt-minutes", type=finite_float, default=3.0, help="checkpoint at least this often (0: every step)")
    p.add_argument("--seed", type=int, default=0, help="random seed (initialisation, data order)")
    p.add_argument("--threads", type=positive_int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--init", default=None, help="start from this exported head folder (when --out has no checkpoint)")
    p.add_argument("--export", default=None, help="after training, write the shippable head folder here (fp16)")
    add_device_arguments(p, dtype=False)
    p.set_defaults(func=run)


def run(args) -> int:
    import torch

    from selfjudge.models import load_pair
    from selfjudge.models.eagle_data import reference_text, self_generated_text
    from selfjudge.models.eagle_train import export_eagle, train_eagle

    if args.threads:
        torch.set_num_threads(args.threads)
    from selfjudge.folders import lock_folder

    lock = lock_folder(args.out, args.command_line)  # one job per run folder, held to the end
    if args.head_vocab == "draft" and args.target != DEFAULT_PAIR:
        raise ValueError("--head-vocab draft takes the built-in draft's sub-vocabulary; use --head-vocab full with "
                         f"--target {args.target}")
    # training runs in float32 on any device (the head shares the target's embedding); the draft model
    # is loaded only for its sub-vocabulary ("prompt-lookup" loads the target alone)
    target, draft, tokenizer = load_pair(args.target, device=args.device, dtype="float32",
                                         drafter="model" if args.head_vocab == "draft" else "prompt-lookup")
    train, heldout = self_generated_text(target, tokenizer, args.out, n_gsm8k=args.gsm8k if args.data == "self" else 0,
                                         n_sharegpt=args.sharegpt if args.data == "self" else 0,
                                         n_heldout=args.heldout, max_new_tokens=args.max_new_tokens)
    if args.data == "reference":
        train = reference_text(tokenizer, n_gsm8k=args.gsm8k, n_sharegpt=args.sharegpt)
    vocab_ids = getattr(draft.get_output_embeddings(), "vocab_ids", None) if args.head_vocab == "draft" else None
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    data = {"source": args.data, "gsm8k_train_prompts": args.gsm8k, "sharegpt_train_prompts": args.sharegpt,
            "heldout": f"target's greedy responses to the first {args.heldout} val prompts (GSM8K + ShareGPT)",
            "max_new_tokens": args.max_new_tokens, "command": args.command_line}
    state = train_eagle(target, train, heldout, args.out, pad_id=pad, vocab_ids=vocab_ids, steps=args.steps,
                        batch_size=args.batch_size, lr=args.lr, token_weight=args.token_weight, noise=args.noise,
                        seed=args.seed, eval_every=args.eval_every, max_minutes=args.max_minutes, data=data,
                        init_from=args.init, ckpt_minutes=args.ckpt_minutes)
    print(json.dumps({"step": state["step"], "heldout": state["history"][-1]}))
    if args.export:
        export_eagle(args.out, target, args.export, extra={"command": args.command_line}, dtype=torch.float16)
        print(f"[train-eagle] exported to {args.export}")
    lock.release()
    return 0
