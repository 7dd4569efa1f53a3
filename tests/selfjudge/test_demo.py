"""``selfjudge demo`` end to end on the real default pair (1 prompt, a few tokens)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.default_pair


def test_demo_prints_table_and_writes_json_and_plot(tmp_path):
    out = tmp_path / "demo"
    res = subprocess.run([sys.executable, "-m", "selfjudge.cli", "demo", "--prompts", "1", "--max-new-tokens", "12",
                          "--out", str(out), "--no-color"], capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    report = json.loads((out / "demo.json").read_text())
    names = [r["policy"] for r in report["rows"]]
    assert names[0] == "target-only" and names[1] == "standard SD" and names[2] == "SelfJudge-quality:0.97"
    assert report["task"] == "summarize" and report["prompt_ids"][0].startswith("summarize/")
    # the best training-free rule within the budget on the shipped verifier's validation curves, if any
    from selfjudge.evaluation.demo import best_rule_at_budget
    from selfjudge.judge.verifier import load_verifier

    assert report["k"] is None  # adaptive speculation by default
    rule = best_rule_at_budget(load_verifier(report["verifier"]).metadata, 0.97, 4)
    assert report["rule_at_budget"] == (rule[0] if rule else None)
    assert names[3:] == ([rule[0]] if rule else []) + ["SelfJudge-R"]  # the looser threshold last
    base, std = report["rows"][0], report["rows"][1]
    assert base["speedup_vs_target_only"] == 1.0 and base["mean_accepted_length"] == 1.0
    # greedy standard SD is lossless: the same completion as target-only decoding
    assert report["completions"]["standard SD"] == report["completions"]["target-only"]
    assert std["semantic_fidelity"] > 0.999 and std["rouge_l_vs_target"] == 1.0 and std["mean_accepted_length"] >= 1.0
    assert all(0 < r["new_tokens"] <= 12 for r in report["rows"])
    assert (out / "demo.png").read_bytes()[:4] == b"\x89PNG"
    assert "policy" in res.stdout and "wrote" in res.stdout
    # the sample marks exactly the judge-only tokens, which the JSON lists per token
    judge_name = report["sample"]["policy"]  # the SelfJudge row with the most judge-only tokens
    assert judge_name in names[2:] and judge_name.startswith("SelfJudge-")
    row = report["rows"][names.index(judge_name)]
    sources = report["token_sources"][judge_name][0]
    assert len(sources) == row["new_tokens"]
    assert sources.count("judge") == row["judge_accepted_tokens"]
    assert set(report["token_sources"]["target-only"][0]) == {"target"}
    if sources.count("judge"):  # one mark per judge-only token with visible text
        assert "(in [[...]])" in res.stdout and 0 < res.stdout.count("[[") - 1 <= sources.count("judge")
    else:
        assert "[[" not in res.stdout
