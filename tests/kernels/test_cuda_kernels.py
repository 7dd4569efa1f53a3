"""The Triton kernels compiled for a real GPU (not the interpreter) against their PyTorch twins,
at awkward shapes, every dtype and with the judge inputs. Runs wherever torch sees a GPU
(``bench/gpu_check`` runs the ``cuda`` marker with ``TRITON_INTERPRET=0``); the CPU suite skips it.
"""

from __future__ import annotations

import os

import pytest
import torch

from selfjudge.kernels.scorer import token_logprobs
from selfjudge.kernels.scorer.reference import token_logprobs_torch
from selfjudge.kernels.verify import JudgeInputs, Randomness, RelaxedRules, verify

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1",
                       reason="needs a CUDA GPU and compiled Triton (TRITON_INTERPRET unset or 0)"),
]


def _plain_logprobs(h, W, ids):
    """Independent formula: full logits in fp64, log_softmax, gather."""
    return torch.log_softmax(h.double() @ W.double().T, -1).gather(1, ids[:, None].long())[:, 0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("R, H, V", [(1, 64, 1000), (47, 96, 50257), (300, 576, 49152), (129, 4096, 128256)])
def test_scorer_kernel_equals_twin_and_log_softmax(dtype, R, H, V):
    g = torch.Generator(device="cuda").manual_seed(R + V)
    h = torch.randn(R, H, device="cuda", generator=g).to(dtype)
    W = (torch.randn(V, H, device="cuda", generator=g) * H ** -0.5).to(dtype)
    ids = torch.randint(0, V, (R,), device="cuda", generator=g)
    ids[0] = V - 1  # the vocabulary's last row, past the last full tile
    S = 5
    seg = torch.randint(-1, S - 1, (R,), device="cuda", generator=g)
    lp_k, sums_k = token_logprobs(h, W, ids, seg, S, backend="triton")
    lp_t, sums_t = token_logprobs_torch(h, W, ids, seg, S)
    tol = 2e-4 if dtype == torch.float32 else 2e-3
    torch.testing.assert_close(lp_k, lp_t, atol=tol, rtol=1e-4)
    torch.testing.assert_close(lp_k.double(), _plain_logprobs(h, W, ids), atol=tol, rtol=1e-4)
    torch.testing.assert_close(sums_k, sums_t, atol=tol * R, rtol=1e-4)
    assert sums_k[S - 1] == 0  # no row is in the last segment


def _verify_inputs(B, K, V, dtype, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    logits = (torch.randn(B, K + 1, V, device="cuda", generator=g) * 3).to(dtype)
    top = logits[:, :K].float().argmax(-1)
    rand = torch.randint(0, V, (B, K), device="cuda", generator=g)
    drafts = torch.where(torch.rand(B, K, device="cuda", generator=g) < 0.7, top, rand)
    n = torch.randint(0, K + 1, (B,), device="cuda", generator=g)
    q = torch.softmax(logits[:, :K].float() + torch.randn(B, K, V, device="cuda", generator=g), -1)
    return drafts, n, logits, q


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("B, K, V", [(1, 1, 3), (3, 5, 50257), (17, 4, 128256), (64, 8, 32001)])
def test_verify_kernel_equals_twin_every_mode(dtype, B, K, V):
    drafts, n, logits, q = _verify_inputs(B, K, V, dtype, seed=B * K)
    for temperature, probs in ((0.0, None), (1.0, None), (0.7, q.to(dtype))):
        a = verify(drafts, n, logits, probs, temperature=temperature, backend="triton",
                   randomness=Randomness(seed=11))
        b = verify(drafts, n, logits, probs, temperature=temperature, backend="torch",
                   randomness=Randomness(seed=11))
        same = (a.output_token_ids == b.output_token_ids).all(-1)
        # greedy is bit-exact; sampling may flip a comparison that sits within an ulp of exp's rounding
        assert int(same.sum()) >= (B if temperature == 0.0 else int(0.95 * B)), (temperature, same)
        emitted = a.output_token_ids[a.output_token_ids >= 0]
        assert bool(((emitted >= 0) & (emitted < V)).all())
        assert bool((a.num_accepted <= n).all())


def test_verify_kernel_judge_and_relaxed_inputs_equal_twin():
    B, K, V, H = 9, 4, 50257, 64
    drafts, n, logits, _ = _verify_inputs(B, K, V, torch.bfloat16, seed=5)
    g = torch.Generator(device="cuda").manual_seed(6)
    hidden = torch.randn(B, K, H, device="cuda", generator=g, dtype=torch.bfloat16)
    w = torch.randn(H, device="cuda", generator=g)
    relaxed = torch.rand(B, K, device="cuda", generator=g) < 0.2
    blocked = torch.rand(B, K, device="cuda", generator=g) < 0.1
    kw = dict(temperature=0.0,
              judge=JudgeInputs(hidden_states=hidden, weight=w, bias=0.1, threshold=0.5, phi_weight=torch.tensor([0.5, -0.3, 1.0], device="cuda")),
              rules=RelaxedRules(accept=relaxed, blocked=blocked))
    a = verify(drafts, n, logits, backend="triton", **kw)
    b = verify(drafts, n, logits, backend="torch", **kw)
    assert torch.equal(a.num_accepted, b.num_accepted) and torch.equal(a.output_token_ids, b.output_token_ids)
    torch.testing.assert_close(a.judge_logits, b.judge_logits, atol=1e-3, rtol=1e-4, equal_nan=True)
    plain = verify(drafts, n, logits, temperature=0.0, backend="triton")
    assert bool((a.num_accepted >= plain.num_accepted).all())  # a judge only ever keeps more
    assert bool((a.num_accepted > plain.num_accepted).any())  # negative control: the judge acted


@pytest.mark.parametrize("B, K, V", [(2, 4, 128256), (64, 4, 128256), (33, 7, 50257)])
def test_verify_split_kernels_equal_fused_kernel(B, K, V):
    """The default split-vocabulary kernels (the GPU's own chunk plan) against the fused kernel."""
    from selfjudge.kernels.verify import draw_noise
    from selfjudge.kernels.verify.launch import verify_triton
    from selfjudge.kernels.verify.prepare import PaddedInputs, VerifyOptions

    drafts, n, logits, q = _verify_inputs(B, K, V, torch.bfloat16, seed=B + K)
    u, e = draw_noise(B, K, V, "cuda", seed=3)
    for greedy, probs in ((True, None), (False, None), (False, q)):
        options = VerifyOptions(torch.full((B,), 1.0, device="cuda"), torch.full((B,), greedy, device="cuda"),
                                all_greedy=greedy, uniforms=None if greedy else u, exponentials=None if greedy else e)
        inputs = PaddedInputs(drafts, n, logits, options, draft_probs=probs)
        split = verify_triton(inputs)
        fused = verify_triton(inputs, split=False)
        same = (split[0] == fused[0]).all(-1)
        assert int(same.sum()) >= (B if greedy else int(0.95 * B)), (greedy, same)
        assert bool(((split[0] >= -1) & (split[0] < V)).all())
