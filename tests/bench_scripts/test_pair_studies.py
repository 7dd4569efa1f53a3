"""The real pair's studies' arithmetic, on hand-made inputs: token agreement between two outputs
and the task summary's intervals and counts."""

import json


def test_agreement_finds_where_two_outputs_part(bench_script):
    agreement = bench_script("qwen_pair_lossless").agreement
    assert agreement([1, 2, 3], [1, 2, 3]) == {"identical": True, "first_difference": None, "agreement": 1.0}
    assert agreement([1, 2, 3], [1, 5, 3]) == {"identical": False, "first_difference": 1, "agreement": 2 / 3}
    part = agreement([1, 2], [1, 2, 3])  # one stopped early: they part where it stopped
    assert part["first_difference"] == 2 and not part["identical"] and part["agreement"] == 2 / 3


def test_the_task_summary_pools_blocks_and_skips_empty_answers(bench_script, tmp_path):
    mod = bench_script("pair_task_metrics")
    blocks = tmp_path / "blocks"
    blocks.mkdir()
    rows = lambda scores, reason="eos": [{"prompt_id": f"p{i}", "tokens": 10, "text": "", "finish_reason": reason,  # noqa: E731
                                          "score": s} for i, s in enumerate(scores)]
    (blocks / "gsm8k-0000.json").write_text(json.dumps({"seconds": 2.0, "tokens": 40, "rows": rows([1, 0, 1, 1])}))
    (blocks / "gsm8k-0004.json").write_text(json.dumps({"seconds": 2.0, "tokens": 40,
                                                        "rows": rows([0, 0, 1, 1], "length")}))
    (blocks / "sharegpt-0000.json").write_text(json.dumps({"seconds": 1.0, "tokens": 20,
                                                           "rows": rows([-0.5, float("nan")])}))
    summary = mod.summarise(tmp_path, ["gsm8k", "sharegpt", "humaneval"])
    g = summary["gsm8k"]
    assert g["prompts"] == 8 and g["mean"] == 5 / 8 and g["low"] <= 5 / 8 <= g["high"] and g["high"] <= 1
    assert g["tokens_per_s"] == 20.0 and g["hit_cap"] == 4 and g["metric"] == "accuracy"
    assert summary["sharegpt"]["prompts"] == 1 and summary["sharegpt"]["mean"] == -0.5
    assert "humaneval" not in summary  # no blocks: no row
