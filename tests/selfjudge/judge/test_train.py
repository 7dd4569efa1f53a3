"""Verifier training: folding, grouped split, thresholds, calibration table, CLI, file round trip."""

import json
import os

import numpy as np
import pytest
import torch
from sklearn.metrics import f1_score, roc_auc_score

from selfjudge.judge import load_verifier
from selfjudge.labelling.shards import ShardWriter
from selfjudge.judge.train import (
    _make_model,
    choose_thresholds,
    confusion_at,
    fit_verifier,
    fold_standardisation,
    grouped_split,
    reliability_table,
    train_from_labels,
)


def synthetic(n_prompts=60, per_prompt=12, h=16, seed=0, noise=0.5):
    """Features with per-dim offsets/scales; labels from a known linear model + noise; grouped ids."""
    rng = np.random.default_rng(seed)
    mu = rng.normal(0, 3, h)
    sd = rng.uniform(0.2, 5.0, h)
    w_true = rng.normal(0, 1, h)
    n = n_prompts * per_prompt
    z = rng.normal(0, 1, (n, h))
    X = mu + sd * z
    logit = z @ w_true + noise * rng.normal(0, 1, n)
    y = (logit > 0.3).astype(np.int64)
    groups = [f"p{i // per_prompt}" for i in range(n)]
    return X.astype(np.float32), y, groups


def test_fold_matches_pipeline_and_plain_formula():
    X, y, _ = synthetic(n_prompts=20)
    X = X.astype(np.float64)
    model = _make_model(0.1, 2000).fit(X, y)
    sc, lr = model[0], model[-1]
    w, b = fold_standardisation(sc.mean_, sc.scale_, lr.coef_[0], lr.intercept_[0])
    X64 = X.astype(np.float64)
    folded = X64 @ w + b
    np.testing.assert_allclose(folded, model.decision_function(X), rtol=0, atol=1e-9)
    plain = ((X64 - sc.mean_) / sc.scale_) @ lr.coef_[0] + lr.intercept_[0]
    np.testing.assert_allclose(folded, plain, rtol=0, atol=1e-9)
    with pytest.raises(ValueError, match="scale"):
        fold_standardisation(sc.mean_, -sc.scale_, lr.coef_[0], 0.0)


def test_grouped_split_keeps_prompts_apart():
    X, y, g = synthetic()
    tr, va, _ = grouped_split(y, g, 0.25, seed=3)
    ga, gb = {g[i] for i in tr}, {g[i] for i in va}
    assert ga.isdisjoint(gb) and len(ga | gb) == 60
    assert 0.1 < len(gb) / 60 < 0.4
    with pytest.raises(ValueError, match="groups"):
        grouped_split(y, ["same"] * len(y))


def test_choose_thresholds_rules_against_brute_force():
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 2, 300)
    logits = np.round(labels * 1.0 + rng.normal(0, 1, 300), 2)  # ties on purpose
    th = choose_thresholds(logits, labels, target_recall=0.9, quantiles=(0.1, 0.5, 0.9))
    cands = np.concatenate([[logits.min() - 1], np.unique(logits)])
    f1s = [f1_score(labels, (logits > t).astype(int), zero_division=0) for t in cands]
    assert f1_score(labels, (logits > th["F"]).astype(int)) == pytest.approx(max(f1s))
    f1u = [f1_score(1 - labels, (logits <= t).astype(int), zero_division=0) for t in cands]
    assert f1_score(1 - labels, (logits <= th["F_unacceptable"]).astype(int)) == pytest.approx(max(f1u))
    neg = logits[labels == 0]
    assert np.mean(neg <= th["R"]) >= 0.9
    lower = neg[neg < th["R"]]
    assert len(lower) and np.mean(neg <= lower.max()) < 0.9  # R is the smallest such threshold
    assert confusion_at(logits, labels, th["R"])["unacceptable_recall"] >= 0.9
    for q in (0.1, 0.5, 0.9):
        assert abs(np.mean(logits > th[f"q{q:.2f}"]) - (1 - q)) < 0.03
    youden = [np.mean(logits[labels == 1] > t) - np.mean(neg > t) for t in cands]
    m = confusion_at(logits, labels, th["J"])
    assert m["recall"] - m["harmful_accept_rate"] == pytest.approx(max(youden))
    assert np.mean(neg <= th["R80"]) >= 0.8 and th["R80"] <= th["R"]


def test_reliability_table_counts_and_rates():
    probs = np.array([0.05, 0.15, 0.12, 0.95, 0.99, 0.5])
    labels = np.array([0, 1, 0, 1, 1, 0])
    t = reliability_table(probs, labels, n_bins=10)
    assert sum(r["count"] for r in t) == 6
    assert t[1]["count"] == 2 and t[1]["observed_rate"] == 0.5 and t[1]["mean_predicted"] == pytest.approx(0.135)
    assert t[9]["count"] == 2 and t[9]["observed_rate"] == 1.0
    assert t[5]["count"] == 1 and t[3]["count"] == 0 and t[3]["observed_rate"] is None


def test_fit_verifier_learns_and_exports_folded_float32(tmp_path):
    X, y, g = synthetic()
    v, rep = fit_verifier(X, y, g, c_grid=(1e-4, 1e-2, 1.0), metadata={"target": "toy", "method": "selfjudge"})
    assert rep["C"] in (1e-4, 1e-2, 1.0)
    assert rep["val_roc_auc"] > 0.85 and rep["train_roc_auc"] > 0.85
    assert max(s["val_roc_auc"] for s in rep["c_sweep"]) == rep["val_roc_auc"] or abs(
        max(s["val_roc_auc"] for s in rep["c_sweep"]) - rep["val_roc_auc"]) < 1e-3
    ts = rep["training_set"]
    assert ts["n_train_prompts"] + ts["n_val_prompts"] == 60 and ts["n"] == len(y)
    assert v.weight.dtype == torch.float32 and v.weight.shape == (16,)
    # the exported (folded) verifier reproduces the refit pipeline's decision function
    tr, va, _ = grouped_split(y, g, 0.2, seed=ts["split_seed"], max_tries=1)
    model = _make_model(rep["C"], 2000).fit(X[tr], y[tr])
    np.testing.assert_allclose(v.logits(torch.from_numpy(X)).numpy(), model.decision_function(X), atol=2e-4, rtol=1e-5)
    assert rep["val_roc_auc"] == pytest.approx(roc_auc_score(y[va], model.decision_function(X[va])), abs=1e-6)
    assert rep["at_threshold"]["R"]["unacceptable_recall"] >= 0.9
    assert set(["F", "R", "q0.05", "q0.50", "q0.95", "q0.99"]) <= set(v.thresholds)
    assert sum(r["count"] for r in rep["reliability"]) == ts["n_val"]
    # round trip
    p = tmp_path / "v.safetensors"
    v.save(p)
    w = load_verifier(p, expect_model="toy", expect_hidden_size=16)
    assert torch.equal(w.weight, v.weight) and w.bias == v.bias and w.thresholds == v.thresholds
    assert w.metadata["metrics"]["val_roc_auc"] == rep["val_roc_auc"]


def test_fit_verifier_rejects_bad_input():
    X, y, g = synthetic(n_prompts=10)
    with pytest.raises(ValueError, match="labels"):
        fit_verifier(X, y + 1, g)
    with pytest.raises(ValueError, match="features"):
        fit_verifier(X[:, 0], y, g)
    with pytest.raises(ValueError, match="length"):
        fit_verifier(X, y[:-1], g)
    with pytest.raises(ValueError, match="split"):
        fit_verifier(X, y, g, split=(np.arange(0, 60), np.arange(50, 120)))


def write_synthetic_dir(d, X, y, g, method="selfjudge"):
    man = {"method": method, "target": "toy/target", "draft": "toy/draft", "task": "gsm8k", "window": 20,
           "tau": 0.0, "hidden_size": X.shape[1]}
    w = ShardWriter(str(d), man)
    for pid in dict.fromkeys(g):
        idx = [i for i, gi in enumerate(g) if gi == pid]
        rows = [{"prompt_id": pid, "position": k, "target_token_id": 1, "draft_token_id": 2, "target_token": "a",
                 "draft_token": "b", "score": 0.0, "label": int(y[i])} for k, i in enumerate(idx)]
        w.write([pid], rows, torch.from_numpy(X[idx]))
    return len(w.done_prompt_ids)


def test_train_cli_end_to_end(tmp_path):
    from selfjudge.cli import main

    X, y, g = synthetic(n_prompts=40, seed=2)
    assert write_synthetic_dir(tmp_path / "labels", X, y, g) == 40
    out = tmp_path / "judge.safetensors"
    rep = tmp_path / "report.json"
    assert main(["train", "--labels", str(tmp_path / "labels"), "--out", str(out), "--c-grid", "0.001,0.1",
                 "--report", str(rep)]) == 0
    v = load_verifier(out, expect_model="toy/target")
    assert v.metadata["method"] == "selfjudge" and v.metadata["tau"] == 0.0 and v.metadata["window"] == 20
    assert v.metadata["command"].startswith("selfjudge ")
    assert json.load(open(rep))["val_roc_auc"] > 0.8
    assert os.path.getsize(out) < 64 * 1024
    v2, _ = train_from_labels([str(tmp_path / "labels")], c_grid=(0.001, 0.1))
    assert torch.allclose(v2.weight, v.weight)


def test_train_relabels_selfjudge_scores_with_tau_quantile(tmp_path):
    from selfjudge.labelling.shards import read_rows

    X, y, g = synthetic(n_prompts=30, seed=4)
    d = tmp_path / "labels"
    man = {"method": "selfjudge", "target": "toy/target", "draft": "toy/draft", "task": "gsm8k", "window": 20,
           "tau": 0.0, "hidden_size": X.shape[1]}
    w = ShardWriter(str(d), man)
    score = X.astype(np.float64) @ np.linspace(-1, 1, X.shape[1])
    for pid in dict.fromkeys(g):
        idx = [i for i, gi in enumerate(g) if gi == pid]
        rows = [{"prompt_id": pid, "position": k, "target_token_id": 1, "draft_token_id": 2, "target_token": "a",
                 "draft_token": "b", "score": float(score[i]), "label": 0} for k, i in enumerate(idx)]
        w.write([pid], rows, torch.from_numpy(X[idx]))
    v, rep = train_from_labels([str(d)], tau_quantile=0.7, c_grid=(0.01, 1.0))
    tau = float(np.quantile(score, 0.7))
    assert v.metadata["tau"] == pytest.approx(tau, abs=1e-9) and v.metadata["tau_quantile"] == 0.7
    assert rep["training_set"]["positive_rate"] == pytest.approx(np.mean(score > tau))
    assert rep["val_roc_auc"] > 0.9  # the score is linear in the features
    assert all(r["label"] == 0 for r in read_rows(d))  # the stored labels are untouched


def _phi_world(n_prompts=40, per=12, seed=0):
    """Labels decided by the probability features alone; the hidden state is noise."""
    rng = np.random.default_rng(seed)
    n = n_prompts * per
    h = rng.normal(size=(n, 16))
    phi = np.stack([rng.normal(-2, 1, n), np.abs(rng.normal(0, 1, n)), rng.uniform(0, 1, n)], 1)
    y = (phi[:, 0] - phi[:, 1] + rng.normal(0, 0.3, n) > -2.5).astype(int)
    g = [f"p{i // per}" for i in range(n)]
    return h, phi, y, g


def test_feature_sets_read_what_they_name_and_test_is_held_out():
    h, phi, y, g = _phi_world()
    kw = dict(c_grid=(0.01, 1.0), val_fraction=0.2, test_fraction=0.2)
    v_h, r_h = fit_verifier(h, y, g, phi=phi, feature_set="h", **kw)
    v_p, r_p = fit_verifier(h, y, g, phi=phi, feature_set="phi", **kw)
    v_b, r_b = fit_verifier(h, y, g, phi=phi, feature_set="h+phi", **kw)
    assert r_p["test"]["roc_auc"] > 0.9 and r_b["test"]["roc_auc"] > 0.9
    assert r_h["test"]["roc_auc"] < 0.7  # negative control: the hidden state carries no signal here
    assert v_h.phi_weight is None and v_p.phi_weight.shape == (3,) and float(v_p.weight.abs().max()) == 0.0
    ts = r_b["training_set"]
    assert ts["n_train"] + ts["n_val"] + ts["n_test"] == len(y) and ts["n_test_prompts"] == 8
    # the exported verifier gives the report's logits: folded weights over raw h and phi
    logits = v_b.logits(torch.tensor(h, dtype=torch.float32), torch.tensor(phi, dtype=torch.float32)).numpy()
    assert abs(roc_auc_score(y, logits) - np.mean([r_b["train_roc_auc"], r_b["val_roc_auc"]])) < 0.1


def test_augmentation_adds_training_rows_only_and_round_trips(tmp_path):
    h, phi, y, g = _phi_world(seed=1)
    orig = (h + 1.0, np.stack([np.full(len(y), -0.1), np.zeros(len(y)), phi[:, 2]], 1))
    kw = dict(phi=phi, feature_set="h+phi", c_grid=(1.0,), test_fraction=0.2, seed=3)
    v0, r0 = fit_verifier(h, y, g, **kw)
    v1, r1 = fit_verifier(h, y, g, augment=orig, **kw)
    assert r1["training_set"] == r0["training_set"]  # same prompts on every side; extra rows only fit
    assert r1["augment"] and not r0["augment"]
    assert not np.allclose(v0.phi_weight.numpy(), v1.phi_weight.numpy())
    path = tmp_path / "v.safetensors"
    v1.save(path)
    back = load_verifier(path)
    assert back.phi_features == ("logp_draft", "margin_to_top1", "topk_entropy")
    assert torch.equal(back.phi_weight, v1.phi_weight) and back.metadata["feature_set"] == "h+phi"
