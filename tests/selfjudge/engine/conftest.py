"""Fixtures shared by the engine tests: recording what the drafter proposed each cycle."""

from __future__ import annotations

import pytest

from selfjudge.engine import StandardPolicy
from selfjudge.engine.policies import Relaxation


class RecordingPolicy(StandardPolicy):
    """Standard SD that records the drafts of row 0 in every cycle."""

    def __init__(self):
        self.drafts: list[list[int]] = []

    def relax(self, cycle):
        self.drafts.append(cycle.draft_token_ids[0].tolist())
        return Relaxation()


def replay(drafts: list[list[int]], out: list[int], expected_chain) -> int:
    """Walk the recorded cycles against the output ``out``: each cycle's drafts must equal
    ``expected_chain(position, k)``, the drafter's own greedy chain after ``out[:position]``.
    Returns the number of cycles that accepted part (not none, not all) of their drafts."""
    pos = partial = 0
    for d in drafts:
        assert d == expected_chain(pos, len(d)), f"cycle at output position {pos}"
        a = 0
        while a < len(d) and pos + a < len(out) and d[a] == out[pos + a]:
            a += 1
        partial += 0 < a < len(d)
        pos += a + 1
    # (a last cycle that needs one token runs the target alone, without drafts)
    assert pos >= len(out) - 1
    return partial


def _token_pvalue(tokens: list[int], probs) -> float:
    """Chi-square p-value of ``tokens`` (one draw per row) against the distribution ``probs`` [V]:
    every token expected at least 5 times is a bucket, the rest are pooled into one."""
    import torch
    from scipy.stats import chisquare

    rows = len(tokens)
    keep = probs * rows >= 5
    counts = torch.bincount(torch.tensor(tokens), minlength=probs.numel()).double()
    observed, expected = counts[keep], probs[keep] * rows
    if (~keep).any():
        observed = torch.cat([observed, counts[~keep].sum()[None]])
        expected = torch.cat([expected, probs[~keep].sum()[None] * rows])
    return chisquare(observed.numpy(), expected.numpy() * rows / expected.sum().item()).pvalue


@pytest.fixture
def recording_policy():
    return RecordingPolicy()


@pytest.fixture
def replay_proposals():
    return replay


@pytest.fixture
def token_pvalue():
    return _token_pvalue
