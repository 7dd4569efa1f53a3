"""Rebuild a label folder's feature tensors from its committed text.

A SelfJudge label costs a target forward over a window of N + 1 swapped tokens; its features
(the hidden state after the draft token, the probability features, and the original token's
state and features for augmentation) cost one token each. A label folder is therefore kept
small -- its manifest, ``progress.jsonl`` (whose batch records hold each prompt's length and the
target's response ids) and the shards' rows (``.parquet``; ``.jsonl`` in older folders) -- and its
``.safetensors`` are recomputed
from that text by :func:`rebuild_features`: the same :func:`~selfjudge.labelling.swap_scoring.score_swaps`
forward as labelling, with a window of 0. ``selfjudge label`` calls it before resuming, so a
folder committed without its tensors continues where it stopped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch

from selfjudge.writes import save_safetensors

from .label_rows import read_shard_rows, shard_rows_path
from .shards import MANIFEST, read_progress
from .swap_scoring import score_swaps

#: the per-row tensors a shard holds, in the order :class:`~selfjudge.labelling.swap_scoring.SwapScores` names them
SHARD_TENSORS = ("features", "phi", "orig_features", "orig_phi")


def missing_shards(out_dir: str | Path) -> list[dict]:
    """Committed batch records whose shard's ``.safetensors`` is absent."""
    out_dir = Path(out_dir)
    return [r for r in read_progress(out_dir)
            if r.get("shard") and not (out_dir / f"{r['shard']}.safetensors").exists()]


def _check_dtype(out_dir: Path, model) -> None:
    from selfjudge.json_io import read_json

    manifest = read_json(out_dir / MANIFEST)
    made_in = manifest.get("feature_dtype") if isinstance(manifest, dict) else None
    now = str(next(model.parameters()).dtype).replace("torch.", "")
    if made_in is not None and made_in != now:
        raise ValueError(f"out: {out_dir}'s features were computed in {made_in}; rebuilding them in {now} would mix "
                         f"dtypes in one folder: load the target in {made_in}")


def _prompt_rows(rows: list[dict], path: Path) -> dict[str, list[int]]:
    """Row indices per prompt id, in row order."""
    by_prompt: dict[str, list[int]] = {}
    for k, row in enumerate(rows):
        pid = row.get("prompt_id")
        if not isinstance(pid, str):
            raise ValueError(f"out: {path} row {k + 1} has no prompt_id")
        by_prompt.setdefault(pid, []).append(k)
    return by_prompt


def _response(texts: dict, pid: str, prompt: list[int], path: Path) -> torch.Tensor:  # [Ly] int64
    text = texts.get(pid)
    ids = text.get("response_ids") if isinstance(text, dict) else None
    if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
        raise ValueError(f"out: {path}'s batch record holds no response_ids for {pid!r}")
    if text.get("prompt_len") != len(prompt):
        raise ValueError(f"out: {pid!r} was labelled with a {text.get('prompt_len')}-token prompt, the task now "
                         f"builds {len(prompt)} tokens (another tokenizer or prompt template?)")
    return torch.tensor(ids, dtype=torch.long)


def _rebuild_shard(model, record: dict, out_dir: Path, prompt_for: Callable[[str], list[int]],
                   max_tokens: int, backend: str) -> int:
    path = shard_rows_path(out_dir, record["shard"])
    rows = read_shard_rows(out_dir, record["shard"])
    texts = record.get("texts")
    if not isinstance(texts, dict):
        raise ValueError(f"out: {path} has no tensors and its batch record keeps no response text (labelled before "
                         "responses were kept): label those prompts again in a new folder")
    parts: dict[str, list[torch.Tensor]] = {k: [None] * len(rows) for k in SHARD_TENSORS}
    for pid, index in _prompt_rows(rows, path).items():
        prompt = prompt_for(pid)
        y = _response(texts, pid, prompt, path)
        try:
            pos = torch.tensor([int(rows[k]["position"]) for k in index], dtype=torch.long)
            z = torch.tensor([int(rows[k]["draft_token_id"]) for k in index], dtype=torch.long)
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"out: {path} is damaged: a row of {pid!r} lacks a position or draft_token_id") from None
        res = score_swaps(model, torch.tensor(prompt, dtype=torch.long), y, pos, z, 0,
                          max_tokens=max_tokens, backend=backend)
        for name in SHARD_TENSORS:
            for j, k in enumerate(index):
                parts[name][k] = getattr(res, name)[j].cpu()
    tensors = {name: torch.stack(v).float().contiguous() for name, v in parts.items()}
    save_safetensors(tensors, out_dir / f"{record['shard']}.safetensors")
    return len(rows)


def rebuild_features(out_dir: str | Path, model, prompt_for: Callable[[str], list[int]], *,
                     max_tokens: int = 2048, backend: str = "auto", progress: bool = True) -> int:
    """Recompute every committed shard's missing ``.safetensors``; returns the rows rebuilt.

    ``prompt_for(prompt_id)`` gives the prompt's token ids as the labeller built them (checked
    against the recorded prompt length). Each shard is written atomically, so an interrupted
    rebuild resumes at the first shard still missing.
    """
    from tqdm.auto import tqdm

    out_dir = Path(out_dir)
    todo = missing_shards(out_dir)
    if not todo:
        return 0
    _check_dtype(out_dir, model)
    rebuilt = 0
    for record in tqdm(todo, desc="rebuild features", unit="shard", disable=not progress):
        rebuilt += _rebuild_shard(model, record, out_dir, prompt_for, max_tokens, backend)
    return rebuilt
