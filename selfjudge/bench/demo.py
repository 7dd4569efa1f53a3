"""The main job on the built-in default pair (``selfjudge demo``), in a few minutes on a CPU.

Prepares SmolLM2-135M-Instruct and its shipped draft (first run only), loads the
shipped SelfJudge verifier, decodes a handful of GSM8K evaluation prompts with
target-only decoding, standard speculative decoding and SelfJudge (policies
interleaved prompt by prompt, so the ratios survive a noisy machine), and
returns every figure: a row per policy, the completions with the source of
each token, and one sample completion split into pieces (the judge-only ones
flagged) for the command line to mark. :func:`plot_demo` draws the PNG.
"""

from __future__ import annotations

import logging
import platform
import time
from pathlib import Path

_log = logging.getLogger(__name__)


def _engines(pair: str, k: int, threshold, verifier_path: str | None, target, draft, tokenizer,
             drafter: str = "model"):
    """The three engines of the demo (``draft``: a draft model or a drafter; ``drafter``: its kind,
    which picks the shipped verifier trained on that drafter's mismatches)."""
    from selfjudge.engine import SpeculativeEngine
    from selfjudge.judge import load_verifier
    from selfjudge.judge.verifier import shipped_verifier_for

    path = verifier_path or shipped_verifier_for("selfjudge", pair, ("gsm8k",), drafter)
    if path is None:
        raise ValueError(f"pair: no shipped SelfJudge verifier for {pair!r}; pass verifier_path")
    verifier = load_verifier(path, expect_model=pair, expect_hidden_size=target.config.hidden_size)
    common = dict(num_draft_tokens=k)
    return {
        "target-only": SpeculativeEngine(target, None, tokenizer, policy="autoregressive", **common),
        "standard SD": SpeculativeEngine(target, draft, tokenizer, policy="standard", **common),
        f"SelfJudge-{threshold}": SpeculativeEngine(
            target, draft, tokenizer, policy="judge", verifier=verifier, threshold=threshold, **common
        ),
    }, path


def sample_pieces(tokenizer, result) -> list[tuple[str, bool]]:
    """The completion as (text piece, accepted by the judge only) per token."""
    if not result.token_sources:
        return [(result.text, False)]
    return [(tokenizer.decode([tok], skip_special_tokens=True), src == "judge")
            for tok, src in zip(result.token_ids, result.token_sources)]


def plot_demo(rows: list[dict], path: Path) -> None:
    """Bar charts of tokens/s and mean accepted length per policy, written to ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.5))
    names = [r["policy"] for r in rows]
    colors = ["grey", "tab:blue", "tab:green"][: len(rows)]
    a.bar(names, [r["tokens_per_s"] for r in rows], color=colors)
    a.set_ylabel("tokens/s")
    a.set_title("throughput (batch 1, CPU)")
    b.bar(names, [r["mean_accepted_length"] for r in rows], color=colors)
    b.set_ylabel("mean accepted length m")
    b.set_title("tokens per target forward")
    for ax in (a, b):
        ax.tick_params(axis="x", labelrotation=15)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run_demo(pair: str = "smollm2-135m", *, prompts: int = 4, max_new_tokens: int = 128, k: int = 4,
             threshold: str | float = "R", verifier_path: str | None = None, drafter: str | None = None,
             eagle_dir: str | None = None, device: str = "auto", dtype: str = "auto") -> dict:
    """Run the comparison; returns every figure as a JSON-ready dict (``sample`` holds the
    pieces of the completion with the most judge-only tokens). ``device`` / ``dtype``: see
    :func:`selfjudge.models.load_pair`."""
    import torch

    from selfjudge.engine import aggregate_stats
    from selfjudge.models import load_pair
    from selfjudge.tasks import load_task

    if prompts < 1:
        raise ValueError(f"prompts must be >= 1, got {prompts}")
    t_start = time.time()
    from selfjudge.models.pair import default_drafter

    drafter = drafter or default_drafter(pair)
    # the pair's draft slot holds what drafts (no draft model is assembled for prompt lookup or a head)
    target, draft, tokenizer = load_pair(pair, eagle_dir if drafter == "eagle" else None, device=device, dtype=dtype,
                                         drafter=drafter)
    engines, verifier_used = _engines(pair, k, threshold, verifier_path, target, draft, tokenizer, drafter)
    task = load_task("gsm8k")
    examples = task.examples("eval", limit=prompts)
    texts = [task.build_prompt(tokenizer, ex) for ex in examples]

    # untimed warm-up: first calls pay one-off allocation and dispatch costs that belong to no policy
    for engine in engines.values():
        engine.generate([texts[0]], max_new_tokens=min(8, max_new_tokens))

    results = {name: [] for name in engines}
    for i, text in enumerate(texts):  # interleaved: every policy on prompt i, then prompt i+1
        for name, engine in engines.items():
            r = engine.generate([text], max_new_tokens=max_new_tokens)[0]
            results[name].append(r)
            _log.info(f"[{i + 1}/{len(texts)}] {name:<14} {r.stats.new_tokens:4d} tokens "
                      f"{r.stats.wall_time:6.2f} s  m={r.stats.mean_accepted_length:.2f}")

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

    judge_name = list(engines)[-1]
    best = max(range(len(examples)), key=lambda j: results[judge_name][j].stats.judge_accepted)
    sample = results[judge_name][best]
    return {
        "pair": pair, "drafter": drafter, "eagle": eagle_dir, "k": k, "max_new_tokens": max_new_tokens,
        "verifier": verifier_used,
        "threshold": threshold, "prompt_ids": [e.prompt_id for e in examples], "rows": rows,
        "completions": {n: [r.text for r in res] for n, res in results.items()},
        "token_ids": {n: [r.token_ids for r in res] for n, res in results.items()},
        "token_sources": {n: [r.token_sources for r in res] for n, res in results.items()},
        "sample": {"policy": judge_name, "prompt_id": examples[best].prompt_id,
                   "judge_accepted": sample.stats.judge_accepted, "pieces": sample_pieces(tokenizer, sample)},
        "environment": {"python": platform.python_version(), "torch": torch.__version__,
                        "threads": torch.get_num_threads(), "cpu": platform.processor() or platform.machine()},
        "total_s": time.time() - t_start,
    }
