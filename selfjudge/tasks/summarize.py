"""Summarisation of long ShareGPT assistant answers: an open-ended task the 135M target can do,
and one where prompt lookup has text to copy.

Rows: the first assistant reply of each raw ShareGPT conversation (the turn after a first
user turn) with 600 to 2,500 characters of plain prose (code-heavy replies, with three or
more fenced blocks, are left out); the prompt asks for a summary in two or three sentences.
Splits by raw conversation index, as :mod:`selfjudge.tasks.sharegpt`: 0..999 "eval",
1000..1999 "val", >= 2000 "train" (disjoint, and disjoint from no other task's training
split, since every task trained on ShareGPT uses its own "train" rows >= 2000).

Scores as ShareGPT: the target's mean log-likelihood of the output (no reference answer
exists), fidelity ROUGE-L against the target's own greedy output (the bench adds the
semantic similarity of :mod:`selfjudge.tasks.semantic`).
"""

from __future__ import annotations

from .base import Example
from .sharegpt import ShareGPT, _read

MIN_CHARS, MAX_CHARS = 600, 2500
INSTRUCTION = "Summarize the following text in two or three sentences."


class Summarize(ShareGPT):
    name = "summarize"
    max_new_tokens = 96

    def _rows(self) -> list[dict]:
        rows = []
        for i, conv in enumerate(_read(str(self.path))):
            turns = conv.get("conversations") or []
            if len(turns) < 2 or turns[0].get("from") not in ("human", "user") or turns[1].get("from") != "gpt":
                continue
            text = (turns[1].get("value") or "").strip()
            if not MIN_CHARS <= len(text) <= MAX_CHARS or text.count("```") >= 6:
                continue
            rows.append({"index": i, "id": str(conv.get("id", "")), "prompt": f"{INSTRUCTION}\n\n{text}"})
        return rows

    def _to_example(self, row: dict) -> Example:
        ex = super()._to_example(row)
        return Example(task=self.name, prompt_id=f"{self.name}/{row['index']}", messages=ex.messages,
                       reference=None, meta=ex.meta)

    def reference_chats(self, start: int = 0, stop: int | None = None) -> list[list[dict]]:
        raise NotImplementedError("summarize has no reference summaries")
