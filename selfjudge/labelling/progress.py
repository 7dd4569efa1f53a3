"""A label folder's commit log, ``progress.jsonl``: one JSON record per committed batch of prompts.

A batch counts as done iff its record is in the log; readers list shards from it only, so they
never see a shard whose commit was interrupted. A torn last line (a write killed midway) is no
record.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

PROGRESS = "progress.jsonl"

__all__ = ["PROGRESS", "committed_shards", "read_progress"]


def read_progress(out_dir: str | Path) -> list[dict]:
    """Committed progress records, in order (a torn last line is ignored)."""
    path = Path(out_dir) / PROGRESS
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            break  # torn write at the end: that batch never committed
        if not isinstance(record, dict):
            raise ValueError(f"out_dir: {path} is damaged: a progress record is not a JSON object")
        records.append(record)
    return records


def committed_shards(out_dir: str | Path) -> list[str]:
    """The committed shards' names, in write order; a name that is not ``shard-NNNNN`` (a damaged
    record, or one pointing outside the folder) is refused."""
    names = [r["shard"] for r in read_progress(out_dir) if r.get("shard")]
    bad = [n for n in names if not isinstance(n, str) or not re.fullmatch(r"shard-\d{5}", n)]
    if bad:
        raise ValueError(f"out_dir: {Path(out_dir) / PROGRESS} is damaged: shard names {bad[:3]!r:.80}")
    return names
