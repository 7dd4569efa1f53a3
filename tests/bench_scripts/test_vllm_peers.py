"""The peer run's plumbing without vLLM: the spec's checks, the JSON-lines child process (a stand-in
worker), resumable blocks, the operating-point fallback, and the report's figures against hand
computations."""

import json
import sys

import pytest

import vllm_peers_report as peer_report  # bench/studies/, on the path as when its scripts run (conftest)
import vllm_peers_run as peers
from vllm_peers_run import (ENGINE_METHODS, PeerSpec, VllmProcess, add_elementwise, block_path, operating_point,
                            run_peers)


def test_spec_names_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="methods: unknown"):
        PeerSpec(out_dir=tmp_path, methods=("vllm eagle",))
    with pytest.raises(ValueError, match="prompts must be >= 1"):
        PeerSpec(out_dir=tmp_path, prompts=0)
    with pytest.raises(ValueError, match="concurrencies"):
        PeerSpec(out_dir=tmp_path, concurrencies=(0,))
    assert not set(PeerSpec(out_dir=tmp_path, engine=False).methods) & set(ENGINE_METHODS)


def test_add_elementwise_pads_the_shorter_list():
    assert add_elementwise([1, 2], [3, 4, 5]) == [4, 6, 5] and add_elementwise([], []) == []


FAKE_WORKER = """
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    if "engine" in r:
        reply = {"ok": "ready"} if r["engine"].get("model") != "bad" else {"error": "ValueError: bad model"}
    elif r.get("stop"):
        break
    else:
        reply = {"ok": {"token_ids": [p[-2:] for p in r["prompts"]], "seconds": [0.5], "plugin": None}}
    print(json.dumps(reply), flush=True)
"""


def fake_python(tmp_path):
    """A 'python' that runs the stand-in worker whatever module it is asked for."""
    worker = tmp_path / "worker.py"
    worker.write_text(FAKE_WORKER)
    exe = tmp_path / "bin" / "python"
    exe.parent.mkdir(exist_ok=True)
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} {worker}\n")
    exe.chmod(0o755)
    return str(exe)


def test_the_child_process_answers_and_reports_its_errors_by_name(tmp_path):
    proc = VllmProcess("vllm plain", fake_python(tmp_path), {"model": "m"}, tmp_path / "log")
    assert proc.generate([[1, 2, 3], [4, 5]], 8, 2)["token_ids"] == [[2, 3], [4, 5]]
    proc.close()
    with pytest.raises(RuntimeError, match="vllm ngram: ValueError: bad model"):
        VllmProcess("vllm ngram", fake_python(tmp_path), {"model": "bad"}, tmp_path / "log2")


def test_a_finished_block_is_not_decoded_again(tmp_path, monkeypatch):
    spec = PeerSpec(out_dir=tmp_path, tasks=("summarize",), prompts=4, chunk=2, concurrencies=(1,))
    monkeypatch.setattr("selfjudge.models.gguf_convert.ensure_smollm2_target", lambda verbose: tmp_path)
    ran = []
    monkeypatch.setattr(peers, "_run_task", lambda spec, task, target, todo, cmd: ran.append(todo))
    block_path(spec, "summarize", 1, 0).parent.mkdir(parents=True)
    block_path(spec, "summarize", 1, 0).write_text("{}")
    run_peers(spec, "cmd")
    assert ran == [[(1, 1)]]


def test_a_verifier_without_a_validation_curve_falls_back(tmp_path):
    import torch

    from selfjudge.judge.verifier import Verifier

    path = tmp_path / "v.safetensors"
    Verifier(weight=torch.zeros(4), bias=0.0, thresholds={"F": 0.5}, metadata={"target": "t"}).save(path)
    assert operating_point(str(path), "quality:0.97", "F") == "F"
    assert operating_point(str(path), "F", "R") == "F"


def block(task, conc, chunk, methods):
    return {"task": task, "concurrency": conc, "chunk": chunk, "methods": methods,
            "texts": {m: [f"{m[:4]} {i}" for i in range(len(v["token_ids"]))] for m, v in methods.items()}}


def test_the_report_figures_equal_hand_computations():
    plain = {"token_ids": [[1] * 10, [2] * 10], "seconds": [1.0, 1.0], "plugin": None}
    lossless = {"token_ids": [[1] * 10, [2] * 10], "seconds": [0.5, 0.5], "plugin": {"judge_only_total": 0},
                "spec_decode": {"num_drafts": 4, "num_accepted_tokens": 6, "accepted_per_position": [3, 2, 1]}}
    judge = {"token_ids": [[1] * 10, [3] * 10], "seconds": [0.25, 0.5], "plugin": {"judge_only_total": 5},
             "spec_decode": {"num_drafts": 2, "num_accepted_tokens": 5, "accepted_per_position": [2, 2, 1]}}
    engine = {"token_ids": [[1] * 10, [2] * 10], "seconds": [2.0, 2.0], "plugin": None}
    methods = {"vllm plain": plain, "vllm ngram + plugin lossless": lossless, "vllm ngram + SelfJudge": judge,
               "engine target-only": engine}
    blocks = [block("t", 1, 0, methods)]
    sim = lambda texts, refs: [1.0 if a == b else 0.5 for a, b in zip(texts, refs)]  # noqa: E731
    rows = {r["method"]: r for r in peer_report.summarise(blocks, similarity=sim, rouge=lambda a, b: 0.0)}
    assert rows["vllm ngram + plugin lossless"]["vs_vllm_plain"]["ratio"] == pytest.approx(2.0)
    assert rows["vllm ngram + SelfJudge"]["tokens_per_s"] == pytest.approx(20 / 0.75)
    assert rows["vllm ngram + SelfJudge"]["m_drafted"] == pytest.approx(1 + 5 / 2)
    assert rows["vllm ngram + plugin lossless"]["acceptance_by_position"] == pytest.approx([0.75, 0.5, 0.25])
    assert rows["vllm ngram + SelfJudge"]["judge_only_tokens"] == 5
    assert rows["vllm ngram + SelfJudge"]["identical_outputs"] == 1
    assert rows["engine target-only"]["reference"] == "engine target-only"
    assert rows["engine target-only"]["identical_outputs"] == 2
    md = peer_report.markdown(list(rows.values()))
    assert "| t | 1 | vllm ngram + SelfJudge |" in md


def test_the_speed_interval_brackets_the_ratio_and_collapses_for_equal_calls():
    same = peer_report.speed_ratio([(10, 1.0, 10, 2.0)] * 5)
    assert same["ratio"] == same["low"] == same["high"] == pytest.approx(2.0)
    mixed = peer_report.speed_ratio([(10, 1.0, 10, 2.0), (10, 2.0, 10, 2.0), (10, 1.5, 10, 2.0)] * 4)
    assert mixed["low"] < mixed["ratio"] < mixed["high"]


def test_write_report_reads_blocks_and_writes_both_files(tmp_path, monkeypatch):
    plain = {"token_ids": [[1, 2]], "seconds": [1.0], "plugin": None}
    (tmp_path / "blocks").mkdir()
    (tmp_path / "blocks" / "t-c1-00.json").write_text(json.dumps(block("t", 1, 0, {"vllm plain": plain})))
    monkeypatch.setattr("selfjudge.tasks.semantic.semantic_similarity", lambda a, b: [1.0] * len(a))
    for name in ("results.json", "results.md"):  # planted links are replaced, never written through
        (tmp_path / name).symlink_to(tmp_path / "blocks" / f"{name}.outside")
    rows = peer_report.write_report(tmp_path)
    assert not list((tmp_path / "blocks").glob("*.outside"))
    assert len(rows) == 1 and json.loads((tmp_path / "results.json").read_text())[0]["method"] == "vllm plain"
    assert "vllm plain" in (tmp_path / "results.md").read_text()
