"""``selfjudge calibrate``: validation curves of a bench block stored in the verifier it measured."""

import json

import pytest
import torch

from selfjudge.evaluation.wallclock import file_digest
from selfjudge.cli import main
from selfjudge.judge.verifier import Verifier, load_verifier, save_verifier


def _row(name, family, m, sem, K=3, threshold=None, params=(), top_k=None):
    return {"name": name, "family": family, "K": K, "mean_accepted_length": m, "semantic_fidelity": sem,
            "rouge_l_vs_target": sem, "speedup_vs_standard": 1.0, "threshold": threshold, "params": params,
            "top_k": top_k, "tokens_per_s": 10.0, "speedup_vs_target_only": m, "fidelity": sem, "task_score": sem,
            "judge_accepted_tokens": 0, "prompts": 2, "fidelity_name": "rouge", "task_score_name": "loglik",
            "share_draft": 0.1, "share_target": 0.7, "share_verify": 0.1, "share_other": 0.1}


def _bench(tmp_path, verifier_path, split="val", digest=None):
    rows = [_row("target-only", "target-only", 1.0, 1.0, K=0), _row("standard", "standard", 1.3, 1.0),
            _row("SelfJudge-R", "SelfJudge", 1.4, 0.98, threshold="R"),
            _row("SelfJudge-F", "SelfJudge", 1.6, 0.95, threshold="F"),
            _row("relaxed top-N(2,0.05)", "relaxed top-N", 1.35, 0.99, params=[["top_n", 2], ["delta", 0.05]]),
            _row("top-2", "top-k", 1.7, 0.9, top_k=2)]
    block = {"task": "summarize", "batch": 8, "split": split, "command": "selfjudge bench --split val",
             "prompt_ids": ["summarize/1", "summarize/2"], "drafter": "prompt-lookup",
             "verifier_sha256": {"SelfJudge": digest or file_digest(verifier_path)}, "rows": rows}
    folder = tmp_path / f"bench-{split}"
    (folder / "blocks").mkdir(parents=True)
    (folder / "blocks" / "summarize_b8.json").write_text(json.dumps(block))
    return folder


@pytest.fixture
def verifier_path(tmp_path):
    path = tmp_path / "v.safetensors"
    save_verifier(Verifier(weight=torch.ones(4), bias=0.0, thresholds={"F": 0.5, "R": 1.5},
                           metadata={"hidden_size": 4}), path)
    return path


def test_calibrate_stores_curves_that_quality_thresholds_read(tmp_path, verifier_path, capsys):
    out = tmp_path / "v2.safetensors"
    assert main(["calibrate", "--bench", str(_bench(tmp_path, verifier_path)), "--verifier", str(verifier_path),
                 "--out", str(out)]) == 0
    assert "SelfJudge 2" in capsys.readouterr().out
    v = load_verifier(out)
    record = v.metadata["validation"]
    assert record["split"] == "val" and record["K"] == 3 and record["standard"]["m"] == 1.3
    assert [p["threshold"] for p in record["curves"]["SelfJudge"]] == ["R", "F"]  # by m
    assert record["curves"]["relaxed top-N"][0]["params"] == {"top_n": 2, "delta": 0.05}
    assert record["curves"]["top-k"][0]["params"] == {"k": 2}
    assert v.threshold("quality:0.97") == 1.5 and v.threshold("quality:0.95") == 0.5
    assert "calibrate" in record["calibrate_command"]


def test_calibrate_refuses_eval_blocks_and_another_verifier(tmp_path, verifier_path, capsys):
    out = tmp_path / "v2.safetensors"
    assert main(["calibrate", "--bench", str(_bench(tmp_path, verifier_path, split="eval")), "--verifier",
                 str(verifier_path), "--out", str(out)]) == 2
    assert "validation prompts" in capsys.readouterr().err
    assert main(["calibrate", "--bench", str(_bench(tmp_path, verifier_path, digest="0" * 16)), "--verifier",
                 str(verifier_path), "--out", str(out)]) == 2
    assert "is not the SelfJudge verifier" in capsys.readouterr().err
    assert not out.exists()


def test_the_demo_picks_the_rule_reaching_the_largest_m_within_the_budget():
    from selfjudge.evaluation.demo import best_rule_at_budget
    from selfjudge.engine.policies import FlyPolicy, RelaxedTopNPolicy

    curves = {
        "SelfJudge": [{"threshold": "R", "logit": 1.0, "m": 1.5, "semantic_fidelity": 0.99}],
        "relaxed top-N": [{"name": "relaxed top-N(2,0.05)", "params": {"top_n": 2, "delta": 0.05}, "m": 1.4,
                           "semantic_fidelity": 0.99},
                          {"name": "relaxed top-N(3,0.1)", "params": {"top_n": 3, "delta": 0.1}, "m": 1.6,
                           "semantic_fidelity": 0.96}],
        "FLy": [{"name": "FLy(2,0.3)", "params": {"window": 2, "entropy_threshold": 0.3}, "m": 1.45,
                 "semantic_fidelity": 0.98}],
        "top-k": [{"name": "top-2", "params": {"k": 2}, "m": 1.9, "semantic_fidelity": 0.99}],  # not a rule
    }
    meta = {"validation": {"curves": curves}}
    name, policy = best_rule_at_budget(meta, 0.97, K=3)
    assert name == "FLy(2,0.3)" and isinstance(policy, FlyPolicy) and policy.window == 2
    name, policy = best_rule_at_budget(meta, 0.95, K=3)
    assert name == "relaxed top-N(3,0.1)" and isinstance(policy, RelaxedTopNPolicy)
    assert best_rule_at_budget(meta, 0.999, K=3) is None and best_rule_at_budget({}, 0.97, K=3) is None


def _prompt_row(name, family, cycles, accepted, semantic, threshold=None, policy=None):
    return {**_row(name, family, 0.0, 0.0, threshold=threshold), "policy": policy or family,
            "per_prompt": {"cycles": cycles, "accepted": accepted, "semantic": semantic, "rouge_l": semantic}}


def _task_block(task, prompts, sj_cycles, sj_accepted, sj_semantic, digest):
    rows = [_prompt_row("standard", "standard", [10] * len(prompts), [3] * len(prompts), [1.0] * len(prompts)),
            _prompt_row("SelfJudge-R", "SelfJudge", sj_cycles, sj_accepted, sj_semantic, threshold="R")]
    return {"task": task, "batch": 8, "split": "val", "command": f"selfjudge bench --tasks {task}",
            "prompt_ids": [f"{task}/{p}" for p in prompts], "drafter": "prompt-lookup",
            "verifier_sha256": {"SelfJudge": digest}, "rows": rows}


def test_several_tasks_are_pooled_prompt_by_prompt(tmp_path, verifier_path):
    """Task a (1 prompt: 10 cycles, 10 accepted, semantic 0.9) and task b (3 prompts: 10 cycles, 0 accepted,
    semantic 1.0 each) pool to m = (10 + 40) / 40 = 1.25 and semantic (0.9 + 3) / 4 = 0.975; the mean of
    the tasks' own figures (m 1.5, semantic 0.95) would weight a single prompt like three."""
    from selfjudge.evaluation.calibrate import pooled_block, validation_curves

    digest = file_digest(verifier_path)
    a = _task_block("a", [0], [10], [10], [0.9], digest)
    b = _task_block("b", [0, 1, 2], [10] * 3, [0] * 3, [1.0] * 3, digest)
    record = validation_curves([b, a], load_verifier(verifier_path), verifier_path)
    point = record["curves"]["SelfJudge"][0]
    assert point["m"] == pytest.approx(1.25) and point["semantic_fidelity"] == pytest.approx(0.975)
    assert point["rouge_l"] == pytest.approx(0.975) and point["tokens_per_s_vs_standard"] is None
    assert record["task"] == "a+b" and record["prompt_ids"] == ["a/0", "b/0", "b/1", "b/2"]
    assert record["standard"]["m"] == pytest.approx(1.3)
    other = {**b, "verifier_sha256": {"SelfJudge": "0" * 16}}
    with pytest.raises(ValueError, match="different verifiers"):
        pooled_block([a, other])
    fewer = {**b, "rows": b["rows"][:1]}
    with pytest.raises(ValueError, match="different configurations"):
        pooled_block([a, fewer])
