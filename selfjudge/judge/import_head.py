"""Published judge heads, imported as verifier files without running their pickles.

The SelfJudge authors publish heads for Llama-3.1-8B-Instruct and Qwen2.5-7B-Instruct
(naver-aics/SelfJudge ``verifier_general/*.pkl``): a pickled dict holding a
scikit-learn ``StandardScaler`` (``"scaler"``), a ``LogisticRegression``
(``"model"``) that predicts P(important), and thresholds on that probability
(``"youden_threshold"``, ``"min_recall_threshold"``). Their decoder accepts a
mismatching draft token iff ``P(important) < threshold``. AutoJudge's exporter
writes the same head as plain numbers: ``mean``, ``scale``, ``weights``, ``bias``
and ``thresholds``.

:func:`read_published_head` reads a pickle through :class:`RestrictedUnpickler`: an
allowlist of the numpy globals that rebuild arrays, plus two stand-in classes in
place of the scikit-learn estimators that only record their attributes. Any other
global (``os.system``, ``builtins.eval``, a module's function) is refused when the
pickle names it, before anything it would call runs; scikit-learn code never runs
either. :func:`fold_head` folds the scaler into one weight vector and a bias and
flips the sign: our judge scores *acceptability*,
``logit = -(w / s) . x - (b - sum(w * mean / s))``, and a source threshold ``t`` on
P(important) becomes the logit threshold ``log((1 - t) / t)`` (accept iff
``logit > threshold`` exactly when ``P(important) < t``).

Feature layout: the published heads read ``[draft final hidden ; target final hidden]``
(AutoJudge's "DD-DT"), while the engine hands the judge the target's final hidden
state only. With ``hidden_size`` smaller than the head's feature count the import
keeps ``hidden_size`` features starting at ``feature_offset`` (default: the last
ones, the target's part) and holds the others at their training mean, where their
standardised value, and so their contribution, is zero. That is an approximation,
recorded in the metadata; AutoJudge reports target-only features nearly as good
(ROC-AUC 0.808 against 0.812).
"""

from __future__ import annotations

import io
import math
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import torch

from selfjudge.json_io import read_json

from .verifier import Verifier

PICKLE_SUFFIXES = (".pkl", ".pickle", ".joblib")


class _Recorded:
    """Stand-in for an estimator class: keeps the pickled attributes, runs no code of its own."""

    source = ""

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2:  # (dict, slots)
            state = {**(state[0] or {}), **(state[1] or {})}
        if not isinstance(state, dict):
            raise pickle.UnpicklingError(f"{self.source}: unexpected state {type(state).__name__}")
        self.__dict__.update(state)


class RecordedScaler(_Recorded):
    source = "sklearn StandardScaler"


class RecordedLogisticRegression(_Recorded):
    source = "sklearn LogisticRegression"


def _numpy_globals() -> dict[tuple[str, str], Any]:
    """The numpy functions that rebuild arrays, dtypes and scalars (under numpy 1 and 2 names)."""
    try:
        from numpy._core import multiarray, numeric
    except ImportError:  # numpy < 2
        from numpy.core import multiarray, numeric

    allowed = {("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype}
    for package in ("numpy.core", "numpy._core"):
        allowed[(f"{package}.multiarray", "_reconstruct")] = multiarray._reconstruct
        allowed[(f"{package}.multiarray", "scalar")] = multiarray.scalar
        allowed[(f"{package}.numeric", "_frombuffer")] = numeric._frombuffer
    return allowed


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickles only numpy arrays/scalars, plain containers and the two recorded estimators."""

    ESTIMATORS = {
        ("sklearn.preprocessing._data", "StandardScaler"): RecordedScaler,
        ("sklearn.preprocessing.data", "StandardScaler"): RecordedScaler,
        ("sklearn.linear_model._logistic", "LogisticRegression"): RecordedLogisticRegression,
        ("sklearn.linear_model.logistic", "LogisticRegression"): RecordedLogisticRegression,
    }

    def find_class(self, module: str, name: str):
        allowed = {**_numpy_globals(), **self.ESTIMATORS}
        if (module, name) in allowed:
            return allowed[(module, name)]
        raise pickle.UnpicklingError(f"refused global {module}.{name}: not on the allowlist of published judge heads")


def restricted_load(data: bytes) -> Any:
    """Unpickle ``data`` through :class:`RestrictedUnpickler` (``ValueError`` on any refused global)."""
    try:
        return RestrictedUnpickler(io.BytesIO(data)).load()
    except pickle.UnpicklingError as err:
        raise ValueError(str(err)) from None
    except (EOFError, AttributeError, TypeError, IndexError, KeyError) as err:
        raise ValueError(f"not a readable judge-head pickle ({type(err).__name__}: {err})") from None


MAX_FEATURES = 1 << 20  # far beyond any hidden size: a larger head is a damaged or hostile file


def _array(value, name: str, pickled: bool = False) -> np.ndarray:
    """A finite float64 vector. From a pickle only a numpy array or number is taken: nested lists
    there can share references and describe exponentially many elements in a few bytes."""
    if pickled and not isinstance(value, (np.ndarray, np.generic, int, float)):
        raise ValueError(f"{name} must be a numpy array, got {type(value).__name__}")
    if isinstance(value, np.ndarray) and value.dtype.kind not in "fiu":
        raise ValueError(f"{name} must hold numbers, got dtype {value.dtype}")
    try:
        arr = np.asarray(value, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError, OverflowError) as err:
        raise ValueError(f"{name} is not an array of numbers ({str(err)[:80]})") from None
    if arr.size > MAX_FEATURES:
        raise ValueError(f"{name} holds {arr.size} values, more than any judge head ({MAX_FEATURES})")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} holds non-finite values")
    return arr


def read_published_head(path: str | Path) -> dict[str, Any]:
    """``{"mean", "scale", "weights", "bias", "thresholds", "format"}`` of a published head file.

    ``.pkl``/``.pickle``/``.joblib``: the SelfJudge pickle (restricted unpickling);
    ``.json``: AutoJudge's exported numbers. ``thresholds`` are on P(important). Whatever is
    wrong with the file is one ``ValueError`` naming it.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"FILE: no judge head at {path}")
    try:
        return _read_head(path)
    except ValueError as err:
        raise ValueError(str(err) if str(path) in str(err) else f"FILE {path}: {err}") from None
    except (TypeError, AttributeError, KeyError, IndexError, RecursionError, OverflowError) as err:
        raise ValueError(f"FILE {path}: not a usable judge head ({type(err).__name__}: {str(err)[:120]})") from None


def _read_head(path: Path) -> dict[str, Any]:
    if path.suffix == ".json":
        obj = read_json(path)
        if not isinstance(obj, dict):
            raise ValueError(f"FILE {path}: an AutoJudge export is a JSON object, got {type(obj).__name__}")
        fmt = "autojudge-export"
        missing = [k for k in ("mean", "scale", "weights", "bias") if k not in obj]
        if missing:
            raise ValueError(f"FILE {path}: an AutoJudge export needs mean, scale, weights, bias; missing {missing}")
        weights, bias = obj["weights"], obj["bias"]
        mean, scale = obj["mean"], obj["scale"]
        thresholds = obj.get("thresholds") or {}
        pickled = False
    elif path.suffix in PICKLE_SUFFIXES:
        obj = restricted_load(path.read_bytes())
        fmt = "selfjudge-pickle"
        if not isinstance(obj, dict) or not isinstance(obj.get("model"), RecordedLogisticRegression) \
                or not isinstance(obj.get("scaler"), RecordedScaler):
            raise ValueError(f"FILE {path}: expected a dict with a LogisticRegression 'model' and a StandardScaler "
                             "'scaler'")
        model, scaler = obj["model"], obj["scaler"]
        pickled = True
        coef_raw = getattr(model, "coef_", None)
        if not isinstance(coef_raw, np.ndarray) or coef_raw.dtype.kind not in "fiu":
            raise ValueError(f"FILE {path}: the LogisticRegression's coef_ is not a numeric array")
        coef = coef_raw.astype(np.float64)
        if coef.ndim != 2 or coef.shape[0] != 1:
            raise ValueError(f"FILE {path}: expected a binary LogisticRegression (coef_ [1, F]), got {coef.shape}")
        classes = list(np.asarray(getattr(model, "classes_", [0, 1])).tolist())
        if classes != [0, 1]:
            raise ValueError(f"FILE {path}: expected classes [0, 1] (1 = important), got {classes}")
        weights, bias = coef[0], _array(getattr(model, "intercept_", None), "intercept_", pickled=True)[0]
        mean = getattr(scaler, "mean_", None)
        scale = getattr(scaler, "scale_", None)
        if mean is None or scale is None:  # with_mean / with_std off
            mean = np.zeros_like(weights) if mean is None else mean
            scale = np.ones_like(weights) if scale is None else scale
        thresholds = {k.removesuffix("_threshold"): obj[k] for k in ("youden_threshold", "min_recall_threshold")
                      if obj.get(k) is not None}
    else:
        raise ValueError(f"FILE {path}: expected a .pkl (SelfJudge) or .json (AutoJudge export) head")
    if not isinstance(thresholds, dict):
        raise ValueError(f"FILE {path}: thresholds must be a mapping of names to probabilities")
    weights, mean, scale = (_array(v, n, pickled) for v, n in ((weights, "weights"), (mean, "mean"), (scale, "scale")))
    bias = _array(bias, "bias", pickled)
    if bias.size != 1:
        raise ValueError(f"FILE {path}: bias must be one number, got {bias.size}")
    bias = bias[0]
    F = weights.shape[0]
    if mean.shape[0] < F or scale.shape[0] < F:
        raise ValueError(f"FILE {path}: the scaler has {mean.shape[0]} features, the head {F}")
    mean, scale = mean[:F], scale[:F]  # as the published loader trims the scaler to the head's features
    if (scale <= 0).any():
        raise ValueError(f"FILE {path}: scale must be > 0")
    thresholds = {str(k): float(_array(v, f"threshold {k}", pickled)[0]) for k, v in thresholds.items()}
    bad = [k for k, v in thresholds.items() if not 0.0 < v < 1.0]
    if bad:
        raise ValueError(f"FILE {path}: thresholds {bad} are not probabilities in (0, 1)")
    return {"mean": mean, "scale": scale, "weights": weights, "bias": float(bias), "thresholds": thresholds,
            "format": fmt}


def fold_head(head: dict[str, Any], hidden_size: int, feature_offset: int | None = None) -> tuple[torch.Tensor, float, dict]:
    """Fold scaler and sign into ``(weight [hidden_size] fp32, bias, acceptability thresholds)``."""
    w, mean, scale = head["weights"], head["mean"], head["scale"]
    F = w.shape[0]
    if not 1 <= hidden_size <= F:
        raise ValueError(f"hidden_size must be in [1, {F}] (the head's feature count), got {hidden_size}")
    offset = F - hidden_size if feature_offset is None else int(feature_offset)
    if not 0 <= offset <= F - hidden_size:
        raise ValueError(f"feature_offset must be in [0, {F - hidden_size}], got {feature_offset}")
    keep = slice(offset, offset + hidden_size)
    # features outside ``keep`` sit at their training mean: standardised value 0, no contribution
    important_w = w[keep] / scale[keep]
    important_b = head["bias"] - float(np.sum(w[keep] * mean[keep] / scale[keep]))
    thresholds = {name: math.log((1.0 - t) / t) for name, t in head["thresholds"].items()}
    return torch.tensor(-important_w, dtype=torch.float32), -important_b, thresholds


def import_head(path: str | Path, *, model: str, hidden_size: int, feature_offset: int | None = None,
                command: str | None = None) -> Verifier:
    """A :class:`~selfjudge.judge.verifier.Verifier` from a published head file (see the module docstring)."""
    if not model:
        raise ValueError("model: the id of the target the head was trained for is required")
    head = read_published_head(path)
    try:
        weight, bias, thresholds = fold_head(head, hidden_size, feature_offset)
    except ValueError as err:
        raise ValueError(f"FILE {path}: {err}") from None
    F = head["weights"].shape[0]
    offset = F - hidden_size if feature_offset is None else int(feature_offset)
    meta = {
        "method": "imported", "source": str(path), "source_format": head["format"], "target": model,
        "source_features": F, "feature_offset": offset,
        "feature": "target final-layer hidden state after reading the draft token",
        "label": "1 = acceptable (the source head's P(important), sign flipped)",
        "source_thresholds_on_p_important": head["thresholds"],
        "approximation": None if F == hidden_size else (
            f"the head reads {F} features; features outside [{offset}, {offset + hidden_size}) are held at their "
            "training mean (zero contribution after standardisation)"),
        "command": command,
    }
    try:
        return Verifier(weight=weight, bias=bias, thresholds=thresholds, metadata=meta)
    except ValueError as err:  # e.g. a scale so small the folded weight overflows float32
        raise ValueError(f"FILE {path}: {err}") from None
