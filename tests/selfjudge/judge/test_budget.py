"""Quality-budget thresholds: the loosest validated point that keeps semantic fidelity >= the budget."""

import math

import pytest
import torch

from selfjudge.engine.policies import CycleInputs, JudgePolicy
from selfjudge.judge.budget import parse_budget, point_within_budget, rule_params_at_budget
from selfjudge.judge.verifier import Verifier

CURVE = [  # strict -> loose by m; (logit, m, semantic fidelity)
    {"threshold": "q0.99", "logit": 2.0, "m": 1.40, "semantic_fidelity": 0.99},
    {"threshold": "R", "logit": 1.0, "m": 1.50, "semantic_fidelity": 0.975},
    {"threshold": "F", "logit": 0.0, "m": 1.60, "semantic_fidelity": 0.95},
    {"threshold": "q0.50", "logit": -1.0, "m": 1.80, "semantic_fidelity": 0.98},  # lucky, after a violation
]
RULES = [{"name": "relaxed(2,0.05)", "params": {"top_n": 2, "delta": 0.05}, "m": 1.45, "semantic_fidelity": 0.99},
         {"name": "relaxed(5,0.4)", "params": {"top_n": 5, "delta": 0.4}, "m": 1.7, "semantic_fidelity": 0.9}]


def _verifier(curves=None):
    meta = {"validation": {"curves": curves}} if curves is not None else {}
    return Verifier(weight=torch.ones(4), bias=0.0, thresholds={"F": 0.0}, metadata=meta)


def test_budget_names_parse_and_bad_ones_name_themselves():
    assert parse_budget("quality:0.97") == 0.97 and parse_budget("F") is None and parse_budget(0.5) is None
    for bad in ("quality:abc", "quality:0", "quality:1.5"):
        with pytest.raises(ValueError, match="quality"):
            parse_budget(bad)


def test_the_budget_stops_at_the_first_violation():
    assert point_within_budget(CURVE, 0.97)["threshold"] == "R"
    assert point_within_budget(CURVE, 0.94)["threshold"] == "q0.50"
    assert point_within_budget(CURVE, 0.995) is None  # even the strictest misses it
    shuffled = [CURVE[2], CURVE[0], CURVE[3], CURVE[1]]
    assert point_within_budget(shuffled, 0.97)["threshold"] == "R"  # order comes from m, not the list


def test_verifier_threshold_reads_its_validation_curve():
    v = _verifier({"SelfJudge": CURVE, "relaxed top-N": RULES})
    assert v.threshold("quality:0.97") == 1.0
    assert v.threshold("quality:0.999") == math.inf
    assert rule_params_at_budget(v.metadata, "relaxed top-N", 0.97) == {"top_n": 2, "delta": 0.05}
    assert rule_params_at_budget(v.metadata, "relaxed top-N", 0.999) is None
    with pytest.raises(ValueError, match="calibrate"):
        _verifier().threshold("quality:0.97")
    with pytest.raises(ValueError, match="FLy"):
        rule_params_at_budget(v.metadata, "FLy", 0.97)


def test_a_budget_no_point_meets_makes_the_judge_accept_nothing():
    v = _verifier({"SelfJudge": CURVE})
    policy = JudgePolicy(v, "quality:0.999")
    kw = policy.relax(CycleInputs(torch.zeros(1, 3, 5), torch.zeros(1, 2, dtype=torch.long), torch.full((1, 2, 4), 1e6)))
    assert kw.judge.threshold == math.inf  # a logit of 4e6 is still not above it
    assert JudgePolicy(v, "quality:0.97").threshold == 1.0
