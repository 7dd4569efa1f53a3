"""selfjudge.timing: the alternating order and the median timer."""

import pytest

from selfjudge.timing import alternating, median_ms


def test_alternating_reverses_every_odd_pass_and_keeps_the_input():
    items = ("a", "b", "c")
    assert [alternating(items, p) for p in range(3)] == [["a", "b", "c"], ["c", "b", "a"], ["a", "b", "c"]]
    assert items == ("a", "b", "c")


def test_median_ms_warms_up_untimed_and_takes_the_median(monkeypatch):
    import selfjudge.timing as timing

    clock = iter([0.0, 1.0, 10.0, 10.002, 20.0, 20.003])  # timed calls of 1000, 2 and 3 ms
    monkeypatch.setattr(timing.time, "perf_counter", lambda: next(clock))
    calls = []
    assert median_ms(lambda: calls.append(1), repeats=3, warmup=2) == pytest.approx(3.0)
    assert len(calls) == 5
    with pytest.raises(ValueError, match="repeats must be >= 1"):
        median_ms(lambda: None, repeats=0)
