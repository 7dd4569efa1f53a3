"""The main job on the built-in default pair (``selfjudge demo``), in a few minutes on a CPU.

Prepares SmolLM2-135M-Instruct and its default drafter (first run only), loads the shipped
SelfJudge verifier of an open-ended task the pair can do (summarisation by default: no answer
checker could label it), decodes a handful of its evaluation prompts with target-only decoding,
standard speculative decoding, SelfJudge at a quality budget (the loosest threshold whose
validation curve keeps semantic fidelity >= 0.97), the best training-free rule within the
same budget, and SelfJudge at a looser named threshold (``R`` by default: what the judge buys
when the budget is given up, and at what semantic cost, since at a strict budget the judge may
accept nothing on a handful of prompts). Policies are interleaved prompt by prompt, so the ratios
survive a noisy machine. It returns every figure: a row per policy (speed, m, judge-only tokens, semantic similarity and
ROUGE-L to the target's own output), the completions with the source of each token, and one
sample completion split into pieces (the judge-only ones flagged) for the command line to
mark. :func:`plot_demo` draws the PNG.
"""

from __future__ import annotations

import logging
import math
import platform
import time
from pathlib import Path

from selfjudge.builtin import DEFAULT_PAIR
from selfjudge.models.fingerprint import target_fingerprint
from selfjudge.writes import save_figure

_log = logging.getLogger(__name__)


def _verifier(pair: str, task: str, verifier_path: str | None, drafter: str, hidden_size: int):
    from selfjudge.judge import load_verifier
    from selfjudge.judge.verifier import shipped_verifier_for

    path = verifier_path or shipped_verifier_for("selfjudge", pair, (task,), drafter)
    if path is None:
        raise ValueError(f"pair: no shipped SelfJudge verifier for {pair!r}; pass verifier_path")
    return load_verifier(path, expect_model=pair, expect_hidden_size=hidden_size,
                         expect_fingerprint=target_fingerprint(pair)), path


def best_rule_at_budget(metadata: dict, budget: float, K: int):
    """The training-free rule whose validation curve reaches the largest m within ``budget``:
    ``(config name, engine policy)``, or None when no rule's curve stays within it."""
    from selfjudge.evaluation.matrix import RULE_SWEEPS, Config, rule_policy
    from selfjudge.judge.budget import point_within_budget

    best = None
    for family, points in ((metadata.get("validation") or {}).get("curves") or {}).items():
        policy = next((pol for fam, pol, _ in RULE_SWEEPS.values() if fam == family and pol in
                       ("typical", "relaxed", "fly")), None)
        point = point_within_budget(points, budget) if policy else None
        if point is not None and (best is None or point["m"] > best[1]["m"]):
            best = (Config(point["name"], family, policy, K, params=tuple(point["params"].items())), point)
    return None if best is None else (best[0].name, rule_policy(best[0]))


def _engines(k: int | None, threshold, verifier, budget: float, target, draft, tokenizer, loose=None):
    """The demo's engines: target-only, standard SD, SelfJudge at ``threshold``, when the verifier's
    validation curves name one the best training-free rule within the same quality budget, and
    SelfJudge at the ``loose`` threshold (None, or the same as ``threshold``: not run)."""
    from selfjudge.engine import SpeculativeEngine

    common = dict(num_draft_tokens=k)
    engines = {
        "target-only": SpeculativeEngine(target, None, tokenizer, policy="autoregressive", **common),
        "standard SD": SpeculativeEngine(target, draft, tokenizer, policy="standard", **common),
        f"SelfJudge-{threshold}": SpeculativeEngine(
            target, draft, tokenizer, policy="judge", verifier=verifier, threshold=threshold, **common
        ),
    }
    rule = best_rule_at_budget(verifier.metadata, budget, k or 4)
    if rule is not None:
        engines[rule[0]] = SpeculativeEngine(target, draft, tokenizer, policy=rule[1], **common)
    if loose is not None and str(loose) != str(threshold):
        engines[f"SelfJudge-{loose}"] = SpeculativeEngine(
            target, draft, tokenizer, policy="judge", verifier=verifier, threshold=loose, **common)
    return engines, (rule[0] if rule else None)


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
    colors = ["grey", "tab:blue", "tab:green", "tab:brown", "tab:olive"][: len(rows)]
    a.bar(names, [r["tokens_per_s"] for r in rows], color=colors)
    a.set_ylabel("tokens/s")
    a.set_title("throughput (batch 1, CPU)")
    b.bar(names, [r["mean_accepted_length"] for r in rows], color=colors)
    b.set_ylabel("mean accepted length m")
    b.set_title("tokens per target forward")
    for ax in (a, b):
        ax.tick_params(axis="x", labelrotation=15)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    plt.close(fig)


def run_demo(pair: str = DEFAULT_PAIR, *, task: str = "summarize", prompts: int = 6, max_new_tokens: int = 96,
             k: int | None = None, budget: float = 0.97, threshold: str | float | None = None, verifier_path: str | None = None,
             drafter: str | None = None, eagle_dir: str | None = None, device: str = "auto",
             dtype: str = "auto", loose_threshold: str | float | None = "R") -> dict:
    """Run the comparison; returns every figure as a JSON-ready dict (``sample`` holds the
    pieces of the completion with the most judge-only tokens). SelfJudge runs at ``threshold``,
    by default ``"quality:<budget>"`` (the loosest threshold its validation curve keeps at semantic
    fidelity >= ``budget``), beside the best training-free rule within the same budget and SelfJudge at
    ``loose_threshold`` (None: not run).
    ``k``: a fixed number of drafts per cycle, None: adaptive speculation (0..4 per row each cycle).
    ``device`` / ``dtype``: see :func:`selfjudge.models.load_pair`."""
    import torch

    from selfjudge.evaluation.block_run import TaskScorer
    from selfjudge.models import load_pair
    from selfjudge.models.pair import default_drafter
    from selfjudge.tasks import load_task

    if prompts < 1:
        raise ValueError(f"prompts must be >= 1, got {prompts}")
    if not 0 < budget <= 1:
        raise ValueError(f"budget must lie in (0, 1], got {budget}")
    t_start = time.time()
    drafter = drafter or default_drafter(pair)
    threshold = threshold if threshold is not None else f"quality:{budget:g}"
    # the pair's draft slot holds what drafts (no draft model is assembled for prompt lookup or a head)
    target, draft, tokenizer = load_pair(pair, eagle_dir if drafter == "eagle" else None, device=device, dtype=dtype,
                                         drafter=drafter)
    verifier, verifier_used = _verifier(pair, task, verifier_path, drafter, target.config.hidden_size)
    engines, rule_name = _engines(k, threshold, verifier, budget, target, draft, tokenizer, loose_threshold)
    the_task = load_task(task)
    examples = the_task.examples("eval", limit=prompts)
    texts = [the_task.build_prompt(tokenizer, ex) for ex in examples]
    results = _decode_interleaved(engines, texts, max_new_tokens)
    rows = _rows(results, TaskScorer(the_task, target, tokenizer))
    # the sample: the completion with the most judge-only tokens, over the SelfJudge rows
    judge_names = [n for n in engines if n.startswith("SelfJudge-")]
    judge_name, best = max(((n, j) for n in judge_names for j in range(len(examples))),
                           key=lambda nj: results[nj[0]][nj[1]].stats.judge_accepted)
    sample = results[judge_name][best]
    return {
        "pair": pair, "task": task, "drafter": drafter, "eagle": eagle_dir, "k": k, "max_new_tokens": max_new_tokens,
        "verifier": verifier_used, "threshold": threshold,
        "judge_threshold_logit": _finite_or_none(verifier.threshold(threshold)),
        "budget": budget, "rule_at_budget": rule_name, "prompt_ids": [e.prompt_id for e in examples], "rows": rows,
        "completions": {n: [r.text for r in res] for n, res in results.items()},
        "token_ids": {n: [r.token_ids for r in res] for n, res in results.items()},
        "token_sources": {n: [r.token_sources for r in res] for n, res in results.items()},
        "sample": {"policy": judge_name, "prompt_id": examples[best].prompt_id,
                   "judge_accepted": sample.stats.judge_accepted, "pieces": sample_pieces(tokenizer, sample)},
        "environment": {"python": platform.python_version(), "torch": torch.__version__,
                        "threads": torch.get_num_threads(), "cpu": platform.processor() or platform.machine()},
        "total_s": time.time() - t_start,
    }


def _finite_or_none(x: float) -> float | None:
    """JSON has no infinity: a threshold no logit passes (nothing within the budget) is written as null."""
    return x if math.isfinite(x) else None


def _decode_interleaved(engines: dict, texts: list[str], max_new_tokens: int) -> dict[str, list]:
    """Every engine on prompt i, then every engine on prompt i+1 (a noisy machine favours no
    policy), after one untimed warm-up call each."""
    for engine in engines.values():
        engine.generate([texts[0]], max_new_tokens=min(8, max_new_tokens))
    results = {name: [] for name in engines}
    for i, text in enumerate(texts):
        for name, engine in engines.items():
            r = engine.generate([text], max_new_tokens=max_new_tokens)[0]
            results[name].append(r)
            _log.info(f"[{i + 1}/{len(texts)}] {name:<14} {r.stats.new_tokens:4d} tokens "
                      f"{r.stats.wall_time:6.2f} s  m={r.stats.mean_accepted_length:.2f}")
    return results


def _rows(results: dict[str, list], scorer) -> list[dict]:
    """One row per policy: speed, m, judge-only tokens and closeness to the target-only outputs."""
    from selfjudge.engine import aggregate_stats

    reference = [r.text for r in results["target-only"]]
    rows = []
    for name, res in results.items():
        agg = aggregate_stats([r.stats for r in res])
        tokens = sum(r.stats.new_tokens for r in res)
        wall = sum(r.stats.wall_time for r in res)
        semantic = scorer.semantic([r.text for r in res], reference)
        rows.append({
            "policy": name, "new_tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / wall if wall else 0.0,
            "mean_accepted_length": agg.mean_accepted_length, "judge_accepted_tokens": agg.judge_accepted,
            "semantic_fidelity": sum(semantic) / len(semantic),
            "rouge_l_vs_target": sum(scorer.rouge(r.text, ref) for r, ref in zip(res, reference)) / len(res),
            "per_prompt_semantic": semantic,
        })
    base = rows[0]["tokens_per_s"]
    for row in rows:
        row["speedup_vs_target_only"] = row["tokens_per_s"] / base if base else 0.0
    return rows
