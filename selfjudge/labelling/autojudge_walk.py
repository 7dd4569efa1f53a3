"""AutoJudge's semi-greedy walk over one prompt (SPEC §3): the answer-checking baseline.

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

:func:`selfjudge.labelling.autojudge_batch.mine_batch` runs the same walk for
several prompts in lock step; :func:`selfjudge.labelling.autojudge.mine_task`
writes the labels of a task split into label shards.
"""

from __future__ import annotations

import copy
import random
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from selfjudge.models.generation import crop_cache, draft_top1, greedy_generate, mismatches, new_cache

__all__ = ["MinedPrompt", "mine_prompt"]

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
        target, torch.tensor([prompt_ids]), new_cache(target), max_new_tokens, eos_ids
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
        i = next(iter(mismatches(z, y, cursor)), None)
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
