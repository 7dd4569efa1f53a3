"""GenerationStats records its own cycles."""

from selfjudge.engine import GenerationStats, aggregate_stats


def test_record_cycle_counts_sources_before_truncation():
    s = GenerationStats()
    s.record_cycle(4, ["draft", "judge", "draft", "target"], draft_forwards=4)
    s.record_cycle(2, ["target"], draft_forwards=2)
    assert (s.cycles, s.steps, s.target_forwards, s.draft_forwards) == (2, 2, 2, 6)
    assert (s.draft_tokens, s.accepted_tokens, s.align_accepted, s.judge_accepted) == (6, 3, 2, 1)
    assert s.mean_accepted_length == (3 + 2) / 2 and s.acceptance_rate == 3 / 6
    assert s.position_drafted == [2, 2, 1, 1] and s.position_accepted == [1, 1, 1]
    assert s.acceptance_by_position == [0.5, 0.5, 1.0, 0.0]  # a position never kept still has its rate


def test_batched_cycles_and_times():
    total = GenerationStats()
    total.record_batched_cycle(num_rows=3, draft_forwards=4)
    total.add_times(prefill=1.0, draft=0.5, target=2.0, verify=0.25, other=0.25)
    assert (total.steps, total.cycles, total.target_forwards, total.draft_forwards) == (1, 3, 1, 4)
    assert total.cycle_time == 3.0 and total.wall_time == 4.0
    both = aggregate_stats([total, total])
    assert both.cycles == 6 and both.wall_time == 8.0
