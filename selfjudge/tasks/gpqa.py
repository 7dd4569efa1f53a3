"""GPQA-diamond (198 four-choice science questions) with letter extraction.

The four options are shuffled deterministically per question (seeded by the SHA-256
of its Record ID), so the correct letter is fixed but not always "A".
Splits by CSV row index: 0..99 "eval", 100..139 "val", 140..197 "train".
The prompt follows OpenAI simple-evals ("Answer: $LETTER" on the last line).
"""

from __future__ import annotations

import csv
import hashlib
import random
import re
from pathlib import Path

from .base import Example, Task
from .data_files import gpqa_path

LETTERS = "ABCD"
TEMPLATE = (
    "Answer the following multiple choice question. The last line of your response should be of "
    "the following format: 'Answer: $LETTER' (without quotes) where LETTER is one of ABCD. "
    "Think step by step before answering.\n\n{question}\n\nA) {A}\nB) {B}\nC) {C}\nD) {D}"
)

_SEP = r"[^A-Za-z0-9\n]{0,8}"
_ANSWER_RE = re.compile(
    r"(?i:answer)" + _SEP + r"(?:(?i:is)" + _SEP + r")?(?:(?i:option|choice)\s*)?\(?([A-D])(?![A-Za-z0-9])"
)
_BOXED_RE = re.compile(r"\\boxed\s*\{\s*(?:\\text(?:bf)?\s*\{\s*)?\(?([A-D])\)?\s*\}?\s*\}")
_PAREN_RE = re.compile(r"\(([A-D])\)")
_ALONE_RE = re.compile(r"^\W*([A-D])\W*$")


def extract_letter(text: str) -> str | None:
    """Chosen option letter A-D, or None.

    Priority: the last "answer (is) X" / "Answer: X" / "answer is (X)" (case-insensitive
    "answer", upper-case letter); else the last ``\\boxed{X}``; else the last "(X)"; else
    a text that is a lone letter such as "C" or "(C).".
    """
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")
    for pattern in (_ANSWER_RE, _BOXED_RE, _PAREN_RE):
        found = pattern.findall(text)
        if found:
            return found[-1]
    m = _ALONE_RE.match(text.strip())
    return m.group(1) if m else None


def shuffle_options(record_id: str, correct: str, incorrect: list[str]) -> tuple[list[str], str]:
    """Deterministic order of the four options for one question and the correct letter."""
    options = [correct, *incorrect]
    seed = int(hashlib.sha256(record_id.encode("utf-8")).hexdigest()[:16], 16)
    order = list(range(4))
    random.Random(seed).shuffle(order)
    shuffled = [options[i] for i in order]
    return shuffled, LETTERS[order.index(0)]


class GPQA(Task):
    name = "gpqa"
    task_score_name = "accuracy"
    fidelity_name = "same letter as target"
    max_new_tokens = 512
    eval_end = 100
    val_end = 140

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path is not None else gpqa_path()

    def _rows(self) -> list[dict]:
        with open(self.path, encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            rows = []
            for i, r in enumerate(reader):
                options, letter = shuffle_options(
                    r["Record ID"], r["Correct Answer"].strip(),
                    [r[f"Incorrect Answer {k}"].strip() for k in (1, 2, 3)],
                )
                rows.append({"index": i, "record_id": r["Record ID"], "question": r["Question"].strip(),
                             "options": options, "answer": letter,
                             "domain": r.get("High-level domain", ""), "subdomain": r.get("Subdomain", "")})
        return rows

    def _to_example(self, row: dict) -> Example:
        content = TEMPLATE.format(question=row["question"], **dict(zip(LETTERS, row["options"])))
        return Example(
            task=self.name,
            prompt_id=f"{self.name}/{row['index']}",
            messages=[{"role": "user", "content": content}],
            reference=row["answer"],
            meta={k: row[k] for k in ("index", "record_id", "options", "domain", "subdomain")},
        )

    def extract_answer(self, text: str) -> str | None:
        return extract_letter(text)

    def score(self, text: str, example: Example) -> float:
        """1.0 if the extracted letter is the correct one, else 0.0."""
        return float(extract_letter(text) == example.reference)
