"""Target-only task scores of a built-in pair's target, with 95 % bootstrap intervals over prompts.

    python bench/studies/pair_task_metrics.py --out bench/results/qwen-pair/task-metrics \\
        --tasks gsm8k humaneval sharegpt --limits 96 100 32

Greedy, the engine's target-only decoding (``policy="autoregressive"``) at ``--batch-size`` rows,
the pair's default dtype (bf16 on a CPU with bf16 matmuls), each task's own prompt format
(:meth:`selfjudge.tasks.Task.build_prompt`) and new-token cap, the evaluation split. Scores:
GSM8K's final-answer accuracy, HumanEval's pass@1 in the project's sandbox, and for ShareGPT (no
answer to check) the target's own mean per-token log-likelihood of its output. Every batch is a
block file written when it finishes; a rerun skips finished blocks and rebuilds ``results.json``
and ``README.md``'s table.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

PAIR = "qwen2.5-coder-1.5b"
#: published figures of the pair's target to set beside ours (source in the README)
PUBLISHED = {("qwen2.5-coder-1.5b", "humaneval"): ("70.7", "Qwen2.5-Coder technical report (arXiv 2409.12186)")}


def run_block(engine, task, examples, tokenizer, max_new_tokens: int) -> dict:
    prompts = [task.build_prompt(tokenizer, ex) for ex in examples]
    ids = [tokenizer(p, add_special_tokens=False).input_ids for p in prompts]
    t0 = time.perf_counter()
    results = engine.generate(ids, max_new_tokens=max_new_tokens)
    seconds = time.perf_counter() - t0
    rows = []
    for ex, prompt, res in zip(examples, prompts, results):
        score = task.task_score(res.text, ex, model=engine.target, tokenizer=tokenizer, prompt=prompt,
                                token_ids=list(res.token_ids))  # ShareGPT: the target's own mean log-likelihood
        rows.append({"prompt_id": ex.prompt_id, "tokens": len(res.token_ids), "text": res.text,
                     "finish_reason": res.stats.finish_reason, "score": float(score)})
    return {"seconds": seconds, "tokens": sum(r["tokens"] for r in rows), "rows": rows}


def task_metric(name: str) -> str:
    return {"gsm8k": "accuracy", "humaneval": "pass@1"}.get(name, "mean log-likelihood per token")


def summarise(out: Path, tasks: list[str]) -> dict:
    from selfjudge.evaluation.pareto import mean_interval

    summary = {}
    for name in tasks:
        rows = [r for p in sorted((out / "blocks").glob(f"{name}-*.json")) for r in json.loads(p.read_text())["rows"]]
        blocks = [json.loads(p.read_text()) for p in sorted((out / "blocks").glob(f"{name}-*.json"))]
        values = [r["score"] for r in rows if r["score"] == r["score"]]  # NaN: an empty ShareGPT answer
        if not values:
            continue
        ci = mean_interval(values)
        tokens, seconds = sum(b["tokens"] for b in blocks), sum(b["seconds"] for b in blocks)
        summary[name] = {"metric": task_metric(name),
                         "prompts": len(values), "mean": ci["mean"], "low": ci["low"], "high": ci["high"],
                         "mean_new_tokens": tokens / len(rows), "tokens_per_s": tokens / seconds,
                         "hit_cap": sum(r["finish_reason"] == "length" for r in rows)}
    return summary


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--pair", default=PAIR)
    p.add_argument("--tasks", nargs="+", default=["gsm8k", "humaneval", "sharegpt"])
    p.add_argument("--limits", nargs="+", type=int, default=[96, 100, 32], help="eval prompts per task, in order")
    p.add_argument("--batch-size", type=int, default=8)
    args = p.parse_args(argv)
    if len(args.limits) != len(args.tasks):
        p.error("--limits needs one count per task")
    from selfjudge.engine import SpeculativeEngine
    from selfjudge.models import load_pair
    from selfjudge.tasks import load_task

    target, _, tokenizer = load_pair(args.pair, drafter="prompt-lookup")
    engine = SpeculativeEngine(target, None, tokenizer, policy="autoregressive")
    (args.out / "blocks").mkdir(parents=True, exist_ok=True)
    for name, limit in zip(args.tasks, args.limits):
        task = load_task(name)
        examples = task.examples("eval", limit)
        for start in range(0, len(examples), args.batch_size):
            path = args.out / "blocks" / f"{name}-{start:04d}.json"
            if path.exists():
                continue
            block = run_block(engine, task, examples[start:start + args.batch_size], tokenizer, task.max_new_tokens)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(block))
            tmp.replace(path)
            print(f"{name} {start + len(block['rows'])}/{len(examples)}: {block['tokens'] / block['seconds']:.1f} tok/s",
                  flush=True)
    summary = summarise(args.out, args.tasks)
    record = {"pair": args.pair, "dtype": str(target.dtype).replace("torch.", ""), "batch_size": args.batch_size,
              "command": "python bench/studies/pair_task_metrics.py " + shlex.join(argv), "tasks": summary,
              "published": {t: PUBLISHED.get((args.pair, t)) for t in args.tasks}}
    (args.out / "results.json").write_text(json.dumps(record, indent=1))
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
