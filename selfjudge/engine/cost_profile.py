"""The target's step cost as a function of batch rows and positions per row, measured once.

The adaptive controller (:mod:`selfjudge.engine.adaptive`) weighs a cycle's expected tokens
against what its target forward costs. That cost is a property of the machine, the target,
the device and the dtype, and its shape differs by device: on a CPU a forward over B rows x T
positions is compute-bound and grows with B·T; on a GPU at small batch it is memory-bound and
nearly flat in T. The controller must not assume either, so it reads a table measured here:

* ``seconds[i][j]``: wall seconds of one engine step with ``rows[i]`` rows and ``positions[j]``
  positions per row. Position count 1 is a plain decode step (forward + argmax); T >= 2 is a
  speculative step with T - 1 drafts (forward + the verify op + the cache rollback).

Each entry is the median of ``repeats`` interleaved timings over a cache holding ``context``
tokens per row. The table is not forced to grow with T: on the CPU this was built on, a forward
over 4 positions costs less than one over 2 or 3 (the matrix-multiply library picks another
kernel), and the controller should use that. A table is cached as JSON under ``$SELFJUDGE_PROFILE_DIR`` (default
``<selfjudge cache>/cost-profiles``), keyed by a fingerprint of machine, target, device, dtype,
thread count and library versions; a cached table that covers the rows and positions asked for
is reused, else a wider one is measured and replaces it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from selfjudge.engine.cache import RaggedCache
from selfjudge.json_io import read_json
from selfjudge.writes import write_json
from selfjudge.timing import alternating

__all__ = ["CostProfile", "measure_cost_profile", "load_or_measure_profile", "profile_key", "PROFILE_DIR_ENV"]

PROFILE_DIR_ENV = "SELFJUDGE_PROFILE_DIR"
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CostProfile:
    """Step seconds on a grid of rows x positions per row (see the module doc)."""

    rows: tuple[int, ...]  # ascending batch sizes measured
    positions: tuple[int, ...]  # ascending positions per row measured, starting at 1 (a plain step)
    seconds: tuple[tuple[float, ...], ...]  # [len(rows)][len(positions)]
    key: dict | None = None  # what the table was measured on (profile_key)

    def __post_init__(self) -> None:
        rows, positions = list(self.rows), list(self.positions)
        if not rows or rows != sorted(set(rows)) or rows[0] < 1:
            raise ValueError(f"rows must be ascending distinct ints >= 1, got {rows}")
        if not positions or positions != sorted(set(positions)) or positions[0] != 1:
            raise ValueError(f"positions must be ascending distinct ints starting at 1, got {positions}")
        if len(self.seconds) != len(rows) or any(len(r) != len(positions) for r in self.seconds):
            raise ValueError(f"seconds must be {len(rows)} x {len(positions)}")
        if any(not (s > 0 and s < float("inf")) for r in self.seconds for s in r):
            raise ValueError("seconds must be finite and > 0")

    def step_seconds(self, rows: int, drafts: int) -> float:
        """Seconds of one step of ``rows`` rows with ``drafts`` draft positions each (0: a plain
        decode step); linear in rows between and beyond the measured batch sizes."""
        j = self._position_index(drafts + 1)
        column = [r[j] for r in self.seconds]
        if len(self.rows) == 1:
            return column[0] * rows / self.rows[0]
        i = next((n for n in range(1, len(self.rows) - 1) if rows <= self.rows[n]), len(self.rows) - 1)
        (r0, r1), (c0, c1) = (self.rows[i - 1], self.rows[i]), (column[i - 1], column[i])
        return max(c0 + (c1 - c0) * (rows - r0) / (r1 - r0), 1e-9)

    def packed_seconds(self, rows: int, tokens: int) -> float:
        """Seconds of one packed step: ``rows`` rows feeding ``tokens`` positions in all (at least
        one each), read off the table at ``tokens / rows`` positions per row (linear between
        measured position counts; beyond the widest, on the last segment's line)."""
        per_row = max(tokens / rows, 1.0)
        lo = max(p for p in self.positions if p <= per_row)
        hi = next((p for p in self.positions if p > lo), None)
        if hi is None:  # past the widest measured: extend the last segment
            if len(self.positions) == 1:
                return self.step_seconds(rows, 0) * per_row
            lo, hi = self.positions[-2], self.positions[-1]
        a, b = self.step_seconds(rows, lo - 1), self.step_seconds(rows, hi - 1)
        return max(a + (b - a) * (per_row - lo) / (hi - lo), 1e-9)

    def _position_index(self, positions: int) -> int:
        if positions not in self.positions:
            raise ValueError(f"positions: {positions} per row is not in the profile's {list(self.positions)}")
        return self.positions.index(positions)

    def covers(self, rows: int, positions: int) -> bool:
        return self.rows[-1] >= rows and self.positions[-1] >= positions

    def to_json(self) -> dict:
        return {"format": 1, **asdict(self)}

    @classmethod
    def from_json(cls, obj, where: str = "cost profile") -> "CostProfile":
        try:
            return cls(tuple(int(r) for r in obj["rows"]), tuple(int(p) for p in obj["positions"]),
                       tuple(tuple(float(s) for s in r) for r in obj["seconds"]), obj.get("key"))
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise ValueError(f"{where}: not a cost profile ({err})") from None


def profile_key(target, device: torch.device) -> dict:
    """What a table depends on: machine, target (architecture and sizes), device, dtype, threads."""
    cfg = target.config
    param = next(target.parameters())
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    return {
        "machine": f"{platform.node()}/{platform.machine()}/{os.cpu_count()} cpus",
        "device": f"{device.type}:{device_name}",
        "dtype": str(param.dtype).removeprefix("torch."),
        "threads": torch.get_num_threads(),
        "target": {name: getattr(cfg, name, None) for name in
                   ("_name_or_path", "model_type", "hidden_size", "num_hidden_layers", "vocab_size",
                    "intermediate_size", "num_attention_heads", "num_key_value_heads")},
        "torch": torch.__version__,
    }


def _time_step(target, rows: int, positions: int, cache: RaggedCache, generator) -> float:
    """Seconds of one engine step on ``cache`` (which is left as it was)."""
    from selfjudge.kernels.verify import verify

    V = int(target.config.vocab_size)
    device = cache.valid.device
    fed = torch.randint(0, V, (rows, positions), device=device, generator=generator)  # [B, T]
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    logits = cache.feed(fed, logits_to_keep=positions).logits  # [B, T, V]
    if positions == 1:
        logits[:, -1].argmax(-1).tolist()  # the host sync a plain step pays
        kept = torch.zeros(rows, dtype=torch.long, device=device)
    else:
        v = verify(fed[:, 1:], None, logits, None, temperature=0.0)
        v.output_token_ids.tolist()  # the host sync a speculative step pays
        kept = v.num_accepted
    cache.rollback(torch.zeros_like(kept), positions, 0)  # time the rollback; then restore the length
    return time.perf_counter() - start


@torch.inference_mode()
def measure_cost_profile(target, rows=(1, 2, 4, 8), positions=(1, 2, 3, 4, 5), *, context: int = 256,
                         repeats: int = 7, progress: bool = True) -> CostProfile:
    """Time engine steps of ``target`` on the grid (see the module doc); a progress line per batch size."""
    device = next(target.parameters()).device
    generator = torch.Generator(device=device).manual_seed(0)
    V = int(target.config.vocab_size)
    table = []
    for B in rows:
        cache = RaggedCache(target, B, device)
        cache.feed(torch.randint(0, V, (B, context), device=device, generator=generator))
        times = {T: [] for T in positions}
        for r in range(repeats + 1):  # one warm-up round; the order alternates so drift hits every T alike
            for T in alternating(positions, r):
                seconds = _time_step(target, B, T, cache, generator)
                if r:
                    times[T].append(seconds)
        table.append(tuple(statistics.median(times[T]) for T in positions))
        if progress:
            _log.info("[cost profile] %d rows: %s ms", B, " ".join(f"{1000 * s:.1f}" for s in table[-1]))
    return CostProfile(tuple(rows), tuple(positions), tuple(table), profile_key(target, device))


def profile_dir() -> Path:
    """``$SELFJUDGE_PROFILE_DIR``, else ``<selfjudge cache>/cost-profiles``."""
    env = os.environ.get(PROFILE_DIR_ENV)
    if env:
        return Path(env).expanduser()
    from selfjudge.models.cache_dir import default_cache_dir

    return default_cache_dir() / "cost-profiles"


def load_or_measure_profile(target, rows: int, positions: int, folder: str | os.PathLike | None = None) -> CostProfile:
    """The cached table for ``target`` here if it covers ``rows`` x ``positions``, else a newly measured
    one (batch sizes 1, 2, 4, ... up to ``rows``; positions 1..``positions``) written to the cache."""
    device = next(target.parameters()).device
    key = profile_key(target, device)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]
    path = Path(folder if folder is not None else profile_dir()) / f"profile-{digest}.json"
    old = None
    if path.is_file() and not path.is_symlink():
        try:
            old = CostProfile.from_json(read_json(path), str(path))
        except ValueError as err:
            _log.warning("%s; measuring again", err)
        if old is not None and old.covers(rows, positions):
            return old
    sizes = sorted({1, *(2 ** n for n in range(1, max(rows, 1).bit_length() + 1) if 2 ** n <= rows), rows,
                    *(old.rows if old else ())})
    widths = tuple(range(1, max(positions, old.positions[-1] if old else 1) + 1))
    _log.info("[cost profile] measuring the target's step cost (%d batch sizes x %d widths, once per machine)",
              len(sizes), len(widths))
    profile = measure_cost_profile(target, tuple(sizes), widths)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, profile.to_json())
    return profile
