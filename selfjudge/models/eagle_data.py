"""Training and held-out text for an EAGLE head, from the shipped tasks.

* Self-generated (the default): the target's own greedy responses to chat prompts of
  the tasks' *train* splits (GSM8K rows >= 500, ShareGPT conversations >= 2000); the
  held-out text is its responses to the *val* splits' first prompts. Generation is
  cached (``selfjudge.models.eagle_train.self_generated_sequences``).
* Reference: the tasks' reference answers as chats (``Task.reference_chats``), the
  distillation data of the standalone draft, for the comparison.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["task_prompts", "self_generated_text", "reference_text"]


def task_prompts(tokenizer, split: str, n_gsm8k: int, n_sharegpt: int) -> list[list[int]]:
    """Chat-formatted prompt ids: the first ``n_gsm8k`` GSM8K and ``n_sharegpt`` ShareGPT prompts of
    ``split``, interleaved so that a prefix of the list mixes both tasks."""
    from selfjudge.tasks import load_task

    lists = []
    for name, n in (("gsm8k", n_gsm8k), ("sharegpt", n_sharegpt)):
        task = load_task(name)
        lists.append([tokenizer(task.build_prompt(tokenizer, ex), add_special_tokens=False)["input_ids"]
                      for ex in task.examples(split, limit=n)])
    mixed = []
    for i in range(max(len(lst) for lst in lists)):
        mixed += [lst[i] for lst in lists if i < len(lst)]
    return mixed


def self_generated_text(target, tokenizer, out_dir: str | Path, *, n_gsm8k: int, n_sharegpt: int, n_heldout: int,
                        max_new_tokens: int = 256, batch_size: int = 8, progress: bool = True):
    """``(train, heldout)`` sequences of the target's own greedy responses (cached under ``out_dir``)."""
    from .eagle_train import self_generated_sequences

    out_dir = Path(out_dir)
    heldout = self_generated_sequences(
        target, tokenizer, task_prompts(tokenizer, "val", n_heldout // 2, n_heldout - n_heldout // 2),
        out_dir / "heldout-text.jsonl", max_new_tokens=max_new_tokens, batch_size=batch_size, progress=progress)
    train = self_generated_sequences(
        target, tokenizer, task_prompts(tokenizer, "train", n_gsm8k, n_sharegpt), out_dir / "train-text.jsonl",
        max_new_tokens=max_new_tokens, batch_size=batch_size, progress=progress)
    return train, heldout


def reference_text(tokenizer, *, n_gsm8k: int, n_sharegpt: int, max_len: int = 384) -> list[tuple[list[int], int]]:
    """Reference answers of the train splits as (ids, response start) sequences."""
    from selfjudge.tasks import load_task

    from .distill import encode_chat

    chats = load_task("gsm8k").reference_chats(500, 500 + n_gsm8k)
    chats += load_task("sharegpt").reference_chats(2000, None)[:n_sharegpt]
    return [s for s in (encode_chat(tokenizer, c, max_len) for c in chats) if s]
