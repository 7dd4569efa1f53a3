"""GPQA-diamond loader, deterministic option shuffle and letter extraction."""

import pytest

from selfjudge.tasks import load_task
from selfjudge.tasks.gpqa import GPQA, extract_letter, shuffle_options


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Let me think... so the answer is (C)", "C"),
        ("Reasoning.\nAnswer: C", "C"),
        ("**Answer: B**", "B"),
        ("The correct answer is D.", "D"),
        ("answer is: **A**", "A"),
        ("The answer is option B", "B"),
        ("I first thought Answer: A but on reflection the answer is (D).", "D"),
        ("Answer: Actually I am not sure", None),
        ("Final: \\boxed{C}", "C"),
        ("Final: \\boxed{\\text{B}}", "B"),
        ("Options (A) and (B) are wrong, so (C)", "C"),
        ("C", "C"),
        ("(B).", "B"),
        ("A bird is not a plane", None),
        ("The answer is E", None),
        ("", None),
    ],
)
def test_extract_letter(text, expected):
    assert extract_letter(text) == expected


def test_shuffle_is_deterministic_and_tracks_correct_option():
    opts, letter = shuffle_options("rec123", "right", ["w1", "w2", "w3"])
    again, letter2 = shuffle_options("rec123", "right", ["w1", "w2", "w3"])
    assert opts == again and letter == letter2
    assert sorted(opts) == ["right", "w1", "w2", "w3"] and opts["ABCD".index(letter)] == "right"
    letters = {shuffle_options(f"rec{i}", "right", ["w1", "w2", "w3"])[1] for i in range(40)}
    assert letters == set("ABCD")  # not always the same position


def test_real_file_counts_splits_and_scoring():
    task = load_task("gpqa")
    splits = {s: task.examples(s) for s in ("eval", "val", "train")}
    assert {s: len(v) for s, v in splits.items()} == {"eval": 100, "val": 40, "train": 58}
    ids = [e.prompt_id for v in splits.values() for e in v]
    assert len(set(ids)) == 198
    ex = splits["eval"][0]
    content = ex.messages[0]["content"]
    assert "Answer: $LETTER" in content and "\nA) " in content and "\nD) " in content
    correct = ex.meta["options"]["ABCD".index(ex.reference)]
    assert f"{ex.reference}) {correct}" in content
    assert task.score(f"blah\nAnswer: {ex.reference}", ex) == 1.0
    wrong = next(c for c in "ABCD" if c != ex.reference)
    assert task.score(f"Answer: {wrong}", ex) == 0.0
    assert task.same_answer(f"Answer: {wrong}", f"the answer is ({wrong})", ex)
    assert not task.same_answer(f"Answer: {wrong}", f"Answer: {ex.reference}", ex)
    assert [e.reference for e in GPQA().examples("val")] == [e.reference for e in splits["val"]]
