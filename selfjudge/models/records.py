"""Lists of tensor records (one dict of tensors per sequence) in one safetensors file.

The teacher caches of the draft distillation and of EAGLE training store their
per-sequence tensors this way: key ``"{index}.{name}"``, written atomically.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

__all__ = ["save_records", "load_records"]


def save_records(path: str | Path, records: list[dict[str, torch.Tensor]]) -> None:
    """Write ``records`` to ``path`` (a temporary file, then renamed)."""
    from safetensors.torch import save_file

    save_file({f"{i}.{k}": v.contiguous() for i, r in enumerate(records) for k, v in r.items()}, str(path) + ".tmp")
    os.replace(str(path) + ".tmp", path)


def load_records(path: str | Path) -> list[dict[str, torch.Tensor]]:
    """The records of a file written by :func:`save_records`, in order."""
    from safetensors.torch import load_file

    recs: dict[int, dict] = {}
    for key, v in load_file(str(path)).items():
        i, k = key.split(".", 1)
        recs.setdefault(int(i), {})[k] = v
    return [recs[i] for i in sorted(recs)]
