"""What ``SpeculativeEngine.generate`` takes in and hands out per request: prompts to token ids
(checked: valid text, ids in the vocabulary, within the context window), stop strings, and
appending a cycle's tokens to a request cut at EOS / a stop string / the length limit."""

from __future__ import annotations

from typing import Callable

import torch

__all__ = ["encode_prompts", "check_context", "stop_strings", "append_tokens"]


def _check_text(prompt, index: int) -> None:
    """Text must be valid Unicode (a command line or file read with the wrong encoding gives
    lone surrogates, which the tokenizer cannot take)."""
    texts = [prompt] if isinstance(prompt, str) else (
        [m.get("content") for m in prompt if isinstance(m, dict)] if isinstance(prompt, (list, tuple)) else [])
    for text in texts:
        if isinstance(text, str):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as err:
                raise ValueError(f"prompts[{index}] is not valid UTF-8 text (undecodable byte at character "
                                 f"{err.start}); decode the input as UTF-8 first") from None


def _token_ids(p, index: int, chat: bool, tokenizer) -> list[int]:
    """One prompt (text, message list or ids) as token ids."""
    if isinstance(p, torch.Tensor):
        p = p.tolist()
    _check_text(p, index)
    if chat:
        if tokenizer is None:
            raise ValueError("chat=True needs a tokenizer")
        msgs = [{"role": "user", "content": p}] if isinstance(p, str) else p
        p = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    if isinstance(p, str):
        if tokenizer is None:
            raise ValueError("string prompts need a tokenizer")
        p = tokenizer(p, add_special_tokens=False)["input_ids"]
    try:
        return [int(t) for t in p]
    except (TypeError, ValueError):
        raise ValueError(f"prompts[{index}] must be text, a message list or token ids, "
                         f"got {type(p).__name__}") from None


def encode_prompts(prompts, chat: bool, tokenizer, vocab_size: int | None) -> list[list[int]]:
    """A prompt or a list of prompts as token-id lists (``ValueError`` naming the bad prompt)."""
    if isinstance(prompts, (str, dict)) or (
        isinstance(prompts, (list, tuple)) and prompts and isinstance(prompts[0], int)
    ):
        prompts = [prompts]
    out = []
    for index, p in enumerate(prompts):
        ids = _token_ids(p, index, chat, tokenizer)
        if not ids:
            raise ValueError("prompts must not be empty")
        if vocab_size is not None and any(not 0 <= t < vocab_size for t in ids):
            raise ValueError(f"prompts[{index}] holds token ids outside [0, {vocab_size})")
        out.append(ids)
    return out


def check_context(prompts: list[list[int]], max_new_tokens: int, window: int | None) -> None:
    """Prompt + new tokens must fit the target's context ``window`` (positions past it are
    untrained: the model would run, slowly, and return nonsense)."""
    if window is None:
        return
    longest = max(range(len(prompts)), key=lambda i: len(prompts[i]))
    need = len(prompts[longest]) + max_new_tokens
    if need > window:
        raise ValueError(
            f"prompts[{longest}] has {len(prompts[longest])} tokens; with max_new_tokens={max_new_tokens} that is "
            f"{need} positions, more than the target's context window ({window}): shorten the prompt or "
            "lower max_new_tokens")


def stop_strings(stop) -> list[str]:
    """``stop`` as a list of non-empty strings (``ValueError`` naming the bad entry otherwise)."""
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    for st in stops:
        if not isinstance(st, str) or not st:
            raise ValueError(f"stop: every stop string must be a non-empty string, got {st!r}")
    return stops


def append_tokens(out: list[int], new: list[int], max_new: int, stops: list[str], eos_ids,
                  decode: Callable[[list[int]], str]) -> str:
    """Append emitted tokens to one request's ``out``, cut at EOS / a stop string / the limit.

    Returns the finish reason, or "" if the request goes on.
    """
    start = len(out)
    reason = ""
    for t in new:
        out.append(t)
        if t in eos_ids:
            reason = "eos"
            break
        if len(out) >= max_new:
            reason = "length"
            break
    if stops and any(st in decode(out) for st in stops):
        # shortest prefix whose text contains a stop string (search only the new tokens)
        for n in range(start + 1, len(out) + 1):
            if any(st in decode(out[:n]) for st in stops):
                del out[n:]
                return "stop"
    return reason
