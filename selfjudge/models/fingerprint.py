"""A cheap identity of a target model folder, so files made for one target are refused for another.

Verifiers, n-gram stores and EAGLE heads read a target's hidden states or token ids: used with
another model they decide nonsense without failing. A folder's path says little (a moved folder is
the same model; two folders named ``llama-8b`` may not be), so each file records a fingerprint of
what the model is: its ``config.json`` (less the fields that say where or by which library version
it was saved), its tokenizer files' digests, and its weight files' names, sizes and a digest of
16 blocks of 4 KiB spread over each file (a fine-tune keeps every size; it does not keep those
bytes). That costs a few reads per weight file and a hash of a few MB of tokenizer files, even for a
70B model.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from selfjudge.json_io import read_json

__all__ = ["PREFIX", "folder_fingerprint", "target_fingerprint", "model_fingerprint", "check_target"]

PREFIX = "sha256:"
#: config fields that say where or how a folder was saved, not what the model is
_VOLATILE_CONFIG_KEYS = ("_name_or_path", "transformers_version", "_commit_hash")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                    "merges.txt", "tokenizer.model", "added_tokens.json")
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _sampled_digest(path: Path, blocks: int = 16, block: int = 4096) -> str:
    """Digest of ``blocks`` evenly spaced ``block``-byte pieces of a file (all of it when small)."""
    size = path.stat().st_size
    h = hashlib.sha256()
    with open(path, "rb") as f:
        if size <= blocks * block:
            h.update(f.read())
        else:
            for i in range(blocks):
                f.seek(i * (size - block) // (blocks - 1))
                h.update(f.read(block))
    return h.hexdigest()


def folder_fingerprint(folder: str | os.PathLike) -> str:
    """``"sha256:<hex>"`` of a model folder's config (less path and library-version fields), its
    tokenizer files' contents and its weight files' names, sizes and sampled digests. Raises
    ``ValueError`` naming the folder when it has no ``config.json``."""
    folder = Path(folder)
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise ValueError(f"target: {folder} has no config.json, so it cannot be fingerprinted")
    config = read_json(config_path)
    if isinstance(config, dict):
        config = {k: v for k, v in config.items() if k not in _VOLATILE_CONFIG_KEYS}
    tokenizer = {name: _file_digest(folder / name) for name in _TOKENIZER_FILES if (folder / name).is_file()}
    weights = sorted((p.name, p.stat().st_size, _sampled_digest(p)) for p in folder.iterdir()
                     if p.is_file() and p.name.endswith(_WEIGHT_SUFFIXES))
    record = json.dumps({"config": config, "tokenizer": tokenizer, "weights": weights}, sort_keys=True)
    return PREFIX + hashlib.sha256(record.encode()).hexdigest()


def target_fingerprint(name_or_target: str | os.PathLike | None) -> str | None:
    """The fingerprint of a target given as a local folder; None for a name (the built-in pair's,
    or a hub id), which files then match by name."""
    if name_or_target is None or not Path(name_or_target).is_dir():
        return None
    return folder_fingerprint(name_or_target)


def model_fingerprint(model) -> str | None:
    """The fingerprint of a loaded Hugging Face model's folder (its ``config._name_or_path``), None
    when it was not loaded from a local folder."""
    return target_fingerprint(getattr(getattr(model, "config", None), "_name_or_path", None) or None)


def check_target(meta: dict, what: str, *, name: str | None = None, fingerprint: str | None = None,
                 made: str = "made", remedy: str = "remake it for this target") -> None:
    """Refuse (``ValueError``) a file made for another target than the one in use.

    ``meta``: the file's record, with ``"target"`` (the name or folder it was made with) and, when
    made for a local folder, ``"target_fingerprint"``. Where both sides have a fingerprint, they
    decide (a moved folder matches, another model under the same folder name does not); otherwise
    the names must be equal. ``what`` names the file in the message, ``made`` how it was made
    ("trained"), ``remedy`` what to do."""
    recorded = meta.get("target_fingerprint")
    if fingerprint is not None and recorded is not None:
        if recorded != fingerprint:
            raise ValueError(f"{what} was {made} for another target model than {str(name)!r} (fingerprint "
                             f"{str(recorded)[:19]}... vs {fingerprint[:19]}...: another config, tokenizer "
                             f"or weight files): {remedy}")
        return
    if name is not None and meta.get("target") != str(name):
        raise ValueError(f"{what} was {made} for target model {meta.get('target')!r}, not {str(name)!r}: {remedy}")
