"""One bench block: every configuration on every prompt group of one (task, batch size), in
alternating order, and one row of figures per configuration (speed, speculation statistics and
fidelity to the target-only output of the same run, mean and per prompt)."""

from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict
from typing import Any, Callable, Sequence

from selfjudge.evaluation.matrix import ADAPTIVE, AUTOREGRESSIVE, Config
from selfjudge.timing import alternating


class TaskScorer:
    """Task score and fidelity of one generation, asked of the task, cached per (prompt, text).

    Greedy policies often write identical texts and HumanEval runs a sandboxed
    process, so every figure is computed once. The task decides what its scores
    mean (:meth:`selfjudge.tasks.Task.task_score`, :meth:`~selfjudge.tasks.Task.fidelity`):
    e.g. open-ended prompts score the target's mean log-likelihood and ROUGE-L
    against the target's greedy output.
    """

    def __init__(self, task, target, tokenizer):
        self.task, self.target, self.tokenizer = task, target, tokenizer
        self.name = getattr(task, "name", type(task).__name__)
        self.task_score_name = getattr(task, "task_score_name", "score")
        self.fidelity_name = getattr(task, "fidelity_name", "agreement with target")
        self._cache: dict[tuple, float] = {}

    def _cached(self, key: tuple, fn: Callable[[], float]) -> float:
        if key not in self._cache:
            self._cache[key] = float(fn())
        return self._cache[key]

    def task_score(self, example, prompt: str, text: str, token_ids: list[int]) -> float:
        return self._cached(("score", example.prompt_id, text, tuple(token_ids)), lambda: self.task.task_score(
            text, example, model=self.target, tokenizer=self.tokenizer, prompt=prompt, token_ids=token_ids))

    def fidelity(self, example, text: str, reference: str) -> float:
        return self._cached(("fidelity", example.prompt_id, text, reference),
                            lambda: self.task.fidelity(text, reference, example))

    def semantic(self, texts: Sequence[str], references: Sequence[str]) -> list[float]:
        """Semantic similarity of each text to its reference (all-MiniLM-L6-v2), cached per pair."""
        from selfjudge.tasks.semantic import semantic_similarity

        todo = [(t, r) for t, r in zip(texts, references) if ("semantic", t, r) not in self._cache]
        if todo:
            for (t, r), s in zip(todo, semantic_similarity([t for t, _ in todo], [r for _, r in todo])):
                self._cache[("semantic", t, r)] = s
        return [self._cache[("semantic", t, r)] for t, r in zip(texts, references)]

    def rouge(self, text: str, reference: str) -> float:
        from selfjudge.tasks.metrics import rouge_l

        return self._cached(("rouge", text, reference), lambda: rouge_l(text, reference))


def _mean(xs: Sequence[float]) -> float:
    xs = [x for x in xs if not math.isnan(x)]
    return sum(xs) / len(xs) if xs else float("nan")


def run_block(
    engines: dict[str, Any],
    configs: Sequence[Config],
    scorer: TaskScorer,
    examples: Sequence[Any],
    prompts: Sequence[str],
    batch: int,
    max_new_tokens: int,
    progress: bool = True,
    semantic: bool = True,
    timing_rounds: int = 1,
) -> list[dict[str, Any]]:
    """Run every configuration on every prompt group of ``batch`` prompts (interleaved)
    and return one row of figures per configuration. Fidelity to the target-only outputs of
    the same run: the task's own measure, ROUGE-L, and (``semantic``) the all-MiniLM-L6-v2
    cosine similarity.

    The configurations run in list order on even passes over a group and in reverse order on
    odd ones (A B C, C B A, ...), so a machine that speeds up or slows down during a block
    favours no configuration. A block with one prompt group has only one pass unless
    ``timing_rounds`` > 1 repeats every group: the repeats only add time (tokens and wall
    clock); outputs, scores and statistics come from the first round."""
    if not configs or configs[0].name != AUTOREGRESSIVE:
        raise ValueError("the first configuration must be target-only (it is the reference)")
    if timing_rounds < 1:
        raise ValueError(f"timing_rounds must be >= 1, got {timing_rounds}")
    groups = [list(range(i, min(i + batch, len(prompts)))) for i in range(0, len(prompts), batch)]
    acc = _run_passes(engines, configs, groups, prompts, max_new_tokens, timing_rounds,
                      desc=f"{scorer.name} batch {batch}", progress=progress)
    ref = acc[configs[0].key]["outputs"]
    tps = {c.key: _tokens_per_s(acc[c.key]) for c in configs}
    standard = {(c.K, c.adaptive): tps[c.key] for c in configs if c.name in ("standard", "standard" + ADAPTIVE)}
    rows = []
    for c in configs:
        row = {**asdict(c), "task": scorer.name, "batch": batch, "prompts": len(prompts),
               "timing_rounds": timing_rounds, "tokens_per_s": tps[c.key],
               "speedup_vs_target_only": tps[c.key] / tps[configs[0].key] if tps[configs[0].key] else float("nan"),
               "speedup_vs_standard": tps[c.key] / standard[c.K, c.adaptive] if (c.K, c.adaptive) in standard
               else float("nan")}
        engine = _engine_figures(c, acc[c.key])
        quality = _quality_figures(scorer, examples, prompts, acc[c.key]["outputs"], ref, semantic)
        per_prompt = {**quality.pop("per_prompt"), **engine.pop("per_prompt")}
        rows.append({**row, **engine, **quality, "per_prompt": per_prompt})
    return rows


def _tokens_per_s(a: dict[str, Any]) -> float:
    """Tokens per second over every timing round of every prompt group."""
    wall = sum(a["group_wall"])
    return sum(a["group_tokens"]) / wall if wall > 0 else float("nan")


def _run_passes(engines: dict[str, Any], configs: Sequence[Config], groups: list[list[int]], prompts: Sequence[str],
                max_new_tokens: int, timing_rounds: int, desc: str, progress: bool) -> dict[str, dict[str, Any]]:
    """Every configuration on every prompt group, in alternating order pass by pass; per configuration
    the first round's outputs and statistics and every round's wall time and tokens per group."""
    from tqdm import tqdm

    from selfjudge.engine import GenerationStats

    acc = {c.key: {"stats": GenerationStats(), "outputs": [], "cycles": [], "accepted": [],
                   "group_wall": [0.0] * len(groups), "group_tokens": [0] * len(groups)} for c in configs}
    bar = tqdm(total=timing_rounds * len(groups) * len(configs), desc=desc, file=sys.stderr, disable=not progress)
    passes = [(r, g, grp) for r in range(timing_rounds) for g, grp in enumerate(groups)]
    for pass_index, (round_index, g_index, grp) in enumerate(passes):
        for c in alternating(configs, pass_index):
            eng = engines[c.key]
            t0 = time.perf_counter()
            res = eng.generate([prompts[i] for i in grp], max_new_tokens=max_new_tokens)
            a = acc[c.key]
            a["group_wall"][g_index] += time.perf_counter() - t0  # all rounds: tokens/s and its intervals
            a["group_tokens"][g_index] += sum(len(r.token_ids) for r in res)
            if round_index == 0:
                a["stats"].add(eng.last_batch_stats)
                a["outputs"] += [(r.text, list(r.token_ids)) for r in res]
                # per prompt: the bootstrap's m (Hugging Face's generate reports no cycles: 0)
                a["cycles"] += [r.stats.cycles if hasattr(r, "stats") else 0 for r in res]
                a["accepted"] += [r.stats.accepted_tokens if hasattr(r, "stats") else 0 for r in res]
            bar.update(1)
    bar.close()
    return acc


def _engine_figures(c: Config, a: dict[str, Any]) -> dict[str, Any]:
    """One configuration's speculation statistics, time shares and per-group timings."""
    st, cyc = a["stats"], a["stats"].cycle_time
    return {
        "tokens": sum(len(ids) for _, ids in a["outputs"]),
        "wall_s": sum(a["group_wall"]),  # all timing rounds
        "mean_accepted_length": (1.0 if c.policy == "autoregressive" else
                                 float("nan") if c.family == "HF" else st.mean_accepted_length),
        "acceptance_rate": st.acceptance_rate,
        "draft_tokens": st.draft_tokens,
        "accepted_tokens": st.accepted_tokens,
        "judge_accepted_tokens": st.judge_accepted,
        "cycles": st.cycles,
        "target_forwards": st.target_forwards,
        "share_draft": st.time_draft / cyc if cyc else 0.0,
        "share_target": st.time_target / cyc if cyc else 0.0,
        "share_verify": st.time_verify / cyc if cyc else 0.0,
        "share_other": st.time_other / cyc if cyc else 0.0,
        # adaptive speculation: cycles per drafts verified per row (0 = plain) and expected vs kept drafts
        "drafts_verified": list(st.drafts_verified),
        "expected_accepted": st.expected_accepted,
        # per prompt group (one prompt at batch 1), all timing rounds: tokens/s ratio intervals
        "per_group": {"wall_s": a["group_wall"], "tokens": a["group_tokens"]},
        "per_prompt": {"tokens": [len(ids) for _, ids in a["outputs"]], "cycles": a["cycles"],
                       "accepted": a["accepted"]},
    }


def _quality_figures(scorer: TaskScorer, examples: Sequence[Any], prompts: Sequence[str],
                     outputs: list[tuple[str, list[int]]], ref: list[tuple[str, list[int]]],
                     semantic: bool) -> dict[str, Any]:
    """Task score and fidelity of ``outputs`` to the target-only ``ref`` of the same run, mean and per prompt."""
    ref_text = [text for text, _ in ref]
    scores = [scorer.task_score(ex, p, text, ids) for ex, p, (text, ids) in zip(examples, prompts, outputs)]
    fid = [scorer.fidelity(ex, text, r) for ex, (text, _), r in zip(examples, outputs, ref_text)]
    sem = scorer.semantic([text for text, _ in outputs], ref_text) if semantic else []
    rouge = [scorer.rouge(text, r) for (text, _), r in zip(outputs, ref_text)]
    return {
        "task_score": _mean(scores),
        "task_score_name": scorer.task_score_name,
        "fidelity": _mean(fid),
        "fidelity_name": scorer.fidelity_name,
        "semantic_fidelity": _mean(sem) if semantic else float("nan"),
        "rouge_l_vs_target": _mean(rouge),
        "same_tokens_as_target_only": [ids for _, ids in outputs] == [ids for _, ids in ref],
        "per_prompt": {"task_score": scores, "fidelity": fid, "semantic": sem, "rouge_l": rouge},
    }
