"""What a batch's verify forward costs when only some rows propose drafts: the options of
adaptive speculation's "rows that propose nothing do not pay for the others' width".

On the default target (1 torch thread, 8 rows over a 256-token cache, medians of interleaved
timings), for p of the 8 rows proposing w drafts and the rest none:

* padded: one forward of 8 rows x (w + 1) positions (what the engine does);
* split: the p rows at w + 1 positions, then the other rows at 1 position (two forwards);
* flattened (lower bound): one forward over p (w + 1) + (8 - p) positions of a single row, what a
  packed forward with a block mask over the ragged cache would multiply (it leaves out the mask
  and the gathers such a forward needs, so it is the best that option could do).

    python bench/ops/ragged_options.py [--repeats 7] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from selfjudge.engine.cache import RaggedCache
from selfjudge.models.pair import load_pair
from selfjudge.writes import write_json
from selfjudge.timing import alternating


def timed_forward(cache: RaggedCache, rows: int, positions: int, V: int, generator) -> float:
    """Seconds of one forward of ``positions`` new tokens on every row of ``cache``, rolled back after."""
    fed = torch.randint(0, V, (rows, positions), generator=generator)  # [B, T]
    start = time.perf_counter()
    logits = cache.feed(fed, logits_to_keep=positions).logits  # [B, T, V]
    logits.argmax(-1)
    seconds = time.perf_counter() - start
    cache.rollback(torch.zeros(rows, dtype=torch.long), positions, 0)
    return seconds


@torch.inference_mode()
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--out", default=None, help="also write the table as JSON here")
    args = ap.parse_args()
    torch.set_num_threads(1)
    target = load_pair("smollm2-135m").target
    V, g, B = int(target.config.vocab_size), torch.Generator().manual_seed(0), 8
    caches = {}
    for rows in range(1, B + 1):
        caches[rows] = RaggedCache(target, rows, torch.device("cpu"))
        caches[rows].feed(torch.randint(0, V, (rows, args.context), generator=g))
    shapes = sorted({(B, 1)} | {(r, t) for p in (1, 2, 4) for w in (1, 2, 3, 4)
                     for r, t in ((B, w + 1), (p, w + 1), (B - p, 1), (1, p * (w + 1) + B - p))})
    times: dict[tuple[int, int], list[float]] = {s: [] for s in shapes}
    for r in range(args.repeats + 1):  # a warm-up round, then alternating orders
        for rows, t in alternating(shapes, r):
            seconds = timed_forward(caches[rows], rows, t, V, g)
            if r:
                times[rows, t].append(seconds)
    ms = {s: 1000 * statistics.median(v) for s, v in times.items()}
    table = []
    print(f"{'p rows':>6} {'w':>2} {'padded ms':>10} {'split ms':>9} {'flat >= ms':>10}")
    for p in (1, 2, 4):
        for w in (1, 2, 3, 4):
            row = {"proposing_rows": p, "width": w, "padded_ms": ms[B, w + 1],
                   "split_ms": ms[p, w + 1] + ms[B - p, 1], "flattened_lower_bound_ms": ms[1, p * (w + 1) + B - p]}
            table.append(row)
            print(f"{p:6d} {w:2d} {row['padded_ms']:10.1f} {row['split_ms']:9.1f} {row['flattened_lower_bound_ms']:10.1f}")
    print(f"(plain step of {B} rows: {ms[B, 1]:.1f} ms)")
    if args.out:
        write_json(args.out, {"context": args.context, "repeats": args.repeats, "rows": B, "table": table,
                              "plain_step_ms": ms[B, 1]})


if __name__ == "__main__":
    main()
