"""--device / --dtype: names resolved with clear errors, models and engine state on the chosen
device and dtype. The ``cuda`` tests run wherever torch sees a GPU (bench/gpu_check runs them)."""

from __future__ import annotations

import pytest
import torch

from selfjudge.devices import resolve_device, resolve_dtype

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_names_resolve():
    cpu = torch.device("cpu")
    assert resolve_device("cpu") == cpu
    assert resolve_device("auto") == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_dtype("auto", cpu) == torch.float32 and resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16
    assert resolve_dtype("bf16", cpu) == torch.bfloat16 and resolve_dtype(torch.float16, cpu) == torch.float16


@pytest.mark.parametrize("bad, name", [("tpu", "device"), ("cuda:x", "device"), ("meta", "device")])
def test_bad_device_names(bad, name):
    with pytest.raises(ValueError, match=name):
        resolve_device(bad)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message when no GPU is visible")
def test_cuda_without_a_gpu_is_a_clear_error():
    with pytest.raises(ValueError, match="no CUDA GPU is visible"):
        resolve_device("cuda")


@pytest.mark.parametrize("bad", ["int8", "float64", torch.int32])
def test_bad_dtypes(bad):
    with pytest.raises(ValueError, match="dtype"):
        resolve_dtype(bad, torch.device("cpu"))


def _engine_run(tiny, device, dtype):
    from selfjudge.engine import SpeculativeEngine

    target = tiny.llama(0).to(device=device, dtype=dtype)
    draft = tiny.llama(1, num_hidden_layers=1).to(device=device, dtype=dtype)
    prompts = [[1, 5, 9, 2], [3, 4]]
    out = {}
    for policy in ("autoregressive", "standard"):
        eng = SpeculativeEngine(target, draft if policy == "standard" else None, None, num_draft_tokens=3, policy=policy)
        res = eng.generate(prompts, max_new_tokens=10)
        out[policy] = [r.token_ids for r in res]
        V = target.config.vocab_size
        assert all(0 <= t < V for r in res for t in r.token_ids)
    return out


def test_bfloat16_engine_on_cpu(tiny):
    """bf16 weights and caches run end to end (the GPU path's dtype, on the CPU)."""
    out = _engine_run(tiny, "cpu", torch.bfloat16)
    assert all(len(ids) == 10 for ids in out["standard"])


@pytest.mark.cuda
@needs_cuda
def test_cuda_engine_greedy_equals_target_only_fp32(tiny):
    out = _engine_run(tiny, "cuda", torch.float32)
    assert out["standard"] == out["autoregressive"]


@pytest.mark.cuda
@needs_cuda
def test_cuda_verify_kernel_equals_twin():
    from selfjudge.kernels.verify import Randomness, verify

    g = torch.Generator(device="cuda").manual_seed(0)
    B, K, V = 8, 4, 32000
    logits = torch.randn(B, K + 1, V, device="cuda", generator=g, dtype=torch.bfloat16)
    draft = torch.randint(0, V, (B, K), device="cuda", generator=g)
    draft[:, 0] = logits[:, 0].float().argmax(-1)
    draft[0, 1] = -1
    for temperature in (0.0, 1.0):
        a = verify(draft, None, logits, temperature=temperature, backend="triton", randomness=Randomness(seed=3))
        b = verify(draft, None, logits, temperature=temperature, backend="torch", randomness=Randomness(seed=3))
        assert torch.equal(a.num_accepted, b.num_accepted) and torch.equal(a.output_token_ids, b.output_token_ids)
