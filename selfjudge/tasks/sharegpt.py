"""Open-ended prompts from a ShareGPT dump (first user turn of real conversations).

The shipped ``ShareGPT_V3_unfiltered_cleaned_split.json`` is cut off mid-file, so it is
decoded object by object (``json.JSONDecoder.raw_decode``) and the incomplete tail is
dropped (~17.6k complete conversations).

Splits by RAW conversation index in file order (before filtering, so they never move):
0..999 "eval", 1000..1999 "val", >= 2000 "train".
Filter (applied within each split): the conversation's first turn is from the user
("human"/"user") — conversations that start with an assistant turn are continuations
without context — and its stripped text is non-empty and at most ``MAX_PROMPT_CHARS``.

Score: ROUGE-L F against a reference text — the target's own greedy output, which the
caller puts into ``example.reference`` or passes as ``reference_text``. The
reference-free score is :func:`selfjudge.tasks.metrics.mean_logprob`.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

from .base import Example, Task
from .data_files import sharegpt_path
from .metrics import mean_logprob, rouge_l

MAX_PROMPT_CHARS = 2000
_SEP_RE = re.compile(r"[\s,]*")


def decode_conversations(text: str) -> list[dict]:
    """Complete top-level objects of a (possibly truncated) JSON array, in order."""
    start = text.find("[")
    if start < 0:
        raise ValueError("text does not contain a JSON array")
    decoder = json.JSONDecoder()
    pos, out = start + 1, []
    while True:
        pos = _SEP_RE.match(text, pos).end()
        if pos >= len(text) or text[pos] == "]":
            break
        try:
            obj, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            break  # truncated tail
        out.append(obj)
    return out


@functools.lru_cache(maxsize=4)
def _read(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return decode_conversations(f.read())


def first_user_turn(conv: dict) -> str | None:
    turns = conv.get("conversations") or []
    if not turns or turns[0].get("from") not in ("human", "user"):
        return None
    return turns[0].get("value")


class ShareGPT(Task):
    name = "sharegpt"
    max_new_tokens = 256
    eval_end = 1000
    val_end = 2000
    task_score_name = "target mean log-lik"
    fidelity_name = "ROUGE-L vs target"
    #: ``same_answer`` threshold on ROUGE-L F between the two generations.
    same_threshold = 0.5

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path is not None else sharegpt_path()

    def _rows(self) -> list[dict]:
        rows = []
        for i, conv in enumerate(_read(str(self.path))):
            prompt = first_user_turn(conv)
            if prompt is None or not prompt.strip() or len(prompt.strip()) > MAX_PROMPT_CHARS:
                continue
            rows.append({"index": i, "id": str(conv.get("id", "")), "prompt": prompt.strip()})
        return rows

    def _to_example(self, row: dict) -> Example:
        return Example(
            task=self.name,
            prompt_id=f"{self.name}/{row['index']}",
            messages=[{"role": "user", "content": row["prompt"]}],
            reference=None,
            meta={"index": row["index"], "id": row["id"]},
        )

    def extract_answer(self, text: str) -> str:
        """The whole generation (open-ended: no final answer), whitespace-stripped."""
        return text.strip()

    def score(self, text: str, example: Example, reference_text: str | None = None) -> float:
        """ROUGE-L F of ``text`` against ``reference_text`` (default ``example.reference``)."""
        ref = reference_text if reference_text is not None else example.reference
        if ref is None:
            raise ValueError(
                "reference_text is required for sharegpt (the target's own greedy output), "
                "or set example.reference"
            )
        return rouge_l(text, ref)

    def same_answer(self, text_a: str, text_b: str, example: Example) -> bool:
        """Open-ended agreement: ROUGE-L F between the two texts >= ``same_threshold``."""
        return rouge_l(text_a, text_b) >= self.same_threshold

    def task_score(self, text: str, example: Example, *, model=None, tokenizer=None, prompt: str | None = None,
                   token_ids: list[int] | None = None) -> float:
        """Open-ended prompts have no answer to check: the target's mean log-likelihood of the
        generated tokens (``model`` = the target); NaN for an empty generation."""
        if model is None or tokenizer is None or prompt is None or token_ids is None:
            raise ValueError("model, tokenizer, prompt and token_ids are required for the sharegpt task score")
        if not token_ids:
            return float("nan")
        return mean_logprob(model, tokenizer, prompt, completion_ids=token_ids)

    def fidelity(self, text: str, reference_text: str, example: Example) -> float:
        """ROUGE-L F of ``text`` against the target's own greedy output."""
        return rouge_l(text, reference_text)

    def reference_chats(self, start: int = 0, stop: int | None = None) -> list[list[dict]]:
        """First user turn + first assistant reply of the raw conversations with index in
        ``[start, stop)`` (the first turn must be "human", the second "gpt", both non-empty;
        the user turn is cut at 2,000 and the reply at 3,000 characters)."""
        out = []
        for conv in _read(str(self.path))[start:stop]:
            turns = conv.get("conversations", [])
            if len(turns) < 2 or turns[0].get("from") != "human" or turns[1].get("from") != "gpt":
                continue
            user, reply = turns[0].get("value", "").strip(), turns[1].get("value", "").strip()
            if user and reply:
                out.append([{"role": "user", "content": user[:2000]}, {"role": "assistant", "content": reply[:3000]}])
        return out
