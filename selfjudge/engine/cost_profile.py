"""The target's step cost as a function of batch rows and positions per row, measured once.

The adaptive controller (:mod:`selfjudge.engine.adaptive`) weighs a cycle's expected tokens
against what its target forward costs. That cost is a property of the machine, the target,
the device and the dtype, and its shape differs by device: on a CPU a forward over B rows x T
positions is compute-bound and grows with B·T; on a GPU at small batch it is memory-bound and
nearly flat in T. The controller must not assume either, so it reads a table measured here:

* ``seconds[i][j]``: wall seconds of one engine step with ``rows[i]`` rows and ``positions[j]``
  positions per row. Position count 1 is a plain decode step (forward + argmax); T >= 2 is a
  speculative step with T - 1 drafts (forward + the verify op + the cache rollback).

* ``packed[i][j]``: wall seconds of one engine step with ``rows[i]`` rows and ``packed_drafts[i][j]``
  draft positions in all, spread over the rows (round robin), through the packed forward
  (:mod:`selfjudge.engine.packed`) that the engine runs. The controller prices what it admits from this table,
  because a packed step's cost is not the padded table's read at the mean width: the packed
  path has a fixed cost of its own (gathers, the ragged attention mask) and the matrix-multiply
  library's cost is not linear in the rows it multiplies (``csrc_docs/adaptive.md``).

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

__all__ = ["CostProfile", "measure_cost_profile", "packed_grid", "load_or_measure_profile", "profile_key", "PROFILE_DIR_ENV"]

PROFILE_DIR_ENV = "SELFJUDGE_PROFILE_DIR"
_log = logging.getLogger(__name__)


def _on_line(xs, ys, x: float) -> float:
    """Piecewise-linear ``ys`` over ascending ``xs`` at ``x``; outside, the nearest segment's line."""
    if len(xs) == 1:
        return ys[0]
    i = next((n for n in range(1, len(xs) - 1) if x <= xs[n]), len(xs) - 1)
    (x0, x1), (y0, y1) = (xs[i - 1], xs[i]), (ys[i - 1], ys[i])
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def _ascending_from(values, first: int, what: str) -> list[int]:
    values = list(values)
    if not values or values != sorted(set(values)) or values[0] != first:
        raise ValueError(f"{what} must be ascending distinct ints starting at {first}, got {values}")
    return values


@dataclass(frozen=True)
class CostProfile:
    """Step seconds on a grid of rows x positions per row, and of packed steps (see the module doc)."""

    rows: tuple[int, ...]  # ascending batch sizes measured
    positions: tuple[int, ...]  # ascending positions per row measured, starting at 1 (a plain step)
    seconds: tuple[tuple[float, ...], ...]  # [len(rows)][len(positions)]
    key: dict | None = None  # what the table was measured on (profile_key)
    packed_drafts: tuple[tuple[int, ...], ...] = ()  # per batch size: drafts in all, ascending from 0
    packed: tuple[tuple[float, ...], ...] = ()  # per batch size: seconds at those draft counts

    def __post_init__(self) -> None:
        rows = list(self.rows)
        if not rows or rows != sorted(set(rows)) or rows[0] < 1:
            raise ValueError(f"rows must be ascending distinct ints >= 1, got {rows}")
        _ascending_from(self.positions, 1, "positions")
        if len(self.seconds) != len(rows) or any(len(r) != len(self.positions) for r in self.seconds):
            raise ValueError(f"seconds must be {len(rows)} x {len(self.positions)}")
        if self.packed or self.packed_drafts:
            if len(self.packed) != len(rows) or len(self.packed_drafts) != len(rows):
                raise ValueError(f"packed and packed_drafts need one entry per batch size ({len(rows)})")
            for drafts, seconds in zip(self.packed_drafts, self.packed):
                if len(_ascending_from(drafts, 0, "packed_drafts")) != len(seconds):
                    raise ValueError("packed: one time per entry of packed_drafts")
        if any(not (s > 0 and s < float("inf")) for table in (self.seconds, self.packed) for r in table for s in r):
            raise ValueError("seconds must be finite and > 0")

    @property
    def has_packed(self) -> bool:
        """Whether packed steps were measured (else :meth:`packed_seconds` reads the padded table)."""
        return bool(self.packed)

    def _across_rows(self, per_size: list[float], rows: int) -> float:
        if len(self.rows) == 1:
            return max(per_size[0] * rows / self.rows[0], 1e-9)
        return max(_on_line(self.rows, per_size, rows), 1e-9)

    def step_seconds(self, rows: int, drafts: int) -> float:
        """Seconds of one step of ``rows`` rows with ``drafts`` draft positions each (0: a plain
        decode step); linear in rows between and beyond the measured batch sizes."""
        j = self._position_index(drafts + 1)
        return self._across_rows([r[j] for r in self.seconds], rows)

    def packed_seconds(self, rows: int, tokens: int) -> float:
        """Seconds of one packed step: ``rows`` rows feeding ``tokens`` positions in all (at least
        one each). From the packed table where it was measured (linear in the draft count
        ``tokens - rows``, then in rows); else read off the padded table at ``tokens / rows``
        positions per row."""
        if self.has_packed:
            drafts = max(tokens - rows, 0)
            per_size = [_on_line(d, s, drafts) for d, s in zip(self.packed_drafts, self.packed)]
            return self._across_rows(per_size, rows)
        per_row = max(tokens / rows, 1.0)
        if len(self.positions) == 1:
            return self.step_seconds(rows, 0) * per_row
        per_position = [self.step_seconds(rows, p - 1) for p in self.positions]
        return max(_on_line(self.positions, per_position, per_row), 1e-9)

    def _position_index(self, positions: int) -> int:
        if positions not in self.positions:
            raise ValueError(f"positions: {positions} per row is not in the profile's {list(self.positions)}")
        return self.positions.index(positions)

    def covers(self, rows: int, positions: int) -> bool:
        return self.rows[-1] >= rows and self.positions[-1] >= positions

    def to_json(self) -> dict:
        return {"format": 2, **asdict(self)}

    @classmethod
    def from_json(cls, obj, where: str = "cost profile") -> "CostProfile":
        try:
            return cls(tuple(int(r) for r in obj["rows"]), tuple(int(p) for p in obj["positions"]),
                       tuple(tuple(float(s) for s in r) for r in obj["seconds"]), obj.get("key"),
                       tuple(tuple(int(d) for d in r) for r in obj.get("packed_drafts", ())),
                       tuple(tuple(float(s) for s in r) for r in obj.get("packed", ())))
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


def _round_robin(rows: int, drafts: int) -> list[int]:
    """``drafts`` draft positions spread over ``rows`` rows, one at a time (counts per row)."""
    return [drafts // rows + (1 if b < drafts % rows else 0) for b in range(rows)]


def _time_step(target, counts: list[int], cache: RaggedCache, generator, packed: bool = True) -> float:
    """Seconds of one engine step on ``cache`` (which is left as it was) with ``counts[b]`` drafts
    on row b: a plain step when all are 0, else the packed forward (``packed``) or the padded one."""
    from selfjudge.kernels.verify import verify

    V = int(target.config.vocab_size)
    device = cache.valid.device
    rows, width = len(counts), max(counts) + 1
    fed = torch.randint(0, V, (rows, width), device=device, generator=generator)  # [B, T]
    num = torch.tensor(counts, device=device)  # [B]
    valid = torch.arange(width, device=device)[None] <= num[:, None]  # [B, T]
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    if packed and width > 1:
        logits, _ = cache.feed_packed(fed, valid, counts=[c + 1 for c in counts], starts=[0] * rows)  # [B, T, V]
    else:
        logits = cache.feed(fed, logits_to_keep=width).logits  # [B, T, V]
    if width == 1:
        logits[:, -1].argmax(-1).tolist()  # the host sync a plain step pays
    else:
        v = verify(fed[:, 1:], num if min(counts) < width - 1 else None, logits, None, temperature=0.0)
        v.output_token_ids.tolist()  # the host sync a speculative step pays
    cache.rollback(torch.zeros(rows, dtype=torch.long, device=device), width, 0)  # timed; then the old length
    return time.perf_counter() - start


def packed_grid(rows: int, max_drafts_per_row: int) -> tuple[int, ...]:
    """Draft counts in all at which a batch of ``rows`` rows is timed: 0, powers of two, and every
    multiple of ``rows`` (equal widths) up to ``rows * max_drafts_per_row``."""
    top = rows * max_drafts_per_row
    return tuple(sorted({0, *(2 ** n for n in range(top.bit_length()) if 2 ** n <= top),
                         *(rows * w for w in range(1, max_drafts_per_row + 1))}))


@torch.inference_mode()
def measure_cost_profile(target, rows=(1, 2, 4, 8), positions=(1, 2, 3, 4, 5), *, context: int = 256,
                         repeats: int = 7, progress: bool = True) -> CostProfile:
    """Time engine steps of ``target`` (see the module doc): per batch size the padded widths and the
    packed grid, interleaved. A progress line per batch size."""
    positions = tuple(_ascending_from(positions, 1, "positions"))
    if positions != tuple(range(1, positions[-1] + 1)):
        raise ValueError(f"positions must be 1..T without gaps, got {list(positions)}")
    device = next(target.parameters()).device
    generator = torch.Generator(device=device).manual_seed(0)
    V = int(target.config.vocab_size)
    padded, packed_drafts, packed = [], [], []
    for B in rows:
        cache = RaggedCache(target, B, device)
        cache.feed(torch.randint(0, V, (B, context), device=device, generator=generator))
        grid = packed_grid(B, positions[-1] - 1)
        points = [("packed", d) for d in grid] + [("padded", B * (T - 1)) for T in positions[1:]]
        times = {point: [] for point in points}
        for r in range(repeats + 1):  # one warm-up round; the order alternates so drift hits every point alike
            for kind, d in alternating(points, r):
                seconds = _time_step(target, _round_robin(B, d), cache, generator, packed=kind == "packed")
                if r:
                    times[kind, d].append(seconds)
        medians = {point: statistics.median(t) for point, t in times.items()}
        padded.append((medians["packed", 0], *(medians["padded", B * (T - 1)] for T in positions[1:])))
        packed_drafts.append(grid)
        packed.append(tuple(medians["packed", d] for d in grid))
        if progress:
            _log.info("[cost profile] %d rows: padded %s ms; packed, drafts %s: %s ms", B,
                      " ".join(f"{1000 * s:.1f}" for s in padded[-1]), list(grid),
                      " ".join(f"{1000 * s:.1f}" for s in packed[-1]))
    return CostProfile(tuple(rows), positions, tuple(padded), profile_key(target, device),
                       tuple(packed_drafts), tuple(packed))


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
        if old is not None and old.covers(rows, positions) and old.has_packed:
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
