"""The ``selfjudge`` entry of vLLM's ``additional_config``: what the plugin reads, checked.

``LLM(..., additional_config={"selfjudge": {...}})`` turns the plugin on for that engine; without
the entry vLLM's own rejection sampler runs untouched. The entry is a JSON object:

- ``verifier``: path of a verifier file (safetensors + JSON); absent = lossless (this package's
  verify op, exactly vLLM's acceptance rule);
- ``threshold``: the verifier's operating point, a name (``"F"``, ``"q0.30"``), a quality budget
  (``"quality:0.97"``) or a logit; absent: the engine's default
  (:data:`selfjudge.judge.operating_point.DEFAULT_THRESHOLD`, resolved as the engine resolves it);
- ``target``: the name the verifier must have been trained for (default: the built-in pair's name
  when vLLM serves the built-in target folder, else vLLM's ``model`` string);
- ``backend``: ``"auto"`` (Triton on CUDA tensors, the PyTorch twin elsewhere), ``"triton"``,
  ``"torch"``.

This module imports no vLLM: it is tested where vLLM is not installed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from selfjudge.judge.operating_point import DEFAULT_THRESHOLD, JudgeWeights  # noqa: F401 (re-export)

CONFIG_KEY = "selfjudge"
_KEYS = ("verifier", "threshold", "target", "backend")
_BACKENDS = ("auto", "triton", "torch")


@dataclass(frozen=True)
class PluginOptions:
    """The checked ``additional_config["selfjudge"]`` entry."""

    verifier: str | None = None
    threshold: str | float | None = None  # None: DEFAULT_THRESHOLD, as in the engine
    target: str | None = None
    backend: str = "auto"


def options_from(additional_config: Any) -> PluginOptions | None:
    """The plugin's options from vLLM's ``additional_config``, or None when it has no ``selfjudge``
    entry (the plugin stays out of the way). Raises ``ValueError`` naming a bad key or value."""
    if not isinstance(additional_config, dict) or CONFIG_KEY not in additional_config:
        return None
    raw = additional_config[CONFIG_KEY]
    if raw is True:
        raw = {}
    if not isinstance(raw, dict):
        raise ValueError(f"additional_config[{CONFIG_KEY!r}] must be a JSON object (or true), got {raw!r}")
    unknown = sorted(set(raw) - set(_KEYS))
    if unknown:
        raise ValueError(f"additional_config[{CONFIG_KEY!r}] has unknown keys {unknown}; known: {list(_KEYS)}")
    verifier = raw.get("verifier")
    if verifier is not None and not isinstance(verifier, (str, os.PathLike)):
        raise ValueError(f"additional_config[{CONFIG_KEY!r}]['verifier'] must be a path, got {verifier!r}")
    threshold = raw.get("threshold")
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (str, int, float))):
        raise ValueError(f"additional_config[{CONFIG_KEY!r}]['threshold'] must be a name, a quality budget "
                         f"or a number, got {threshold!r}")
    target = raw.get("target")
    if target is not None and not isinstance(target, str):
        raise ValueError(f"additional_config[{CONFIG_KEY!r}]['target'] must be a string, got {target!r}")
    backend = raw.get("backend", "auto")
    if backend not in _BACKENDS:
        raise ValueError(f"additional_config[{CONFIG_KEY!r}]['backend'] must be one of {list(_BACKENDS)}, "
                         f"got {backend!r}")
    return PluginOptions(verifier=None if verifier is None else str(verifier), threshold=threshold,
                         target=target, backend=backend)


def served_target_name(model: str, cache_dir: str | os.PathLike | None = None) -> str:
    """The name a verifier for the model vLLM serves carries: the built-in pair's name when ``model``
    is the built-in target folder, else ``model`` itself."""
    from selfjudge.builtin import DEFAULT_PAIR
    from selfjudge.models.cache_dir import default_cache_dir
    from selfjudge.models.gguf_convert import SMOLLM2_DIRNAME
    from selfjudge.models.pair import PARTED_PAIRS

    cache = Path(cache_dir or default_cache_dir())
    targets = {DEFAULT_PAIR: SMOLLM2_DIRNAME, **{name: dirs[0] for name, dirs in PARTED_PAIRS.items()}}
    try:
        for name, dirname in targets.items():
            if Path(model).resolve() == (cache / dirname).resolve():
                return name
    except OSError:
        pass
    return model


def load_judge(options: PluginOptions, model: str, hidden_size: int, device: torch.device) -> JudgeWeights | None:
    """The verifier the options name, checked against the served model (its target name and hidden
    size), at the options' threshold; None in lossless mode. Raises ``ValueError`` for a verifier
    made for another model."""
    if options.verifier is None:
        return None
    from selfjudge.judge.verifier import load_verifier
    from selfjudge.models.fingerprint import target_fingerprint

    expect = options.target or served_target_name(model)
    verifier = load_verifier(options.verifier, expect_model=expect, expect_hidden_size=hidden_size,
                             expect_fingerprint=target_fingerprint(model))
    return verifier.at(options.threshold, source=options.verifier).to(device)
