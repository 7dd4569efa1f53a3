"""HumanEval (164 Python problems) scored by pass@1 in the sandbox (:mod:`.sandbox`).

Splits by problem index (HumanEval/<i>): 0..99 "eval", 100..131 "val", 132..163 "train".
The model is asked for the complete function in a ```python block; the program run is
``problem prompt + extracted code + test + check(entry_point)`` (a full redefinition of
the function overrides the prompt's stub while keeping the prompt's imports and helpers;
an indented body-only answer continues the prompt).
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

from .base import Example, Task
from .data_files import humaneval_path
from .sandbox import SandboxResult, run_python

INSTRUCTION = (
    "Complete the following Python function. "
    "Reply with the complete function (signature included) in a single ```python code block."
)
_FENCE_RE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)


def extract_code(text: str, entry_point: str | None = None) -> str:
    """The code of a reply: the first fenced block that defines ``entry_point`` (if given),
    else the first fenced block (an unclosed fence runs to the end), else the whole text."""
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")
    blocks = _FENCE_RE.findall(text)
    if not blocks:
        return text
    if entry_point:
        defines = re.compile(rf"^\s*def\s+{re.escape(entry_point)}\s*\(", re.MULTILINE)
        for block in blocks:
            if defines.search(block):
                return block
    return blocks[0]


def build_program(problem: dict, code: str) -> str:
    """Test program for one completion: prompt + code + the problem's tests + check call."""
    first = next((ln for ln in code.splitlines() if ln.strip()), "")
    if first[:1] in (" ", "\t"):  # body only: continue the prompt's function
        body = problem["prompt"] + code
    else:
        body = problem["prompt"] + "\n    pass\n\n" + code
    return f"{body}\n\n{problem['test']}\n\ncheck({problem['entry_point']})\n"


class HumanEval(Task):
    name = "humaneval"
    task_score_name = "pass@1"
    fidelity_name = "same test outcome as target"
    max_new_tokens = 384
    eval_end = 100
    val_end = 132

    def __init__(self, path: str | Path | None = None, *, timeout_s: float = 10.0, memory_mb: int = 1024):
        self.path = Path(path) if path is not None else humaneval_path()
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb
        self._results: dict[tuple[str, str], SandboxResult] = {}

    def _rows(self) -> list[dict]:
        opener = gzip.open if str(self.path).endswith(".gz") else open
        rows = []
        with opener(self.path, "rt", encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    continue
                obj = json.loads(line)
                index = int(obj["task_id"].split("/")[-1])
                rows.append({"index": index, **{k: obj[k] for k in
                             ("task_id", "prompt", "canonical_solution", "test", "entry_point")}})
        rows.sort(key=lambda r: r["index"])
        return rows

    def _to_example(self, row: dict) -> Example:
        problem = {k: row[k] for k in ("task_id", "prompt", "canonical_solution", "test", "entry_point")}
        return Example(
            task=self.name,
            prompt_id=f"{self.name}/{row['index']}",
            messages=[{"role": "user", "content": f"{INSTRUCTION}\n\n```python\n{row['prompt']}```"}],
            reference=problem,
            meta={"index": row["index"], "task_id": row["task_id"], "entry_point": row["entry_point"]},
        )

    def extract_answer(self, text: str) -> str:
        return extract_code(text)

    def run(self, text: str, example: Example) -> SandboxResult:
        """Sandboxed test run of a generation (cached per prompt and extracted code)."""
        code = extract_code(text, example.reference["entry_point"])
        key = (example.prompt_id, code)
        if key not in self._results:
            self._results[key] = run_python(build_program(example.reference, code),
                                            timeout_s=self.timeout_s, memory_mb=self.memory_mb, must_finish=True)
        return self._results[key]

    def score(self, text: str, example: Example) -> float:
        """pass@1 of one sample: 1.0 if all the problem's tests pass, else 0.0."""
        return float(self.run(text, example).passed)

    def same_answer(self, text_a: str, text_b: str, example: Example) -> bool:
        """Same outcome: both pass or both fail the unit tests."""
        return self.run(text_a, example).passed == self.run(text_b, example).passed
