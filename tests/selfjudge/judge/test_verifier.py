"""The verifier file: safetensors + JSON header, threshold lookup, refusing mismatches, no pickle."""

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

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
    with pytest.raises(ValueError, match="not 'org/other'"):
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


def _header(path):
    with safe_open(str(path), framework="pt") as f:
        return dict(f.metadata())


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "bad json", "json list", "nan threshold",
                                    "string threshold", "int weight", "inf weight"])
def test_broken_files_raise_value_error_naming_path(tmp_path, damage):
    """Every broken file is a ValueError that names the path (was SafetensorError/TypeError/
    AttributeError, and NaN thresholds loaded silently)."""
    p = tmp_path / "v.safetensors"
    make().save(p)
    raw = p.read_bytes()
    meta = _header(p)
    inner = json.loads(meta["selfjudge_verifier"])
    tensors = {"weight": torch.randn(8), "bias": torch.tensor(0.0)}
    if damage == "truncated":
        p.write_bytes(raw[: len(raw) // 2])
    elif damage == "garbage":
        p.write_bytes(b"\x00\xffnot a safetensors file at all" * 3)
    elif damage == "empty":
        p.write_bytes(b"")
    elif damage == "bad json":
        save_file(tensors, str(p), metadata={**meta, "selfjudge_verifier": "{not json"})
    elif damage == "json list":
        save_file(tensors, str(p), metadata={**meta, "selfjudge_verifier": "[1, 2]"})
    elif damage in ("nan threshold", "string threshold"):
        inner["thresholds"]["F"] = float("nan") if damage == "nan threshold" else "high"
        save_file(tensors, str(p), metadata={**meta, "selfjudge_verifier": json.dumps(inner)})
    elif damage == "int weight":
        save_file({"weight": torch.zeros(8, dtype=torch.long), "bias": torch.tensor(0.0)}, str(p), metadata=meta)
    elif damage == "inf weight":
        save_file({"weight": torch.full((8,), float("inf")), "bias": torch.tensor(0.0)}, str(p), metadata=meta)
    with pytest.raises(ValueError) as err:
        load_verifier(p)
    assert str(p) in str(err.value)


def test_missing_file_is_an_os_error_naming_path(tmp_path):
    with pytest.raises(OSError, match="no verifier file"):
        load_verifier(tmp_path / "absent.safetensors")
    with pytest.raises(OSError):
        load_verifier(tmp_path)  # a folder


def test_nan_threshold_refused_at_construction():
    with pytest.raises(ValueError, match="NaN"):
        Verifier(weight=torch.zeros(4), bias=0.0, thresholds={"F": float("nan")})


def test_shipped_verifiers_are_keyed_by_drafter():
    """Verifiers mined from the draft model's mismatches keep the plain name; another drafter's
    carry its name; a drafter without its own falls back to the draft model's."""
    from pathlib import Path

    from selfjudge.judge.verifier import shipped_verifier_for, shipped_verifier_path

    model = shipped_verifier_path("selfjudge", "smollm2-135m", "gsm8k")
    assert Path(model).name == "smollm2-135m-gsm8k-selfjudge.safetensors"
    with pytest.raises(ValueError, match="drafter='no-such-drafter'"):
        shipped_verifier_path("selfjudge", "smollm2-135m", "gsm8k", "no-such-drafter")
    assert shipped_verifier_for("selfjudge", "smollm2-135m", ("gsm8k",), "no-such-drafter") == model
    # the first task with a verifier wins (summarize has none: ShareGPT's is next)
    assert Path(shipped_verifier_for("selfjudge", "smollm2-135m", ("summarize", "sharegpt"))).name == \
        "smollm2-135m-sharegpt-selfjudge.safetensors"
    assert shipped_verifier_for("autojudge", "smollm2-135m", ("sharegpt",)) is None
    folder = Path(model).parent
    for path in folder.glob("*-prompt-lookup.safetensors"):  # a drafter's own verifier is preferred
        task, method = path.name[len("smollm2-135m-"):].split("-")[:2]
        assert shipped_verifier_for(method, "smollm2-135m", (task,), "prompt-lookup") == str(path)
    # a task without its own verifier takes the drafter's general one (trained on every task's labels)
    assert Path(shipped_verifier_for("selfjudge", "smollm2-135m", ("humaneval",), "prompt-lookup")).name == \
        "smollm2-135m-general-selfjudge-prompt-lookup.safetensors"


def _phi_verifier():
    return Verifier(weight=torch.randn(8), bias=0.5, thresholds={"F": 0.1, "R": -0.2},
                    metadata={"target": "toy", "phi_features": ["logp_draft", "margin_to_top1", "topk_entropy"]},
                    phi_weight=torch.tensor([0.5, -1.0, 2.0]))


def _mutations(p, rng):
    """Damaged variants of the verifier file at ``p`` (bytes), seeded: truncation, byte flips,
    metadata values of the wrong JSON type, tensors added, removed or re-shaped."""
    raw = p.read_bytes()
    meta = _header(p)
    inner = json.loads(meta["selfjudge_verifier"])
    good = {"weight": torch.randn(8), "bias": torch.tensor(0.0), "phi_weight": torch.randn(3)}
    odd_values = [None, 3, "x", [1, "a"], {"a": 1}, float("nan"), 1e308, -1, [], True]
    for _ in range(12):
        cut = int(rng.integers(0, len(raw)))
        yield "truncated", raw[:cut]
        flipped = bytearray(raw)
        for i in rng.integers(0, len(raw), size=int(rng.integers(1, 8))):
            flipped[int(i)] ^= int(rng.integers(1, 256))
        yield "flipped", bytes(flipped)
    for key in ("phi_features", "thresholds", "hidden_size", "target"):
        for v in odd_values:
            yield f"{key}={v!r}", {**inner, key: v}
    for tensors in ({**good, "extra": torch.zeros(2)}, {k: good[k] for k in ("weight", "phi_weight")},
                    {**good, "phi_weight": torch.zeros(5)}, {**good, "phi_weight": torch.zeros(3, dtype=torch.long)},
                    {**good, "phi_weight": torch.zeros(1, 3)}, {**good, "phi_weight": torch.full((3,), float("nan"))}):
        yield "tensors " + ",".join(f"{k}{tuple(t.shape)}" for k, t in tensors.items()), (tensors, meta)


def test_fuzzed_verifier_files_load_or_fail_in_one_value_error(tmp_path):
    """Every damaged verifier file (format 2) loads cleanly or raises one ValueError naming the file."""
    import numpy as np

    p = tmp_path / "good.safetensors"
    _phi_verifier().save(p)
    rng = np.random.default_rng(0)
    outcomes = {"loaded": 0, "refused": 0}
    for n, (what, damaged) in enumerate(_mutations(p, rng)):
        q = tmp_path / f"m{n}.safetensors"
        if isinstance(damaged, bytes):
            q.write_bytes(damaged)
        elif isinstance(damaged, dict):
            tensors = {k: v for k, v in load_file(str(p)).items()}
            save_file(tensors, str(q), metadata={**_header(p), "selfjudge_verifier": json.dumps(damaged)})
        else:
            save_file(damaged[0], str(q), metadata=damaged[1])
        try:
            v = load_verifier(q)
        except ValueError as err:
            assert str(q) in str(err), (what, err)
            outcomes["refused"] += 1
            continue
        outcomes["loaded"] += 1  # a clean load is a usable verifier
        assert torch.isfinite(v.weight).all() and (v.phi_weight is None or torch.isfinite(v.phi_weight).all())
    assert outcomes["refused"] >= 30 and outcomes["loaded"] >= 1, outcomes


def test_saving_onto_a_folder_is_refused_and_leaves_nothing(tmp_path):
    folder = tmp_path / "existing"
    folder.mkdir()
    with pytest.raises(ValueError, match="is a folder"):
        make().save(folder)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing"] and not any(folder.iterdir())
