"""import-head: published SelfJudge pickles and AutoJudge exports become verifier files,
read without running any code the pickle names."""

from __future__ import annotations

import json
import os
import pickle

import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from selfjudge.judge import load_verifier
from selfjudge.judge.import_head import import_head, read_published_head, restricted_load


def _published(tmp_path, F=12, n=400, seed=0, trim_scaler_to=None):
    """A head as the SelfJudge authors pickle it: {"model", "scaler", thresholds}."""
    rng = np.random.default_rng(seed)
    X = rng.normal(3.0, 2.0, size=(n, F + (trim_scaler_to or 0)))
    y = ((X[:, :F] - 3.0) @ rng.normal(size=F) + rng.normal(size=n) > 0).astype(int)  # 1 = important
    scaler = StandardScaler().fit(X)
    head = LogisticRegression(C=1.0, max_iter=1000).fit(scaler.transform(X)[:, :F], y)
    path = tmp_path / "head.pkl"
    with open(path, "wb") as f:
        pickle.dump({"model": head, "scaler": scaler, "youden_threshold": 0.42, "min_recall_threshold": 0.27}, f)
    return path, head, scaler, X


def _p_important(head, scaler, X, F):
    Z = (X[:, :F] - scaler.mean_[:F]) / scaler.scale_[:F]
    return head.predict_proba(Z)[:, 1]


def test_imported_scores_equal_predict_proba(tmp_path):
    path, head, scaler, X = _published(tmp_path)
    v = import_head(path, model="org/llama", hidden_size=12)
    accept_p = torch.sigmoid(v.logits(torch.tensor(X, dtype=torch.float64).float())).double().numpy()
    np.testing.assert_allclose(accept_p, 1.0 - _p_important(head, scaler, X, 12), atol=1e-6)
    # the sign: accept (logit > threshold) exactly where the source accepts (P(important) < t)
    for name, t in (("youden", 0.42), ("min_recall", 0.27)):
        ours = (v.logits(torch.tensor(X).float()) > v.threshold(name)).numpy()
        theirs = _p_important(head, scaler, X, 12) < t
        assert (ours == theirs).mean() > 0.995  # ties within fp32 of the threshold may differ
    assert v.metadata["target"] == "org/llama" and v.metadata["approximation"] is None


def test_scaler_longer_than_head_is_trimmed_like_the_published_loader(tmp_path):
    path, head, scaler, X = _published(tmp_path, F=10, trim_scaler_to=6)
    v = import_head(path, model="m", hidden_size=10)
    accept_p = torch.sigmoid(v.logits(torch.tensor(X[:, :10]).float())).double().numpy()
    np.testing.assert_allclose(accept_p, 1.0 - _p_important(head, scaler, X, 10), atol=1e-6)


def test_target_slice_holds_draft_features_at_their_mean(tmp_path):
    """DD-DT heads read [draft; target]: keeping the target part equals the source head with
    the draft features set to their training mean."""
    path, head, scaler, X = _published(tmp_path, F=12)
    v = import_head(path, model="m", hidden_size=8)  # the last 8 features
    assert v.hidden_size == 8 and "training mean" in v.metadata["approximation"]
    X_mean_draft = X.copy()
    X_mean_draft[:, :4] = scaler.mean_[:4]
    accept_p = torch.sigmoid(v.logits(torch.tensor(X[:, 4:]).float())).double().numpy()
    np.testing.assert_allclose(accept_p, 1.0 - _p_important(head, scaler, X_mean_draft, 12), atol=1e-6)
    with pytest.raises(ValueError, match="feature_offset"):
        import_head(path, model="m", hidden_size=8, feature_offset=5)
    with pytest.raises(ValueError, match="hidden_size"):
        import_head(path, model="m", hidden_size=13)


def test_autojudge_export(tmp_path):
    rng = np.random.default_rng(1)
    mean, scale, w = rng.normal(size=6), rng.uniform(0.5, 2, 6), rng.normal(size=6)
    path = tmp_path / "aj.json"
    path.write_text(json.dumps({"mean": mean.tolist(), "scale": scale.tolist(), "weights": w.tolist(), "bias": 0.3,
                                "thresholds": {"q0.50": 0.5}}))
    v = import_head(path, model="m", hidden_size=6)
    x = rng.normal(size=(5, 6))
    p_imp = 1 / (1 + np.exp(-(((x - mean) / scale) @ w + 0.3)))
    np.testing.assert_allclose(torch.sigmoid(v.logits(torch.tensor(x).float())).numpy(), 1 - p_imp, atol=1e-6)
    assert v.threshold("q0.50") == pytest.approx(0.0)


def test_round_trip_through_the_cli(tmp_path, capsys):
    from selfjudge.cli import main

    path, *_ = _published(tmp_path)
    out = tmp_path / "v.safetensors"
    out.symlink_to(tmp_path / "outside.safetensors")  # a planted link is replaced, never written through
    assert main(["import-head", str(path), "--model", "org/llama", "--hidden-size", "12", "--out", str(out)]) == 0
    assert not out.is_symlink() and not (tmp_path / "outside.safetensors").exists()
    v = load_verifier(out, expect_model="org/llama", expect_hidden_size=12)
    assert set(v.thresholds) == {"youden", "min_recall"}


class _Payload:
    """Unpickling this would write a file (it never may)."""

    def __init__(self, target):
        self.target = target

    def __reduce__(self):
        return (os.system, (f"touch {self.target}",))


@pytest.mark.parametrize("how", ["top-level", "inside the dict", "as the model"])
def test_a_pickle_reaching_any_other_global_is_refused_without_running(tmp_path, how):
    marker = tmp_path / "pwned"
    payload = _Payload(marker)
    path = tmp_path / "evil.pkl"
    if how == "top-level":
        obj = payload
    else:
        good, head, scaler, _ = _published(tmp_path)
        obj = {"model": head, "scaler": scaler, "extra": payload} if how == "inside the dict" else {
            "model": payload, "scaler": scaler}
    path.write_bytes(pickle.dumps(obj))
    # negative control: the same bytes through plain pickle do run the payload
    control = tmp_path / "control.pkl"
    control.write_bytes(pickle.dumps(_Payload(tmp_path / "control-ran")))
    pickle.loads(control.read_bytes())
    assert (tmp_path / "control-ran").exists()
    with pytest.raises(ValueError, match="refused global (posix|os).system"):
        read_published_head(path)
    assert not marker.exists()


@pytest.mark.parametrize("global_name", ["builtins eval", "builtins getattr", "subprocess Popen", "numpy load",
                                         "sklearn.base clone"])
def test_other_globals_refused(global_name):
    module, name = global_name.split()
    data = b"\x80\x04c" + module.encode() + b"\n" + name.encode() + b"\n."
    with pytest.raises(ValueError, match=f"refused global {module}.{name}"):
        restricted_load(data)


def test_bad_files(tmp_path):
    with pytest.raises(OSError):
        read_published_head(tmp_path / "missing.pkl")
    (tmp_path / "x.bin").write_bytes(b"x")
    with pytest.raises(ValueError, match=".pkl"):
        read_published_head(tmp_path / "x.bin")
    (tmp_path / "t.pkl").write_bytes(b"\x80\x04")
    with pytest.raises(ValueError, match="not a readable"):
        read_published_head(tmp_path / "t.pkl")
    (tmp_path / "l.pkl").write_bytes(pickle.dumps([1, 2]))
    with pytest.raises(ValueError, match="expected a dict"):
        read_published_head(tmp_path / "l.pkl")
