"""Lists of tensor records (one dict of tensors per sequence) in one safetensors file.

The teacher caches of the draft distillation and of EAGLE training store their
per-sequence tensors this way: key ``"{index}.{name}"``, written atomically.
"""

from __future__ import annotations

from pathlib import Path

import torch

__all__ = ["save_records", "load_records", "write_checkpoint", "read_checkpoint"]


def save_records(path: str | Path, records: list[dict[str, torch.Tensor]]) -> None:
    """Write ``records`` to ``path`` (a temporary file, then renamed)."""
    from selfjudge.writes import save_safetensors

    save_safetensors({f"{i}.{k}": v.contiguous() for i, r in enumerate(records) for k, v in r.items()}, path)


def load_records(path: str | Path) -> list[dict[str, torch.Tensor]]:
    """The records of a file written by :func:`save_records`, in order."""
    from safetensors.torch import load_file

    recs: dict[int, dict] = {}
    for key, v in load_file(str(path)).items():
        i, k = key.split(".", 1)
        recs.setdefault(int(i), {})[k] = v
    return [recs[i] for i in sorted(recs)]


# ----------------------------------------------------------------------------- training checkpoints
STATE_FILE = "state.json"


def write_checkpoint(out: str | Path, tensors: dict[str, dict[str, torch.Tensor]], state: dict) -> None:
    """Commit one training checkpoint atomically: a kill at any instant leaves the previous one whole.

    Each group of ``tensors`` (e.g. ``{"head": ..., "optim": ...}``) is written to
    ``{group}-{step:08d}.safetensors``; then ``state.json``, which names those files
    under ``"checkpoint"``, replaces the old one (the commit); then the files of older
    steps are deleted. Readers go through ``state.json`` (:func:`read_checkpoint`), so
    tensors and state always come from the same step.
    """
    from selfjudge.writes import save_safetensors

    out = Path(out)
    step = int(state["step"])
    files = {}
    for group, tensors_of_group in tensors.items():
        name = f"{group}-{step:08d}.safetensors"
        save_safetensors({k: v.detach().contiguous() for k, v in tensors_of_group.items()}, out / name)
        files[group] = name
    state["checkpoint"] = files
    write_state(out, state)
    for group, name in files.items():
        for old in out.glob(f"{group}-*.safetensors"):
            if old.name != name:
                old.unlink(missing_ok=True)


def write_state(out: str | Path, state: dict) -> None:
    """Replace ``out/state.json`` atomically (never a torn file, whenever the job is killed)."""
    from selfjudge.writes import write_json

    write_json(Path(out) / STATE_FILE, state)


def read_checkpoint(out: str | Path, state: dict, group: str) -> dict[str, torch.Tensor] | None:
    """The tensors of ``group`` that ``state`` (read from ``state.json``) committed; None: no checkpoint yet."""
    from safetensors.torch import load_file

    name = (state.get("checkpoint") or {}).get(group)
    path = Path(out) / name if name else None
    return load_file(str(path)) if path is not None and path.exists() else None


def require_checkpoint(out: str | Path, state: dict, group: str) -> dict[str, torch.Tensor]:
    """:func:`read_checkpoint` where the run's state says one must exist; ``ValueError`` naming the folder if not."""
    tensors = read_checkpoint(out, state, group)
    if tensors is None:
        raise ValueError(f"out: {out}/state.json (step {state.get('step')}) names no committed {group!r} checkpoint "
                         "(its files were removed, or an older version wrote it); start again with --no-resume")
    return tensors
