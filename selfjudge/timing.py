"""Timing on a shared machine whose speed drifts: configurations in alternating order, medians of repeats."""

from __future__ import annotations

import statistics
import time
from typing import Callable, Sequence, TypeVar

T = TypeVar("T")


def alternating(items: Sequence[T], pass_index: int) -> list[T]:
    """``items`` in order on even passes and reversed on odd ones (A B C, C B A, ...), so a machine
    that speeds up or slows down during a measurement favours none of them."""
    return list(items) if pass_index % 2 == 0 else list(items)[::-1]


def median_ms(fn: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    """The median wall time of ``repeats`` calls of ``fn`` in milliseconds, after ``warmup`` untimed calls."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)
