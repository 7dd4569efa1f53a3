"""Train a verifier from label shards: standardise, L2 logistic regression, pick C, pick thresholds.

Recipe (SPEC §4, as AutoJudge does it): ``StandardScaler`` + L2
``LogisticRegression`` on acceptability labels (1 = acceptable); the inverse
regularisation ``C`` is chosen by validation ROC-AUC over a log grid on a split
grouped by prompt (no prompt contributes to both sides, since mismatches of one
response are strongly correlated). The chosen model is the one fit on the
training side, so thresholds and metrics picked on the validation side are
honest held-out numbers. The standardisation is folded into the exported
weight and bias: ``w' = w / sigma``, ``b' = b - sum(w * mu / sigma)``.

Operating thresholds (logit space, accept iff ``logit > theta``):

* ``"F"``: maximum validation F1 of the *acceptable* class (the positive class
  the verifier predicts; "accept" is the decision it takes). ``"F_unacceptable"``
  (max F1 of the harmful class, AutoJudge's "important" view) and ``"F_macro"``
  are stored too, because when one class dominates the acceptable-class F1 is
  maximised by accepting nearly everything.
* ``"R"``: the smallest threshold at which at least ``target_recall`` (0.9 by
  default) of the validation *unacceptable* tokens are rejected, i.e. at most
  10 % of harmful mismatches get accepted.
* ``"J"`` (Youden's J, max TPR - FPR) and ``"R80"`` (at least 80 % of the unacceptable
  tokens rejected): the operating points of SelfJudge's released code.
* ``"q0.05" .. "q0.95"``: quantiles of the validation logits (``qX`` rejects
  about a fraction X of mismatches), for accuracy/acceptance Pareto curves.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np

from selfjudge.labelling.shards import read_label_dirs_tensors, resolve_tau

from .metrics import (DEFAULT_QUANTILES, choose_thresholds, confusion_at, expected_calibration_error,  # noqa: F401
                      held_out_metrics, reliability_table)

DEFAULT_C_GRID: tuple[float, ...] = tuple(float(c) for c in np.logspace(-5, 1, 13))

FEATURE_DEFINITION = (
    "target final-layer hidden state (output_hidden_states[-1], after the final norm) at the position of the "
    "draft token z_i, i.e. after the target has read prompt + y_<i + z_i; the same state the verify step sees"
)


# --------------------------------------------------------------------------- folding


def fold_standardisation(
    mean: np.ndarray,  # [H]
    scale: np.ndarray,  # [H]
    coef: np.ndarray,  # [H]
    intercept: float,
) -> tuple[np.ndarray, float]:
    """Fold ``(x - mean) / scale`` into a linear model: returns ``(w', b')`` in float64.

    ``coef · ((x - mean) / scale) + intercept == w' · x + b'`` with
    ``w' = coef / scale`` and ``b' = intercept - sum(coef * mean / scale)``.
    """
    mean = np.asarray(mean, dtype=np.float64)
    scale = np.asarray(scale, dtype=np.float64)
    coef = np.asarray(coef, dtype=np.float64).reshape(-1)
    if not (mean.shape == scale.shape == coef.shape) or mean.ndim != 1:
        raise ValueError(f"mean, scale, coef must all be [H]; got {mean.shape}, {scale.shape}, {coef.shape}")
    if np.any(scale <= 0):
        raise ValueError("scale must be positive")
    w = coef / scale
    b = float(intercept) - float(np.sum(coef * mean / scale))
    return w, b


# --------------------------------------------------------------------------- fitting


def grouped_split(
    labels: np.ndarray, groups: Sequence[Any], val_fraction: float = 0.2, seed: int = 0, max_tries: int = 50
) -> tuple[np.ndarray, np.ndarray, int]:
    """Train/validation index arrays with no group (prompt) on both sides and both classes on each side."""
    from sklearn.model_selection import GroupShuffleSplit

    labels = np.asarray(labels)
    groups = np.asarray([str(g) for g in groups])
    n_groups = len(np.unique(groups))
    if n_groups < 2:
        raise ValueError(f"groups: need at least 2 distinct prompts for a grouped split, got {n_groups}")
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    for t in range(max_tries):
        gss = GroupShuffleSplit(n_splits=1, test_size=val_fraction, random_state=seed + t)
        tr, va = next(gss.split(np.zeros(len(labels)), labels, groups))
        if len(np.unique(labels[tr])) == 2 and len(np.unique(labels[va])) == 2:
            return tr, va, seed + t
    raise ValueError(
        "labels: could not find a grouped split with both classes on both sides "
        f"({n_groups} prompts, positive rate {labels.mean():.3f}); label more prompts or change tau"
    )


def _make_model(c: float, max_iter: int):
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    # sklearn >= 1.8: l1_ratio=0 is the L2 penalty (the `penalty` argument is deprecated)
    return make_pipeline(StandardScaler(), LogisticRegression(C=c, l1_ratio=0.0, solver="lbfgs", max_iter=max_iter))


FEATURE_SETS = ("h", "phi", "h+phi")


def design_matrix(features, phi, feature_set: str) -> np.ndarray:
    """The columns a verifier reads: the hidden state ``[N, H]``, the probability features ``[N, F]``,
    or both side by side (float64)."""
    if feature_set not in FEATURE_SETS:
        raise ValueError(f"feature_set must be one of {FEATURE_SETS}, got {feature_set!r}")
    if feature_set != "h" and phi is None:
        raise ValueError(f"feature_set={feature_set!r} needs phi (labels of format 2 store it)")
    cols = [] if feature_set == "phi" else [("features", _as_array(features))]
    if feature_set != "h":
        cols.append(("phi", _as_array(phi)))
    for name, block in cols:
        if block.ndim != 2:
            raise ValueError(f"{name} must be [N, width], got shape {block.shape}")
    if len({len(block) for _, block in cols}) != 1:
        raise ValueError(f"features and phi must have equal length, got {[len(b) for _, b in cols]}")
    return np.concatenate([block for _, block in cols], 1)


def _as_array(t) -> np.ndarray:
    return np.asarray(t.numpy() if hasattr(t, "numpy") else t, dtype=np.float64)


def three_way_split(labels: np.ndarray, groups, val_fraction: float, test_fraction: float, seed: int):
    """``(train, validation, test, seed used)`` indices, grouped by prompt; test empty when
    ``test_fraction`` is 0."""
    if test_fraction == 0:
        tr, va, used = grouped_split(labels, groups, val_fraction, seed)
        return tr, va, np.zeros(0, dtype=np.int64), used
    g = np.asarray([str(x) for x in groups])
    rest, te, used = grouped_split(labels, g, test_fraction, seed)
    tr, va, _ = grouped_split(labels[rest], g[rest], val_fraction / (1 - test_fraction), seed)
    return rest[tr], rest[va], te, used


def fit_verifier(
    features,  # [N, H] float (torch tensor or numpy)
    labels,  # [N] 0/1, 1 = acceptable
    groups: Sequence[Any],  # [N] prompt ids
    *,
    phi=None,  # [N, F] the probability features (kernels.judge_features), or None
    feature_set: str = "h",
    augment=None,  # (orig_features [N, H], orig_phi [N, F]): the original token, acceptable
    c_grid: Sequence[float] = DEFAULT_C_GRID,
    val_fraction: float = 0.2,
    test_fraction: float = 0.0,
    seed: int = 0,
    target_recall: float = 0.9,
    quantiles: Sequence[float] = DEFAULT_QUANTILES,
    max_iter: int = 2000,
    metadata: dict[str, Any] | None = None,
    split: tuple[np.ndarray, np.ndarray] | None = None,
):
    """Fit a verifier; returns ``(Verifier, report)``.

    ``feature_set``: what the judge reads, ``"h"`` (the hidden state), ``"phi"`` (the target's
    probability features of the draft token) or ``"h+phi"``. ``augment``: the released code's
    augmentation, every *training* mismatch also adds the original token's state and features as
    an acceptable example (never on the validation or test side). ``test_fraction``: prompts held
    out from both fitting and every choice (C, thresholds), on which ``report["test"]`` is measured.
    ``split`` (train indices, validation indices) overrides the grouped random split.
    """
    X = design_matrix(features, phi, feature_set)
    y = np.asarray(labels.numpy() if hasattr(labels, "numpy") else labels).astype(np.int64).reshape(-1)
    H = int(np.shape(features)[1])
    _check_inputs(X, y, groups, c_grid)
    if split is None:
        tr, va, te, split_seed = three_way_split(y, groups, val_fraction, test_fraction, seed)
    else:
        tr, va = (np.asarray(s, dtype=np.int64) for s in split)
        te, split_seed = np.zeros(0, dtype=np.int64), None
        _check_split(y, groups, tr, va)
    X_fit, y_fit = X[tr], y[tr]
    if augment is not None:
        X_aug = design_matrix(augment[0], augment[1], feature_set)[tr]
        X_fit, y_fit = np.concatenate([X_fit, X_aug]), np.concatenate([y_fit, np.ones(len(tr), dtype=np.int64)])

    t0 = time.perf_counter()
    sweep, model, best_c = _choose_c(X_fit, y_fit, X[va], y[va], c_grid, max_iter)
    scaler, lr = model[0], model[-1]
    w, b = fold_standardisation(scaler.mean_, scaler.scale_, lr.coef_[0], float(lr.intercept_[0]))
    w32, b32 = w.astype(np.float32), np.float32(b)
    logit = lambda idx: (X[idx].astype(np.float32) @ w32 + b32).astype(np.float64)  # noqa: E731  kernel's fp32
    va_logit = logit(va)
    thresholds = choose_thresholds(va_logit, y[va], target_recall, quantiles)
    table = reliability_table(1.0 / (1.0 + np.exp(-va_logit)), y[va])
    report = _report(y, groups, tr, va, te, logit, thresholds, table, sweep, best_c, val_fraction, test_fraction)
    report["training_set"]["split_seed"] = split_seed
    report.update(feature_set=feature_set, augment=augment is not None, fit_seconds=time.perf_counter() - t0,
                  target_recall_unacceptable=target_recall)
    return _verifier(w32, b32, H, feature_set, thresholds, table, report, metadata), report


def _check_inputs(X, y, groups, c_grid) -> None:
    if len(y) != len(X) or len(groups) != len(X):
        raise ValueError(f"features ({len(X)}), labels ({len(y)}) and groups ({len(groups)}) must have equal length")
    if not np.isin(y, (0, 1)).all():
        raise ValueError("labels must be 0/1 (1 = acceptable)")
    if not np.isfinite(X).all():
        raise ValueError("features contain non-finite values")
    if not c_grid:
        raise ValueError("c_grid must not be empty")


def _check_split(y, groups, tr, va) -> None:
    g = np.asarray([str(x) for x in groups])
    if set(g[tr]) & set(g[va]):
        raise ValueError("split: a prompt appears on both the train and validation side")
    if len(np.unique(y[tr])) < 2 or len(np.unique(y[va])) < 2:
        raise ValueError("split: both classes must appear on both sides")


def _choose_c(X_tr, y_tr, X_va, y_va, c_grid, max_iter):
    """Fit one model per C; keep the best validation ROC-AUC: ``(sweep, model, C)``."""
    from sklearn.metrics import roc_auc_score

    sweep, best = [], None
    for c in c_grid:
        model = _make_model(float(c), max_iter).fit(X_tr, y_tr)
        auc = float(roc_auc_score(y_va, model.decision_function(X_va)))
        sweep.append({"C": float(c), "val_roc_auc": auc})
        if best is None or auc > best[0] + 1e-12:
            best = (auc, float(c), model)
    return sweep, best[2], best[1]


def _report(y, groups, tr, va, te, logit, thresholds, table, sweep, best_c, val_fraction, test_fraction) -> dict:
    from sklearn.metrics import roc_auc_score

    g = np.asarray([str(x) for x in groups])
    va_logit = logit(va)
    return {
        "C": best_c,
        "c_sweep": sweep,
        "train_roc_auc": float(roc_auc_score(y[tr], logit(tr))),
        "val_roc_auc": float(roc_auc_score(y[va], va_logit)),
        "validation": held_out_metrics(va_logit, y[va], thresholds),
        "test": held_out_metrics(logit(te), y[te], thresholds) if len(te) and len(np.unique(y[te])) == 2 else None,
        "at_threshold": {name: confusion_at(va_logit, y[va], thresholds[name])
                         for name in ("F", "F_unacceptable", "F_macro", "R", "J", "R80")},
        "sweep": [{"name": k, **confusion_at(va_logit, y[va], v)} for k, v in thresholds.items() if k.startswith("q")],
        "reliability": table,
        "val_ece": expected_calibration_error(table),
        "training_set": {
            "n": int(len(y)), "n_prompts": int(len(np.unique(g))), "positive_rate": float(y.mean()),
            "n_train": int(len(tr)), "n_val": int(len(va)), "n_test": int(len(te)),
            "n_train_prompts": int(len(np.unique(g[tr]))), "n_val_prompts": int(len(np.unique(g[va]))),
            "n_test_prompts": int(len(np.unique(g[te]))), "val_positive_rate": float(y[va].mean()),
            "val_fraction": val_fraction, "test_fraction": test_fraction,
        },
    }


def _verifier(w32, b32, H, feature_set, thresholds, table, report, metadata):
    """The exported verifier: the folded weights split into the hidden-state and the feature part."""
    import torch

    from selfjudge.judge.verifier import Verifier
    from selfjudge.kernels.judge_features import FEATURE_NAMES

    meta = dict(metadata or {})
    meta.setdefault("feature", FEATURE_DEFINITION)
    meta["feature_set"] = feature_set
    meta["label"] = "1 = acceptable; logit = acceptability (AutoJudge's importance negated)"
    meta["metrics"] = {k: report[k] for k in ("C", "train_roc_auc", "val_roc_auc", "at_threshold", "val_ece")}
    if report.get("test"):
        meta["metrics"]["test"] = {k: v for k, v in report["test"].items() if k != "at_threshold"}
    meta["reliability"] = table
    meta["training_set"] = report["training_set"]
    meta["trainer"] = "StandardScaler + L2 LogisticRegression (sklearn), C by grouped-validation ROC-AUC, folded"
    weight = np.zeros(H, dtype=np.float32) if feature_set == "phi" else w32[:H]
    phi_weight = None
    if feature_set != "h":
        phi_weight = torch.from_numpy(w32[-len(FEATURE_NAMES):].copy())
        meta["phi_features"] = list(FEATURE_NAMES)
    return Verifier(weight=torch.from_numpy(weight.copy()), bias=float(b32), thresholds=thresholds, metadata=meta,
                    phi_weight=phi_weight)


# --------------------------------------------------------------------------- from label dirs


def train_from_labels(
    label_dirs: Sequence[str],
    out: str | None = None,
    *,
    command: str | None = None,
    tau: float | None = None,
    tau_quantile: float | None = None,
    score: str | None = None,
    feature_set: str = "h",
    augment: bool = False,
    **fit_kwargs,
):
    """Read label dirs, fit, attach metadata from the manifests, optionally save to ``out``.

    ``tau`` / ``tau_quantile`` relabel SelfJudge scores before fitting (recorded in the metadata);
    ``score`` ("likelihood" / "confidence") relabels from that stored score instead of the run's own.
    ``feature_set`` / ``augment``: see :func:`fit_verifier` (both need labels of format 2).
    """
    if score is not None and tau is None and tau_quantile is None:
        raise ValueError("score: choosing a score relabels the rows, so give tau or tau_quantile too")
    tau_used = resolve_tau(label_dirs, tau, tau_quantile, score=score)
    tensors, rows, manifests = read_label_dirs_tensors(label_dirs, tau=tau_used, score=score)
    needed = (["phi"] if feature_set != "h" else []) + (["orig_features", "orig_phi"] if augment else [])
    missing = [k for k in needed if k not in tensors]
    if missing:
        raise ValueError(f"labels: {missing} not stored in {list(label_dirs)} (labelled before format 2: relabel)")
    feats = tensors["features"]
    labels = np.asarray([int(r["label"]) for r in rows])
    groups = [str(r["prompt_id"]) for r in rows]
    meta = _label_metadata(label_dirs, manifests, command, score, tau_quantile)
    if int(feats.shape[1]) != int(manifests[0].get("hidden_size", feats.shape[1])):
        raise ValueError(f"labels: manifest hidden_size {manifests[0].get('hidden_size')} != features width "
                         f"{feats.shape[1]}")
    verifier, report = fit_verifier(feats, labels, groups, phi=tensors.get("phi"), feature_set=feature_set,
                                    augment=(tensors["orig_features"], tensors["orig_phi"]) if augment else None,
                                    metadata=meta, **fit_kwargs)
    if out is not None:
        verifier.save(out)
    return verifier, report


def _label_metadata(label_dirs, manifests, command, score, tau_quantile) -> dict:
    """What a verifier records of the labels it was fit on."""
    m0 = manifests[0]
    meta = {
        "method": m0.get("method"),
        "target": m0.get("target"),
        "target_fingerprint": m0.get("target_fingerprint"),
        "draft": m0.get("draft"),
        "task": m0.get("task") if len({m.get("task") for m in manifests}) == 1 else "+".join(
            sorted({str(m.get("task")) for m in manifests})),
        "label_dirs": [str(d) for d in label_dirs],
        "command": command,
    }
    if m0.get("method") == "selfjudge":
        meta["tau"] = m0.get("tau")
        meta["window"] = m0.get("window")
        meta["score"] = score or m0.get("score", "likelihood")
        if tau_quantile is not None:
            meta["tau_quantile"] = tau_quantile
    if m0.get("command"):
        meta["labels_command"] = m0["command"]
    if m0.get("commands"):
        meta["labels_commands"] = m0["commands"]
    for extra in ("feature", "layer", "max_new_tokens", "split", "label_fraction", "feature_dtype", "feature_device"):
        if extra in m0:
            meta[extra] = m0[extra]
    return meta
