"""HumanEval loader, code extraction and pass@1 through the sandbox."""

import pytest

from selfjudge.tasks import load_task
from selfjudge.tasks.humaneval import build_program, extract_code


def test_extract_code():
    assert extract_code("Sure!\n```python\ndef f():\n    return 1\n```\nDone.") == "def f():\n    return 1\n"
    assert extract_code("```\nx = 1\n```") == "x = 1\n"
    assert extract_code("```python\ndef f():\n    return 2") == "def f():\n    return 2"  # unclosed fence
    assert extract_code("    return 3\n") == "    return 3\n"  # no fence: raw text
    assert extract_code("```py\na\n```\n```python\nb\n```") == "a\n"  # first block
    two = "Usage:\n```python\nprint(f(1))\n```\nCode:\n```python\ndef f(x):\n    return x\n```"
    assert extract_code(two) == "print(f(1))\n" and extract_code(two, "f") == "def f(x):\n    return x\n"
    with pytest.raises(ValueError, match="text"):
        extract_code(None)


def test_real_file_counts_and_splits():
    task = load_task("humaneval")
    splits = {s: task.examples(s) for s in ("eval", "val", "train")}
    assert {s: len(v) for s, v in splits.items()} == {"eval": 100, "val": 32, "train": 32}
    assert splits["eval"][0].prompt_id == "humaneval/0" and splits["val"][0].prompt_id == "humaneval/100"
    assert splits["train"][-1].meta["task_id"] == "HumanEval/163"
    ex = splits["eval"][0]
    assert ex.reference["entry_point"] == "has_close_elements"
    assert "```python\nfrom typing import List" in ex.messages[0]["content"]


def test_pass_at_1_correct_wrong_body_and_hostile():
    task = load_task("humaneval")
    ex = task.examples("eval", limit=1)[0]  # HumanEval/0 has_close_elements
    full = "Here you go:\n```python\n" + ex.reference["prompt"] + ex.reference["canonical_solution"] + "```"
    body = ex.reference["canonical_solution"]  # indented body continuing the prompt
    wrong = "```python\ndef has_close_elements(numbers, threshold):\n    return False\n```"
    loop = "```python\ndef has_close_elements(numbers, threshold):\n    while True:\n        pass\n```"
    assert task.score(full, ex) == 1.0
    assert task.score(body, ex) == 1.0
    assert task.score(wrong, ex) == 0.0
    assert task.score("I cannot do that.", ex) == 0.0
    assert task.same_answer(full, body, ex) and not task.same_answer(full, wrong, ex)
    fast = type(task)(timeout_s=1.5)
    r = fast.run(loop, ex)
    assert r.status == "timeout" and r.wall_s < 4.0
    prog = build_program(ex.reference, extract_code(wrong))
    assert prog.rstrip().endswith("check(has_close_elements)") and ex.reference["test"] in prog


def test_canonical_solutions_of_a_slice_pass():
    task = load_task("humaneval")
    exs = task.examples("val", limit=6)
    assert [task.score(e.reference["canonical_solution"], e) for e in exs] == [1.0] * 6


@pytest.mark.parametrize("exit_call", ["import sys\nsys.exit(0)", "import os\nos._exit(0)", "raise SystemExit",
                                       "raise SystemExit(0)", "import sys\nsys.stdout.close()\nsys.exit(0)"])
def test_early_exit_is_not_a_pass(exit_call):
    """Code that exits with status 0 before the tests run fails (it used to pass unchecked)."""
    task = load_task("humaneval")
    ex = task.examples("eval", limit=1)[0]
    wrong = f"```python\ndef has_close_elements(numbers, threshold):\n    return False\n\n{exit_call}\n```"
    r = task.run(wrong, ex)
    assert r.returncode == 0 and r.status == "failed" and "exited before its last line" in r.stderr
    assert task.score(wrong, ex) == 0.0
    right = ("```python\n" + ex.reference["prompt"] + ex.reference["canonical_solution"] + f"\n{exit_call}\n```")
    assert task.score(right, ex) == 0.0  # its tests never ran either


def test_sandbox_must_finish_plain_program():
    from selfjudge.tasks.sandbox import run_python

    assert run_python("print('hi')", must_finish=True).passed
    assert not run_python("import sys\nsys.exit(0)\nprint('hi')", must_finish=True).passed
    assert run_python("import sys\nsys.exit(0)").passed  # without must_finish exit code 0 is success
    # the nonce is not visible to the program's own code
    assert not run_python("import os\nprint(os.environ.get('SELFJUDGE_SBX_FINISHED'))\nimport sys\nsys.exit(0)",
                          must_finish=True).passed
