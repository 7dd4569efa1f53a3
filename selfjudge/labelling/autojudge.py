"""AutoJudge labels for a task split (SPEC §3), written as label shards.

:func:`mine_task` runs AutoJudge's walk (:mod:`selfjudge.labelling.autojudge_walk`)
over every prompt of a split, one prompt or a lock-step batch of prompts at a
time (:mod:`selfjudge.labelling.autojudge_batch`), and commits each prompt's
labels as its own batch record, so a killed run loses one prompt at most and a
rerun resumes.

Labels are stored as acceptability (1 = acceptable = not important) in the
common label-shard format so one trainer and one kernel serve both methods.
"""

from __future__ import annotations

import functools
import os
import zlib
from typing import Any, Callable, Sequence

from selfjudge.labelling.autojudge_batch import mine_batch
from selfjudge.labelling.autojudge_walk import MinedPrompt, mine_prompt
from selfjudge.labelling.shards import SUMMARY, ShardWriter
from selfjudge.models.fingerprint import model_fingerprint
from selfjudge.models.generation import eos_token_ids, greedy_responses

_COMPARE_KEYS = ("method", "target", "draft", "task", "hidden_size", "max_new_tokens", "label_fraction")

__all__ = ["MinedPrompt", "mine_prompt", "mine_task", "summarise", "model_id"]

def model_id(model) -> str:
    return str(getattr(model.config, "_name_or_path", "") or type(model).__name__)


def mine_task(
    target,
    draft,
    tokenizer,
    task,
    examples: Sequence[Any],
    out_dir: str,
    *,
    max_new_tokens: int = 256,
    max_labels_per_prompt: int | None = None,
    label_fraction: float = 1.0,
    resume: bool = True,
    target_id: str | None = None,
    draft_id: str | None = None,
    task_name: str | None = None,
    command: str | None = None,
    progress: bool = True,
    split: str | None = None,
    batch_size: int = 1,
    generate_batch: Callable[[list[list[int]], int], list[list[int]]] | None = None,
) -> dict[str, Any]:
    """Mine AutoJudge labels for ``examples`` into ``out_dir`` (label-shard format, resumable).

    ``batch_size`` > 1 walks that many prompts in lock step
    (:func:`selfjudge.labelling.autojudge_batch.mine_batch`: same labels, batched
    regenerations); each prompt is still committed as its own batch record.
    ``generate_batch(prompts, max_new_tokens)`` is the batched greedy generator
    those walks use (default: the target's own ``generate``,
    :func:`selfjudge.models.generation.greedy_responses`).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if generate_batch is None:
        generate_batch = functools.partial(greedy_responses, target, tokenizer)

    hidden = int(target.config.hidden_size)
    manifest = {
        "method": "autojudge",
        "target": target_id or model_id(target),
        "target_fingerprint": model_fingerprint(target),
        "draft": draft_id or model_id(draft),
        "task": task_name or getattr(task, "name", type(task).__name__),
        "split": split,
        "window": None,
        "tau": None,
        "hidden_size": hidden,
        "max_new_tokens": max_new_tokens,
        "max_labels_per_prompt": max_labels_per_prompt,
        "label_fraction": label_fraction,
        "label": "1 = acceptable (AutoJudge 'unimportant': same final answer after the swap); score = label",
        "feature": "target final-layer hidden state after reading z_i with prefix y_<i (first regeneration step)",
        "command": command,
    }
    writer = ShardWriter(out_dir, manifest, compare_keys=_COMPARE_KEYS, start_over=not resume)
    try:
        return _mine_into(writer, target, draft, tokenizer, task, examples, out_dir, hidden, max_new_tokens,
                          max_labels_per_prompt, label_fraction, progress, batch_size, generate_batch)
    finally:
        writer.close()


def _mine_into(writer, target, draft, tokenizer, task, examples, out_dir, hidden, max_new_tokens,
               max_labels_per_prompt, label_fraction, progress, batch_size, generate_batch) -> dict[str, Any]:
    """The walks over every prompt ``writer`` has not committed yet, then the summary."""
    from tqdm import tqdm

    done = writer.done_prompt_ids
    eos = eos_token_ids(target, tokenizer)
    todo = [ex for ex in examples if ex.prompt_id not in done]

    def dec(ids: list[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=True)

    def same_fn(ex):
        def same(cand: list[int], ref: list[int]) -> bool:
            return bool(task.same_answer(dec(cand), dec(ref), ex))

        return same

    def prompt_of(ex) -> list[int]:
        return list(tokenizer.encode(task.build_prompt(tokenizer, ex), add_special_tokens=False))

    def seed_of(ex) -> int:
        return zlib.crc32(ex.prompt_id.encode())

    def mined():
        """(example, MinedPrompt) in order, one batch of walks at a time."""
        for b0 in range(0, len(todo), batch_size):
            group = todo[b0 : b0 + batch_size]
            if batch_size == 1:
                ex = group[0]
                yield ex, mine_prompt(target, draft, prompt_of(ex), same_fn(ex), max_new_tokens, eos,
                                      max_labels=max_labels_per_prompt, label_fraction=label_fraction,
                                      seed=seed_of(ex))
                continue
            res = mine_batch(target, draft, [prompt_of(ex) for ex in group], [same_fn(ex) for ex in group],
                             max_new_tokens, eos, generate=generate_batch, seeds=[seed_of(ex) for ex in group],
                             max_labels=max_labels_per_prompt, label_fraction=label_fraction)
            yield from zip(group, res)

    for ex, r in tqdm(mined(), total=len(todo), desc="autojudge", disable=not progress):
        rows = []
        for k in range(len(r.labels)):
            rows.append(
                {
                    "prompt_id": ex.prompt_id,
                    "position": r.positions[k],
                    "target_token_id": r.target_token_ids[k],
                    "draft_token_id": r.draft_token_ids[k],
                    "target_token": dec([r.target_token_ids[k]]),
                    "draft_token": dec([r.draft_token_ids[k]]),
                    "score": float(r.labels[k]),
                    "label": r.labels[k],
                    "original_prefix": r.original_prefix[k],
                    "regen_tokens": r.regen_tokens[k],
                }
            )
        ref_text = dec(r.reference_ids)
        record = {
            "n_acceptable": sum(r.labels),
            "response_tokens": len(r.reference_ids),
            "reference_answer": repr(task.extract_answer(ref_text)),
            "target_forward_tokens": r.target_forward_tokens,
            "cache_shared_forward_tokens": r.cache_shared_forward_tokens,
            "batch_size": batch_size,
            "draft_forward_tokens": r.draft_forward_tokens,
            "reference_forward_tokens": r.reference_forward_tokens,
            "wall_seconds": r.wall_seconds,
            "reference_wall_seconds": r.reference_wall_seconds,
            "reference_ids": r.reference_ids,
        }
        # one committed batch per prompt, so that costs stay per prompt and a kill loses one prompt at most
        writer.write([ex.prompt_id], rows, r.feature_matrix(hidden), stats=record)
    summary = summarise(writer.records, method="autojudge")
    from selfjudge.writes import write_json

    write_json(os.path.join(out_dir, SUMMARY), summary)
    return summary


def summarise(records: list[dict[str, Any]], method: str) -> dict[str, Any]:
    """Label balance and cost totals over committed progress records (one per prompt)."""
    stats = [r.get("stats", {}) for r in records]
    n = sum(int(r.get("rows", 0)) for r in records)
    n_pos = sum(s.get("n_acceptable", 0) for s in stats)
    out = {
        "method": method,
        "n_prompts": sum(len(r["prompt_ids"]) for r in records),
        "n_labels": n,
        "n_acceptable": n_pos,
        "positive_rate": n_pos / n if n else None,
    }
    for key in ("wall_seconds", "target_forward_tokens", "draft_forward_tokens", "reference_wall_seconds",
                "reference_forward_tokens"):
        out[key] = sum(s.get(key, 0) for s in stats)
    # older records (batch-1 walks only) have no separate count: their walk shared the cache
    out["cache_shared_forward_tokens"] = sum(s.get("cache_shared_forward_tokens", s.get("target_forward_tokens", 0))
                                             for s in stats)
    out["cache_shared_forward_tokens_per_label"] = out["cache_shared_forward_tokens"] / n if n else None
    out["seconds_per_label"] = out["wall_seconds"] / n if n else None
    out["target_forward_tokens_per_label"] = out["target_forward_tokens"] / n if n else None
    return out
