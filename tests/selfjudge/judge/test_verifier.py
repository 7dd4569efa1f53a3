"""The verifier file: safetensors + JSON header, threshold lookup, refusing mismatches, no pickle."""

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from selfjudge.judge import FORMAT, Verifier, load_verifier


def make(h=8):
    g = torch.Generator().manual_seed(0)
    return Verifier(weight=torch.randn(h, generator=g), bias=-0.25, thresholds={"F": 0.5, "R": 1.5, "q0.50": -0.1},
                    metadata={"method": "selfjudge", "target": "org/target", "tau": 0.0, "window": 20})


def test_round_trip_and_header(tmp_path):
    v = make()
    p = tmp_path / "v.safetensors"
    v.save(p)
    with safe_open(str(p), framework="pt") as f:
        assert sorted(f.keys()) == ["bias", "weight"]
        assert f.get_tensor("weight").dtype == torch.float32 and f.get_tensor("bias").shape == ()
        meta = json.loads(f.metadata()["selfjudge_verifier"])
        assert f.metadata()["format"] == FORMAT
    assert meta["hidden_size"] == 8 and meta["thresholds"]["R"] == 1.5 and meta["target"] == "org/target"
    w = load_verifier(p, expect_model="org/target", expect_hidden_size=8)
    assert torch.equal(w.weight, v.weight) and w.bias == -0.25 and w.thresholds == v.thresholds
    assert w.metadata["tau"] == 0.0 and "thresholds" not in w.metadata
    x = torch.randn(3, 8)
    assert torch.allclose(w.logits(x), x @ v.weight - 0.25)


def test_threshold_lookup():
    v = make()
    assert v.threshold("F") == 0.5 and v.threshold("q0.50") == -0.1
    assert v.threshold(0.7) == 0.7 and v.threshold(2) == 2.0 and v.threshold("1.25") == 1.25
    with pytest.raises(ValueError, match="stored names"):
        v.threshold("nope")
    with pytest.raises(ValueError):
        v.threshold(True)


def test_load_refuses_mismatch(tmp_path):
    p = tmp_path / "v.safetensors"
    make().save(p)
    with pytest.raises(ValueError, match="expect_model"):
        load_verifier(p, expect_model="org/other")
    with pytest.raises(ValueError, match="hidden size 8"):
        load_verifier(p, expect_hidden_size=576)
    q = tmp_path / "not.safetensors"
    save_file({"weight": torch.zeros(8)}, str(q))
    with pytest.raises(ValueError, match="not a selfjudge verifier"):
        load_verifier(q)


def test_bad_construction():
    with pytest.raises(ValueError, match="weight"):
        Verifier(weight=torch.zeros(2, 3), bias=0.0)
    with pytest.raises(ValueError, match="finite"):
        Verifier(weight=torch.zeros(3), bias=float("nan"))
    with pytest.raises(ValueError, match="hidden size"):
        make().logits(torch.zeros(2, 5))
