"""Label shards on disk: writer (atomic, resumable) and reader (:func:`read_labels`).

Directory layout (team interface 4)::

    manifest.json              run description: method, target, draft, task, window, tau, hidden_size, ...
    shard-00000.safetensors    tensor "features" [n, H] float32; since format 2 also "phi" [n, F]
                               (the judge's probability features), "orig_features" [n, H] and
                               "orig_phi" [n, F] (the original token's, for augmentation)
    shard-00000.parquet        n rows, same order: prompt_id, position, target_token_id,
                               draft_token_id, target_token, draft_token, score, label, ...
                               (:mod:`.label_rows`; ``.jsonl`` in folders of format 2 and older)
    progress.jsonl             commit log: one line per written batch of prompts
    summary.json               written at the end of a run

Atomicity: a batch's two shard files are written under temporary names and renamed;
only then is its line appended (flushed and fsynced) to ``progress.jsonl``. A batch
counts as done iff its progress line exists. On resume, shard files without a progress
line (an interruption between rename and commit) are deleted and their prompts redone,
and a torn last progress line is dropped -- so rows are never duplicated or lost.
Readers go through ``progress.jsonl`` too, so they never see an uncommitted shard.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from pathlib import Path
from typing import Sequence

import torch
from safetensors.torch import load_file

from selfjudge.folders import lock_folder, remove_job_folder
from selfjudge.json_io import read_json
from selfjudge.writes import open_append, save_safetensors, write_text

from .label_rows import read_shard_rows, shard_rows_path, write_shard_rows
from .progress import PROGRESS, committed_shards, read_progress  # noqa: F401 (re-exported)
from .tau import apply_tau, tau_from_quantile

MANIFEST = "manifest.json"
SUMMARY = "summary.json"
_log = logging.getLogger(__name__)
_SHARD_RE = re.compile(r"^shard-(\d{5})\.(safetensors|parquet|jsonl)(\.tmp)?$")


#: every name a label folder holds besides the manifest (what ``start_over`` may delete)
_OWN_FILES = (r"shard-\d{5}\.(safetensors|parquet|jsonl)(\.tmp)?", re.escape(PROGRESS), re.escape(SUMMARY),
              r".*\.tmp")


def _record_line(record: dict) -> str:
    """One commit-log line: compact JSON (the log holds every response's token ids)."""
    return json.dumps(record, separators=(",", ":")) + "\n"


class ShardWriter:
    """Appends shards to ``out_dir``; resumes a compatible earlier run in place.

    The writer holds the folder's lock (:func:`selfjudge.folders.lock_folder`) until
    :meth:`close` or the end of the process, so two runs never write one folder.
    ``defaults`` gives the value of a compared key that an older manifest lacks.
    ``start_over`` deletes an earlier run's files first, only if the folder's manifest
    says a run of the same ``method`` made it. An earlier run that committed nothing
    (it failed on a bad argument, say) never blocks a corrected rerun: its manifest is
    replaced.
    """

    def __init__(self, out_dir: str | Path, manifest: dict, compare_keys: tuple[str, ...] = (),
                 *, start_over: bool = False, defaults: dict | None = None):
        self.dir = Path(out_dir)
        self._lock = lock_folder(self.dir, manifest.get("command"))
        if start_over:
            remove_job_folder(self.dir, manifest=MANIFEST, key="method", value=manifest.get("method"),
                              patterns=_OWN_FILES)
        mpath = self.dir / MANIFEST
        if mpath.exists() and not read_progress(self.dir):
            mpath.unlink()  # nothing committed: the earlier run's settings bind nothing
        if mpath.exists():
            old = json.loads(mpath.read_text(encoding="utf-8"))
            for key in compare_keys:  # ``defaults``: what runs made before a key existed used
                was = old.get(key, (defaults or {}).get(key))
                if was != manifest.get(key):
                    raise ValueError(
                        f"out: {self.dir} holds a run with {key}={was!r}, not {manifest.get(key)!r}; "
                        "use another --out or delete it"
                    )
            self.manifest = {**old, **{k: v for k, v in manifest.items() if k not in old}}
            self._record_command(old, manifest.get("command"))
        else:
            self.manifest = dict(manifest)
        write_text(mpath, json.dumps(self.manifest, indent=2))
        self.records = read_progress(self.dir)
        self._repair()

    def _record_command(self, old: dict, command: str | None) -> None:
        # "command" is the latest invocation (a resume with a larger --limit covers the whole
        # directory); "commands" lists every invocation that wrote here, oldest first
        if command is None or command == old.get("command"):
            return
        history = list(old.get("commands") or ([old["command"]] if old.get("command") else []))
        self.manifest["commands"] = history + [command]
        self.manifest["command"] = command

    def _repair(self) -> None:
        # rewrite the log without a torn tail, and drop shard files nobody committed
        text = "".join(_record_line(r) for r in self.records)
        ppath = self.dir / PROGRESS
        if not ppath.exists() or ppath.read_text(encoding="utf-8") != text:
            write_text(ppath, text)
        committed = {r["shard"] for r in self.records if r.get("shard")}
        self.next_index = 0
        for r in self.records:
            if r.get("shard"):
                self.next_index = max(self.next_index, int(r["shard"].split("-")[1]) + 1)
        for p in self.dir.iterdir():
            m = _SHARD_RE.match(p.name)
            stale_temporary = p.name.startswith(".") and p.name.endswith(".tmp")  # a killed write's
            if stale_temporary or (m and (m.group(3) or f"shard-{m.group(1)}" not in committed)):
                p.unlink()

    @property
    def done_prompt_ids(self) -> set[str]:
        return {pid for r in self.records for pid in r["prompt_ids"]}

    def write(self, prompt_ids: list[str], rows: list[dict], features: torch.Tensor, stats: dict | None = None,
              extra: dict[str, torch.Tensor] | None = None, texts: dict[str, dict] | None = None) -> str | None:
        """Commit one batch: its rows/features (possibly none) and the prompts it covers.
        ``extra``: more per-row tensors stored beside ``features`` (``[len(rows), ...]`` each).
        ``texts``: per prompt id, what the feature tensors were computed from (``prompt_len``,
        ``response_ids``); kept in the batch's progress record so that a folder committed without
        its ``.safetensors`` can have them rebuilt (:mod:`selfjudge.labelling.rebuild`)."""
        # features: [len(rows), H] float32
        if features.dim() != 2 or features.shape[0] != len(rows):
            raise ValueError(f"features must be [len(rows)={len(rows)}, H], got {tuple(features.shape)}")
        tensors = {"features": features, **(extra or {})}
        for key, t in tensors.items():
            if t.dim() != 2 or t.shape[0] != len(rows):
                raise ValueError(f"{key} must be [len(rows)={len(rows)}, ...], got {tuple(t.shape)}")
        name = None
        if rows:
            name = f"shard-{self.next_index:05d}"
            save_safetensors({k: t.detach().to("cpu", torch.float32).contiguous() for k, t in tensors.items()},
                             self.dir / f"{name}.safetensors")
            write_shard_rows(self.dir, name, rows)
            self.next_index += 1
        record = {"shard": name, "prompt_ids": list(prompt_ids), "rows": len(rows), "stats": stats or {},
                  **({"texts": texts} if texts else {})}
        with open_append(self.dir / PROGRESS) as f:
            f.write(_record_line(record))
            f.flush()
            os.fsync(f.fileno())
        self.records.append(record)
        return name

    def close(self) -> None:
        """Release the folder's lock (the writer is done)."""
        self._lock.release()

    def update_manifest(self, **fields) -> None:
        self.manifest.update(fields)
        write_text(self.dir / MANIFEST, json.dumps(self.manifest, indent=2))


def _read_shard_tensors(path: Path) -> dict[str, torch.Tensor]:
    """A shard's per-row tensors: 2-D floating point, one row each (``ValueError`` naming the file)."""
    from safetensors import SafetensorError

    if not path.exists():
        raise ValueError(f"out_dir: {path} is committed in {PROGRESS} but missing (a folder kept without its "
                         "tensors: rerun its `selfjudge label` command, which rebuilds them)")
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, RuntimeError) as err:
        raise ValueError(f"out_dir: {path} is not a readable shard ({str(err)[:120]})") from None
    bad = [k for k, t in tensors.items() if t.dim() != 2 or not t.is_floating_point()]
    if bad or "features" not in tensors:
        raise ValueError(f"out_dir: {path} is damaged: needs 2-D float tensors with features, got "
                         f"{ {k: (str(t.dtype), tuple(t.shape)) for k, t in tensors.items()} }")
    return tensors


def read_rows(out_dir: str | Path) -> list[dict]:
    """All committed rows (no features), in write order."""
    out_dir = Path(out_dir)
    rows = []
    for name in committed_shards(out_dir):
        rows.extend(read_shard_rows(out_dir, name))
    return rows


def relabel(out_dir: str | Path, tau: float) -> None:
    """Rewrite every committed shard's labels as ``score > tau`` (atomically per shard, as Parquet)."""
    out_dir = Path(out_dir)
    for name in committed_shards(out_dir):
        old = shard_rows_path(out_dir, name)
        rows = read_shard_rows(out_dir, name)
        for row in rows:
            row["label"] = int(row["score"] > tau)
        write_shard_rows(out_dir, name, rows)
        if old.suffix != ".parquet":
            old.unlink()


def score_field(score: str | None) -> str:
    """The row field a label is derived from: "score" (the run's own), or "score_likelihood" /
    "score_confidence" (both stored by runs since the two SelfJudge scores exist)."""
    if score is None:
        return "score"
    if score not in ("likelihood", "confidence"):
        raise ValueError(f"score must be 'likelihood' or 'confidence', got {score!r}")
    return f"score_{score}"


def _scores(rows: list[dict], field: str, where) -> list[float]:
    try:
        return [float(r[field]) for r in rows]
    except KeyError:
        raise ValueError(f"labels: {where} stores no {field!r} (labelled before both scores were stored: "
                         "relabel it)") from None
    except (TypeError, ValueError):
        raise ValueError(f"labels: {where} is damaged: a {field!r} is not a number") from None


def read_labels(out_dir: str | Path, tau: float | None = None,
                score: str | None = None) -> tuple[torch.Tensor, list[dict], dict]:
    """Load a label directory: ``(features [N, H] float32, rows, manifest)``.

    Only shards committed in ``progress.jsonl`` are read, in write order; row k of
    ``rows`` describes ``features[k]``. With ``tau`` given, every row's label is
    re-derived from its stored score as ``int(score > tau)`` (and ``manifest["tau"]``
    in the returned dict is set to it); otherwise stored labels are returned as written.
    ``score`` ("likelihood" / "confidence") picks which stored score ``tau`` applies to.
    """
    tensors, rows, manifest = read_label_tensors(out_dir, tau, score)
    return tensors["features"], rows, manifest


def read_label_tensors(out_dir: str | Path, tau: float | None = None,
                       score: str | None = None) -> tuple[dict[str, torch.Tensor], list[dict], dict]:
    """:func:`read_labels` with every stored per-row tensor: ``({"features": [N, H], "phi": [N, F],
    ...}, rows, manifest)``; a tensor some shard lacks (written by an older format) is left out."""
    out_dir = Path(out_dir)
    mpath = out_dir / MANIFEST
    if not mpath.exists():
        raise ValueError(f"out_dir: {out_dir} has no {MANIFEST}")
    manifest = read_json(mpath)
    if not isinstance(manifest, dict):
        raise ValueError(f"out_dir: {mpath} is damaged: not a JSON object")
    shards, rows = [], []
    for name in committed_shards(out_dir):
        t = _read_shard_tensors(out_dir / f"{name}.safetensors")
        shard_rows = read_shard_rows(out_dir, name)
        bad = [k for k, v in t.items() if v.shape[0] != len(shard_rows)]
        if bad:
            raise ValueError(f"out_dir: {out_dir / name} has tensors {sorted(t)} of "
                             f"{[t[k].shape[0] for k in sorted(t)]} rows but {len(shard_rows)} label rows")
        shards.append(t)
        rows.extend(shard_rows)
    widths = {k: {int(t[k].shape[1]) for t in shards if k in t} for k in set().union(*shards)} if shards else {}
    if any(len(w) > 1 for w in widths.values()):
        raise ValueError(f"out_dir: {out_dir} is damaged: shards disagree on tensor widths {widths}")
    H = manifest.get("hidden_size") or (shards[0]["features"].shape[1] if shards else 0)
    if isinstance(H, bool) or not isinstance(H, int) or H < 0:
        raise ValueError(f"out_dir: {mpath} is damaged: hidden_size {H!r:.40}")
    keys = set.intersection(*(set(t) for t in shards)) if shards else {"features"}
    tensors = {k: torch.cat([t[k] for t in shards]) if shards else torch.zeros(0, H) for k in sorted(keys)}
    if tau is not None:
        labels = apply_tau(torch.tensor(_scores(rows, score_field(score), out_dir), dtype=torch.float64), tau).tolist()
        for row, lab in zip(rows, labels):
            row["label"] = lab
        manifest = {**manifest, "tau": float(tau), **({"score": score} if score else {})}
    return tensors, rows, manifest


def resolve_tau(label_dirs: Sequence[str], tau: float | None, tau_quantile: float | None,
                score: str | None = None) -> float | None:
    """SelfJudge's tau to relabel with: a value, or a quantile of all stored scores (None: keep labels)."""
    if tau is not None and tau_quantile is not None:
        raise ValueError("give at most one of tau and tau_quantile")
    if tau is not None and not math.isfinite(tau):
        raise ValueError(f"tau must be a finite number, got {tau}")
    if tau_quantile is None:
        return tau
    field = score_field(score)
    scores = torch.tensor([s for d in label_dirs for s in _scores(read_rows(d), field, d)], dtype=torch.float64)
    if not len(scores):
        raise ValueError("tau_quantile: the label dirs hold no scores")
    return float(tau_from_quantile(scores, tau_quantile))


def read_label_dirs(label_dirs: Sequence[str], tau: float | None = None, score: str | None = None):
    """Concatenate label shards from one or more dirs: (features [N,H] tensor, rows, manifests).

    ``tau`` (SelfJudge only) re-derives every label as ``score > tau`` from the stored scores.
    """
    tensors, rows, manifests = read_label_dirs_tensors(label_dirs, tau, score)
    return tensors["features"], rows, manifests


def read_label_dirs_tensors(label_dirs: Sequence[str], tau: float | None = None, score: str | None = None):
    """:func:`read_label_dirs` with every per-row tensor all the dirs store: (dict, rows, manifests)."""
    parts, rows, manifests = [], [], []
    for d in label_dirs:
        if tau is not None:
            with open(Path(d) / MANIFEST, encoding="utf-8") as fh:
                if json.load(fh).get("method") != "selfjudge":
                    raise ValueError(f"tau: only SelfJudge labels are defined by a score threshold ({d})")
        t, r, m = read_label_tensors(d, tau=tau, score=score)
        parts.append(t)
        rows.extend(r)
        manifests.append(m)
    feats = [t["features"] for t in parts]
    hs = {int(f.shape[1]) for f in feats}
    if len(hs) != 1:
        raise ValueError(f"labels: label dirs have different hidden sizes {sorted(hs)}")
    for key in ("target", "method"):
        vals = {m.get(key) for m in manifests}
        if len(vals) != 1:
            raise ValueError(f"labels: label dirs disagree on {key}: {sorted(map(str, vals))}")
    keys = set.intersection(*(set(t) for t in parts))
    tensors = {k: torch.cat([t[k] for t in parts], 0) for k in sorted(keys)}
    keep = unique_label_rows(rows)
    if len(keep) < len(rows):
        _log.warning(f"labels: {len(rows) - len(keep)} of {len(rows)} rows repeat an earlier (prompt, position, "
                     "draft token) and are dropped (a folder given twice, or overlapping label runs)")
        index = torch.tensor(keep, dtype=torch.long)
        tensors = {k: t[index] for k, t in tensors.items()}
        rows = [rows[i] for i in keep]
    return tensors, rows, manifests


def unique_label_rows(rows: Sequence[dict]) -> list[int]:
    """Indices of the first row of each (prompt_id, position, draft_token_id): one label per swap."""
    seen, keep = set(), []
    for i, r in enumerate(rows):
        key = (r.get("prompt_id"), r.get("position"), r.get("draft_token_id"))
        if key not in seen:
            seen.add(key)
            keep.append(i)
    return keep
