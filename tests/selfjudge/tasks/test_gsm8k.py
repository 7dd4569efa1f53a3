"""GSM8K loader, fixed splits and final-answer extraction."""

import json

import pytest

from selfjudge.tasks import load_task
from selfjudge.tasks.gsm8k import GSM8K, extract_number


@pytest.mark.parametrize(
    "text, expected",
    [
        ("so 16 - 3 - 4 = 9 eggs.\n#### 18", "18"),
        ("#### 1,234", "1234"),
        ("The final answer is $1,234.50", "1234.5"),
        ("Step 1: 3 + 4 = 7. So the answer is 42.", "42"),
        ("the answer is 42 apples per day", "42"),
        ("Temperature drops by 7. The answer is -7 degrees.", "-7"),
        ("He loses $5, i.e. -$5 total. Answer: -$5", "-5"),
        ("We get 2 * 3 = 6 and then \\boxed{42} is it; check 7 + 8 = 15", "42"),
        ("The final answer is: $\\boxed{1,000}$", "1000"),
        ("I computed 3 things, then 12 more, totalling 15", "15"),
        ("Janet sells 16-3-4=9", "9"),
        ("**Answer:** 0.50 dollars", "0.5"),
        ("#### 5\nsome more text 99", "5"),
        ("answer is 3.0", "3"),
        ("x = 1.5.", "1.5"),
        ("To answer this, 16 - 3 = 13 and 13 * 2 = 26 dollars", "26"),
        ("Answer = 12 cups", "12"),
        ("The answer would be 7,500 meters", "7500"),
        ("answered 3 times, total 9", "9"),
        ("no digits at all", None),
        ("", None),
    ],
)
def test_extract_number(text, expected):
    assert extract_number(text) == expected


def test_extract_number_rejects_non_str():
    with pytest.raises(ValueError, match="text"):
        extract_number(None)


def test_real_file_counts_and_splits():
    task = load_task("gsm8k")
    ev, va, tr = (task.examples(s) for s in ("eval", "val", "train"))
    assert (len(ev), len(va), len(tr)) == (300, 200, 819)
    ids = [{e.prompt_id for e in x} for x in (ev, va, tr)]
    assert not (ids[0] & ids[1]) and not (ids[0] & ids[2]) and not (ids[1] & ids[2])
    assert ev[0].prompt_id == "gsm8k/0" and va[0].prompt_id == "gsm8k/300" and tr[0].prompt_id == "gsm8k/500"
    assert ev[0].reference == "18"  # Janet's ducks
    assert ev[0].messages[-1]["role"] == "user" and "Janet" in ev[0].messages[-1]["content"]
    # stable: same ids in the same order on a fresh object, and limit takes a prefix
    again = GSM8K().examples("val", limit=5)
    assert [e.prompt_id for e in again] == [e.prompt_id for e in va[:5]]


def test_small_local_file_split_and_scoring(tmp_path):
    path = tmp_path / "mini.jsonl"
    with open(path, "w") as f:
        for i in range(510):
            f.write(json.dumps({"question": f"What is {i} + 1?", "answer": f"{i}+1={i + 1}\n#### {i + 1:,}"}) + "\n")
    task = GSM8K(path)
    ev = task.examples("eval")
    assert len(ev) == 300 and len(task.examples("val")) == 200 and len(task.examples("train")) == 10
    ex = task.examples("train")[-1]
    assert ex.prompt_id == "gsm8k/509" and ex.reference == "510"
    assert task.score("so 509 + 1 = 510.\n#### 510", ex) == 1.0
    assert task.score("The answer is 511.", ex) == 0.0
    assert task.score("I don't know", ex) == 0.0
    assert task.same_answer("The answer is 511.", "#### 511", ex)
    assert not task.same_answer("The answer is 511.", "#### 510", ex)
    with pytest.raises(ValueError, match="split"):
        task.examples("test")
