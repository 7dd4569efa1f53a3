"""AutoJudge label mining (SPEC §3): the answer-checking baseline SelfJudge is measured against.

For one prompt x the target T writes its greedy response y; its final answer is
the reference. The draft D is run teacher-forced over x + y to get its top-1
z_i at every response position. Walk the mismatches z_i != y_i left to right
from a cursor: swap z_i in at the first mismatch i >= cursor, let T regenerate
greedily from y_<i + z_i to the end (EOS or the length cap), and compare the new
final answer with the reference. Same answer: the mismatch is *acceptable*
(AutoJudge's "unimportant", label 1) and the swapped continuation becomes the
new y (and D's top-1 is recomputed over it); different: label 0, y is kept.
The cursor moves past i and the walk repeats.

The feature of each label is T's final-layer hidden state after reading z_i
with prefix y_<i: the output of the regeneration's first forward step, so it
costs no extra pass. Keys and values of x + y are computed once per y and
cropped for every swap, so each label costs one regeneration, which is
exactly the cost SelfJudge removes; target forward tokens and wall time are
counted per prompt to compare the two.

Labels are stored as acceptability (1 = acceptable = not important) in the
common label-shard format so one trainer and one kernel serve both methods.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import functools
import random
import zlib
import shlex
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

_COMPARE_KEYS = ("method", "target", "draft", "task", "hidden_size", "max_new_tokens", "label_fraction")

__all__ = ["MinedPrompt", "greedy_generate", "draft_top1", "mine_prompt", "mine_task", "register"]


@dataclass
class MinedPrompt:
    """Result of the walk over one prompt."""

    reference_ids: list[int]  # T's greedy response y (the reference answer's text)
    final_ids: list[int]  # y after all acceptable swaps
    positions: list[int] = field(default_factory=list)  # mismatch position i of each label
    target_token_ids: list[int] = field(default_factory=list)  # y_i at the time of the swap
    draft_token_ids: list[int] = field(default_factory=list)  # z_i
    labels: list[int] = field(default_factory=list)  # 1 = acceptable (same final answer)
    original_prefix: list[bool] = field(default_factory=list)  # y_<=i still equals the reference's
    regen_tokens: list[int] = field(default_factory=list)  # tokens T regenerated for that label
    features: list[torch.Tensor] = field(default_factory=list)  # each [H] float32
    reference_forward_tokens: int = 0  # target tokens fed to write y
    target_forward_tokens: int = 0  # target tokens fed for the regenerations (all labels)
    cache_shared_forward_tokens: int = 0  # the same with the prefix's keys/values shared (1 + regenerated - 1)
    draft_forward_tokens: int = 0
    reference_wall_seconds: float = 0.0
    wall_seconds: float = 0.0  # mining (after y exists)

    def feature_matrix(self, hidden_size: int) -> torch.Tensor:  # [n, H]
        if not self.features:
            return torch.zeros(0, hidden_size)
        return torch.stack(self.features).to(torch.float32)


def _eos_ids(model, tokenizer=None) -> set[int]:
    ids: set[int] = set()
    for src in (getattr(model, "generation_config", None), getattr(model, "config", None), tokenizer):
        e = getattr(src, "eos_token_id", None) if src is not None else None
        if e is None:
            continue
        ids.update([int(e)] if isinstance(e, int) else [int(x) for x in e])
    return ids


@functools.lru_cache(maxsize=None)
def _forward_params(cls) -> frozenset:
    import inspect

    return frozenset(inspect.signature(cls.forward).parameters)


def _forward(model, input_ids, cache, want_hidden: bool = False):
    """One cached forward: (last-position logits [V], final-layer hidden [H] or None, cache)."""
    params = _forward_params(type(model))
    kw = {"cache": cache} if "cache" in params else {"past_key_values": cache}
    if "logits_to_keep" in params:
        kw["logits_to_keep"] = 1
    out = model(input_ids=input_ids, use_cache=True, output_hidden_states=want_hidden, **kw)
    new_cache = getattr(out, "cache", None)
    if new_cache is None:
        new_cache = out.past_key_values
    hidden = out.hidden_states[-1][0, -1].to(torch.float32).clone() if want_hidden else None
    return out.logits[0, -1], hidden, new_cache


def crop_cache(cache, length: int) -> None:
    """Keep the first ``length`` positions of a DynamicCache (in place)."""
    extra = cache.get_seq_length() - length
    if extra < 0:
        raise ValueError(f"cannot crop a cache of {cache.get_seq_length()} positions to length {length}")
    if extra:
        cache.crop(-extra)


def greedy_generate(
    model,
    input_ids: torch.Tensor,  # [1, t] tokens not yet in the cache
    cache,  # DynamicCache holding the context before input_ids (may be empty)
    max_tokens: int,
    eos_ids: set[int],
    *,
    want_hidden: bool = False,
) -> tuple[list[int], torch.Tensor | None, Any, int]:
    """Greedy continuation after feeding ``input_ids``; returns (new tokens, hidden, cache, tokens fed).

    Stops after ``max_tokens`` new tokens or at an EOS (kept in the output). If the
    last fed token is itself an EOS or ``max_tokens`` is 0, nothing is generated.
    ``hidden`` is the final-layer state [H] at the last position of ``input_ids``
    (from the first forward, when ``want_hidden``). The last generated token is
    never fed, so the cache ends up covering context + input_ids + new[:-1].
    """
    new: list[int] = []
    hidden = None
    fed = 0
    stop_now = max_tokens <= 0 or int(input_ids[0, -1]) in eos_ids
    if stop_now and not want_hidden:
        return new, hidden, cache, fed
    with torch.no_grad():
        logits, hidden, cache = _forward(model, input_ids, cache, want_hidden)
        fed += int(input_ids.shape[1])
        if stop_now:
            return new, hidden, cache, fed
        while True:
            nxt = int(logits.argmax())
            new.append(nxt)
            if len(new) >= max_tokens or nxt in eos_ids:
                break
            logits, _, cache = _forward(model, torch.tensor([[nxt]], dtype=torch.long), cache)
            fed += 1
    return new, hidden, cache, fed


def draft_top1(draft, prompt_ids: list[int], response_ids: list[int]) -> list[int]:
    """D's teacher-forced top-1 prediction for each response position: z_i = argmax D(. | x, y_<i)."""
    ids = torch.tensor([prompt_ids + response_ids[:-1]], dtype=torch.long)
    with torch.no_grad():
        logits = draft(input_ids=ids).logits[0]  # [t, V]
    p = len(prompt_ids)
    return logits[p - 1 : p - 1 + len(response_ids)].argmax(-1).tolist()


def _new_cache(model):
    from transformers import DynamicCache

    try:
        return DynamicCache(config=model.config)
    except TypeError:
        return DynamicCache()


def mine_prompt(
    target,
    draft,
    prompt_ids: list[int],
    same_answer: Callable[[list[int], list[int]], bool],
    max_new_tokens: int,
    eos_ids: set[int],
    *,
    max_labels: int | None = None,
    label_fraction: float = 1.0,
    seed: int = 0,
) -> MinedPrompt:
    """Run AutoJudge's semi-greedy walk over one prompt (see module doc).

    Args:
        prompt_ids: tokenised prompt x (chat template applied).
        same_answer: ``same_answer(candidate_response_ids, reference_response_ids)``: does
            the candidate have the same final answer as T's own greedy response?
        max_new_tokens: cap on the response length (for y and every regeneration).
        max_labels: stop after this many labels (None: walk to the end).
        label_fraction: label each mismatch the walk reaches with this probability
            (seeded by ``seed``) and step over the others without swapping, so a CPU
            budget buys labels spread over the whole response instead of only its start.
    """
    if not 0.0 < label_fraction <= 1.0:
        raise ValueError(f"label_fraction must be in (0, 1], got {label_fraction}")
    rng = random.Random(seed)
    if not prompt_ids:
        raise ValueError("prompt_ids must not be empty")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    p = len(prompt_ids)
    t0 = time.perf_counter()
    gen, _, cache, fed = greedy_generate(
        target, torch.tensor([prompt_ids]), _new_cache(target), max_new_tokens, eos_ids
    )
    # greedy_generate feeds the prompt then generates; its first output is y_0
    ref = gen
    res = MinedPrompt(reference_ids=list(ref), final_ids=list(ref), reference_forward_tokens=fed)
    res.reference_wall_seconds = time.perf_counter() - t0
    t1 = time.perf_counter()
    y = list(ref)
    cache_y = cache  # covers x + y[:-1]
    z = draft_top1(draft, prompt_ids, y)
    res.draft_forward_tokens += p + len(y) - 1
    cursor = 0
    changed = False
    while max_labels is None or len(res.labels) < max_labels:
        i = next((j for j in range(cursor, len(y)) if z[j] != y[j]), None)
        if i is None:
            break
        if label_fraction < 1.0 and rng.random() >= label_fraction:
            cursor = i + 1
            continue
        c = copy.deepcopy(cache_y)
        crop_cache(c, p + i)
        new, h, c, fed = greedy_generate(
            target, torch.tensor([[z[i]]]), c, max_new_tokens - i - 1, eos_ids, want_hidden=True
        )
        res.target_forward_tokens += fed
        cand = y[:i] + [z[i]] + new
        ok = bool(same_answer(cand, ref))
        res.positions.append(i)
        res.target_token_ids.append(y[i])
        res.draft_token_ids.append(z[i])
        res.labels.append(int(ok))
        res.original_prefix.append(not changed)
        res.regen_tokens.append(len(new))
        res.features.append(h)
        if ok:
            y, cache_y, changed = cand, c, True
            z = draft_top1(draft, prompt_ids, y)
            res.draft_forward_tokens += p + len(y) - 1
        cursor = i + 1
    res.final_ids = y
    res.cache_shared_forward_tokens = res.target_forward_tokens  # this walk shares the prefix's cache
    res.wall_seconds = time.perf_counter() - t1
    return res


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
) -> dict[str, Any]:
    """Mine AutoJudge labels for ``examples`` into ``out_dir`` (label-shard format, resumable).

    ``batch_size`` > 1 walks that many prompts in lock step
    (:func:`selfjudge.judge.autojudge_batch.mine_batch`: same labels, batched
    regenerations); each prompt is still committed as its own batch record.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    from tqdm import tqdm

    from selfjudge.labelling.shards import SUMMARY, ShardWriter

    hidden = int(target.config.hidden_size)
    manifest = {
        "method": "autojudge",
        "target": target_id or model_id(target),
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
    if not resume and os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    writer = ShardWriter(out_dir, manifest, compare_keys=_COMPARE_KEYS)
    done = writer.done_prompt_ids
    eos = _eos_ids(target, tokenizer)
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
        from selfjudge.judge.autojudge_batch import mine_batch

        for b0 in range(0, len(todo), batch_size):
            group = todo[b0 : b0 + batch_size]
            if batch_size == 1:
                ex = group[0]
                yield ex, mine_prompt(target, draft, prompt_of(ex), same_fn(ex), max_new_tokens, eos,
                                      max_labels=max_labels_per_prompt, label_fraction=label_fraction,
                                      seed=seed_of(ex))
                continue
            res = mine_batch(target, draft, [prompt_of(ex) for ex in group], [same_fn(ex) for ex in group],
                             max_new_tokens, eos, seeds=[seed_of(ex) for ex in group],
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
    with open(os.path.join(out_dir, SUMMARY), "w") as f:
        json.dump(summary, f, indent=1)
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


def pair_dirs(pair: str, draft: str | None) -> tuple[str, str | None]:
    """Arguments for ``load_pair``: the default pair's target folder when only the draft is overridden."""
    if draft is not None and pair == "smollm2-135m":
        from selfjudge.models.gguf_convert import ensure_smollm2_target

        return str(ensure_smollm2_target(verbose=False)), draft
    return pair, draft


def _run(args: argparse.Namespace) -> int:
    from selfjudge.models import load_pair
    from selfjudge.tasks import load_task

    command = "selfjudge " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    torch.set_num_threads(args.threads)
    pair = load_pair(*pair_dirs(args.pair, args.draft))
    for m in (pair.target, pair.draft):
        m.eval()
    task = load_task(args.task)
    examples = task.examples(args.split, limit=None if args.limit is None else args.offset + args.limit)
    examples = examples[args.offset :]
    summary = mine_task(
        pair.target,
        pair.draft,
        pair.tokenizer,
        task,
        examples,
        args.out,
        max_new_tokens=args.max_new_tokens or task.max_new_tokens,
        max_labels_per_prompt=args.max_labels_per_prompt,
        label_fraction=args.label_fraction,
        resume=not args.no_resume,
        # same ids as the labelling pipeline's manifests (and what verifiers are checked against)
        target_id=args.target_id or args.pair,
        draft_id=args.draft_id or args.draft or f"{args.pair}:draft",
        task_name=args.task,
        command=command,
        split=args.split,
        batch_size=args.batch_size,
    )
    print({k: summary[k] for k in ("n_prompts", "n_labels", "positive_rate", "seconds_per_label",
                                    "target_forward_tokens_per_label", "cache_shared_forward_tokens_per_label")})
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("autojudge-label", help="mine AutoJudge labels (answer-checking regenerations)")
    p.add_argument("--task", required=True, choices=["gsm8k", "humaneval"])
    p.add_argument("--pair", default="smollm2-135m", help="model pair name or target path (load_pair)")
    p.add_argument("--draft", default=None, help="draft folder overriding the pair's draft")
    p.add_argument("--split", default="train")
    p.add_argument("--limit", type=int, default=None, help="number of prompts")
    p.add_argument("--offset", type=int, default=0, help="skip this many prompts of the split first")
    p.add_argument("--out", required=True, help="label dir")
    p.add_argument("--max-new-tokens", type=int, default=None, help="response cap (default: the task's)")
    p.add_argument("--max-labels-per-prompt", type=int, default=None)
    p.add_argument("--label-fraction", type=float, default=1.0,
                   help="label each reached mismatch with this probability (others are stepped over unswapped)")
    p.add_argument("--target-id", default=None, help="model id stored in the manifest (default: --pair)")
    p.add_argument("--draft-id", default=None)
    p.add_argument("--batch-size", type=int, default=1,
                   help="walk this many prompts in lock step (batched regenerations; same labels)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1 is fastest on a busy CPU)")
    p.add_argument("--no-resume", action="store_true", help="start over instead of skipping finished prompts")
    p.set_defaults(func=_run)
