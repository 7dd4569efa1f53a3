"""A bench block's per-group timings are checked before the report bootstraps them."""

import pytest

from selfjudge.evaluation.block_schema import check_block


def _block(per_group) -> dict:
    row = {"name": "standard", "family": "standard", "K": 3, "mean_accepted_length": 1.5, "tokens_per_s": 20.0,
           "speedup_vs_target_only": 1.2, "speedup_vs_standard": 1.0, "fidelity": 1.0, "task_score": 0.0,
           "judge_accepted_tokens": 0, "prompts": 2, "fidelity_name": "f", "task_score_name": "s",
           "share_draft": 0.0, "share_target": 1.0, "share_verify": 0.0, "share_other": 0.0, "per_group": per_group}
    return {"task": "t", "batch": 1, "rows": [row]}


def test_per_group_timings_are_checked():
    assert check_block(_block({"wall_s": [1.0, 2.0], "tokens": [10, 20]}), "b.json")  # negative control
    for bad in ({"wall_s": [1.0], "tokens": [10, 20]}, {"wall_s": [1.0, -2.0], "tokens": [10, 20]},
                {"wall_s": [1.0, float("nan")], "tokens": [10, 20]}, {"wall_s": "1", "tokens": [1]}):
        with pytest.raises(ValueError, match="b.json: damaged block: per_group"):
            check_block(_block(bad), "b.json")
