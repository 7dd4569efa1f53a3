"""bench/studies/choose_verifier.py: curves cut to shared prompts, the winner by its worst gap against the rules."""

import json

import pytest


def _row(name, family, cycles, accepted, semantic, K=3):
    return {"name": name, "family": family, "K": K, "policy": "autoregressive" if family == "target-only" else family,
            "per_prompt": {"cycles": cycles, "accepted": accepted, "semantic": semantic}}


def _block(prompts, rows):
    return {"prompt_ids": prompts, "rows": rows}


def _rules_block():
    """Three prompts; p2 is one the candidates did not run and must be ignored."""
    prompts = ["p0", "p1", "p2"]
    rows = [_row("standard", "standard", [10, 10, 10], [5, 5, 5], [1.0, 1.0, 1.0]),
            _row("relaxed top-N(2,0.1)", "relaxed top-N", [10, 10, 1], [8, 8, 100], [0.90, 0.90, 0.0]),
            _row("FLy(2,0.9)", "FLy", [10, 10, 1], [8, 8, 100], [0.80, 0.80, 0.0])]
    return _block(prompts, rows)


def _candidate(semantic_at_m18):
    rows = [_row("standard", "standard", [10, 10], [5, 5], [1.0, 1.0]),
            _row("SelfJudge-F", "SelfJudge", [10, 10], [8, 8], [semantic_at_m18] * 2)]
    return _block(["p1", "p0"], rows)


def test_gaps_use_only_shared_prompts_and_the_better_candidate_wins(bench_script):
    mod = bench_script("choose_verifier")
    res = mod.compare(_rules_block(), {"weak": _candidate(0.85), "strong": _candidate(0.95)})
    assert res["prompts"] == ["p0", "p1"]
    strong = res["candidates"]["strong"]["gaps"]
    weak = res["candidates"]["weak"]["gaps"]
    # at m 1.8 SelfJudge 0.95 against relaxed 0.90 / FLy 0.80; the hull from standard (1.5, 1.0) is linear,
    # so the mean gap over [1.5, 1.8] is half the end gap. p2 (a huge m at semantic 0) would change it.
    assert strong["relaxed top-N"]["mean"] == pytest.approx(0.025, abs=1e-6)
    assert strong["FLy"]["mean"] == pytest.approx(0.075, abs=1e-6)
    assert weak["relaxed top-N"]["mean"] == pytest.approx(-0.025, abs=1e-6)
    assert res["winner"] == "strong"


def test_cli_refuses_a_missing_block(bench_script, tmp_path):
    mod = bench_script("choose_verifier")
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps(_rules_block()))
    with pytest.raises(SystemExit):
        mod.main(["--rules", str(rules), "--candidates", f"a={tmp_path / 'missing.json'}", "--out", str(tmp_path / "o.json")])


def test_too_few_shared_prompts_is_an_error(bench_script):
    mod = bench_script("choose_verifier")
    lone = _candidate(0.9)
    lone["prompt_ids"] = ["p9", "p8"]
    with pytest.raises(ValueError, match="share 0 prompts"):
        mod.compare(_rules_block(), {"lone": lone})


def _task(block, task):
    return {**block, "task": task, "batch": 8}


def test_a_verifier_for_several_tasks_is_chosen_by_its_worst_task(bench_script):
    """'even' is level on both tasks; 'skewed' wins one task by more than it loses the other, so a mean over
    tasks would pick it, and the worst task must not."""
    mod = bench_script("choose_verifier")
    rules = {"a": _task(_rules_block(), "a"), "b": _task(_rules_block(), "b")}
    cands = {"even": {"a": _task(_candidate(0.90), "a"), "b": _task(_candidate(0.90), "b")},
             "skewed": {"a": _task(_candidate(1.00), "a"), "b": _task(_candidate(0.86), "b")}}
    res = mod.compare_tasks(rules, cands)
    assert res["worst_gap"]["even"] == pytest.approx(0.0, abs=1e-6)  # level with relaxed top-N on both
    assert res["worst_gap"]["skewed"] == pytest.approx(-0.02, abs=1e-6)
    assert res["winner"] == "even"
    assert set(res["tasks"]) == {"a", "b"} and "Chosen over the tasks' worst gaps: **even**" in mod.markdown(res)
    with pytest.raises(ValueError, match=r"'even' has no block for task\(s\) \['b'\]"):
        mod.compare_tasks(rules, {"even": {"a": cands["even"]["a"]}})


def test_cli_writes_one_calibration_folder_per_candidate_with_every_task(bench_script, tmp_path):
    mod = bench_script("choose_verifier")
    paths = {}
    for name, block in {"ra": _task(_rules_block(), "a"), "rb": _task(_rules_block(), "b"),
                        "ca": _task(_candidate(0.9), "a"), "cb": _task(_candidate(0.9), "b")}.items():
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(block))
    mod.main(["--rules", str(paths["ra"]), str(paths["rb"]), "--candidates", f"q={paths['ca']}", f"q={paths['cb']}",
              "--out", str(tmp_path / "o.json"), "--merged", str(tmp_path / "merged")])
    assert json.loads((tmp_path / "o.json").read_text())["winner"] == "q"
    merged = sorted(p.name for p in (tmp_path / "merged" / "q" / "blocks").iterdir())
    assert merged == ["a_b8.json", "b_b8.json"]
    rows = json.loads((tmp_path / "merged" / "q" / "blocks" / "a_b8.json").read_text())["rows"]
    assert {r["family"] for r in rows} == {"standard", "SelfJudge", "relaxed top-N", "FLy"}


def test_peers_compare_selfjudge_with_another_family(bench_script, tmp_path):
    """``--peers AutoJudge``: the gap is taken against that family's rows of the --rules block, and the
    table names it; the rules' rows are then left out."""
    mod = bench_script("choose_verifier")
    peer = _rules_block()
    peer["rows"].append(_row("AutoJudge-F", "AutoJudge", [10, 10, 10], [8, 8, 8], [0.70, 0.70, 0.70]))
    res = mod.compare(peer, {"strong": _candidate(0.95)}, peers=("AutoJudge",))
    gaps = res["candidates"]["strong"]["gaps"]
    assert set(gaps) == {"AutoJudge"} and gaps["AutoJudge"]["mean"] == pytest.approx(0.125, abs=1e-6)
    rules, cand = tmp_path / "peer.json", tmp_path / "cand.json"
    rules.write_text(json.dumps(peer))
    cand.write_text(json.dumps(_candidate(0.95)))
    mod.main(["--rules", str(rules), "--peers", "AutoJudge", "--candidates", f"strong={cand}", "--out", str(tmp_path / "o.json")])
    table = (tmp_path / "o.md").read_text()
    assert "vs AutoJudge" in table and "vs FLy" not in table
