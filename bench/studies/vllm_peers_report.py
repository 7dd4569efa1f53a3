"""Tables of the peer run (``vllm_peers_run.py``): per task and concurrency, each
method's tokens/s and its ratio to vLLM plain (paired bootstrap over generate calls), mean
accepted length per drafted step (vLLM's definition: 1 + accepted / steps with drafts),
per-position acceptance, judge-only tokens, and fidelity to the same engine's own target-only
output (semantic similarity with a bootstrap interval over prompts, ROUGE-L, identical outputs).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from selfjudge.evaluation.pareto import mean_interval, paired_ratio_interval
from vllm_peers_run import REFERENCE, add_elementwise  # a sibling in bench/studies/
from selfjudge.writes import own_files, write_json, write_text

BASELINES = {"vs_vllm_plain": "vllm plain", "vs_vllm_ngram": "vllm ngram"}  # speed ratios, paired by call


def read_blocks(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in own_files(folder, "*.json")]


def speed_ratio(groups: list[tuple[int, float, int, float]], n_boot: int = 2000, seed: int = 0) -> dict:
    """tokens/s of a method over the baseline's on the same generate calls, each ``(tokens,
    seconds, baseline tokens, baseline seconds)``; percentile interval over resampled calls."""
    ci = paired_ratio_interval(groups, n_boot, seed=seed) or {"ratio": float("nan"), "low": float("nan"),
                                                              "high": float("nan")}
    return {"ratio": ci["ratio"], "low": ci["low"], "high": ci["high"], "calls": len(groups)}


def summarise(blocks: list[dict[str, Any]], similarity=None, rouge=None) -> list[dict[str, Any]]:
    """One row per (task, concurrency, method). ``similarity(texts, refs) -> list[float]`` and
    ``rouge(text, ref) -> float`` default to the package's MiniLM cosine and ROUGE-L."""
    if similarity is None:
        from selfjudge.tasks.semantic import semantic_similarity as similarity
    if rouge is None:
        from selfjudge.tasks.metrics import rouge_l as rouge
    rows = []
    for (task, concurrency), group in sorted(_grouped(blocks).items()):
        methods = [m for m in group[0]["methods"] if all(m in b["methods"] for b in group)]
        for method in methods:
            rows.append(_row(task, concurrency, method, group, similarity, rouge))
    return rows


def _grouped(blocks):
    out: dict[tuple[str, int], list[dict]] = {}
    for b in blocks:
        out.setdefault((b["task"], b["concurrency"]), []).append(b)
    return out


def _row(task, concurrency, method, group, similarity, rouge) -> dict[str, Any]:
    reference = REFERENCE[method]
    texts = [t for b in group for t in b["texts"][method]]
    ids = [t for b in group for t in b["methods"][method]["token_ids"]]
    ref_texts = [t for b in group for t in b["texts"][reference]]
    ref_ids = [t for b in group for t in b["methods"][reference]["token_ids"]]
    ratios = {key: speed_ratio(_paired_calls(group, method, base)) for key, base in BASELINES.items()
              if all(base in b["methods"] for b in group)}
    calls = _paired_calls(group, method, method)
    counts = _counts(group, method)
    semantic = similarity(texts, ref_texts)
    tokens, seconds = sum(c[0] for c in calls), sum(c[1] for c in calls)
    return {"task": task, "concurrency": concurrency, "method": method, "reference": reference,
            "prompts": len(texts), "new_tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds,
            **ratios, **counts,
            "semantic_fidelity": mean_interval(semantic), "per_prompt_semantic": semantic,
            "rouge_l": sum(rouge(t, r) for t, r in zip(texts, ref_texts)) / len(texts),
            "identical_outputs": sum(a == b for a, b in zip(ids, ref_ids))}


def _paired_calls(group, method, baseline) -> list[tuple[int, float, int, float]]:
    """Per generate call: (tokens, seconds) of ``method`` and of ``baseline`` on the same prompts."""
    calls = []
    for b in group:
        own, base = b["methods"][method], b["methods"][baseline]
        size = len(own["token_ids"]) // len(own["seconds"])
        for j, (sec, bsec) in enumerate(zip(own["seconds"], base["seconds"])):
            tok = sum(len(t) for t in own["token_ids"][j * size:(j + 1) * size])
            btok = sum(len(t) for t in base["token_ids"][j * size:(j + 1) * size])
            calls.append((tok, sec, btok, bsec))
    return calls


def _counts(group, method) -> dict[str, Any]:
    drafts = accepted = judge_only = 0
    per_position: list[int] = []
    for b in group:
        spec = b["methods"][method].get("spec_decode") or {}
        drafts += spec.get("num_drafts", 0)
        accepted += spec.get("num_accepted_tokens", 0)
        judge_only += spec.get("judge_only_total", 0)
        plugin = b["methods"][method].get("plugin") or {}
        judge_only += plugin.get("judge_only_total", 0)
        per_position = add_elementwise(per_position, spec.get("accepted_per_position", []))
    return {"steps_with_drafts": drafts, "accepted_tokens": accepted, "judge_only_tokens": judge_only,
            "m_drafted": 1 + accepted / drafts if drafts else 1.0,
            "acceptance_by_position": [a / drafts for a in per_position] if drafts else []}


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| task | seqs | method | tok/s | x vLLM plain [95% CI] | x vLLM ngram [95% CI] | m (drafted steps) "
             "| acceptance by position | judge-only | semantic [95% CI] | ROUGE-L | identical |", "|" + "---|" * 12]
    for r in rows:
        s = r["semantic_fidelity"]
        pos = " / ".join(f"{a:.2f}" for a in r["acceptance_by_position"]) or "-"
        lines.append(f"| {r['task']} | {r['concurrency']} | {r['method']} | {r['tokens_per_s']:.1f} | "
                     f"{_ratio(r.get('vs_vllm_plain'))} | {_ratio(r.get('vs_vllm_ngram'))} | {r['m_drafted']:.2f} | {pos} | "
                     f"{r['judge_only_tokens']} | {s['mean']:.3f} [{s['low']:.3f}, {s['high']:.3f}] | "
                     f"{r['rouge_l']:.3f} | {r['identical_outputs']}/{r['prompts']} |")
    return "\n".join(lines) + "\n"


def _ratio(v: dict | None) -> str:
    return "-" if v is None else f"{v['ratio']:.2f} [{v['low']:.2f}, {v['high']:.2f}]"


def write_report(folder: Path) -> list[dict[str, Any]]:
    """``results.json`` and ``results.md`` beside ``folder``'s ``blocks/``."""
    folder = Path(folder)
    rows = summarise(read_blocks(folder / "blocks"))
    write_json(folder / "results.json", rows)
    write_text(folder / "results.md", markdown(rows))
    return rows
