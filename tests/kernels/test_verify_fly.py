"""FLy's deferred acceptance inside the verify op: against a plain per-row formula, kernel == twin,
padded == flat, greedy and sampling, OR-ed with a judge, and its bad arguments."""

import math
import os

import pytest
import torch

from selfjudge.kernels.verify import JudgeInputs, Randomness, RelaxedRules, draw_noise, verify, verify_flat

BACKENDS = ["torch"] + (["triton"] if os.environ.get("TRITON_INTERPRET") == "1" else [])


def plain_fly(draft, logits, q, u, T, window, theta, top_k):
    """Independent statement: the walk position by position, in float64 Python loops.
    Returns (num_accepted per row, list of FLy-accepted positions per row)."""
    B, K = draft.shape
    out_n, out_fly = [], []
    for b in range(B):
        x = logits[b].double() * (1.0 if T == 0 else 1.0 / T)
        p = torch.softmax(x, -1)

        def native(i):
            d = int(draft[b, i])
            if T == 0:
                return d == int(x[i].argmax())
            qd = 1.0 if q is None else float(q[b, i, d])
            return qd > 0 and float(p[i, d]) / qd >= float(u[b, i])

        def fly(i):
            d = int(draft[b, i])
            top = sorted(p[i].tolist(), reverse=True)[:top_k]
            h = -sum(v * math.log(v) for v in top if v > 0)
            return (h >= theta and float(p[i, d]) > 0 and i + window < K
                    and all(native(j) for j in range(i + 1, i + window + 1)))

        n, flyed = 0, []
        for i in range(K):
            if native(i):
                n += 1
            elif fly(i):
                n += 1
                flyed.append(i)
            else:
                break
        out_n.append(n)
        out_fly.append(flyed)
    return out_n, out_fly


def case(seed, B=6, K=5, V=23, flat_logits=False):
    g = torch.Generator().manual_seed(seed)
    scale = 0.3 if flat_logits else 3.0  # small scale: high entropy everywhere
    logits = torch.randn(B, K + 1, V, generator=g) * scale
    draft = torch.randint(0, V, (B, K), generator=g)
    am = logits[:, :K].argmax(-1)
    keep = torch.rand(B, K, generator=g) < 0.6
    draft = torch.where(keep, am, draft)  # mostly aligned, some rejections
    return logits, draft


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("window, theta", [(1, 0.0), (2, 0.3), (1, 1.2)])
def test_greedy_equals_plain_formula(backend, seed, window, theta):
    logits, draft = case(seed, flat_logits=seed % 2 == 1)
    out = verify(draft, None, logits, backend=backend,
                 rules=RelaxedRules(fly_window=window, fly_entropy_threshold=theta))
    n, flyed = plain_fly(draft, logits, None, None, 0, window, theta, 3)
    assert out.num_accepted.tolist() == n
    for b, positions in enumerate(flyed):
        for i in positions:
            assert out.judge_accepted[b, i] and not out.align_accepted[b, i]
    off = verify(draft, None, logits, backend=backend)
    assert (out.num_accepted >= off.num_accepted).all()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("with_q", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_sampling_equals_plain_formula_with_the_ops_uniforms(backend, with_q, seed):
    logits, draft = case(seed + 10, flat_logits=True)
    B, K, V = draft.shape[0], draft.shape[1], logits.shape[-1]
    g = torch.Generator().manual_seed(seed)
    q = torch.softmax(torch.randn(B, K, V, generator=g), -1) if with_q else None
    u, e = draw_noise(B, K, V, "cpu", seed=seed)
    out = verify(draft, None, logits, q, temperature=0.7, backend=backend, randomness=Randomness(noise=(u, e)),
                 rules=RelaxedRules(fly_window=1, fly_entropy_threshold=0.5, fly_entropy_top_k=2))
    n, _ = plain_fly(draft, logits, q, u, 0.7, 1, 0.5, 2)
    assert out.num_accepted.tolist() == n
    ref = verify(draft, None, logits, q, temperature=0.7, backend="torch", randomness=Randomness(noise=(u, e)),
                 rules=RelaxedRules(fly_window=1, fly_entropy_threshold=0.5, fly_entropy_top_k=2))
    assert torch.equal(out.output_token_ids, ref.output_token_ids)


def test_negative_control_fly_changes_acceptance():
    """The rule fires on these cases (else the tests above could pass with FLy ignored)."""
    fired = 0
    for seed in range(4):
        logits, draft = case(seed, flat_logits=True)
        on = verify(draft, None, logits, rules=RelaxedRules(fly_window=1, fly_entropy_threshold=0.0))
        off = verify(draft, None, logits)
        fired += int((on.num_accepted > off.num_accepted).sum())
    assert fired > 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_or_with_judge_and_placeholders(backend):
    logits, draft = case(5)
    B, K = draft.shape
    draft[0, 0] = -1  # a placeholder is never deferred-accepted either
    H = 4
    hidden = torch.randn(B, K, H)
    kw = dict(backend=backend, judge=JudgeInputs(hidden_states=hidden, weight=torch.ones(H), threshold=1.0),
              rules=RelaxedRules(fly_window=1, fly_entropy_threshold=0.0))
    both = verify(draft, None, logits, **kw)
    assert both.num_accepted[0] == 0
    judge_only = verify(draft, None, logits, backend=backend,
                        judge=JudgeInputs(hidden_states=hidden, weight=torch.ones(H), threshold=1.0))
    assert (both.num_accepted >= judge_only.num_accepted).all()
    ref = verify(draft, None, logits, **{**kw, "backend": "torch"})
    assert torch.equal(both.output_token_ids, ref.output_token_ids)
    assert torch.equal(both.judge_accepted, ref.judge_accepted)


@pytest.mark.parametrize("backend", BACKENDS)
def test_flat_equals_padded(backend):
    logits, draft = case(7, B=3, K=4)
    n = torch.tensor([4, 2, 3])
    rows, lrows = [], []
    for b in range(3):
        rows.append(draft[b, : n[b]])
        lrows.append(logits[b, : n[b] + 1])
    flat = verify_flat(torch.cat(rows), n.cumsum(0), torch.cat(lrows), max_spec_len=4, backend=backend,
                       rules=RelaxedRules(fly_window=1, fly_entropy_threshold=0.0))
    padded = verify(draft, n, logits, backend=backend, rules=RelaxedRules(fly_window=1, fly_entropy_threshold=0.0))
    assert torch.equal(flat.output_token_ids, padded.output_token_ids)


@pytest.mark.parametrize("kw, name", [
    (dict(rules=RelaxedRules(fly_window=4)), "fly_window"),  # >= K
    (dict(rules=RelaxedRules(fly_window=-1)), "fly_window"),
    (dict(rules=RelaxedRules(fly_window=1, fly_entropy_threshold=float("nan"))), "fly_entropy_threshold"),
    (dict(rules=RelaxedRules(fly_window=1, fly_entropy_threshold=-0.1)), "fly_entropy_threshold"),
    (dict(rules=RelaxedRules(fly_window=1, fly_entropy_top_k=0)), "fly_entropy_top_k"),
])
def test_bad_arguments(kw, name):
    with pytest.raises(ValueError, match=name):
        verify(torch.zeros(1, 4, dtype=torch.long), None, torch.randn(1, 5, 7), **kw)
