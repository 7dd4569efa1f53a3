"""Label rows as Parquet: written by the shard writer, read back equal, older JSON-lines folders
read as they are and converted without loss, and loaded as a ``datasets.Dataset``."""

from __future__ import annotations

import json
import math

import pytest
import torch

from selfjudge.cli import main
from selfjudge.labelling.label_rows import convert_folder, load_label_dataset, read_shard_rows
from selfjudge.labelling.shards import ShardWriter, read_labels, read_rows, relabel


def _rows(pids, n=3):
    return [{"prompt_id": p, "position": i, "target_token_id": 5 + i, "draft_token_id": 9, "target_token": " é",
             "draft_token": "", "score": -0.5 + i, "score_likelihood": -0.5 + i, "score_confidence": float("nan"),
             "label": int(i > 0), "response_len": 12} for p in pids for i in range(n)]


def _folder(tmp_path, name="labels", batches=(("p0", "p1"), ("p2",))):
    out = tmp_path / name
    w = ShardWriter(out, {"method": "selfjudge", "target": "t", "hidden_size": 4})
    for pids in batches:
        rows = _rows(pids)
        w.write(list(pids), rows, torch.arange(len(rows) * 4, dtype=torch.float32).view(len(rows), 4))
    w.close()
    return out


def _as_jsonl(out):
    """Rewrite a folder's Parquet rows as the JSON lines format 2 kept (an older run's folder)."""
    for path in sorted(out.glob("shard-*.parquet")):
        rows = read_shard_rows(out, path.stem)
        path.with_suffix(".jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        path.unlink()


def _same(a, b):
    assert len(a) == len(b)
    for r, s in zip(a, b):
        assert set(r) == set(s)
        for k in r:
            assert r[k] == s[k] or (math.isnan(r[k]) and math.isnan(s[k])), k


def test_the_writer_keeps_rows_as_parquet_and_reads_them_back_as_written(tmp_path):
    out = _folder(tmp_path)
    assert sorted(p.name for p in out.glob("shard-*")) == [
        "shard-00000.parquet", "shard-00000.safetensors", "shard-00001.parquet", "shard-00001.safetensors"]
    _same(read_rows(out), _rows(("p0", "p1")) + _rows(("p2",)))
    feats, rows, _ = read_labels(out, tau=0.0)
    assert feats.shape == (9, 4) and [r["label"] for r in rows[:3]] == [0, 1, 1]


def test_an_older_jsonl_folder_reads_the_same_and_converts_without_loss(tmp_path):
    out = _folder(tmp_path)
    before = read_rows(out)
    _as_jsonl(out)
    assert not list(out.glob("*.parquet"))
    _same(read_rows(out), before)  # read as it is
    assert convert_folder(out) == 2
    assert not list(out.glob("*.jsonl")) or [p.name for p in out.glob("*.jsonl")] == ["progress.jsonl"]
    _same(read_rows(out), before)
    assert convert_folder(out) == 0  # nothing left to convert
    relabel(out, 1.0)
    assert [r["label"] for r in read_rows(out)[:3]] == [0, 0, 1]


def test_a_damaged_parquet_shard_is_one_value_error_naming_it(tmp_path):
    out = _folder(tmp_path)
    (out / "shard-00001.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(ValueError, match="shard-00001.parquet"):
        read_rows(out)
    (out / "shard-00001.parquet").unlink()
    with pytest.raises(ValueError, match="rows are missing"):
        read_rows(out)


def test_label_folders_load_as_one_dataset(tmp_path):
    a, b = _folder(tmp_path, "a"), _folder(tmp_path, "b", batches=(("q0",),))
    ds = load_label_dataset([a, b])
    assert ds.num_rows == 12 and set(ds["folder"]) == {str(a), str(b)}
    assert ds.features["score"].dtype == "float64" and ds.features["label"].dtype == "int64"
    assert ds.filter(lambda r: r["folder"] == str(b))["prompt_id"] == ["q0"] * 3


def test_convert_labels_on_the_command_line(tmp_path, capsys):
    out = _folder(tmp_path)
    _as_jsonl(out)
    assert main(["convert-labels", str(out)]) == 0
    assert "2 shards converted" in capsys.readouterr().out and len(list(out.glob("*.parquet"))) == 2
    assert main(["convert-labels", str(tmp_path / "nowhere")]) == 2  # not a label folder: one line, status 2
