"""GSM8K (test set, 1,319 grade-school maths word problems) with final-answer scoring.

Splits by row index of ``test.jsonl`` (fixed; the default draft's distillation data
uses "train" only): rows 0..299 "eval", 300..499 "val", 500..1318 "train".
"""

from __future__ import annotations

import json
import re
from decimal import Decimal, InvalidOperation
from pathlib import Path

from .base import Example, Task
from .data_files import gsm8k_path

INSTRUCTION = (
    "Solve the following math problem step by step. "
    'At the end, write the final answer as a number on its own line in the form "#### <number>".'
)

# A number: optional sign directly attached (before or after a "$"), thousands
# separators, optional decimals. The look-behind keeps "16-3" from reading "-3" and
# "x2" from reading "2" as a separate number start mid-word.
_NUM_RE = re.compile(
    r"(?<![\w.])(?P<s1>[-−])?\$?(?P<s2>[-−])?"
    r"(?P<num>\d{1,3}(?:,\d{3})+(?!\d)(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
)
_HASH_RE = re.compile(r"####\s*([^\n]*)")
_BOXED_RE = re.compile(r"\\boxed\s*\{((?:[^{}]|\{[^{}]*\})*)\}")
# "answer" needs a connector ("is", ":", "=", "would be") so "To answer this, 16 - 3 ..." is skipped.
_ANSWER_RE = re.compile(
    r"answer\**\s*(?:is\b|was\b|:|=|would\s+be\b|will\s+be\b)([^\n]{0,60})", re.IGNORECASE
)


def canonical_number(text: str) -> str | None:
    """Canonical string of the FIRST number in ``text`` ("1,234.50" -> "1234.5", "-$3" -> "-3")."""
    m = _NUM_RE.search(text)
    return _canon(m) if m else None


def _canon(m: re.Match) -> str | None:
    try:
        value = Decimal(m.group("num").replace(",", ""))
    except InvalidOperation:  # pragma: no cover - regex only admits valid numerals
        return None
    if m.group("s1") or m.group("s2"):
        value = -value
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(), "f")


def extract_number(text: str) -> str | None:
    """Final numeric answer of a GSM8K-style solution, as a canonical string, or None.

    Priority: the last "#### N"; else the last "\\boxed{N}"; else the last
    "answer is / answer: / answer = N" (first number after it on that line); else the
    last number anywhere. Commas, "$", trailing units/periods are ignored.
    """
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")
    for pattern in (_HASH_RE, _BOXED_RE, _ANSWER_RE):
        for m in reversed(list(pattern.finditer(text))):
            num = canonical_number(m.group(1))
            if num is not None:
                return num
    last = None
    for last in _NUM_RE.finditer(text):
        pass
    return _canon(last) if last is not None else None


class GSM8K(Task):
    name = "gsm8k"
    max_new_tokens = 384
    eval_end = 300
    val_end = 500

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path is not None else gsm8k_path()

    def _rows(self) -> list[dict]:
        rows = []
        with open(self.path, encoding="utf-8") as f:
            for i, line in enumerate(f):
                if not line.strip():
                    continue
                obj = json.loads(line)
                rows.append({"index": i, "question": obj["question"], "answer": obj["answer"]})
        return rows

    def _to_example(self, row: dict) -> Example:
        return Example(
            task=self.name,
            prompt_id=f"{self.name}/{row['index']}",
            messages=[{"role": "user", "content": f"{INSTRUCTION}\n\n{row['question']}"}],
            reference=extract_number(row["answer"]),
            meta={"index": row["index"], "question": row["question"], "solution": row["answer"]},
        )

    def extract_answer(self, text: str) -> str | None:
        return extract_number(text)

    def reference_chats(self, start: int = 0, stop: int | None = None) -> list[list[dict]]:
        """The bare question + the reference solution of rows ``[start, stop)``, with the
        calculator annotations ``<<...>>`` removed and ``#### N`` written as "The answer is N."."""
        out = []
        for row in self._rows():
            if row["index"] < start or (stop is not None and row["index"] >= stop):
                continue
            answer = re.sub(r"<<[^>]*>>", "", row["answer"])
            body, _, final = answer.rpartition("####")
            answer = f"{body.strip()}\nThe answer is {final.strip()}." if final else answer
            out.append([{"role": "user", "content": row["question"]}, {"role": "assistant", "content": answer}])
        return out

    def score(self, text: str, example: Example) -> float:
        """1.0 if the extracted final answer equals the reference number, else 0.0."""
        pred = extract_number(text)
        return float(pred is not None and pred == example.reference)
