"""Loading a user's Hugging Face model folder: a damaged one fails as one ``ValueError`` naming it.

Hugging Face's loaders raise whatever their parsers raise on a damaged folder (``RecursionError``
for deeply nested JSON, ``SafetensorError``, the tokenizers library's bare ``Exception``, strict
config dataclass errors, ``TypeError``, ``RuntimeError`` for mismatched sizes), and a
``config.json`` that names huge sizes makes them allocate the whole model before any weight is
read. Here the config's sizes are checked against the weight files' headers first (nothing is
allocated), then every failure of the load is one ``ValueError`` naming the role and the folder.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import torch

from selfjudge.json_io import read_json

_SIZES = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers")


def _failed(role: str, folder, what: str, err: BaseException) -> ValueError:
    return ValueError(f"{role}: {what} from {folder} ({type(err).__name__}: {str(err)[:200]})")


def check_config_fits_weights(folder: str | os.PathLike, role: str) -> None:
    """Refuse (``ValueError``) a decoder-only ``config.json`` whose sizes imply many more parameters
    than the folder's safetensors files hold (read from their headers; a config without these
    sizes, or a folder without safetensors files, is left to the loader)."""
    from safetensors import SafetensorError, safe_open

    folder = Path(folder)
    config_path = folder / "config.json"
    if not config_path.is_file():
        return
    try:
        config = read_json(config_path)
    except ValueError as err:
        raise ValueError(f"{role}: {err}") from None
    if not isinstance(config, dict) or not all(k in config for k in _SIZES):
        return
    sizes = [config[k] for k in _SIZES]
    if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in sizes):
        raise ValueError(f"{role}: {config_path}: {', '.join(_SIZES)} must be positive integers, got {sizes}")
    vocab, hidden, inter, layers = sizes
    implied = vocab * hidden + layers * (4 * hidden * hidden + 3 * hidden * inter)  # embeddings + blocks, at least
    held = 0
    try:
        for path in sorted(folder.glob("*.safetensors")):
            with safe_open(str(path), framework="pt") as f:
                for key in f.keys():
                    held += math.prod(f.get_slice(key).get_shape())
    except (SafetensorError, OSError, RuntimeError) as err:
        raise _failed(role, folder, "no weights file could be read", err) from None
    if held and implied > 4 * held:
        raise ValueError(f"{role}: {config_path} implies at least {implied:,} parameters but the folder's weight "
                         f"files hold {held:,}: the config does not describe these weights")


def load_tokenizer(folder: str | os.PathLike, role: str = "target"):
    """The folder's tokenizer, or one ``ValueError`` naming ``role`` and the folder."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(folder)
    except Exception as err:  # noqa: BLE001 - every parser's own error type, reported as one line
        raise _failed(role, folder, "no tokenizer could be loaded", err) from None


def load_causal_lm(folder: str | os.PathLike, dtype: torch.dtype = torch.float32, role: str = "target"):
    """A Hugging Face causal LM from ``folder`` (config checked against the weights first), or one
    ``ValueError`` naming ``role`` and the folder."""
    from transformers import AutoModelForCausalLM

    check_config_fits_weights(folder, role)
    try:
        return AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).eval()
    except Exception as err:  # noqa: BLE001 - every parser's own error type, reported as one line
        raise _failed(role, folder, "no model could be loaded", err) from None
