"""bench/studies/compare_label_scores.py on synthetic bench folders: the merge check and the rival tables."""

import json

import pytest


def row(name, family, m, sem, K=4, threshold=None):
    return {"name": name, "family": family, "K": K if family != "target-only" else 0, "threshold": threshold,
            "mean_accepted_length": m, "semantic_fidelity": sem, "rouge_l_vs_target": sem, "task_score": -1.0,
            "tokens": 96, "tokens_per_s": 10.0, "speedup_vs_target_only": m, "speedup_vs_standard": 1.0,
            "fidelity": sem, "judge_accepted_tokens": 0, "prompts": 8, "fidelity_name": "rouge",
            "task_score_name": "loglik", "share_draft": 0.1, "share_target": 0.7, "share_verify": 0.1,
            "share_other": 0.1}


def folder(path, rows, task="sharegpt"):
    (path / "blocks").mkdir(parents=True)
    (path / "blocks" / f"{task}_b8.json").write_text(json.dumps({"task": task, "batch": 8, "rows": rows}))
    return path


SHARED = [row("target-only", "target-only", 1.0, 1.0), row("standard", "standard", 1.2, 1.0),
          row("top-2", "top-k", 1.3, 0.7)]


def test_rival_tables_rank_each_verifier_against_the_rules(bench_script, tmp_path, capsys):
    mod = bench_script("compare_label_scores")
    lik = folder(tmp_path / "lik", SHARED + [row("SelfJudge-F", "SelfJudge", 1.5, 0.5, threshold="F"),
                                            row("SelfJudge-q0.99", "SelfJudge", 1.25, 0.98, threshold="q0.99")])
    conf = folder(tmp_path / "conf", SHARED + [row("SelfJudge-F", "SelfJudge", 1.5, 0.9, threshold="F")])
    rules = folder(tmp_path / "rules", SHARED + [row("FLy(1,0)", "FLy", 1.5, 0.7),
                                                row("FLy(2,0.6)", "FLy", 1.3, 0.99)])
    out = tmp_path / "out.md"
    assert mod.main(["--likelihood", str(lik), "--confidence", str(conf), "--out", str(out), "--rivals", str(rules)]) == 0
    text = out.read_text()
    # frontier at m in (1.2, 1.3]: likelihood 0.98 vs FLy 0.99; in (1.3, 1.5]: 0.5 vs 0.7 -> negative everywhere
    lik_fly = next(line for line in text.splitlines() if line.startswith("| sharegpt | likelihood | FLy |"))
    conf_fly = next(line for line in text.splitlines() if line.startswith("| sharegpt | confidence | FLy |"))
    assert float(lik_fly.split("|")[5]) < 0 < float(conf_fly.split("|")[5])
    # m at semantic >= 0.97: likelihood reaches 1.25 (x 1.04 of standard 1.2), confidence only standard's
    assert "| sharegpt | 1.20 | likelihood | 1.25 | 1.04 | FLy (1.30) |" in text
    assert "| sharegpt | 1.20 | confidence | 1.20 | 1.00 | FLy (1.30) |" in text


def test_folders_from_different_settings_are_refused(bench_script, tmp_path):
    mod = bench_script("compare_label_scores")
    lik = folder(tmp_path / "lik", SHARED + [row("SelfJudge-F", "SelfJudge", 1.5, 0.5)])
    conf = folder(tmp_path / "conf", SHARED + [row("SelfJudge-F", "SelfJudge", 1.5, 0.9)])
    other = [row("target-only", "target-only", 1.0, 1.0), row("standard", "standard", 1.25, 1.0)]  # another drafter
    rules = folder(tmp_path / "rules", other + [row("FLy(1,0)", "FLy", 1.5, 0.7)])
    with pytest.raises(SystemExit, match="standard differs"):
        mod.main(["--likelihood", str(lik), "--confidence", str(conf), "--out", str(tmp_path / "o.md"),
                  "--rivals", str(rules)])
