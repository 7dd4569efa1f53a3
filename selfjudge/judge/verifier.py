"""The verifier file: one folded linear judge plus its JSON metadata.

A verifier is an *acceptability* logit ``logit = weight · h + phi_weight · phi + bias``
over the target's final-layer hidden state ``h`` after it has read a draft token and
the target's probability features ``phi`` of that token (:mod:`selfjudge.kernels.judge_features`:
log p(z), the margin to the top-1, the top-k entropy, at temperature 1); the engine
accepts a mismatching draft token iff ``logit > threshold``. The feature
standardisation used in training is already folded into the weights and the bias
so that the verify kernel needs one dot product per token.

On disk it is a safetensors file with the tensors ``weight`` [H] float32 and ``bias``
[] float32 and, since format 2, ``phi_weight`` [F] float32 whose feature names the
metadata lists under ``"phi_features"``; the metadata is one JSON string under the
safetensors header metadata key ``"selfjudge_verifier"`` (plus ``"format"`` for a quick
check). A format-1 file loads with ``phi_weight`` None (the hidden state alone).
Nothing is pickled.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

import torch

from selfjudge.builtin import DEFAULT_PAIR
from selfjudge.json_io import parse_json

from .budget import check_validation_record
from .operating_point import JudgeWeights, resolve_threshold

FORMAT = "selfjudge-verifier/2"
FORMATS = ("selfjudge-verifier/1", FORMAT)  # readable
_META_KEY = "selfjudge_verifier"


@dataclass
class Verifier:
    """A linear acceptability judge for one target model.

    Attributes:
        weight: [H] float32, folded (applies to raw, unstandardised hidden states).
        bias: folded scalar bias.
        thresholds: named operating points in logit space, e.g. ``"F"``, ``"R"``,
            ``"q0.50"``; accept iff ``logit > threshold``.
        metadata: method, target model id, hidden size, feature definition,
            tau/N (SelfJudge) or task (AutoJudge), metrics, training-set summary.
    """

    weight: torch.Tensor  # [H] float32
    bias: float
    thresholds: dict[str, float] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    phi_weight: torch.Tensor | None = None  # [F] float32 over the probability features, or None

    @property
    def phi_features(self) -> tuple[str, ...]:
        """Names of the probability features ``phi_weight`` applies to (empty without them)."""
        return tuple(self.metadata.get("phi_features", ())) if self.phi_weight is not None else ()

    def __post_init__(self) -> None:
        if not isinstance(self.weight, torch.Tensor) or self.weight.dim() != 1:
            raise ValueError(f"weight must be a 1-D tensor [H], got {getattr(self.weight, 'shape', type(self.weight))}")
        self.weight = self.weight.detach().to(torch.float32).contiguous()
        self.bias = float(self.bias)
        if not math.isfinite(self.bias) or not bool(torch.isfinite(self.weight).all()):
            raise ValueError("weight and bias must be finite")
        if self.phi_weight is not None:
            self.phi_weight = _check_phi_weight(self.phi_weight, self.metadata)
        self.thresholds = {str(k): float(v) for k, v in self.thresholds.items()}
        bad = sorted(k for k, v in self.thresholds.items() if math.isnan(v))
        if bad:
            raise ValueError(f"thresholds must be numbers, {bad} are NaN")

    @property
    def hidden_size(self) -> int:
        return int(self.weight.shape[0])

    def threshold(self, name_or_value: str | float | int | None) -> float:
        """Operating threshold in logit space: a stored name (``"F"``, ``"R"``, ``"q0.30"``), a quality
        budget (``"quality:0.97"``), a number, or None (the default); resolved by
        :func:`selfjudge.judge.operating_point.resolve_threshold`, the one place that reads them."""
        return resolve_threshold(name_or_value, self.thresholds, self.metadata)

    def at(self, threshold: str | float | int | None = None, *, source: str | None = None) -> JudgeWeights:
        """This verifier's weights at the operating point ``threshold`` names (None: the default,
        :data:`~selfjudge.judge.operating_point.DEFAULT_THRESHOLD`): what the engine, the command
        line, the bench and the vLLM plugin judge with."""
        return JudgeWeights(self.weight, self.bias, self.phi_weight, self.threshold(threshold),
                            feature_dtype=self.metadata.get("feature_dtype"), source=source)

    def logits(self, features: torch.Tensor, phi: torch.Tensor | None = None) -> torch.Tensor:
        """Acceptability logits for hidden states ``features`` [..., H] and, when the verifier reads
        them, the probability features ``phi`` [..., F] -> [...] float32."""
        if features.shape[-1] != self.hidden_size:
            raise ValueError(f"features last dim {features.shape[-1]} != verifier hidden size {self.hidden_size}")
        out = features.to(torch.float32) @ self.weight + self.bias
        if self.phi_weight is not None:
            if phi is None or phi.shape[-1] != self.phi_weight.shape[0]:
                raise ValueError(f"phi: this verifier reads {self.phi_features}; give phi [..., "
                                 f"{self.phi_weight.shape[0]}], got {None if phi is None else tuple(phi.shape)}")
            out = out + phi.to(torch.float32) @ self.phi_weight
        return out

    def save(self, path: str | os.PathLike) -> None:
        save_verifier(self, path)


def _check_phi_weight(phi_weight, metadata: dict) -> torch.Tensor:
    """``phi_weight`` as a finite float32 [F] whose F features the metadata names, in the
    definition this package computes (the verify op computes exactly these)."""
    from selfjudge.kernels.judge_features import FEATURE_NAMES

    if not isinstance(phi_weight, torch.Tensor) or phi_weight.dim() != 1:
        raise ValueError(f"phi_weight must be a 1-D tensor [F], got {getattr(phi_weight, 'shape', type(phi_weight))}")
    names = metadata.get("phi_features", ())
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"phi_weight: metadata phi_features must be a list of feature names, got {names!r}")
    names = tuple(names)
    if names != FEATURE_NAMES[: len(names)] or len(names) != phi_weight.shape[0]:
        raise ValueError(f"phi_weight: metadata phi_features {list(names)} must name its {phi_weight.shape[0]} "
                         f"entries, a prefix of {list(FEATURE_NAMES)}")
    phi_weight = phi_weight.detach().to(torch.float32).contiguous()
    if not bool(torch.isfinite(phi_weight).all()):
        raise ValueError("phi_weight must be finite")
    return phi_weight


def shipped_verifier_path(method: str = "selfjudge", pair: str = DEFAULT_PAIR, task: str = "gsm8k",
                          drafter: str = "model") -> str:
    """Path of a verifier shipped in ``selfjudge/assets/verifiers/``: ``<pair>-<task>-<method>.safetensors``
    for labels mined from the draft model's mismatches, ``<pair>-<task>-<method>-<drafter>.safetensors``
    for another drafter's (``"prompt-lookup"``, ``"eagle"``). Raises ``ValueError`` when none is shipped."""
    if method not in ("selfjudge", "autojudge"):
        raise ValueError(f"method must be 'selfjudge' or 'autojudge', got {method!r}")
    from importlib.resources import files

    suffix = "" if drafter == "model" else f"-{drafter}"
    path = files("selfjudge") / "assets" / "verifiers" / f"{pair}-{task}-{method}{suffix}.safetensors"
    if not path.is_file():
        raise ValueError(f"no shipped verifier for method={method!r}, pair={pair!r}, task={task!r}, "
                         f"drafter={drafter!r} ({path})")
    return str(path)


def shipped_verifier_for(method: str, pair: str, tasks, drafter: str = "model") -> str | None:
    """The first shipped verifier for ``drafter`` over ``tasks`` (in order), then its ``"general"``
    one (trained on every task's labels), else the same for the draft model's labels (a verifier
    reads the target's states, so it transfers, less well, to another drafter's mismatches); None
    when none exists."""
    for d in dict.fromkeys((drafter, "model")):
        for t in dict.fromkeys((*tasks, "general")):
            try:
                return shipped_verifier_path(method, pair, t, d)
            except ValueError:
                continue
    return None


def save_verifier(verifier: Verifier, path: str | os.PathLike) -> None:
    """Write ``verifier`` to ``path`` (safetensors + JSON header metadata)."""
    from selfjudge.writes import save_safetensors

    meta = dict(verifier.metadata)
    meta["thresholds"] = verifier.thresholds
    meta["hidden_size"] = verifier.hidden_size
    tensors = {
        "weight": verifier.weight.contiguous(),
        "bias": torch.tensor(verifier.bias, dtype=torch.float32),
    }
    if verifier.phi_weight is not None:
        tensors["phi_weight"] = verifier.phi_weight.contiguous()
    if os.path.isdir(path):
        raise ValueError(f"out: {path} is a folder; give the verifier's file name (e.g. {path}/judge.safetensors)")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    # renamed into place: a killed write never leaves a torn verifier
    save_safetensors(tensors, path, metadata={"format": FORMAT, _META_KEY: json.dumps(meta, sort_keys=True)})


def load_verifier(
    path: str | os.PathLike,
    expect_model: str | None = None,
    expect_hidden_size: int | None = None,
    expect_fingerprint: str | None = None,
) -> Verifier:
    """Load a verifier file, refusing one made for another model or hidden size.

    Args:
        path: the ``.safetensors`` file written by :func:`save_verifier`.
        expect_model: if given, must equal the file's ``metadata["target"]`` (unless fingerprints decide).
        expect_fingerprint: the target folder's :func:`~selfjudge.models.fingerprint.target_fingerprint`;
            where the file records one too, the two must be equal and the names need not be.
        expect_hidden_size: if given, must equal the weight length.

    Raises:
        ValueError: not a readable verifier file (the message names ``path``), non-finite
            weights or NaN thresholds, or a model / hidden-size mismatch.
        OSError: the file cannot be opened (missing, a folder, no permission).
    """
    from safetensors import SafetensorError, safe_open

    if not os.path.isfile(path):
        raise FileNotFoundError(f"path: no verifier file at {path!s}")
    try:
        with safe_open(str(path), framework="pt") as f:
            header = f.metadata() or {}
            if header.get("format") not in FORMATS or _META_KEY not in header:
                raise ValueError(f"path {path!s} is not a selfjudge verifier file (format {header.get('format')!r})")
            keys = set(f.keys())
            if keys not in ({"weight", "bias"}, {"weight", "bias", "phi_weight"}):
                raise ValueError(f"path {path!s}: expected tensors weight, bias (and phi_weight), found {sorted(keys)}")
            weight = f.get_tensor("weight")
            bias = f.get_tensor("bias")
            phi_weight = f.get_tensor("phi_weight") if "phi_weight" in keys else None
    except (SafetensorError, RuntimeError, TypeError) as err:  # truncated or corrupt file
        raise ValueError(f"path {path!s} is not a readable safetensors verifier file ({err})") from None
    try:
        meta = parse_json(header[_META_KEY], f"path {path!s}: metadata")
        if not isinstance(meta, dict):
            raise TypeError("metadata is not a JSON object")
        thresholds = meta.pop("thresholds", {})
        if not isinstance(thresholds, dict):
            raise TypeError("thresholds is not a JSON object")
        thresholds = {str(k): float(v) for k, v in thresholds.items()}
        if "validation" in meta:
            check_validation_record(meta["validation"])
    except (ValueError, TypeError) as err:
        raise ValueError(f"path {path!s}: broken verifier metadata ({err})") from None
    if not weight.is_floating_point() or not bias.is_floating_point():
        raise ValueError(f"path {path!s}: weight and bias must be floating point, got {weight.dtype}, {bias.dtype}")
    hidden = int(weight.shape[0]) if weight.dim() == 1 else -1
    if weight.dim() != 1 or bias.numel() != 1:
        raise ValueError(f"path {path!s}: weight must be [H] and bias a scalar, got {tuple(weight.shape)}, {tuple(bias.shape)}")
    if meta.get("hidden_size") not in (None, hidden):
        raise ValueError(f"path {path!s}: metadata hidden_size {meta.get('hidden_size')} != weight length {hidden}")
    if expect_hidden_size is not None and int(expect_hidden_size) != hidden:
        raise ValueError(
            f"verifier {path!s} was trained for hidden size {hidden}, but expect_hidden_size={expect_hidden_size}"
        )
    if expect_model is not None or expect_fingerprint is not None:
        from selfjudge.models.fingerprint import check_target

        check_target(meta, f"verifier {path!s}", name=expect_model, fingerprint=expect_fingerprint, made="trained",
                     remedy="its judge reads another model's hidden states (retrain it on this target's labels)")
    try:
        return Verifier(weight=weight, bias=float(bias.reshape(())), thresholds=thresholds, metadata=meta,
                        phi_weight=phi_weight)
    except ValueError as err:
        raise ValueError(f"path {path!s}: {err}") from None
