"""Quick probe of adaptive speculation: target-only, fixed K=3 and adaptive (num_draft_tokens=None),
interleaved group by group on one task's evaluation prompts (96 new tokens, 1 torch thread); prints
tokens/s ratios, the controller's choices per group and whether the greedy outputs equal target-only's.

    python bench/studies/adaptive_probe.py TASK BATCH PROMPTS      (e.g. summarize 8 16)
"""

from __future__ import annotations

import argparse
import time

import torch

from selfjudge.engine import SpeculativeEngine
from selfjudge.models.pair import load_pair
from selfjudge.tasks import load_task
from selfjudge.timing import alternating


def probe(task_name: str, batch: int, prompts: int, max_new_tokens: int = 96) -> None:
    """Decode the prompts with the three engines in alternating order per group and print the figures."""
    pair = load_pair("smollm2-135m")
    task = load_task(task_name)
    texts = [task.build_prompt(pair.tokenizer, e) for e in task.examples("eval", prompts)]
    engines = {"target": SpeculativeEngine(pair.target, None, pair.tokenizer, policy="autoregressive"),
               "K3": SpeculativeEngine(pair.target, pair.draft, pair.tokenizer, 3),
               "adaptive": SpeculativeEngine(pair.target, pair.draft, pair.tokenizer)}
    engines["adaptive"].generate(texts[:batch], max_new_tokens=4)  # the cost profile, once
    seconds, tokens, outputs = ({name: 0.0 for name in engines}, {name: 0 for name in engines},
                                {name: [] for name in engines})
    for start in range(0, len(texts), batch):
        for name in alternating(list(engines), start // batch):
            t0 = time.perf_counter()
            results = engines[name].generate(texts[start:start + batch], max_new_tokens=max_new_tokens)
            seconds[name] += time.perf_counter() - t0
            tokens[name] += sum(len(r.token_ids) for r in results)
            outputs[name] += [(start, r.token_ids) for r in results]
            if name == "adaptive":
                st = engines[name].last_batch_stats
                print(start, "m", round(st.mean_accepted_length, 2), "drafts verified", st.drafts_verified,
                      "expected", round(st.expected_accepted, 1), "kept", st.accepted_tokens, flush=True)
    base = tokens["target"] / seconds["target"]
    for name in engines:
        rate = tokens[name] / seconds[name]
        print(f"{name}: {rate:.2f} tok/s, {rate / base:.3f}x target-only")
    print("same tokens as target-only:", sorted(outputs["adaptive"]) == sorted(outputs["target"]),
          sorted(outputs["K3"]) == sorted(outputs["target"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("task")
    ap.add_argument("batch", type=int)
    ap.add_argument("prompts", type=int)
    args = ap.parse_args()
    torch.set_num_threads(1)
    probe(args.task, args.batch, args.prompts)


if __name__ == "__main__":
    main()
