"""AutoJudge's walk (SPEC §3) for several prompts at once, on a CPU budget.

The walk over one prompt is sequential (whether a swap is kept decides the next
response), but walks over different prompts are independent. :func:`mine_batch`
runs the walks of a batch of prompts in lock step: every round, each prompt
that still has a mismatch to label contributes one regeneration, and all of
them decode together through the batched greedy generator the caller hands in
(one target forward per generated token for the whole batch instead of one per
prompt; the CLI hands the engine's target-only path, the library default is
the model's own ``generate``). Labels, positions and kept responses are those
of :func:`autojudge_walk.mine_prompt` with the same seeds (a test checks it).

Cost accounting: the batched regeneration re-reads each swapped prefix and the
feature pass reads it once more, so ``target_forward_tokens`` (what this miner
fed) is larger than what a cache-sharing miner needs. ``cache_shared_forward_tokens``
is the latter (the swapped token plus the regenerated tokens, as
:func:`autojudge_walk.mine_prompt` feeds them) -- the conservative count for comparing
labelling costs.
"""

from __future__ import annotations

import random
import time
from typing import Callable, Sequence

import torch

from selfjudge.labelling.autojudge_walk import MinedPrompt
from selfjudge.models.generation import draft_top1, mismatches

__all__ = ["mine_batch", "last_hidden"]


def last_hidden(model, sequences: Sequence[list[int]], pad_id: int = 0) -> torch.Tensor:  # [n, H]
    """Final-layer hidden state after the last token of each sequence (one right-padded forward)."""
    n, t = len(sequences), max(len(s) for s in sequences)
    ids = torch.full((n, t), pad_id, dtype=torch.long)  # [n, t]
    mask = torch.zeros(n, t, dtype=torch.long)  # [n, t]
    for j, s in enumerate(sequences):
        ids[j, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[j, : len(s)] = 1
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True, logits_to_keep=1)
    last = torch.tensor([len(s) - 1 for s in sequences])
    return out.hidden_states[-1][torch.arange(n), last].to(torch.float32)


GenerateBatch = Callable[[list[list[int]], int], list[list[int]]]


def _greedy_batch(generate: GenerateBatch, prompts: list[list[int]], caps: list[int]) -> list[list[int]]:
    """Greedy continuations (EOS kept) of each prompt, at most ``caps[j]`` new tokens each."""
    out: list[list[int]] = [[] for _ in prompts]
    todo = [j for j, c in enumerate(caps) if c > 0]
    if todo:
        res = generate([prompts[j] for j in todo], max(caps[j] for j in todo))
        for j, ids in zip(todo, res):
            out[j] = list(ids)[: caps[j]]  # a greedy run with a smaller cap is a prefix of this one
    return out


def mine_batch(
    target,
    draft,
    prompt_ids: Sequence[list[int]],
    same_answer: Sequence[Callable[[list[int], list[int]], bool]],
    max_new_tokens: int,
    eos_ids: set[int],
    *,
    generate: GenerateBatch,
    seeds: Sequence[int],
    max_labels: int | None = None,
    label_fraction: float = 1.0,
) -> list[MinedPrompt]:
    """The AutoJudge walk of :func:`autojudge_walk.mine_prompt` for every prompt of a batch.

    Args:
        prompt_ids: tokenised prompts (chat template applied), one list per prompt.
        same_answer: per prompt, ``same_answer(candidate_ids, reference_ids)``.
        generate: ``generate(prompts, max_new_tokens)``: the target's greedy
            continuations of token-id prompts (EOS kept, stopping at ``eos_ids``).
        seeds: per prompt, the seed of the label-fraction draw (as ``mine_prompt``'s ``seed``).
    Returns one :class:`MinedPrompt` per prompt; times are the batch's, split evenly.
    """
    n = len(prompt_ids)
    if not (len(same_answer) == len(seeds) == n):
        raise ValueError("prompt_ids, same_answer and seeds must have one entry per prompt")
    if not 0.0 < label_fraction <= 1.0:
        raise ValueError(f"label_fraction must be in (0, 1], got {label_fraction}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if any(len(p) == 0 for p in prompt_ids):
        raise ValueError("prompt_ids must not contain an empty prompt")
    t0 = time.perf_counter()
    refs = _greedy_batch(generate, [list(p) for p in prompt_ids], [max_new_tokens] * n)
    t_ref = time.perf_counter() - t0
    results = [MinedPrompt(reference_ids=list(r), final_ids=list(r),
                           reference_forward_tokens=len(p) + max(len(r) - 1, 0))
               for p, r in zip(prompt_ids, refs)]
    t1 = time.perf_counter()
    rngs = [random.Random(s) for s in seeds]
    ys = [list(r) for r in refs]
    zs = [draft_top1(draft, list(p), y) if y else [] for p, y in zip(prompt_ids, ys)]
    for r, p, y in zip(results, prompt_ids, ys):
        r.draft_forward_tokens += len(p) + len(y) - 1 if y else 0
    cursors = [0] * n
    changed = [False] * n
    while True:
        picks: list[tuple[int, int]] = []  # (prompt, mismatch position)
        for b in range(n):
            res, y, z = results[b], ys[b], zs[b]
            while max_labels is None or len(res.labels) < max_labels:
                i = next(iter(mismatches(z, y, cursors[b])), None)
                if i is None:
                    break
                if label_fraction < 1.0 and rngs[b].random() >= label_fraction:
                    cursors[b] = i + 1
                    continue
                picks.append((b, i))
                break
        if not picks:
            break
        prefixes = [list(prompt_ids[b]) + ys[b][:i] + [zs[b][i]] for b, i in picks]
        caps = [0 if zs[b][i] in eos_ids else max_new_tokens - i - 1 for b, i in picks]
        news = _greedy_batch(generate, prefixes, caps)
        feats = last_hidden(target, prefixes)  # [len(picks), H]
        for (b, i), prefix, new, h in zip(picks, prefixes, news, feats):
            res, y, z = results[b], ys[b], zs[b]
            res.target_forward_tokens += len(prefix) + max(len(new) - 1, 0) + len(prefix)  # regen + feature pass
            res.cache_shared_forward_tokens += 1 + max(len(new) - 1, 0)
            cand = y[:i] + [z[i]] + new
            ok = bool(same_answer[b](cand, res.reference_ids))
            res.positions.append(i)
            res.target_token_ids.append(y[i])
            res.draft_token_ids.append(z[i])
            res.labels.append(int(ok))
            res.original_prefix.append(not changed[b])
            res.regen_tokens.append(len(new))
            res.features.append(h.clone())
            if ok:
                ys[b], changed[b] = cand, True
                zs[b] = draft_top1(draft, list(prompt_ids[b]), cand)
                res.draft_forward_tokens += len(prompt_ids[b]) + len(cand) - 1
            cursors[b] = i + 1
    wall = time.perf_counter() - t1
    for r, y in zip(results, ys):
        r.final_ids = y
        r.wall_seconds = wall / n
        r.reference_wall_seconds = t_ref / n
    return results
