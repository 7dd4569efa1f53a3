"""Labels per second: one-pass block-masked swap scoring vs naive re-encoding.

Same prompts, same target responses, same mismatches for both methods; the script
asserts that both give the same labels (score > tau) and scores within 1e-3, then
prints one JSON object (and appends it to ``--results`` if given).

    python bench/ops/bench_labelling.py --prompts 4 --window 20            # default pair, GSM8K train
    python bench/ops/bench_labelling.py --tiny --prompts 2                 # smoke test, random tiny Llamas

Timed: only the scoring of the mismatches (generation and the draft pass are shared
and excluded). The naive baseline re-encodes each swapped sequence cut right after
its window (x + y_<i + z_i + the next N-1 tokens), batch 1, plus one forward of x + y
for the original terms -- the cheapest correct re-encoding.
"""

from __future__ import annotations

import argparse
import json
import time

import torch


def _tiny_pair():
    from transformers import LlamaConfig, LlamaForCausalLM

    class Tok:
        pad_token_id, eos_token_id = 0, 3

        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [4 + ord(c) % 200 for c in text]}

        def decode(self, ids):
            return str(ids)

    def make(seed, layers):
        torch.manual_seed(seed)
        cfg = LlamaConfig(vocab_size=204, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                          num_attention_heads=4, num_key_value_heads=2, initializer_range=0.2, eos_token_id=3)
        return LlamaForCausalLM(cfg).eval()

    return make(0, 4), make(1, 1), Tok()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="smollm2-135m")
    ap.add_argument("--draft", default=None)
    ap.add_argument("--task", default="gsm8k")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--window", type=int, default=20)
    ap.add_argument("--tau", type=float, default=0.0)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--tiny", action="store_true", help="random tiny Llamas and synthetic prompts (smoke test)")
    ap.add_argument("--results", default=None, help="append the JSON result line to this file")
    args = ap.parse_args(argv)

    from selfjudge.labelling.naive import naive_score_swaps
    from selfjudge.models.generation import draft_top1, greedy_responses
    from selfjudge.labelling.swap_scoring import score_swaps

    if args.tiny:
        target, draft, tok = _tiny_pair()
        prompts = [tok("question %d: " % k * 6)["input_ids"] for k in range(args.prompts)]
        name = "tiny-random"
    else:
        from selfjudge.models import load_pair
        from selfjudge.tasks import load_task

        target, draft, tok = load_pair(args.target, args.draft, drafter="model")
        task = load_task(args.task)
        exs = task.examples("train", limit=args.prompts)
        prompts = [tok(task.build_prompt(tok, e), add_special_tokens=False)["input_ids"] for e in exs]
        name = args.target
    target.eval()
    draft.eval()
    t0 = time.perf_counter()
    responses = greedy_responses(target, tok, prompts, args.max_new_tokens)
    t_gen = time.perf_counter() - t0
    cases = []
    for p, r in zip(prompts, responses):
        x, y = torch.tensor(p), torch.tensor(r)
        z = torch.tensor(draft_top1(draft, p, r), dtype=torch.long)
        m = torch.nonzero(z != y).flatten()
        cases.append((x, y, m, z[m]))
    n_labels = sum(int(c[2].numel()) for c in cases)
    # warm-up (first-call allocations / kernel selection) so neither method pays it
    x, y, m, zm = cases[0]
    score_swaps(target, x, y, m[:2], zm[:2], args.window)
    naive_score_swaps(target, x, y, m[:2], zm[:2], args.window)

    t0 = time.perf_counter()
    one = [score_swaps(target, x, y, m, zm, args.window) for x, y, m, zm in cases]
    t_one = time.perf_counter() - t0
    t0 = time.perf_counter()
    naive = [naive_score_swaps(target, x, y, m, zm, args.window) for x, y, m, zm in cases]
    t_naive = time.perf_counter() - t0

    s1 = torch.cat([o.scores for o in one])
    s2 = torch.cat([o.scores for o in naive])
    max_diff = float((s1 - s2).abs().max()) if n_labels else 0.0
    same_labels = bool(torch.equal(s1 > args.tau, s2 > args.tau))
    res = {
        "bench": "labelling_one_pass_vs_naive",
        "model": name,
        "prompts": len(prompts),
        "window": args.window,
        "response_tokens": sum(len(r) for r in responses),
        "mismatches": n_labels,
        "generate_seconds": t_gen,
        "one_pass_seconds": t_one,
        "naive_seconds": t_naive,
        "one_pass_labels_per_s": n_labels / t_one,
        "naive_labels_per_s": n_labels / t_naive,
        "speedup": t_naive / t_one,
        "max_abs_score_diff": max_diff,
        "same_labels": same_labels,
        "positive_fraction": float((s1 > args.tau).float().mean()) if n_labels else None,
        "torch_threads": torch.get_num_threads(),
    }
    line = json.dumps(res)
    print(line)
    if args.results:
        with open(args.results, "a", encoding="utf-8") as f:
            f.write(line + "\n")
    assert same_labels, "one-pass and naive labels differ"
    assert max_diff < 1e-3, f"one-pass and naive scores differ by {max_diff}"
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
