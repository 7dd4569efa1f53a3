"""Every method at one quality budget: the setting picked on its validation curve, read in the
evaluation block, with intervals."""

import torch

from selfjudge.evaluation.block_schema import file_digest
from selfjudge.evaluation.budget_report import budget_choices, budget_table, semantic_interval
from selfjudge.judge.verifier import Verifier, save_verifier


def _curves():
    sj = [{"name": "SelfJudge-R", "m": 1.4, "semantic_fidelity": 0.99, "logit": 1.5, "threshold": "R"},
          {"name": "SelfJudge-F", "m": 1.6, "semantic_fidelity": 0.95, "logit": 0.5, "threshold": "F"}]
    relaxed = [{"name": "relaxed top-N(2,0.05)", "m": 1.35, "semantic_fidelity": 0.98, "params": {"top_n": 2}},
               {"name": "relaxed top-N(10,0.8)", "m": 1.9, "semantic_fidelity": 0.90, "params": {"top_n": 10}}]
    fly = [{"name": "FLy(1,0)", "m": 1.8, "semantic_fidelity": 0.93, "params": {"window": 1}}]
    return {"SelfJudge": sj, "relaxed top-N": relaxed, "FLy": fly}


def _row(name, family, m, semantic, walls, speedup):
    return {"name": name, "family": family, "K": 3, "mean_accepted_length": m, "semantic_fidelity": sum(semantic) / len(semantic),
            "speedup_vs_standard": speedup, "judge_accepted_tokens": 0 if family != "SelfJudge" else 7,
            "per_prompt": {"semantic": semantic}, "per_group": {"wall_s": walls, "tokens": [10] * len(walls)}}


def test_each_method_is_read_at_its_validation_setting(tmp_path):
    path = tmp_path / "v.safetensors"
    save_verifier(Verifier(weight=torch.ones(4), bias=0.0, thresholds={"F": 0.5, "R": 1.5},
                           metadata={"validation": {"curves": _curves()}}), path)
    walls = [1.0] * 8
    rows = [_row("standard", "standard", 1.3, [1.0] * 8, walls, 1.0),
            _row("SelfJudge-quality:0.97", "SelfJudge", 1.45, [1.0, 0.96] * 4, [0.8] * 8, 1.25),
            _row("relaxed top-N(2,0.05)", "relaxed top-N", 1.33, [0.99] * 8, walls, 1.0),
            _row("relaxed top-N(10,0.8)", "relaxed top-N", 1.9, [0.9] * 8, walls, 1.2)]
    block = {"task": "summarize", "batch": 1, "verifiers": {"SelfJudge": str(path)}, "rows": rows}
    assert budget_choices(block, 0.97) == [("SelfJudge", "SelfJudge-quality:0.97"), ("FLy", None),
                                           ("relaxed top-N", "relaxed top-N(2,0.05)")]
    table = budget_table([block], 0.97)
    assert "| summarize | 1 | SelfJudge | SelfJudge-quality:0.97 | 1.45 | 1.12 | 0.980 [" in table
    assert "| 1.25 [1.25, 1.25] | 7 |" in table  # every group 1.25x faster: a point interval
    assert "| FLy | none within the budget |" in table and "relaxed top-N(10,0.8)" not in table
    assert budget_table([{**block, "verifiers": {}}], 0.97) == ""  # no curves: no table
    assert budget_table([{**block, "verifier_sha256": {"SelfJudge": "0" * 16}}], 0.97) == ""  # another verifier now
    assert budget_table([{**block, "verifier_sha256": {"SelfJudge": file_digest(path)}}], 0.97) == table


def test_semantic_interval_brackets_the_mean_and_needs_prompts():
    low, high = semantic_interval({"per_prompt": {"semantic": [0.9, 1.0] * 10}})
    assert 0.9 < low < 0.95 < high < 1.0
    assert semantic_interval({"per_prompt": {"semantic": [1.0]}}) is None


def test_headline_ratio_has_an_interval_only_where_the_ratio_exists():
    from selfjudge.evaluation.report import _ratio

    row, base = {"per_group": {"wall_s": [1.0] * 8, "tokens": [10] * 8}}, {"per_group": {"wall_s": [2.0] * 8, "tokens": [10] * 8}}
    assert _ratio(row, base, 2.0) == "2.00 [2.00, 2.00]"
    assert _ratio(row, base, float("nan")) == "–"  # target-only has no "× standard"
    assert _ratio(row, None, 2.0) == "2.00"
