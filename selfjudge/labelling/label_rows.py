"""A label shard's rows on disk: Parquet (typed, zstd-compressed) since format 3, JSON lines before.

A row is one label: prompt id, position, the target's and the draft's token (ids and text), the
scores and the label. :func:`write_shard_rows` writes ``shard-NNNNN.parquet`` atomically;
:func:`read_shard_rows` reads whichever file a shard has (a folder an older run wrote keeps its
``.jsonl`` until :func:`convert_folder` rewrites it as Parquet, checking the rows read back equal);
:func:`load_label_dataset` gives one or more folders' committed rows as a Hugging Face
``datasets.Dataset``, the form the field's tools read.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

from selfjudge.json_io import parse_json
from selfjudge.writes import replacing

from .progress import committed_shards

__all__ = ["ROW_SUFFIXES", "convert_folder", "load_label_dataset", "read_shard_rows", "shard_rows_path",
           "write_shard_rows"]

#: the files a shard's rows may be in, newest format first
ROW_SUFFIXES = (".parquet", ".jsonl")


def write_shard_rows(out_dir: str | Path, name: str, rows: list[dict]) -> Path:
    """Write ``rows`` as ``out_dir/<name>.parquet`` (atomically: a temporary file renamed into place)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(out_dir) / f"{name}.parquet"
    table = pa.Table.from_pylist(rows)
    with replacing(path) as tmp:
        pq.write_table(table, str(tmp), compression="zstd", compression_level=9)
    return path


def shard_rows_path(out_dir: str | Path, name: str) -> Path:
    """The file holding shard ``name``'s rows (``ValueError`` when it has none)."""
    for suffix in ROW_SUFFIXES:
        path = Path(out_dir) / f"{name}{suffix}"
        if path.is_file():
            return path
    raise ValueError(f"out_dir: {Path(out_dir) / name} is committed in progress.jsonl but its rows are missing")


def read_shard_rows(out_dir: str | Path, name: str) -> list[dict]:
    """Shard ``name``'s rows, in write order, from its Parquet or JSON-lines file (``ValueError``
    naming the file when it is damaged)."""
    path = shard_rows_path(out_dir, name)
    return _read_parquet(path) if path.suffix == ".parquet" else _read_jsonl(path)


def _read_parquet(path: Path) -> list[dict]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_table(str(path)).to_pylist()
    except (pa.ArrowException, OSError) as err:
        raise ValueError(f"out_dir: {path} is not a readable Parquet shard ({str(err)[:120]})") from None


def _read_jsonl(path: Path) -> list[dict]:
    """The JSON object on each non-empty line of ``path`` (``ValueError`` naming it otherwise)."""
    try:
        lines = path.read_bytes().decode("utf-8").splitlines()
    except UnicodeDecodeError as err:
        raise ValueError(f"out_dir: {path} is not UTF-8 text ({err})") from None
    rows = [parse_json(line, f"out_dir: {path} line {i + 1}") for i, line in enumerate(lines) if line.strip()]
    if not all(isinstance(r, dict) for r in rows):
        raise ValueError(f"out_dir: {path} is damaged: a row is not a JSON object")
    return rows


def _same_rows(a: list[dict], b: list[dict]) -> bool:
    """Rows equal field by field (a missing field reads back as None; NaN equals NaN)."""
    def same(x, y) -> bool:
        if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
            return True
        return x == y

    return len(a) == len(b) and all(
        same(r.get(k), s.get(k)) for r, s in zip(a, b) for k in set(r) | set(s))


def convert_folder(out_dir: str | Path) -> int:
    """Rewrite every committed JSON-lines shard of a label folder as Parquet; returns the shards
    converted. Each Parquet file is read back and compared with the JSON rows before the JSON file
    is removed, so an interrupted conversion leaves every shard readable."""
    out_dir, done = Path(out_dir), 0
    for name in committed_shards(out_dir):
        jsonl = out_dir / f"{name}.jsonl"
        if not jsonl.is_file():
            continue
        rows = _read_jsonl(jsonl)
        path = write_shard_rows(out_dir, name, rows)
        if not _same_rows(rows, _read_parquet(path)):
            path.unlink()
            raise ValueError(f"out_dir: {jsonl} does not read back equal from Parquet; left as it was")
        jsonl.unlink()
        done += 1
    return done


def load_label_dataset(label_dirs: str | Path | Sequence[str | Path]):
    """The committed rows of one or more label folders as a ``datasets.Dataset`` (a ``folder``
    column says which folder each row came from)."""
    import datasets

    dirs = [label_dirs] if isinstance(label_dirs, (str, Path)) else list(label_dirs)
    rows = [{**row, "folder": str(d)} for d in dirs for name in committed_shards(Path(d))
            for row in read_shard_rows(d, name)]
    return datasets.Dataset.from_list(rows)
