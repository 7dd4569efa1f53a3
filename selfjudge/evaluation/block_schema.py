"""What a bench block file must hold before the report reads it: a damaged or foreign block is
one ``ValueError`` naming the file, never a ``KeyError`` from deep inside a table."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

_NUM = (int, float)
#: keys every block holds, with their types
BLOCK_KEYS = {"task": str, "batch": int, "rows": list}
#: keys every row holds, with their types (numbers may be NaN where a figure does not apply)
ROW_KEYS = {"name": str, "family": str, "K": int, "mean_accepted_length": _NUM, "tokens_per_s": _NUM,
            "speedup_vs_target_only": _NUM, "speedup_vs_standard": _NUM, "fidelity": _NUM, "task_score": _NUM,
            "judge_accepted_tokens": int, "prompts": int, "fidelity_name": str, "task_score_name": str,
            "share_draft": _NUM, "share_target": _NUM, "share_verify": _NUM, "share_other": _NUM}
#: keys a row may hold, with their types when present and not null
OPTIONAL_ROW_KEYS = {"semantic_fidelity": _NUM, "rouge_l_vs_target": _NUM, "threshold": str, "top_k": int,
                     "policy": str, "params": list, "per_prompt": dict, "per_group": dict}
OPTIONAL_BLOCK_KEYS = {"max_new_tokens": int, "environment": dict, "split": str, "prompt_ids": list}


def file_digest(path: str | Path) -> str | None:
    """The first 16 hex digits of a file's sha256 (a verifier retrained under the same name is
    another verifier); None when the file is not there (a block written in another checkout)."""
    import hashlib

    path = Path(path)
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.is_file() else None


def _kind_ok(value: Any, kind) -> bool:
    if isinstance(value, bool):
        return kind is bool
    return isinstance(value, kind)


def _check_keys(obj: dict, required: dict, optional: dict, what: str, path) -> None:
    for key, kind in required.items():
        if key not in obj or not _kind_ok(obj[key], kind):
            raise ValueError(f"{path}: damaged block: {what} {key} is missing or not {_name(kind)}")
    for key, kind in optional.items():
        if obj.get(key) is not None and not _kind_ok(obj[key], kind):
            raise ValueError(f"{path}: damaged block: {what} {key} is not {_name(kind)}")


def _name(kind) -> str:
    return " or ".join(k.__name__ for k in kind) if isinstance(kind, tuple) else kind.__name__


def _check_per_prompt(pp: dict, path) -> None:
    for key, values in pp.items():
        if not isinstance(values, list) or not all(_kind_ok(v, _NUM) for v in values):
            raise ValueError(f"{path}: damaged block: per_prompt {key} is not a list of numbers")
    sizes = {len(v) for k, v in pp.items() if k in ("cycles", "accepted")}
    if len(sizes) > 1 or any(isinstance(v, float) and not math.isfinite(v) for k in ("cycles", "accepted")
                             for v in pp.get(k, [])):
        raise ValueError(f"{path}: damaged block: per_prompt cycles and accepted disagree")


def _check_per_group(pg: dict, path) -> None:
    wall, tokens = pg.get("wall_s"), pg.get("tokens")
    if not (isinstance(wall, list) and isinstance(tokens, list) and len(wall) == len(tokens)
            and all(_kind_ok(v, _NUM) and math.isfinite(v) and v >= 0 for v in wall + tokens)):
        raise ValueError(f"{path}: damaged block: per_group wall_s and tokens must be equal-length lists of "
                         "finite numbers >= 0")


def check_block(block: Any, path: str | Path) -> dict:
    """``block`` if it has the shape the report reads, else ``ValueError`` naming ``path``."""
    if not isinstance(block, dict):
        raise ValueError(f"{path}: a bench block is a JSON object, got {type(block).__name__}")
    _check_keys(block, BLOCK_KEYS, OPTIONAL_BLOCK_KEYS, "block", path)
    if block["batch"] < 1 or not block["rows"]:
        raise ValueError(f"{path}: damaged block: batch must be >= 1 and rows non-empty")
    for row in block["rows"]:
        if not isinstance(row, dict):
            raise ValueError(f"{path}: damaged block: a row is not a JSON object")
        _check_keys(row, ROW_KEYS, OPTIONAL_ROW_KEYS, "row", path)
        if row["K"] < 0:
            raise ValueError(f"{path}: damaged block: row K must be >= 0")
        if row.get("per_prompt"):
            _check_per_prompt(row["per_prompt"], path)
        if row.get("per_group"):
            _check_per_group(row["per_group"], path)
    return block
