"""``selfjudge distill-draft``: distil the small draft from the target (resumable)."""

from __future__ import annotations

import argparse

from selfjudge.cli.common import (add_command, add_device_arguments, add_model_arguments, finite_float,
                                  positive_int)


def register(subparsers) -> None:
    p = add_command(subparsers, "distill-draft", "distil a small draft from the target (resumable)")
    add_model_arguments(p, draft=False)
    p.add_argument("--out", default="runs/distill-smollm2", help="checkpoint folder (rerun to resume)")
    p.add_argument("--layers", default="0,29", help="target layers the draft starts from")
    p.add_argument("--head-vocab", type=head_vocab_size, default=8192,
                   help="size of the draft head's sub-vocabulary (the training text's most frequent tokens), or "
                        "'shipped': the shipped draft's sub-vocabulary, as train-eagle's head uses")
    p.add_argument("--seed", type=int, default=0, help="random seed (initialisation, data order)")
    p.add_argument("--max-len", type=positive_int, default=256, help="tokens per training sequence")
    p.add_argument("--teacher-bs", type=positive_int, default=4, help="sequences per target (teacher) forward")
    p.add_argument("--train-bs", type=positive_int, default=8, help="sequences per draft training step")
    p.add_argument("--steps-per-teacher", type=positive_int, default=2, help="draft steps per teacher batch")
    p.add_argument("--lr", type=finite_float, default=5e-4, help="learning rate")
    p.add_argument("--max-steps", type=positive_int, default=100000, help="stop after this many steps")
    p.add_argument("--max-minutes", type=finite_float, default=60.0, help="stop after this many minutes (rerun to resume)")
    p.add_argument("--ckpt-minutes", type=finite_float, default=3.0, help="checkpoint at least this often (0: every step)")
    p.add_argument("--sharegpt", type=positive_int, default=6000, help="ShareGPT training conversations")
    p.add_argument("--text", default=None,
                   help="train on these sequences instead of the reference chats: JSON lines {ids, start}, e.g. the "
                        "target's own responses cached by `selfjudge train-eagle` (OUT/train-text.jsonl)")
    p.add_argument("--heldout-text", default=None,
                   help="held-out sequences in the same format (e.g. OUT/heldout-text.jsonl of train-eagle); "
                        "default: reference chats of GSM8K val rows and ShareGPT")
    p.add_argument("--threads", type=positive_int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--export", default=None, help="after training, write the shippable draft to this folder")
    add_device_arguments(p, dtype=False)
    p.set_defaults(func=run)


def run(args) -> int:
    from selfjudge.models.distill import distill, export_draft
    from selfjudge.builtin import BUILTIN_PAIRS
    from selfjudge.models.pair import builtin_target_dir

    try:
        layers = [int(x) for x in args.layers.split(",")]
    except ValueError:
        raise ValueError(f"--layers must be comma-separated layer indices, got {args.layers!r}") from None
    vocab_ids = None
    if args.head_vocab == "shipped":
        from safetensors.torch import load_file

        from selfjudge.models.pair import ASSET_DRAFT_DIR

        vocab_ids = load_file(str(ASSET_DRAFT_DIR / "draft.safetensors"))["head_vocab_ids"]
    given = {"text": args.text, "heldout_text": args.heldout_text}
    texts = {k: read_text_file(k, v) for k, v in given.items() if v is not None}
    target = str(builtin_target_dir(args.target)) if args.target in BUILTIN_PAIRS else args.target
    head_vocab = args.head_vocab if vocab_ids is None else int(vocab_ids.numel())
    distill(target, args.out, layers=layers, head_vocab=head_vocab, seed=args.seed, max_len=args.max_len,
            teacher_bs=args.teacher_bs, train_bs=args.train_bs, steps_per_teacher=args.steps_per_teacher,
            lr=args.lr, max_steps=args.max_steps, max_minutes=args.max_minutes, threads=args.threads,
            ckpt_minutes=args.ckpt_minutes, n_sharegpt=args.sharegpt, device=args.device,
            sequences=texts.get("text"), heldout=texts.get("heldout_text"),
            data=text_provenance(given), vocab_ids=vocab_ids)
    if args.export:
        export_draft(args.out, args.export)
        print(f"[distill] exported to {args.export}")
    return 0


def text_provenance(given: dict[str, str | None]) -> dict[str, str]:
    """What ``state.json`` records of ``--text`` / ``--heldout-text``: each file's name and sha256,
    so a resume from another checkout (same bytes, other path) is accepted and other text is not."""
    import hashlib
    from pathlib import Path

    out = {}
    for key, path in given.items():
        if path is not None:
            out[key] = Path(path).name
            out[key + "_sha256"] = hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    return out


def head_vocab_size(text: str) -> int | str:
    """argparse type of ``--head-vocab``: an integer >= 1 or ``shipped``."""
    if text == "shipped":
        return text
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1 or 'shipped', got {text!r}") from None


def read_text_file(name: str, path: str) -> list[tuple[list[int], int]]:
    """``--text`` / ``--heldout-text``: the sequences of a JSON-lines text cache, refused by name when
    the file is missing or holds none."""
    from pathlib import Path

    from selfjudge.models.eagle_train import read_sequences

    flag = "--" + name.replace("_", "-")
    if not Path(path).is_file():
        raise FileNotFoundError(f"{flag}: no such file: {path}")
    sequences = read_sequences(path)
    if not sequences:
        raise ValueError(f"{flag}: {path} holds no sequences (expected JSON lines {{\"ids\": [...], \"start\": n}})")
    return sequences
