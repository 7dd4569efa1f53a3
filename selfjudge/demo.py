"""``selfjudge demo``: the main job on the built-in default pair, in a few minutes on a CPU.

Prepares SmolLM2-135M-Instruct and its shipped draft (first run only), loads the
shipped SelfJudge verifier, decodes a handful of GSM8K evaluation prompts with
target-only decoding, standard speculative decoding and SelfJudge (policies
interleaved prompt by prompt, so the ratios survive a noisy machine), prints one
table and one sample completion with the judge-accepted tokens marked, and writes
a JSON of every figure and a PNG plot.
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path

JUDGE_MARK = ("\033[1;32m", "\033[0m")  # green: accepted by the judge only


def register(subparsers) -> None:
    p = subparsers.add_parser("demo", help="compare target-only, standard SD and SelfJudge on GSM8K prompts")
    p.add_argument("--pair", default="smollm2-135m")
    p.add_argument("--prompts", type=int, default=4, help="GSM8K evaluation prompts")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("-k", type=int, default=4, help="draft tokens per cycle")
    p.add_argument("--threshold", default="R", help="verifier threshold: name (R = reject 90 %% of harmful swaps, F, ...) or logit value")
    p.add_argument("--verifier", default=None, help="verifier file (default: the shipped SelfJudge one)")
    p.add_argument("--out", type=Path, default=Path("selfjudge-demo"), help="folder for demo.json and demo.png")
    p.add_argument("--no-color", action="store_true")
    p.set_defaults(func=_main)


def _policies(args, target, draft, tokenizer):
    from selfjudge.engine import SpeculativeEngine
    from selfjudge.judge import load_verifier
    from selfjudge.judge.verifier import shipped_verifier_path

    path = args.verifier or shipped_verifier_path("selfjudge", args.pair, "gsm8k")
    verifier = load_verifier(path, expect_hidden_size=target.config.hidden_size)
    threshold = args.threshold
    try:
        threshold = float(threshold)
    except ValueError:
        pass  # a named threshold
    common = dict(num_draft_tokens=args.k)
    return {
        "target-only": SpeculativeEngine(target, None, tokenizer, policy="autoregressive", **common),
        "standard SD": SpeculativeEngine(target, draft, tokenizer, policy="standard", **common),
        f"SelfJudge-{args.threshold}": SpeculativeEngine(
            target, draft, tokenizer, policy="judge", verifier=verifier, threshold=threshold, **common
        ),
    }, path


def _marked(tokenizer, result, color: bool) -> str:
    """The completion with judge-only accepted tokens marked (green, or [[...]] without colour)."""
    sources = result.token_sources
    if not sources:
        return result.text
    on, off = JUDGE_MARK if color else ("[[", "]]")
    parts = []
    for tok, src in zip(result.token_ids, sources):
        piece = tokenizer.decode([tok], skip_special_tokens=True)
        parts.append(f"{on}{piece}{off}" if src == "judge" and piece else piece)
    return "".join(parts)


def _plot(rows, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.5))
    names = [r["policy"] for r in rows]
    a.bar(names, [r["tokens_per_s"] for r in rows], color=["grey", "tab:blue", "tab:green"][: len(rows)])
    a.set_ylabel("tokens/s")
    a.set_title("throughput (batch 1, CPU)")
    b.bar(names, [r["mean_accepted_length"] for r in rows], color=["grey", "tab:blue", "tab:green"][: len(rows)])
    b.set_ylabel("mean accepted length m")
    b.set_title("tokens per target forward")
    for ax in (a, b):
        ax.tick_params(axis="x", labelrotation=15)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run_demo(args) -> dict:
    """Run the comparison and return every figure (also written to ``args.out``/demo.json)."""
    import torch

    from selfjudge.engine import aggregate_stats
    from selfjudge.models import load_pair
    from selfjudge.tasks import load_task

    t_start = time.time()
    target, draft, tokenizer = load_pair(args.pair)
    engines, verifier_path = _policies(args, target, draft, tokenizer)
    task = load_task("gsm8k")
    examples = task.examples("eval", limit=args.prompts)
    prompts = [task.build_prompt(tokenizer, ex) for ex in examples]

    # untimed warm-up: first calls pay one-off allocation and dispatch costs that belong to no policy
    for engine in engines.values():
        engine.generate([prompts[0]], max_new_tokens=min(8, args.max_new_tokens))

    results = {name: [] for name in engines}
    for i, prompt in enumerate(prompts):  # interleaved: every policy on prompt i, then prompt i+1
        for name, engine in engines.items():
            r = engine.generate([prompt], max_new_tokens=args.max_new_tokens)[0]
            results[name].append(r)
            print(f"[{i + 1}/{len(prompts)}] {name:<14} {r.stats.new_tokens:4d} tokens "
                  f"{r.stats.wall_time:6.2f} s  m={r.stats.mean_accepted_length:.2f}", flush=True)

    reference = [r.text for r in results["target-only"]]
    rows = []
    for name, res in results.items():
        agg = aggregate_stats([r.stats for r in res])
        tokens = sum(r.stats.new_tokens for r in res)
        wall = sum(r.stats.wall_time for r in res)
        rows.append({
            "policy": name,
            "new_tokens": tokens,
            "wall_s": wall,
            "tokens_per_s": tokens / wall if wall else 0.0,
            "mean_accepted_length": agg.mean_accepted_length,
            "judge_accepted_tokens": agg.judge_accepted,
            "accuracy": sum(task.score(r.text, ex) for r, ex in zip(res, examples)) / len(examples),
            "agreement_with_target": sum(
                task.same_answer(r.text, ref, ex) for r, ref, ex in zip(res, reference, examples)
            ) / len(examples),
        })
    base = rows[0]["tokens_per_s"]
    for row in rows:
        row["speedup_vs_target_only"] = row["tokens_per_s"] / base if base else 0.0

    print()
    print(f"{'policy':<14} {'tok/s':>7} {'speed-up':>8} {'m':>6} {'judge tok':>9} {'GSM8K acc':>9} {'agree':>6}")
    for r in rows:
        print(f"{r['policy']:<14} {r['tokens_per_s']:7.2f} {r['speedup_vs_target_only']:7.2f}x "
              f"{r['mean_accepted_length']:6.2f} {r['judge_accepted_tokens']:9d} "
              f"{r['accuracy']:9.2f} {r['agreement_with_target']:6.2f}")
    judge_name = list(engines)[-1]
    sample = max(range(len(examples)), key=lambda j: results[judge_name][j].stats.judge_accepted)
    marks = "in [[...]]" if args.no_color else "in green"
    marked = "judge" in results[judge_name][sample].token_sources
    print(f"\nSample ({examples[sample].prompt_id}), {judge_name}, "
          f"{results[judge_name][sample].stats.judge_accepted} tokens accepted by the judge only"
          f"{' (' + marks + ')' if marked else ''}:\n")
    print(_marked(tokenizer, results[judge_name][sample], color=not args.no_color))

    args.out.mkdir(parents=True, exist_ok=True)
    report = {
        "pair": args.pair, "k": args.k, "max_new_tokens": args.max_new_tokens, "verifier": verifier_path,
        "threshold": args.threshold, "prompt_ids": [e.prompt_id for e in examples], "rows": rows,
        "completions": {n: [r.text for r in res] for n, res in results.items()},
        "token_ids": {n: [r.token_ids for r in res] for n, res in results.items()},
        "token_sources": {n: [r.token_sources for r in res] for n, res in results.items()},
        "environment": {"python": platform.python_version(), "torch": torch.__version__,
                        "threads": torch.get_num_threads(), "cpu": platform.processor() or platform.machine()},
        "total_s": time.time() - t_start,
    }
    (args.out / "demo.json").write_text(json.dumps(report, indent=2))
    _plot(rows, args.out / "demo.png")
    print(f"\nwrote {args.out / 'demo.json'} and {args.out / 'demo.png'} ({report['total_s']:.0f} s in all)")
    return report


def _main(args) -> int:
    run_demo(args)
    return 0
