"""Regression tests of the reliability findings (issue 14) outside the verify op.

Each test failed before its fix: data loss with --no-resume, two runs into one folder,
duplicated training rows, a failed run's manifest blocking the rerun, limit=0, NaN
arguments, verifiers for another model, over-long and non-UTF-8 prompts, stale bench blocks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from selfjudge.folders import LOCK_FILE, lock_folder, remove_job_folder
from selfjudge.labelling.shards import ShardWriter, read_label_dirs, read_rows


def _manifest(**over):
    return {"method": "autojudge", "target": "t", "draft": "d", "task": "gsm8k", "hidden_size": 4, **over}


def _rows(pids, position=3):
    return [{"prompt_id": p, "position": position, "draft_token_id": 7, "target_token_id": 8, "score": 1.0,
             "label": 1} for p in pids]


# ----------------------------------------------------------------------------- 1. --no-resume
def test_no_resume_refuses_a_folder_it_did_not_make(tmp_path):
    precious = tmp_path / "home"
    precious.mkdir()
    (precious / "thesis.tex").write_text("years of work")
    (precious / "src").mkdir()
    with pytest.raises(ValueError, match="not made by this job"):
        ShardWriter(precious, _manifest(), start_over=True)
    assert (precious / "thesis.tex").read_text() == "years of work" and (precious / "src").is_dir()


def test_no_resume_through_mine_task_refuses_foreign_folder(tmp_path):
    """The library entry point autojudge-label --no-resume calls (used to rmtree the folder)."""
    from selfjudge.labelling.autojudge import mine_task

    precious = tmp_path / "notes"
    precious.mkdir()
    (precious / "keep.txt").write_text("x")
    target = SimpleNamespace(config=SimpleNamespace(hidden_size=4, _name_or_path="t"))
    with pytest.raises(ValueError, match="not made by this job"):
        mine_task(target, target, None, SimpleNamespace(name="gsm8k"), [], str(precious), resume=False)
    assert (precious / "keep.txt").read_text() == "x"


def test_no_resume_refuses_same_job_folder_with_foreign_files(tmp_path):
    out = tmp_path / "labels"
    w = ShardWriter(out, _manifest())
    w.write(["p0"], _rows(["p0"]), torch.zeros(1, 4))
    w.close()
    (out / "my-notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="my-notes.txt"):
        ShardWriter(out, _manifest(), start_over=True)
    assert (out / "shard-00000.jsonl").exists()


def test_no_resume_starts_over_in_its_own_folder(tmp_path):
    out = tmp_path / "labels"
    w = ShardWriter(out, _manifest())
    w.write(["p0"], _rows(["p0"]), torch.zeros(1, 4))
    w.close()
    w = ShardWriter(out, _manifest(), start_over=True)
    assert w.done_prompt_ids == set() and read_rows(out) == []
    w.close()
    with pytest.raises(ValueError, match="method='selfjudge'"):  # another job's folder
        remove_job_folder(out, manifest="manifest.json", key="method", value="selfjudge", patterns=[])


# ----------------------------------------------------------------------------- 5. one writer per folder
_HOLD = """
import sys, time
from selfjudge.folders import lock_folder
lock = lock_folder(sys.argv[1], "holder job")
print("locked", flush=True)
time.sleep(60)
"""


def test_second_run_into_a_locked_folder_fails_at_once(tmp_path):
    out = tmp_path / "labels"
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(ValueError, match=r"in use by another selfjudge job \(pid \d+: holder job\)"):
            ShardWriter(out, _manifest())
    finally:
        holder.kill()
        holder.wait()
    w = ShardWriter(out, _manifest())  # a killed holder leaves no stale lock
    w.close()
    assert (out / LOCK_FILE).exists()


def test_lock_is_exclusive_within_one_process_and_released(tmp_path):
    a = lock_folder(tmp_path / "x")
    with pytest.raises(ValueError, match="in use"):
        lock_folder(tmp_path / "x")
    a.release()
    with lock_folder(tmp_path / "x"):
        pass


def test_training_rows_are_deduplicated(tmp_path):
    out = tmp_path / "labels"
    w = ShardWriter(out, _manifest())
    w.write(["p0", "p1"], _rows(["p0", "p1"]), torch.arange(8.0).view(2, 4))
    w.close()
    feats, rows, _ = read_label_dirs([str(out), str(out)])  # the same folder given twice
    assert len(rows) == 2 and feats.shape == (2, 4)
    assert torch.equal(feats, torch.arange(8.0).view(2, 4))


# ----------------------------------------------------------------------------- 9. failed run's manifest
def test_a_run_that_committed_nothing_does_not_block_the_corrected_rerun(tmp_path):
    out = tmp_path / "labels"
    ShardWriter(out, _manifest(task="humaneval"), compare_keys=("task",)).close()  # then it failed
    w = ShardWriter(out, _manifest(task="gsm8k"), compare_keys=("task",))
    w.write(["p0"], _rows(["p0"]), torch.zeros(1, 4))
    w.close()
    with pytest.raises(ValueError, match="task='gsm8k'"):  # committed work still protects itself
        ShardWriter(out, _manifest(task="humaneval"), compare_keys=("task",))


# ----------------------------------------------------------------------------- 7. limit 0
def test_examples_limit_zero_is_empty():
    from selfjudge.tasks import load_task

    assert load_task("gsm8k").examples("eval", limit=0) == []
    assert len(load_task("gsm8k").examples("eval", limit=1)) == 1


@pytest.mark.parametrize("argv", [
    ["label", "--task", "gsm8k", "--out", "x", "--tau", "0", "--limit", "0"],
    ["autojudge-label", "--task", "gsm8k", "--out", "x", "--limit", "0"],
    ["label", "--task", "gsm8k", "--out", "x", "--tau", "nan"],
    ["label", "--task", "gsm8k", "--out", "x", "--tau", "inf"],
    ["train", "--labels", "x", "--out", "v.safetensors", "--tau", "nan"],
    ["generate", "--prompt", "hi", "--temperature", "nan"],
    ["generate", "--prompt", "hi", "--temperature", "inf"],
    ["generate", "--prompt", "hi", "--max-new-tokens", "0"],
    ["bench", "--limit", "0"],
])
def test_bad_numbers_are_one_line_errors(argv, tmp_path):
    res = subprocess.run([sys.executable, "-m", "selfjudge.cli", *argv], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().count("\n") == 0 and "Traceback" not in res.stderr
    assert not (tmp_path / "x").exists()  # nothing written


def test_threshold_nan_refused():
    from selfjudge.cli.common import parse_threshold

    with pytest.raises(ValueError, match="--threshold"):
        parse_threshold("nan")
    assert parse_threshold("F") == "F" and parse_threshold("0.5") == 0.5


# ----------------------------------------------------------------------------- 8/9. engine boundary
def test_engine_refuses_prompts_beyond_the_context_window(tiny):
    from selfjudge.engine import SpeculativeEngine

    target = tiny.llama(0, max_position_embeddings=64)
    engine = SpeculativeEngine(target, None, None, policy="autoregressive")
    with pytest.raises(ValueError, match=r"prompts\[1\] has 60 tokens.*context window \(64\)"):
        engine.generate([[1, 2, 3], list(range(1, 61))], max_new_tokens=8)
    assert len(engine.generate([list(range(1, 57))], max_new_tokens=8)[0].token_ids) <= 8  # 64 fits


def test_engine_refuses_nan_temperature_and_bad_ids(tiny):
    from selfjudge.engine import SpeculativeEngine

    target = tiny.llama(0)
    engine = SpeculativeEngine(target, None, None, policy="autoregressive")
    for bad in (float("nan"), float("inf"), -1.0):
        with pytest.raises(ValueError, match="temperature"):
            engine.generate([[1, 2]], max_new_tokens=2, temperature=bad)
    with pytest.raises(ValueError, match=r"prompts\[0\] holds token ids outside"):
        engine.generate([[1, target.config.vocab_size]], max_new_tokens=2)
    with pytest.raises(ValueError, match=r"prompts\[0\] must be text"):
        engine.generate([[1.5j]], max_new_tokens=2)


def test_engine_refuses_undecodable_text(tiny):
    from selfjudge.engine import SpeculativeEngine

    engine = SpeculativeEngine(tiny.llama(0), None, tiny.tokenizer, policy="autoregressive")
    bad = b"caf\xe9 au lait".decode("utf-8", errors="surrogateescape")  # latin-1 bytes read as UTF-8
    with pytest.raises(ValueError, match=r"prompts\[0\] is not valid UTF-8"):
        engine.generate(bad, max_new_tokens=2)
    with pytest.raises(ValueError, match=r"prompts\[0\] is not valid UTF-8"):
        engine.generate([[{"role": "user", "content": bad}]], max_new_tokens=2, chat=False)


@pytest.mark.default_pair
def test_generate_cli_non_utf8_argument_is_one_line(tmp_path):
    res = subprocess.run([sys.executable.encode(), b"-m", b"selfjudge.cli", b"generate", b"--max-new-tokens", b"2",
                          b"--prompt", b"caf\xe9"], capture_output=True, timeout=300, cwd=tmp_path)
    err = res.stderr.decode(errors="replace")
    assert res.returncode == 2 and "not valid UTF-8" in err and "Traceback" not in err


# ----------------------------------------------------------------------------- 6. verifier for another model
@pytest.mark.default_pair
def test_generate_refuses_a_verifier_made_for_another_target(tmp_path):
    from selfjudge.judge import Verifier

    path = tmp_path / "other.safetensors"
    Verifier(weight=torch.zeros(576), bias=0.0, thresholds={"F": 0.0},
             metadata={"target": "meta-llama/Llama-3.1-8B-Instruct"}).save(path)
    res = subprocess.run([sys.executable, "-m", "selfjudge.cli", "generate", "--policy", "judge", "--verifier",
                          str(path), "--max-new-tokens", "2", "--prompt", "hi"], capture_output=True, text=True,
                         timeout=300, cwd=tmp_path)
    assert res.returncode == 2 and "Llama-3.1-8B-Instruct" in res.stderr and "smollm2-135m" in res.stderr


# ----------------------------------------------------------------------------- 10. bench blocks
def test_bench_refuses_a_block_measured_with_other_settings():
    from selfjudge.bench.wallclock import MatrixSpec, block_settings, stale_settings

    spec = MatrixSpec(tasks=["gsm8k"], limit=2, max_new_tokens=32, device="cpu")
    old = {"max_new_tokens": 256, "prompt_ids": ["gsm8k/0", "gsm8k/1", "gsm8k/2"],
           "verifiers": {"SelfJudge": "/elsewhere/smollm2-135m-gsm8k-selfjudge.safetensors"}, "drafter": None}
    now = block_settings(spec, "gsm8k", {"SelfJudge": "/here/smollm2-135m-gsm8k-selfjudge.safetensors"},
                         ["gsm8k/0", "gsm8k/1"])
    stale = stale_settings(old, now)
    assert any(s.startswith("max_new_tokens=256") for s in stale) and any(s.startswith("prompt_ids") for s in stale)
    assert not any(s.startswith("verifiers") or s.startswith("drafter") for s in stale)  # same file, default drafter
    assert stale_settings({**old, **now}, now) == []
    assert "timing_rounds" not in old and not any(s.startswith("timing_rounds") for s in stale)  # default: 1
    repeated = block_settings(MatrixSpec(tasks=["gsm8k"], limit=2, max_new_tokens=32, device="cpu", timing_rounds=2),
                              "gsm8k", {}, ["gsm8k/0", "gsm8k/1"])
    assert [s for s in stale_settings({**old, **now}, repeated) if s.startswith("timing_rounds=1")]
    with pytest.raises(ValueError, match="timing_rounds"):
        MatrixSpec(tasks=["gsm8k"], timing_rounds=0)


def test_bench_prompt_lookup_blocks_record_their_ngram_lengths(monkeypatch, tmp_path):
    """A prompt-lookup block written before the n-gram setting was recorded counts as n-grams 3
    to 1, so a run with other lengths refuses to reuse it; a draft-model block carries none."""
    import selfjudge.models.pair as pair_mod
    from selfjudge.bench.wallclock import MatrixSpec, block_settings, stale_settings

    record = json.loads(pair_mod.DEFAULT_DRAFTER_FILE.read_text())
    fake = tmp_path / "default.json"
    monkeypatch.setattr(pair_mod, "DEFAULT_DRAFTER_FILE", fake)
    spec = MatrixSpec(tasks=["gsm8k"], limit=2, max_new_tokens=32, device="cpu", drafter="prompt-lookup")
    old = {"max_new_tokens": 32, "prompt_ids": ["gsm8k/0"], "verifiers": {}, "drafter": "prompt-lookup"}
    fake.write_text(json.dumps({**record, "lookup": {"max_ngram": 3, "min_ngram": 2}}))
    now = block_settings(spec, "gsm8k", {}, ["gsm8k/0"])
    assert now["lookup"] == {"max_ngram": 3, "min_ngram": 2}
    assert [s for s in stale_settings(old, now) if s.startswith("lookup")]
    fake.write_text(json.dumps({**record, "lookup": {"max_ngram": 3, "min_ngram": 1}}))
    assert stale_settings(old, block_settings(spec, "gsm8k", {}, ["gsm8k/0"])) == []
    model = MatrixSpec(tasks=["gsm8k"], limit=2, max_new_tokens=32, device="cpu")
    assert block_settings(model, "gsm8k", {}, ["gsm8k/0"])["lookup"] is None
    # a record with an n-gram store: its fingerprint joins the settings; blocks without one are stale
    from selfjudge.models.ngram_store import NgramStore

    store = NgramStore([[5, 6, 7, 5, 6, 8]], min_count=1)
    store.save(tmp_path / "store.safetensors")
    fake.write_text(json.dumps({**record, "lookup": {"max_ngram": 3, "min_ngram": 1, "store": "store.safetensors"}}))
    with_store = block_settings(spec, "gsm8k", {}, ["gsm8k/0"])
    assert with_store["lookup"] == {"max_ngram": 3, "min_ngram": 1, "store": store.fingerprint()}
    assert [s for s in stale_settings(old, with_store) if s.startswith("lookup")]
    assert stale_settings({**old, **with_store}, with_store) == []
    without = MatrixSpec(tasks=["gsm8k"], limit=2, max_new_tokens=32, device="cpu", drafter="prompt-lookup",
                         lookup_store="none")
    assert stale_settings(old, block_settings(without, "gsm8k", {}, ["gsm8k/0"])) == []
    fake.write_text(json.dumps({**record, "lookup": {"max_ngram": 3, "min_ngram": 1, "store": "store.safetensors",
                                                     "store_min_accepted": 1.0}}))
    assert pair_mod.default_lookup(16).store_min_accepted == 1.0 and pair_mod.default_lookup(16).store is not None
    gated = block_settings(spec, "gsm8k", {}, ["gsm8k/0"])
    assert gated["lookup"]["store_min_accepted"] == 1.0 and stale_settings({**old, **with_store}, gated)


def test_committed_default_drafter_blocks_match_the_default_record():
    """The README's default-drafter harness (bench/results/rules-default) was measured with the
    n-gram lengths the default record gives today, without an n-gram store (the store came after;
    the README says so): a changed record must come with a rerun."""
    from selfjudge.bench.wallclock import MatrixSpec, block_settings, stale_settings

    root = Path(__file__).resolve().parents[2] / "bench" / "results" / "rules-default" / "blocks"
    paths = sorted(root.glob("*.json"))
    assert paths
    for path in paths:
        block = json.loads(path.read_text())
        spec = MatrixSpec(tasks=[block["task"]], limit=len(block["prompt_ids"]), max_new_tokens=block["max_new_tokens"],
                          device="cpu", drafter=block["drafter"], rules=block["rules"], lookup_store="none")
        now = block_settings(spec, block["task"], block["verifiers"], block["prompt_ids"])
        assert stale_settings(block, now) == [], path


def test_bench_unknown_threshold_name_is_an_error():
    from selfjudge.bench.matrix import make_configs
    from selfjudge.judge import Verifier

    v = Verifier(weight=torch.zeros(4), bias=0.0, thresholds={"F": 0.1, "R": 0.2})
    assert [c.threshold for c in make_configs([4], [], {"SelfJudge": v}, ["F", "0.5"], [], [4]) if c.threshold] == ["F", "0.5"]
    with pytest.raises(ValueError, match="Fx"):
        make_configs([4], [], {"SelfJudge": v}, ["F", "Fx"], [], [4])


def test_committed_bench_blocks_are_still_reusable():
    """The README's measured blocks, read with the settings that made them, are not stale."""
    from selfjudge.bench.wallclock import MatrixSpec, block_settings, stale_settings

    root = Path(__file__).resolve().parents[2] / "bench" / "results" / "wallclock" / "blocks"
    for path in sorted(root.glob("*.json")):
        block = json.loads(path.read_text())
        spec = MatrixSpec(tasks=[block["task"]], limit=len(block["prompt_ids"]), max_new_tokens=block["max_new_tokens"],
                          device="cpu")
        now = block_settings(spec, block["task"], block["verifiers"], block["prompt_ids"])
        assert stale_settings(block, now) == [], path


def test_bench_refuses_a_block_whose_verifier_was_retrained_under_the_same_name(tmp_path):
    """Blocks record each verifier's digest: a file retrained under the same name is another
    verifier, so its old block is stale; a block written before digests were recorded is not."""
    from selfjudge.bench.wallclock import MatrixSpec, block_settings, stale_settings

    spec = MatrixSpec(tasks=["gsm8k"], limit=1, max_new_tokens=32, device="cpu")
    verifier = tmp_path / "smollm2-135m-gsm8k-autojudge.safetensors"
    verifier.write_bytes(b"first training")
    written = block_settings(spec, "gsm8k", {"AutoJudge": str(verifier)}, ["gsm8k/0"])
    assert len(written["verifier_sha256"]["AutoJudge"]) == 16
    assert stale_settings(written, block_settings(spec, "gsm8k", {"AutoJudge": str(verifier)}, ["gsm8k/0"])) == []
    verifier.write_bytes(b"retrained on more prompts")
    now = block_settings(spec, "gsm8k", {"AutoJudge": str(verifier)}, ["gsm8k/0"])
    assert [s for s in stale_settings(written, now) if s.startswith("verifier_sha256")]
    legacy = {k: v for k, v in written.items() if k != "verifier_sha256"}
    assert stale_settings(legacy, now) == []
    elsewhere = block_settings(spec, "gsm8k", {"AutoJudge": str(tmp_path / "gone" / verifier.name)}, ["gsm8k/0"])
    assert elsewhere["verifier_sha256"] == {"AutoJudge": None} and stale_settings(written, elsewhere) == []


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_lock_never_writes_through_a_planted_link(tmp_path, kind):
    """A lock file that is a link to a file outside the folder is refused; the outside file is untouched."""
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me")
    out = tmp_path / "out"
    out.mkdir()
    (os.symlink if kind == "symlink" else os.link)(outside, out / LOCK_FILE)
    with pytest.raises(ValueError, match="out: .*" + LOCK_FILE):
        lock_folder(out, "job")
    assert outside.read_text() == "keep me"
    dangling = tmp_path / "out2"
    dangling.mkdir()
    os.symlink(tmp_path / "would-be-created", dangling / LOCK_FILE)
    with pytest.raises(ValueError, match="symbolic link"):
        lock_folder(dangling, "job")
    assert not (tmp_path / "would-be-created").exists()
    lock_folder(tmp_path / "fresh", "job").release()  # negative control: a plain folder locks
