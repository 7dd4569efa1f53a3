"""Pareto envelopes, the gap between two methods, and its bootstrap interval over prompts."""

import math
import random

import pytest

from selfjudge.evaluation.pareto import (gap_interval, hull_frontier, pareto_gap, resampled_rows, speed_ratio_interval,
                                    step_frontier)


def test_hull_frontier_is_the_time_sharing_curve():
    f = hull_frontier([(1.0, 1.0), (2.0, 0.8), (3.0, 0.2), (2.5, 0.3)])  # (2.5, 0.3) lies under the hull
    assert f(0.5) == 1.0 and f(1.0) == 1.0 and math.isclose(f(2.0), 0.8)
    assert math.isclose(f(2.5), 0.5) and math.isnan(f(3.5))
    g = hull_frontier([(1.0, 1.0), (2.0, 0.3), (3.0, 0.2)])  # a dent: mixing (1, 1) and (3, 0.2) beats it
    assert math.isclose(g(2.0), 0.6)
    h = hull_frontier([(1.0, 0.9), (1.5, 1.0), (2.0, 0.5)])  # best y right of the smallest m
    assert h(1.2) == 1.0 and math.isclose(h(1.75), 0.75)


def test_step_frontier_takes_the_next_point_to_the_right():
    f = step_frontier([(1.0, 1.0), (2.0, 0.8), (3.0, 0.2)])
    assert f(1.5) == 0.8 and f(2.5) == 0.2 and math.isnan(f(3.5))


def _row(family, K, m, y, per_prompt=None):
    r = {"family": family, "K": K, "mean_accepted_length": m, "semantic_fidelity": y, "policy": family}
    if per_prompt:
        r["per_prompt"] = per_prompt
    return r


def test_hull_gap_does_not_reward_a_denser_sweep_of_the_same_curve():
    """Two methods on one linear trade-off, one swept with 9 points, one with its end point only:
    the hull gap is 0; the step envelope charges the sparse one (negative control)."""
    line = lambda m: 1.0 - 0.5 * (m - 1.5)  # noqa: E731
    rows = [_row("standard", 3, 1.5, 1.0)]
    rows += [_row("dense", 3, 1.5 + 0.1 * i, line(1.5 + 0.1 * i)) for i in range(1, 10)]
    rows += [_row("sparse", 3, 2.4, line(2.4))]
    hull = pareto_gap(rows, "dense", "sparse", y="semantic_fidelity", K=3)
    step = pareto_gap(rows, "dense", "sparse", y="semantic_fidelity", K=3, envelope="step")
    assert abs(hull["mean"]) < 1e-9 and (hull["points_a"], hull["points_b"]) == (9, 1)
    assert step["mean"] > 0.1
    with pytest.raises(ValueError, match="envelope"):
        pareto_gap(rows, "dense", "sparse", y="semantic_fidelity", K=3, envelope="area")


def _prompt_rows(n, shift, seed):
    """Per-prompt figures: standard (m 1.5, y 1); methods a and b accept the same on every prompt,
    a keeps ``shift`` more semantic similarity, with noise per prompt."""
    rng = random.Random(seed)
    cycles = [50] * n
    std_acc, lossy_acc = [25] * n, [40] * n
    y_b = [0.8 + rng.uniform(-0.1, 0.1) for _ in range(n)]
    y_a = [y + shift + rng.uniform(-0.02, 0.02) for y in y_b]
    pp = lambda acc, ys: {"cycles": cycles, "accepted": acc, "semantic": ys}  # noqa: E731
    return [_row("standard", 3, 1.5, 1.0, pp(std_acc, [1.0] * n)),
            _row("a", 3, 1.8, sum(y_a) / n, pp(lossy_acc, y_a)),
            _row("b", 3, 1.8, sum(y_b) / n, pp(lossy_acc, y_b))]


def test_resampling_every_prompt_once_gives_the_blocks_own_figures():
    rows = _prompt_rows(12, 0.05, seed=1)
    again = resampled_rows(rows, list(range(12)), "semantic_fidelity")
    for r, s in zip(rows, again):
        assert math.isclose(r["mean_accepted_length"], s["mean_accepted_length"])
        assert math.isclose(r["semantic_fidelity"], s["semantic_fidelity"])


def test_interval_excludes_zero_for_a_real_difference_and_covers_it_for_none():
    real = gap_interval(_prompt_rows(24, 0.05, seed=2), "a", "b", K=3, n_boot=300)
    assert 0 < real["low"] <= real["mean"] <= real["high"] and real["prompts"] == 24
    none = gap_interval(_prompt_rows(24, 0.0, seed=3), "a", "b", K=3, n_boot=300)  # negative control
    assert none["low"] < 0 < none["high"]


def test_interval_needs_per_prompt_figures():
    rows = [_row("standard", 3, 1.5, 1.0), _row("a", 3, 1.8, 0.9), _row("b", 3, 1.8, 0.8)]
    assert gap_interval(rows, "a", "b", K=3) is None


def _timed(walls: list[float], tokens: list[int]) -> dict:
    return {"per_group": {"wall_s": walls, "tokens": tokens}}


def test_speed_ratio_interval_is_the_pooled_ratio_and_brackets_the_truth():
    rng = random.Random(0)
    tokens = [rng.randrange(50, 100) for _ in range(24)]
    base_wall = [t / 20.0 * rng.uniform(0.7, 1.3) for t in tokens]
    fast_wall = [w / 1.3 * rng.uniform(0.9, 1.1) for w in base_wall]  # 1.3x faster, noisy per prompt
    fast, base = _timed(fast_wall, tokens), _timed(base_wall, tokens)
    ci = speed_ratio_interval(fast, base, n_boot=400)
    plain = (sum(tokens) / sum(fast_wall)) / (sum(tokens) / sum(base_wall))  # the independent formula
    assert math.isclose(ci["ratio"], plain) and ci["groups"] == 24
    assert 1.0 < ci["low"] <= ci["ratio"] <= ci["high"] and ci["low"] < 1.3 < ci["high"]
    # negative control: with no speed difference the 95 % interval covers 1 in about 95 % of data sets
    covered = 0
    for _ in range(40):
        same = speed_ratio_interval(_timed([w * rng.uniform(0.9, 1.1) for w in base_wall], tokens), base, n_boot=200)
        covered += same["low"] <= 1.0 <= same["high"]
    assert covered >= 32


def test_speed_ratio_interval_needs_enough_groups():
    few = _timed([1.0] * 3, [96] * 3)  # batch 8 over 24 prompts: 3 groups
    assert speed_ratio_interval(few, few) is None
    assert speed_ratio_interval({}, _timed([1.0] * 8, [9] * 8)) is None
