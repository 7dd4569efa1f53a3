"""The judge's probability features against a plain per-row formula in float64."""

import math

import pytest
import torch

from selfjudge.kernels.judge_features import FEATURE_NAMES, LOGP_FLOOR, position_features


def plain(row: list[float], token: int, top_k: int) -> list[float]:
    """log p(z), log p_max - log p(z), -sum p log p over the top_k, by hand."""
    m = max(row)
    z = sum(math.exp(v - m) for v in row)
    logp = [v - m - math.log(z) for v in row]
    top = sorted(logp, reverse=True)[:top_k]
    lz = max(logp[token], LOGP_FLOOR)
    return [lz, max(top[0] - lz, 0.0), -sum(math.exp(t) * t for t in top)]


@pytest.mark.parametrize("V, top_k", [(1, 3), (2, 3), (7, 1), (97, 3), (1000, 5)])
def test_matches_plain_formula(V, top_k):
    g = torch.Generator().manual_seed(V)
    logits = torch.randn(9, V, generator=g) * 4
    ids = torch.randint(0, V, (9,), generator=g)
    ids[0] = logits[0].argmax()  # the target's top-1: margin exactly 0
    got = position_features(logits, ids, top_k=top_k)
    want = torch.tensor([plain(logits[n].double().tolist(), int(ids[n]), top_k) for n in range(9)], dtype=torch.float64)
    assert got.shape == (9, len(FEATURE_NAMES)) and got.dtype == torch.float32
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)
    assert got[0, 1] == 0


def test_bf16_rows_use_fp32_math():
    logits = (torch.randn(4, 300) * 3).to(torch.bfloat16)
    ids = torch.tensor([0, 5, 299, 17])
    torch.testing.assert_close(position_features(logits, ids), position_features(logits.float(), ids))


def test_invalid_rows_and_zero_probability_stay_finite():
    logits = torch.randn(4, 10)
    logits[0, 3] = float("nan")
    logits[1, :] = float("-inf")
    logits[2, 7] = float("inf")
    logits[3, 2] = float("-inf")  # a token the target never emits
    phi = position_features(logits, torch.tensor([1, 1, 1, 2]))
    assert torch.isfinite(phi).all()
    assert (phi[:3] == 0).all()  # invalid rows: no evidence either way
    assert phi[3, 0] == LOGP_FLOOR and phi[3, 1] > 0


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="logits"):
        position_features(torch.zeros(3), torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="token_ids"):
        position_features(torch.zeros(3, 5), torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match="top_k"):
        position_features(torch.zeros(3, 5), torch.zeros(3, dtype=torch.long), top_k=0)
