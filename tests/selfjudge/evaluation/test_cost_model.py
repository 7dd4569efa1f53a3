"""The cost model against closed forms: Leviathan et al.'s expected tokens per cycle and their speed-up."""

import math

import pytest

from selfjudge.evaluation.cost_model import PAPER_PAIR, CostModel, best_k, expected_tokens, measured_cost_model


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.8, 0.95])
@pytest.mark.parametrize("K", [1, 4, 8])
def test_expected_tokens_is_the_geometric_closed_form(alpha, K):
    rates = [alpha ** (i + 1) for i in range(K)]  # position i kept iff the first i+1 drafts all kept
    closed = (1 - alpha ** (K + 1)) / (1 - alpha)  # Leviathan et al. 2023, eq. 1
    assert expected_tokens(rates) == pytest.approx(closed)


def test_speedup_is_the_leviathan_formula():
    alpha, K, c = 0.8, 4, 0.05
    model = CostModel(draft_cost=c)
    rates = [alpha ** (i + 1) for i in range(K)]
    leviathan = (1 - alpha ** (K + 1)) / ((1 - alpha) * (K * c + 1))
    assert model.speedup(expected_tokens(rates), K) == pytest.approx(leviathan)
    assert model.speedup(1.0, 0) == 1.0  # target-only


def test_best_k_trades_acceptance_for_draft_cost():
    rates = [0.9 ** (i + 1) for i in range(8)]
    k_cheap, _ = best_k(rates, CostModel(0.01), range(1, 9))
    k_dear, _ = best_k(rates, CostModel(0.5), range(1, 9))
    assert k_cheap == 8 and k_dear < k_cheap
    assert math.isclose(PAPER_PAIR.draft_cost, 1.24 / 8.03)


def test_measured_costs_and_bad_input():
    m = measured_cost_model(0.1, 0.01, verify_s=0.15)
    assert (m.draft_cost, m.verify_cost) == pytest.approx((0.1, 1.5))
    with pytest.raises(ValueError, match="draft_cost"):
        CostModel(-1.0)
    with pytest.raises(ValueError, match="rates"):
        expected_tokens([0.5, 0.7])  # a later position cannot be kept more often
    with pytest.raises(ValueError, match="rates"):
        expected_tokens([1.5])
    with pytest.raises(ValueError, match="target_step_s"):
        measured_cost_model(0.0, 1.0)
