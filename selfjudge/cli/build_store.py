"""``selfjudge build-store``: prompt lookup's n-gram store from a target's own responses.

    selfjudge build-store --target path/to/model --tasks gsm8k sharegpt --out store.safetensors
    selfjudge generate --target path/to/model --drafter prompt-lookup --lookup-store store.safetensors ...
"""

from __future__ import annotations

import json
from pathlib import Path

from selfjudge.cli.common import (add_command, add_device_arguments, add_model_arguments, finite_float,
                                  non_negative_int, positive_int)


def register(subparsers) -> None:
    p = add_command(subparsers, "build-store", "prompt lookup's n-gram store from the target's own responses "
                                               "(resumable), its settings chosen on held-out responses")
    add_model_arguments(p, draft=False)
    p.add_argument("--tasks", nargs="+", default=["gsm8k", "sharegpt"],
                   help="tasks whose train prompts the target answers (the store) and val prompts (held out)")
    p.add_argument("--prompts", type=positive_int, default=200, help="train prompts per task")
    p.add_argument("--heldout", type=non_negative_int, default=16, help="val prompts per task the settings are "
                                                                         "chosen on (0: give --min-count/--min-share)")
    p.add_argument("--max-new-tokens", type=positive_int, default=256, help="cap of each target response")
    p.add_argument("--batch-size", type=positive_int, default=8, help="prompts per generate call")
    p.add_argument("--text-dir", type=Path, default=None,
                   help="where the target's responses are kept, so a rerun resumes (default: OUT's name + .text)")
    p.add_argument("--context", type=non_negative_int, default=3, help="prompt tokens kept before each response")
    p.add_argument("--max-ngram", type=positive_int, default=3, help="longest n-gram the store keeps")
    p.add_argument("--min-ngram", type=positive_int, default=2, help="shortest n-gram the store keeps")
    p.add_argument("--min-count", type=positive_int, default=None, help="fewest sightings of a kept continuation "
                                                                        "(default: the sweep's best)")
    p.add_argument("--min-share", type=finite_float, default=None, help="least share of a kept continuation "
                                                                        "(default: the sweep's best)")
    p.add_argument("--out", type=Path, required=True, help="the store (.safetensors)")
    add_device_arguments(p)
    p.set_defaults(func=run)


def _prompts(tokenizer, tasks: list[str], split: str, n: int) -> list[list[int]]:
    from selfjudge.tasks import load_task

    prompts = []
    for name in tasks:
        task = load_task(name)
        prompts += [tokenizer(task.build_prompt(tokenizer, ex), add_special_tokens=False)["input_ids"]
                    for ex in task.examples(split, limit=n)]
    return prompts


def run(args) -> int:
    from selfjudge.engine.lookup_store import build_store
    from selfjudge.folders import lock_folder
    from selfjudge.models import load_pair
    from selfjudge.models.eagle_train import self_generated_sequences
    from selfjudge.writes import write_json

    text_dir = args.text_dir or args.out.with_name(args.out.name + ".text")
    lock = lock_folder(text_dir, args.command_line)  # noqa: F841 - one job per text folder, held to the end
    target, _, tokenizer = load_pair(args.target, device=args.device, dtype=args.dtype, drafter="prompt-lookup")
    texts = {}
    for split, n, name in (("val", args.heldout, "heldout"), ("train", args.prompts, "train")):
        prompts = _prompts(tokenizer, args.tasks, split, n) if n else []
        texts[name] = self_generated_sequences(target, tokenizer, prompts, text_dir / f"{name}-text.jsonl",
                                               max_new_tokens=args.max_new_tokens, batch_size=args.batch_size)
    from selfjudge.models.pair import default_lookup

    lookup = default_lookup(1, args.target)  # the n-gram lengths prompt lookup matches for this target
    store, report = build_store(
        texts["train"], texts["heldout"], context=args.context, max_ngram=args.max_ngram, min_ngram=args.min_ngram,
        min_count=args.min_count, min_share=args.min_share, lookup_ngrams=(lookup.max_ngram, lookup.min_ngram),
        source=f"{args.target}'s greedy responses to {args.prompts} train prompts of {', '.join(args.tasks)}")
    from selfjudge.models.fingerprint import target_fingerprint

    fingerprint = target_fingerprint(args.target)  # a folder's: the store is refused for another target
    store.save(args.out, target_fingerprint=fingerprint)
    report.update(command=args.command_line, target=args.target, target_fingerprint=fingerprint, path=str(args.out))
    write_json(args.out.with_suffix(".json"), report)
    print(json.dumps(report["written"]))
    return 0
