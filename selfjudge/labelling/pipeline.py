"""SelfJudge's label miner (``selfjudge label``): SelfJudge training labels from the target itself (SPEC section 2).

Per batch of training prompts:
  1. the target's greedy responses y (batched ``generate``, left padding; the response
     is cut after its first EOS, which it keeps);
  2. the draft teacher-forced over x + y; z_i = argmax of its prediction for position i;
     mismatches M = {i : z_i != y_i};
  3. one-pass swap scores s_i and features (target final hidden state after reading
     z_i) from :func:`selfjudge.labelling.swap_scoring.score_swaps` -- no second pass;
  4. labels ``score > tau`` and one shard per batch (see :mod:`selfjudge.labelling.shards`).

The run is resumable: prompts whose batch is committed in ``progress.jsonl`` are
skipped. With ``tau_quantile`` the labels are written as null first and set once all
scores exist (tau = that quantile of all scores of the run); ``read_labels(dir, tau=)``
can re-derive labels from the stored scores for any other tau.
N=0 (``window=0``) is the prefix-only ablation through the same code. Each batch's progress
record keeps the target's response ids, so a folder may be kept (committed, copied) without its
``.safetensors``: the next run rebuilds them first (:mod:`.rebuild`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from selfjudge.builtin import BUILTIN_PAIRS, DEFAULT_PAIR
from selfjudge.kernels.judge_features import FEATURE_NAMES, NUM_FEATURES
from selfjudge.models.fingerprint import target_fingerprint
from selfjudge.models.generation import draft_top1, greedy_responses, mismatches
from selfjudge.models.lookup import NgramLookup, lookup_id_suffix
from selfjudge.writes import write_json

from .rebuild import rebuild_features
from .shards import SUMMARY, ShardWriter, read_progress, read_rows, relabel
from .swap_scoring import score_swaps
from .tau import label_balance, tau_from_quantile

FEATURE_DOC = (
    "target final-layer hidden state after the final norm (base model last_hidden_state == "
    "output_hidden_states[-1]) at the swapped token z_i, from the one-pass scoring forward"
)
_COMPARE = ("method", "target", "draft", "task", "split", "window", "tau_mode", "max_new_tokens", "hidden_size", "score",
            "format_version", "skip")
#: the per-row tensors stored beside "features" (format 2): the judge's probability features of the
#: draft token and, for the released code's augmentation, the original token's state and features
EXTRA_TENSORS = ("phi", "orig_features", "orig_phi")


def _decode(tokenizer, tid: int) -> str:
    return tokenizer.decode([tid])


def _prompt_builder(task, tok, split: str, examples: list):
    """``prompt_id -> prompt token ids`` as the labeller builds them (the whole split is read only
    for an id outside ``examples``, i.e. a folder labelled with another --limit or --skip)."""
    by_id = {ex.prompt_id: ex for ex in examples}

    def prompt_for(pid: str) -> list[int]:
        if pid not in by_id:
            by_id.update({ex.prompt_id: ex for ex in task.examples(split, limit=None)})
        if pid not in by_id:
            raise ValueError(f"out: the folder holds labels of prompt {pid!r}, which task {task.name!r} "
                             f"split {split!r} does not have")
        return tok(task.build_prompt(tok, by_id[pid]), add_special_tokens=False)["input_ids"]

    return prompt_for


def _summarise(out_dir: Path, writer: ShardWriter, wall: float) -> dict:
    records = read_progress(out_dir)
    rows = read_rows(out_dir)
    stat = lambda k: sum(r["stats"].get(k, 0) for r in records)  # noqa: E731
    scores = torch.tensor([r["score"] for r in rows], dtype=torch.float64)
    labels = torch.tensor([r["label"] for r in rows if r["label"] is not None], dtype=torch.long)
    t_score = stat("score_seconds")
    man = writer.manifest
    summary = {
        "prompts": sum(len(r["prompt_ids"]) for r in records),
        "response_tokens": stat("response_tokens"),
        "proposals": stat("proposals"),  # 0 for batches labelled before proposals were counted
        "matches": stat("matches"),
        "mismatches": len(rows),
        "mismatch_rate": (len(rows) / stat("response_tokens")) if stat("response_tokens") else None,
        "window": man["window"],
        "tau": man.get("tau"),
        "tau_quantile": man.get("tau_quantile"),
        **label_balance(labels),
        "score_mean": float(scores.mean()) if len(rows) else None,
        "score_quantiles": {str(q): float(torch.quantile(scores, q)) for q in (0.1, 0.25, 0.5, 0.75, 0.9)}
        if len(rows)
        else None,
        "seconds": {
            "generate": stat("generate_seconds"),
            "draft": stat("draft_seconds"),
            "score": t_score,
            "this_invocation_wall": wall,
        },
        "labels_per_second_scoring": (len(rows) / t_score) if t_score else None,
        "labels_per_second_end_to_end": (len(rows) / (stat("generate_seconds") + stat("draft_seconds") + t_score))
        if len(rows)
        else None,
    }
    write_json(out_dir / SUMMARY, summary, indent=2)
    return summary


def _draft_id(target: str, draft: str | None, drafter) -> str | None:
    """The manifest's name of what drafted: the draft folder, the pair's prompt lookup with its
    settings (the same id the command line writes), or the built-in pair's draft model."""
    if draft is not None:
        return draft
    if isinstance(drafter, NgramLookup):
        return f"{target}:prompt-lookup" + lookup_id_suffix(drafter)
    return f"{target}:draft" if target in BUILTIN_PAIRS else None


def label(
    target: str = DEFAULT_PAIR,
    draft: str | None = None,
    task="gsm8k",
    *,
    out: str | Path,
    window: int = 20,
    tau: float | None = None,
    tau_quantile: float | None = None,
    limit: int | None = None,
    split: str = "train",
    skip: int = 0,
    batch_size: int = 8,
    max_new_tokens: int | None = None,
    max_tokens_per_forward: int = 2048,
    backend: str = "auto",
    pair=None,
    progress: bool = True,
    command: str | None = None,
    draft_id: str | None = None,
    score: str = "likelihood",
) -> dict:
    """Label ``limit`` prompts of ``task``'s ``split``; returns the summary dict.

    ``target``/``draft``: "smollm2-135m" (the default pair) or local model folders,
    loaded with :func:`selfjudge.models.load_pair` and its default drafter (for the built-in pair
    the measured best, prompt lookup with its n-gram store, as on the command line; with a draft
    folder the draft model); ``pair`` = an already loaded
    ``(target, draft, tokenizer)`` triple instead (ids still name it in the manifest); its draft
    may be a drafter (e.g. prompt lookup, an EAGLE head): then name it with ``draft_id``.
    ``task``: a name for :func:`selfjudge.tasks.load_task` or a Task-like object with
    ``name``, ``examples(split, limit)`` and ``build_prompt(tokenizer, example)``.
    ``skip``: the split's first ``skip`` prompts are left out (``limit`` counts after them), e.g. the
    prompts whose responses built the drafter's n-gram store, which would otherwise predict them
    verbatim. Exactly one of ``tau`` / ``tau_quantile`` must be given. ``score``: "likelihood" (SPEC
    section 2, the suffix log-likelihood difference) or "confidence" (SelfJudge's released
    code: the mean top-1 log-probability difference over the same window; its tau is the
    negated published one, e.g. -0.056 at N = 20); rows store both, the label uses this one.
    """
    from tqdm.auto import tqdm

    _check_label_arguments(score, tau, tau_quantile, window, batch_size, skip)
    t_start = time.perf_counter()
    if isinstance(task, str):
        from selfjudge.tasks import load_task

        task = load_task(task)
    if pair is None:
        from selfjudge.models import load_pair

        pair = load_pair(target, draft)  # the pair's default drafter, as the command line uses
    tgt, drf, tok = pair[0], pair[1], pair[2]
    tgt.eval()
    if hasattr(drf, "eval"):  # a model (drafters are always in inference mode)
        drf.eval()
    if max_new_tokens is None:
        max_new_tokens = int(getattr(task, "max_new_tokens", 256))
    manifest = _label_manifest(target, draft_id if draft_id is not None else _draft_id(target, draft, drf), task.name,
                               split, skip, window, tau, tau_quantile, score, tgt, max_new_tokens, command)
    compare = _COMPARE + (("tau",) if tau is not None else ("tau_quantile",))
    writer = ShardWriter(out, manifest, compare_keys=compare, defaults={"score": "likelihood", "format_version": 1,
                                                                          "skip": 0})
    swap = _SwapSettings(window, tau, score, max_tokens_per_forward, backend)
    try:
        examples = task.examples(split, limit=None if limit is None else skip + limit)[skip:]
        rebuild_features(out, tgt, _prompt_builder(task, tok, split, examples), max_tokens=max_tokens_per_forward,
                         backend=backend, progress=progress)
        done = writer.done_prompt_ids
        todo = [ex for ex in examples if ex.prompt_id not in done]
        bar = tqdm(total=len(examples), initial=len(examples) - len(todo), desc="label", unit="prompt", disable=not progress)
        for b0 in range(0, len(todo), batch_size):
            batch = todo[b0 : b0 + batch_size]
            rows, features, stats, extra, texts = _label_batch(tgt, drf, tok, task, batch, max_new_tokens, swap)
            writer.write([ex.prompt_id for ex in batch], rows, features, stats, extra=extra, texts=texts)
            _summarise(Path(out), writer, time.perf_counter() - t_start)  # kept current for long runs
            bar.update(len(batch))
        bar.close()
        if tau_quantile is not None:
            _apply_tau_quantile(out, writer, tau_quantile)
        return _summarise(Path(out), writer, time.perf_counter() - t_start)
    finally:
        writer.close()  # the folder's lock


def _check_label_arguments(score, tau, tau_quantile, window, batch_size, skip) -> None:
    if score not in ("likelihood", "confidence"):
        raise ValueError(f"score must be 'likelihood' or 'confidence', got {score!r}")
    if (tau is None) == (tau_quantile is None):
        raise ValueError("give exactly one of tau and tau_quantile")
    if tau is not None and not math.isfinite(tau):
        raise ValueError(f"tau must be a finite number, got {tau}")
    if tau_quantile is not None and not 0.0 <= tau_quantile <= 1.0:
        raise ValueError(f"tau_quantile must lie in [0, 1], got {tau_quantile}")
    if not isinstance(window, int) or window < 0:
        raise ValueError(f"window must be an int >= 0, got {window!r}")
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    if not isinstance(skip, int) or skip < 0:
        raise ValueError(f"skip must be an int >= 0, got {skip!r}")


def _label_manifest(target, draft_id, task_name, split, skip, window, tau, tau_quantile, score, tgt, max_new_tokens,
                    command) -> dict:
    """What a label folder records of how its labels were made (compared when a run resumes)."""
    return {
        "method": "selfjudge",
        "target": target,
        "target_fingerprint": target_fingerprint(target),  # a local folder's, so a moved folder still matches
        "draft": draft_id,
        "task": task_name,
        "split": split,
        "skip": skip,
        "window": window,
        "tau": tau,
        "tau_quantile": tau_quantile,
        "tau_mode": "value" if tau is not None else "quantile",
        "score": score,
        "label_rule": "label = 1 (acceptable) iff score > tau",
        "hidden_size": int(tgt.config.hidden_size),
        "feature": FEATURE_DOC,
        "max_new_tokens": max_new_tokens,
        "phi_features": list(FEATURE_NAMES),
        # what the features were computed in: a verifier used in another dtype sees other numbers
        "feature_dtype": str(next(tgt.parameters()).dtype).replace("torch.", ""),
        "feature_device": next(tgt.parameters()).device.type,
        "format_version": 2,
        "command": command,  # the command line that made the labels (copied into verifiers' metadata)
    }


@dataclass(frozen=True)
class _SwapSettings:
    """How every mismatch is scored and labelled (see :func:`label`)."""

    window: int
    tau: float | None
    score: str
    max_tokens: int
    backend: str


def _label_batch(tgt, drf, tok, task, batch: list, max_new_tokens: int, swap: _SwapSettings):
    """One batch of prompts: the target's greedy responses, then every prompt's mismatches scored.
    Returns ``(rows, features [n, H], stats, extra tensors, texts)`` for :meth:`ShardWriter.write`."""
    prompts = [tok(task.build_prompt(tok, ex), add_special_tokens=False)["input_ids"] for ex in batch]
    t0 = time.perf_counter()
    responses = greedy_responses(tgt, tok, prompts, max_new_tokens)
    stats = {"generate_seconds": time.perf_counter() - t0, "draft_seconds": 0.0, "score_seconds": 0.0,
             "response_tokens": 0,
             "proposals": 0,  # positions where the drafter proposed (teacher-forced first drafts)
             "matches": 0}  # ... and proposed the target's own token
    rows, feats, extra = [], [], {k: [] for k in EXTRA_TENSORS}
    for ex, p, r in zip(batch, prompts, responses):
        if r:
            _label_response(tgt, drf, tok, ex.prompt_id, p, r, swap, rows, feats, extra, stats)
    H = int(tgt.config.hidden_size)
    features = torch.cat(feats) if feats else torch.zeros(0, H)
    widths = {"phi": NUM_FEATURES, "orig_features": H, "orig_phi": NUM_FEATURES}
    extra = {k: torch.cat(v) if v else torch.zeros(0, widths[k]) for k, v in extra.items()}
    texts = {ex.prompt_id: {"prompt_len": len(p), "response_ids": list(r)}
             for ex, p, r in zip(batch, prompts, responses) if r}
    return rows, features, stats, extra, texts


def _label_response(tgt, drf, tok, prompt_id, prompt: list[int], response: list[int], swap: _SwapSettings,
                    rows: list, feats: list, extra: dict, stats: dict) -> None:
    """One response: the drafter's teacher-forced first proposals, each mismatch swapped in and scored;
    appends its rows, features and extra tensors, and adds its counts and times to ``stats``."""
    x = torch.tensor(prompt, dtype=torch.long)  # [P]
    y = torch.tensor(response, dtype=torch.long)  # [T]
    ta = time.perf_counter()
    z_list = draft_top1(drf, prompt, response)  # None where a drafter proposes nothing
    z = torch.tensor([-1 if t is None else t for t in z_list], dtype=torch.long)  # [T]
    mism = torch.tensor(mismatches(z_list, response), dtype=torch.long)  # [M]
    tb = time.perf_counter()
    res = score_swaps(tgt, x, y, mism, z[mism], swap.window, max_tokens=swap.max_tokens, backend=swap.backend)
    stats["draft_seconds"] += tb - ta
    stats["score_seconds"] += time.perf_counter() - tb
    stats["response_tokens"] += len(response)
    stats["proposals"] += sum(t is not None for t in z_list)
    stats["matches"] += sum(t == y_t for t, y_t in zip(z_list, response))
    for j, i in enumerate(mism.tolist()):
        s_likelihood, s_confidence = float(res.scores[j]), float(res.confidence_scores[j])
        s = s_likelihood if swap.score == "likelihood" else s_confidence
        rows.append({
            "prompt_id": prompt_id,
            "position": i,
            "target_token_id": int(y[i]),
            "draft_token_id": int(z[i]),
            "target_token": _decode(tok, int(y[i])),
            "draft_token": _decode(tok, int(z[i])),
            "score": s,
            "score_likelihood": s_likelihood,
            "score_confidence": s_confidence,
            "prefix_score": float(res.prefix_terms[j]),
            "label": int(s > swap.tau) if swap.tau is not None else None,
            "response_len": len(response),
        })
    feats.append(res.features.cpu())
    for k in EXTRA_TENSORS:
        extra[k].append(getattr(res, k).cpu())


def _apply_tau_quantile(out, writer: ShardWriter, tau_quantile: float) -> None:
    """Labels by a quantile of every score in the folder (known only once all are scored)."""
    scores = torch.tensor([r["score"] for r in read_rows(out)], dtype=torch.float64)
    tau_q = tau_from_quantile(scores, tau_quantile)
    if not math.isnan(tau_q):
        relabel(out, tau_q)
    writer.update_manifest(tau=None if math.isnan(tau_q) else tau_q)
