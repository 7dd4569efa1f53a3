"""A finished bench block is reused only when it was measured with the same settings (prompts, drafter
and its n-gram lengths, the verifier file's digest); the current harness blocks stay reusable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch


def test_bench_refuses_a_block_measured_with_other_settings():
    from selfjudge.evaluation.matrix_spec import MatrixSpec
    from selfjudge.evaluation.wallclock import block_settings, stale_settings

    spec = MatrixSpec.from_options(tasks=["gsm8k"], limit=2, max_new_tokens=32, device="cpu")
    old = {"max_new_tokens": 256, "prompt_ids": ["gsm8k/0", "gsm8k/1", "gsm8k/2"],
           "verifiers": {"SelfJudge": "/elsewhere/smollm2-135m-gsm8k-selfjudge.safetensors"}, "drafter": "model"}
    now = block_settings(spec, "gsm8k", {"SelfJudge": "/here/smollm2-135m-gsm8k-selfjudge.safetensors"},
                         ["gsm8k/0", "gsm8k/1"])
    stale = stale_settings(old, now)
    assert any(s.startswith("max_new_tokens=256") for s in stale) and any(s.startswith("prompt_ids") for s in stale)
    assert not any(s.startswith("verifiers") or s.startswith("drafter") for s in stale)  # same file, same drafter
    assert stale_settings({**old, **now}, now) == []
    assert "timing_rounds" not in old and any(s.startswith("timing_rounds=None") for s in stale)  # unrecorded
    repeated = block_settings(MatrixSpec.from_options(tasks=["gsm8k"], limit=2, max_new_tokens=32, device="cpu", timing_rounds=2),
                              "gsm8k", {}, ["gsm8k/0", "gsm8k/1"])
    assert [s for s in stale_settings({**old, **now}, repeated) if s.startswith("timing_rounds=1")]
    with pytest.raises(ValueError, match="timing_rounds"):
        MatrixSpec.from_options(tasks=["gsm8k"], timing_rounds=0)


def test_bench_prompt_lookup_blocks_record_their_ngram_lengths(monkeypatch, tmp_path):
    """A prompt-lookup block records its n-gram lengths and store, so a run with other lengths or
    another store refuses to reuse it; a draft-model block carries none."""
    import selfjudge.models.pair as pair_mod
    from selfjudge.evaluation.matrix_spec import MatrixSpec
    from selfjudge.evaluation.wallclock import block_settings, stale_settings

    record = json.loads(pair_mod.DEFAULT_DRAFTER_FILE.read_text())
    fake = tmp_path / "default.json"
    monkeypatch.setattr(pair_mod, "DEFAULT_DRAFTER_FILE", fake)
    spec = MatrixSpec.from_options(tasks=["gsm8k"], limit=2, max_new_tokens=32, device="cpu", drafter="prompt-lookup")
    fake.write_text(json.dumps({**record, "lookup": {"max_ngram": 3, "min_ngram": 1}}))
    old = block_settings(spec, "gsm8k", {}, ["gsm8k/0"])  # a block measured with n-grams 3..1, no store
    assert old["lookup"] == {"max_ngram": 3, "min_ngram": 1}
    fake.write_text(json.dumps({**record, "lookup": {"max_ngram": 3, "min_ngram": 2}}))
    now = block_settings(spec, "gsm8k", {}, ["gsm8k/0"])
    assert now["lookup"] == {"max_ngram": 3, "min_ngram": 2}
    assert [s for s in stale_settings(old, now) if s.startswith("lookup")]
    fake.write_text(json.dumps({**record, "lookup": {"max_ngram": 3, "min_ngram": 1}}))
    assert stale_settings(old, block_settings(spec, "gsm8k", {}, ["gsm8k/0"])) == []
    model = MatrixSpec.from_options(tasks=["gsm8k"], limit=2, max_new_tokens=32, device="cpu")
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
    without = MatrixSpec.from_options(tasks=["gsm8k"], limit=2, max_new_tokens=32, device="cpu", drafter="prompt-lookup",
                         lookup_store="none")
    assert stale_settings(old, block_settings(without, "gsm8k", {}, ["gsm8k/0"])) == []
    fake.write_text(json.dumps({**record, "lookup": {"max_ngram": 3, "min_ngram": 1, "store": "store.safetensors",
                                                     "store_min_accepted": 1.0}}))
    assert pair_mod.default_lookup(16).store_min_accepted == 1.0 and pair_mod.default_lookup(16).store is not None
    gated = block_settings(spec, "gsm8k", {}, ["gsm8k/0"])
    assert gated["lookup"]["store_min_accepted"] == 1.0 and stale_settings({**old, **with_store}, gated)


def test_the_current_harness_blocks_match_the_default_record():
    """The README's harness (bench/results/eval24; GSM8K: its rerun with the shipped verifier) was
    measured with the default drafter's record and the verifiers as they are today: a changed record
    or verifier must come with a rerun."""
    from selfjudge.evaluation.matrix_spec import MatrixSpec
    from selfjudge.evaluation.wallclock import block_settings, stale_settings

    root = Path(__file__).resolve().parents[3] / "bench" / "results" / "eval24"
    paths = [root / "blocks" / "sharegpt_b8.json", root / "blocks" / "summarize_b8.json",
             root / "gsm8k-verifier-q0.95" / "blocks" / "gsm8k_b8.json"]
    for path in paths:
        block = json.loads(path.read_text())
        spec = MatrixSpec.from_options(tasks=[block["task"]], limit=len(block["prompt_ids"]), max_new_tokens=block["max_new_tokens"],
                          device="cpu", drafter=block["drafter"], rules=block["rules"],
                          rules_budget=block.get("rules_budget"), timing_rounds=block["timing_rounds"])
        now = block_settings(spec, block["task"], block["verifiers"], block["prompt_ids"])
        assert stale_settings(block, now) == [], path


def test_bench_unknown_threshold_name_is_an_error():
    from selfjudge.evaluation.matrix import make_configs
    from selfjudge.judge import Verifier

    v = Verifier(weight=torch.zeros(4), bias=0.0, thresholds={"F": 0.1, "R": 0.2})
    assert [c.threshold for c in make_configs([4], [], {"SelfJudge": v}, ["F", "0.5"], [], [4]) if c.threshold] == ["F", "0.5"]
    with pytest.raises(ValueError, match="Fx"):
        make_configs([4], [], {"SelfJudge": v}, ["F", "Fx"], [], [4])


def test_bench_refuses_a_block_whose_verifier_was_retrained_under_the_same_name(tmp_path):
    """Blocks record each verifier's digest: a file retrained under the same name is another
    verifier, so its old block is stale; a block written before digests were recorded is not."""
    from selfjudge.evaluation.matrix_spec import MatrixSpec
    from selfjudge.evaluation.wallclock import block_settings, stale_settings

    spec = MatrixSpec.from_options(tasks=["gsm8k"], limit=1, max_new_tokens=32, device="cpu")
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
