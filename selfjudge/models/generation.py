"""Plain greedy decoding helpers over a Hugging Face causal LM (no speculation).

The label miners need three things a speculative engine is overkill for: the
stop tokens of a model, the target's greedy responses (batched, or one
sequence with a cache they can crop and copy) and the draft's teacher-forced
top-1 predictions. They live here, below every job that uses them, so that
each concept has one implementation.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch

__all__ = [
    "eos_token_ids",
    "greedy_responses",
    "greedy_generate",
    "new_cache",
    "crop_cache",
    "draft_top1",
    "mismatches",
]


def eos_token_ids(model, tokenizer=None, eos_token_id: int | list[int] | None = None) -> set[int]:
    """The token ids that end a response: ``eos_token_id`` if given, else the model's
    generation config, else the tokenizer's EOS (empty set when none is known)."""
    if eos_token_id is None:
        config = getattr(model, "generation_config", None)
        eos_token_id = getattr(config, "eos_token_id", None) if config is not None else None
    if eos_token_id is None and tokenizer is not None:
        eos_token_id = tokenizer.eos_token_id
    if eos_token_id is None:
        return set()
    if isinstance(eos_token_id, int):
        return {int(eos_token_id)}
    return {int(t) for t in eos_token_id}


@torch.no_grad()
def greedy_responses(model, tokenizer, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
    """Greedy responses of ``model`` to token-id prompts, one batched ``generate`` with
    left padding; each response is cut after its first EOS, which it keeps."""
    if not prompts:
        return []
    eos = sorted(eos_token_ids(model, tokenizer))
    pad = getattr(tokenizer, "pad_token_id", None)
    if pad is None:
        pad = eos[0] if eos else 0
    width = max(len(p) for p in prompts)
    device = next(model.parameters()).device
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)  # [B, width]
    attention = torch.zeros((len(prompts), width), dtype=torch.long)  # [B, width]
    for b, p in enumerate(prompts):
        ids[b, width - len(p):] = torch.tensor(p, dtype=torch.long)
        attention[b, width - len(p):] = 1
    out = model.generate(
        input_ids=ids.to(device),
        attention_mask=attention.to(device),
        max_new_tokens=max_new_tokens,
        do_sample=False,
        pad_token_id=pad,
        eos_token_id=eos or None,
    )
    responses = []
    for row in out[:, width:].tolist():
        cut = next((k + 1 for k, t in enumerate(row) if t in eos), len(row))
        responses.append(row[:cut])
    return responses


def new_cache(model):
    """An empty ``DynamicCache`` for ``model``."""
    from transformers import DynamicCache

    try:
        return DynamicCache(config=model.config)
    except TypeError:
        return DynamicCache()


def crop_cache(cache, length: int) -> None:
    """Keep the first ``length`` positions of a DynamicCache (in place)."""
    extra = cache.get_seq_length() - length
    if extra < 0:
        raise ValueError(f"length: cannot crop a cache of {cache.get_seq_length()} positions to {length}")
    if extra:
        cache.crop(-extra)


@functools.lru_cache(maxsize=None)
def _forward_params(cls) -> frozenset:
    return frozenset(inspect.signature(cls.forward).parameters)


def _cached_forward(model, input_ids: torch.Tensor, cache, want_hidden: bool = False):
    """One cached forward: (last-position logits [V], final-layer hidden [H] or None, cache)."""
    params = _forward_params(type(model))
    kw = {"cache": cache} if "cache" in params else {"past_key_values": cache}
    if "logits_to_keep" in params:
        kw["logits_to_keep"] = 1
    out = model(input_ids=input_ids, use_cache=True, output_hidden_states=want_hidden, **kw)
    cache_out = getattr(out, "cache", None)
    if cache_out is None:
        cache_out = out.past_key_values
    hidden = out.hidden_states[-1][0, -1].to(torch.float32).clone() if want_hidden else None
    return out.logits[0, -1], hidden, cache_out


def greedy_generate(
    model,
    input_ids: torch.Tensor,  # [1, t] tokens not yet in the cache
    cache,  # DynamicCache holding the context before input_ids (may be empty)
    max_tokens: int,
    eos_ids: set[int],
    *,
    want_hidden: bool = False,
) -> tuple[list[int], torch.Tensor | None, Any, int]:
    """Greedy continuation of one sequence after feeding ``input_ids``.

    Returns ``(new tokens, hidden, cache, tokens fed)``. Stops after ``max_tokens``
    new tokens or at an EOS (kept in the output). If the last fed token is itself
    an EOS or ``max_tokens`` is 0, nothing is generated. ``hidden`` is the
    final-layer state [H] at the last position of ``input_ids`` (from the first
    forward, when ``want_hidden``). The last generated token is never fed, so the
    cache ends up covering context + input_ids + new[:-1]: a caller can crop and
    copy it to branch off any earlier position.
    """
    new: list[int] = []
    hidden = None
    fed = 0
    stop_now = max_tokens <= 0 or int(input_ids[0, -1]) in eos_ids
    if stop_now and not want_hidden:
        return new, hidden, cache, fed
    with torch.no_grad():
        logits, hidden, cache = _cached_forward(model, input_ids, cache, want_hidden)
        fed += int(input_ids.shape[1])
        if stop_now:
            return new, hidden, cache, fed
        while True:
            nxt = int(logits.argmax())
            new.append(nxt)
            if len(new) >= max_tokens or nxt in eos_ids:
                break
            logits, _, cache = _cached_forward(model, torch.tensor([[nxt]], dtype=torch.long), cache)
            fed += 1
    return new, hidden, cache, fed


@torch.no_grad()
def draft_top1(draft, prompt_ids: list[int], response_ids: list[int]) -> list[int | None]:
    """The draft's teacher-forced top-1 for each response position:
    ``z_i = argmax D(. | x, y_<i)`` (one forward over ``x + y[:-1]``).

    ``draft`` is a causal LM, or a drafter with ``teacher_forced_top1(prompt_ids,
    response_ids)`` (the engine's EAGLE head and prompt lookup): its first proposal after
    each true prefix, None where it would propose nothing (never a mismatch).
    """
    if hasattr(draft, "teacher_forced_top1"):
        return draft.teacher_forced_top1(list(prompt_ids), list(response_ids))
    if not response_ids:
        return []
    device = next(draft.parameters()).device
    ids = torch.tensor([list(prompt_ids) + list(response_ids[:-1])], dtype=torch.long, device=device)  # [1, t]
    logits = draft(input_ids=ids).logits[0]  # [t, V]
    p = len(prompt_ids)
    return logits[p - 1 : p - 1 + len(response_ids)].argmax(-1).tolist()


def mismatches(z: list[int | None], y: list[int], start: int = 0) -> list[int]:
    """Response positions >= ``start`` where the draft proposed a token (not None) other than y's."""
    return [i for i in range(start, len(y)) if z[i] is not None and z[i] != y[i]]
