"""Build prompt lookup's n-gram store from the target's own text, sweeping its confidence on held-out text.

    python bench/drafters/build_ngram_store.py --text bench/results/eagle-smollm2/train-text.jsonl \
        --heldout-text bench/results/eagle-smollm2/heldout-text.jsonl \
        --out selfjudge/assets/drafters/smollm2-135m-self-ngrams.safetensors \
        --report bench/results/ngram-store.json

``--text`` / ``--heldout-text``: JSON lines ``{"ids": [...], "start": i}`` (prompt + the target's greedy
response from ``start``; ``selfjudge train-eagle`` writes them). The store keeps each response with
the last ``--context`` prompt tokens before it (the chat template's assistant header seeds the first
n-grams). The sweep scores prompt lookup (the default pair's n-gram lengths) with and without the
store at every (min count, min share) on the held-out text, teacher-forced: first-position agreement
(a position without a proposal is a miss), how often the store is asked and proposes, and its
precision there. The store is written with ``--min-count`` / ``--min-share``; choose them from the
sweep on this validation text, never on evaluation prompts.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path


def score(seqs, max_ngram: int, min_ngram: int, store) -> dict:
    """:func:`selfjudge.engine.lookup_store.lookup_agreement` (the sweep's score; ``selfjudge build-store``
    runs the same sweep for any target)."""
    from selfjudge.engine.lookup_store import lookup_agreement

    return lookup_agreement(seqs, max_ngram, min_ngram, store)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--text", required=True, help="the target's own text the store is built from (JSON lines)")
    ap.add_argument("--heldout-text", default=None, help="validation text the sweep is scored on (JSON lines)")
    ap.add_argument("--context", type=int, default=3, help="prompt tokens kept before each response")
    ap.add_argument("--max-ngram", type=int, default=3)
    ap.add_argument("--min-ngram", type=int, default=2)
    ap.add_argument("--min-count", type=int, default=2, help="the store's written setting")
    ap.add_argument("--min-share", type=float, default=0.5, help="the store's written setting")
    ap.add_argument("--sweep-counts", type=int, nargs="*", default=[1, 2, 3, 5])
    ap.add_argument("--sweep-shares", type=float, nargs="*", default=[0.0, 0.5, 0.6, 0.75])
    ap.add_argument("--out", required=True, help="the store (.safetensors)")
    ap.add_argument("--report", default=None, help="the sweep and settings (.json)")
    args = ap.parse_args(argv)
    if args.context < 0:
        ap.error(f"--context must be >= 0, got {args.context}")

    from selfjudge.models.eagle_train import read_sequences
    from selfjudge.models.lookup import NgramLookup
    from selfjudge.models.ngram_store import NgramStore
    from selfjudge.models.pair import default_lookup

    lengths: NgramLookup = default_lookup(1)
    seqs = read_sequences(args.text)
    sequences = [ids[max(0, start - args.context):] for ids, start in seqs]
    source = f"{Path(args.text).name}: {len(seqs)} responses, {args.context} prompt tokens before each"
    make = lambda count, share: NgramStore(sequences, args.max_ngram, args.min_ngram, count, share, source)  # noqa: E731
    words = sys.argv[1:] if argv is None else argv
    report = {"command": "python bench/drafters/build_ngram_store.py " + shlex.join(words),
              "lookup": {"max_ngram": lengths.max_ngram, "min_ngram": lengths.min_ngram}}
    if args.heldout_text:
        held = read_sequences(args.heldout_text)
        report["without_store"] = score(held, lengths.max_ngram, lengths.min_ngram, None)
        print(json.dumps({"store": None, **report["without_store"]}), flush=True)
        report["sweep"] = []
        for count in args.sweep_counts:
            for share in args.sweep_shares:
                row = {"min_count": count, "min_share": share,
                       **score(held, lengths.max_ngram, lengths.min_ngram, make(count, share))}
                report["sweep"].append(row)
                print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
    store = make(args.min_count, args.min_share)
    store.save(args.out)
    report["written"] = {"path": args.out, **store.settings(), "ngrams": len(store)}
    print(json.dumps(report["written"]), flush=True)
    if args.report:
        Path(args.report).parent.mkdir(parents=True, exist_ok=True)
        Path(args.report).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
