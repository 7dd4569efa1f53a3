"""Semantic similarity (all-MiniLM-L6-v2 from its wheel) and the summarisation task."""

import pytest
import torch

from selfjudge.tasks import load_task
from selfjudge.tasks.semantic import embed, semantic_similarity


def test_paraphrases_score_high_and_unrelated_low():
    sims = semantic_similarity(
        ["It is a nice day today.", "The answer is 42.", "The cat sat on the mat."],
        ["It's a nice day today.", "So the final answer is 42.", "Quantum chromodynamics describes quarks."])
    assert sims[0] > 0.9 and sims[1] > 0.7
    assert sims[2] < 0.3  # negative control: unrelated texts
    assert semantic_similarity(["same text"], ["same text"]) == [1.0]


def test_embeddings_are_unit_mean_pooled_and_batch_independent():
    texts = ["a short one", "a considerably longer sentence with many more tokens in it than the first"]
    together = embed(texts)
    alone = torch.cat([embed([t]) for t in texts])
    assert together.shape == (2, 384)
    torch.testing.assert_close(together.norm(dim=-1), torch.ones(2))
    torch.testing.assert_close(together, alone, atol=1e-5, rtol=1e-5)  # padding does not leak into the mean
    with pytest.raises(ValueError, match="length"):
        semantic_similarity(["a"], ["a", "b"])


def test_summarize_splits_are_disjoint_and_prompts_quote_the_text():
    task = load_task("summarize")
    ids = {s: {ex.prompt_id for ex in task.examples(s)} for s in ("eval", "val", "train")}
    assert ids["eval"] and ids["val"] and ids["train"]
    assert not (ids["eval"] & ids["val"]) and not (ids["eval"] & ids["train"]) and not (ids["val"] & ids["train"])
    ex = task.examples("eval", limit=1)[0]
    text = ex.messages[0]["content"]
    assert text.startswith("Summarize the following text") and 600 <= len(text.split("\n\n", 1)[1]) <= 2500
    assert task.fidelity("It is fine.", "It is fine.", ex) == 1.0
