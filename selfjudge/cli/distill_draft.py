"""``selfjudge distill-draft``: distil the small draft from the target (resumable)."""

from __future__ import annotations

from selfjudge.cli.common import add_device_arguments, add_command, finite_float, positive_int


def register(subparsers) -> None:
    p = add_command(subparsers, "distill-draft", "distil a small draft from the target (resumable)")
    p.add_argument("--target", default=None, help="target HF folder (default: converted SmolLM2-135M-Instruct)")
    p.add_argument("--out", default="runs/distill-smollm2", help="checkpoint folder (rerun to resume)")
    p.add_argument("--layers", default="0,29", help="target layers the draft starts from")
    p.add_argument("--head-vocab", type=positive_int, default=8192)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-len", type=positive_int, default=256)
    p.add_argument("--teacher-bs", type=positive_int, default=4)
    p.add_argument("--train-bs", type=positive_int, default=8)
    p.add_argument("--steps-per-teacher", type=positive_int, default=2)
    p.add_argument("--lr", type=finite_float, default=5e-4)
    p.add_argument("--max-steps", type=positive_int, default=100000)
    p.add_argument("--max-minutes", type=finite_float, default=60.0)
    p.add_argument("--ckpt-minutes", type=finite_float, default=3.0, help="checkpoint at least this often (0: every step)")
    p.add_argument("--sharegpt", type=positive_int, default=6000, help="ShareGPT training conversations")
    p.add_argument("--threads", type=positive_int, default=None)
    p.add_argument("--export", default=None, help="after training, write the shippable draft to this folder")
    add_device_arguments(p, dtype=False)
    p.set_defaults(func=run)


def run(args) -> int:
    from selfjudge.models.distill import distill, export_draft
    from selfjudge.models.gguf_convert import ensure_smollm2_target

    try:
        layers = [int(x) for x in args.layers.split(",")]
    except ValueError:
        raise ValueError(f"--layers must be comma-separated layer indices, got {args.layers!r}") from None
    target = args.target or str(ensure_smollm2_target())
    distill(target, args.out, layers=layers, head_vocab=args.head_vocab, seed=args.seed, max_len=args.max_len,
            teacher_bs=args.teacher_bs, train_bs=args.train_bs, steps_per_teacher=args.steps_per_teacher,
            lr=args.lr, max_steps=args.max_steps, max_minutes=args.max_minutes, threads=args.threads,
            ckpt_minutes=args.ckpt_minutes, n_sharegpt=args.sharegpt, device=args.device)
    if args.export:
        export_draft(args.out, args.export)
        print(f"[distill] exported to {args.export}")
    return 0
