"""verify: Triton kernel == PyTorch twin on identical noise, twin == a plain-formula
reference, judge masks, degenerate rows, the flattened (vLLM) layout, replayable seeds.

The kernel runs under TRITON_INTERPRET=1 (set in tests/conftest.py) on small,
awkward shapes: V in {7, 100, 8193} (8193 = one real lane in the last tile),
K in {1, 4, 7}, B in {1, 3}, rows with 0 drafts and mixed draft counts.
"""

import pytest
import torch

from verify_cases import assert_same_output, random_case, to_flat

from selfjudge.kernels.verify import JudgeInputs, Randomness, RelaxedRules, draw_noise, verify, verify_flat


def run_both(case, noise, **kw):
    args = (case["drafts"], case["n"], case["logits"], case["q"])
    a = verify(*args, backend="torch", randomness=Randomness(noise=noise), **kw)
    b = verify(*args, backend="triton", randomness=Randomness(noise=noise), **kw)
    return a, b


SHAPES = [(1, 1, 7), (3, 4, 7), (3, 7, 100), (1, 4, 100), (3, 1, 8193)]


@pytest.mark.parametrize("B,K,V", SHAPES)
@pytest.mark.parametrize("with_q", [True, False])
def test_kernel_equals_twin_sampling(B, K, V, with_q):
    for seed in range(2 if V < 1000 else 1):
        case = random_case(B, K, V, seed=seed, with_q=with_q)
        noise = draw_noise(B, K, V, "cpu", seed=seed)
        a, b = run_both(case, noise, temperature=0.8)
        assert_same_output(a, b)


@pytest.mark.parametrize("B,K,V", [(3, 4, 100), (3, 7, 7), (1, 1, 8193)])
def test_kernel_equals_twin_greedy(B, K, V):
    case = random_case(B, K, V, seed=5)
    a, b = run_both(case, None, temperature=0.0)
    assert_same_output(a, b)


def test_kernel_equals_twin_mixed_temperature_judge_relaxed_bf16():
    B, K, V = 3, 4, 100
    case = random_case(B, K, V, seed=7, dtype=torch.bfloat16, hidden=24)
    g = torch.Generator().manual_seed(1)
    relaxed = torch.rand(B, K, generator=g) < 0.3
    noise = draw_noise(B, K, V, "cpu", seed=3)
    kw = dict(temperature=torch.tensor([0.0, 1.3, 0.5]),
              judge=JudgeInputs(hidden_states=case["h"], weight=case["w"], bias=torch.tensor([0.1, -0.2, 0.0]), threshold=0.2),
              rules=RelaxedRules(accept=relaxed))
    a, b = run_both(case, noise, **kw)
    assert_same_output(a, b)
    assert a.judge_logits is not None


def test_kernel_equals_twin_with_blocked_positions():
    """judge_blocked overrides the judge and relaxed_accept identically in kernel and twin."""
    B, K, V = 3, 4, 100
    case = random_case(B, K, V, seed=9, hidden=24)
    g = torch.Generator().manual_seed(4)
    relaxed = torch.rand(B, K, generator=g) < 0.4
    blocked = torch.rand(B, K, generator=g) < 0.4
    noise = draw_noise(B, K, V, "cpu", seed=4)
    for temp in (0.0, torch.tensor([0.0, 1.1, 0.7])):
        kw = dict(temperature=temp, judge=JudgeInputs(hidden_states=case["h"], weight=case["w"], threshold=-0.5),
                  rules=RelaxedRules(accept=relaxed, blocked=blocked))
        a, b = run_both(case, noise, **kw)
        assert_same_output(a, b)
        assert not (a.judge_accepted & blocked).any()


def test_kernel_small_tiles_many_tiles():
    """V=100 split into 7 tiles of 16 (last one 4 real lanes): online LSE across tiles."""
    from selfjudge.kernels.verify.launch import verify_triton
    from selfjudge.kernels.verify.prepare import PaddedInputs, VerifyOptions

    B, K, V = 3, 4, 100
    case = random_case(B, K, V, seed=11)
    noise = draw_noise(B, K, V, "cpu", seed=11)
    a = verify(case["drafts"], case["n"], case["logits"], case["q"], temperature=1.0, backend="torch",
               randomness=Randomness(noise=noise))
    options = VerifyOptions(torch.ones(B), torch.zeros(B, dtype=torch.bool), all_greedy=False, uniforms=noise[0],
                            exponentials=noise[1])
    out = verify_triton(PaddedInputs(case["drafts"], case["n"], case["logits"], options, draft_probs=case["q"]),
                        block_v=16)
    assert torch.equal(out[0], a.output_token_ids)
    assert torch.equal(out[1], a.num_accepted)


# ---------------------------------------------------------------- plain formula


def reference_verify(drafts, n, logits, q, temperature, u, E, judge_logit=None, threshold=0.0):
    """Textbook speculative sampling, one request and one position at a time, float64."""
    B, K = drafts.shape
    V = logits.shape[-1]
    out = [[-1] * (K + 1) for _ in range(B)]
    acc = []
    for b in range(B):
        T = float(temperature[b])
        k = 0
        emitted = None
        for i in range(int(n[b])):
            x = logits[b, i].double()
            d = int(drafts[b, i])
            judge_ok = judge_logit is not None and float(judge_logit[b, i]) > threshold
            if T == 0:
                ok = d == int(torch.argmax(x))
                recovered = int(torch.argmax(x))
            else:
                p = torch.exp(x / T) / torch.exp(x / T).sum()
                qv = q[b, i].double() if q is not None else torch.nn.functional.one_hot(torch.tensor(d), V).double()
                ok = bool(qv[d] > 0) and float(u[b, i]) <= float(p[d] / qv[d])
                res = torch.clamp(p - qv, min=0)
                dist = res if res.sum() > 0 else p
                recovered = int(torch.argmax(dist / E[b].double()))  # exponential race
            if ok or judge_ok:
                out[b][k] = d
                k += 1
            else:
                emitted = recovered
                break
        if emitted is None:  # bonus
            x = logits[b, int(n[b])].double()
            if T == 0:
                emitted = int(torch.argmax(x))
            else:
                p = torch.exp(x / T) / torch.exp(x / T).sum()
                emitted = int(torch.argmax(p / E[b].double()))
        out[b][k] = emitted
        acc.append(k)
    return torch.tensor(out), torch.tensor(acc)


@pytest.mark.parametrize("B,K,V,temp", [(3, 4, 7, 1.0), (3, 7, 100, 0.7), (3, 4, 100, 0.0), (1, 1, 8193, 1.0)])
@pytest.mark.parametrize("with_q", [True, False])
def test_twin_matches_plain_formula(B, K, V, temp, with_q):
    for seed in range(3):
        case = random_case(B, K, V, seed=100 + seed, with_q=with_q, hidden=8)
        u, E = draw_noise(B, K, V, "cpu", seed=seed)
        jl = case["h"] @ case["w"] + 0.1
        out = verify(case["drafts"], case["n"], case["logits"], case["q"], temperature=temp, backend="torch",
                     randomness=Randomness(noise=(u, E)),
                     judge=JudgeInputs(hidden_states=case["h"], weight=case["w"], bias=0.1, threshold=0.5))
        ref_ids, ref_acc = reference_verify(case["drafts"], case["n"], case["logits"], case["q"],
                                            torch.full((B,), temp), u, E, jl, 0.5)
        assert torch.equal(out.output_token_ids, ref_ids), (out.output_token_ids, ref_ids)
        assert torch.equal(out.num_accepted, ref_acc)


def test_bonus_and_recovered_follow_residual_not_draft():
    """Rejected position: the recovered token is never the rejected draft when q is one-hot."""
    B, K, V = 64, 1, 7
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(1, 2, V, generator=g).expand(B, 2, V).contiguous()
    drafts = torch.full((B, 1), 3)
    out = verify(drafts, None, logits, temperature=1.0, backend="torch", randomness=Randomness(seed=0))
    rejected = out.num_accepted == 0
    assert rejected.any() and (~rejected).any()
    assert (out.output_token_ids[rejected, 0] != 3).all()


# ---------------------------------------------------------------- judge masks


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_judge_forced_on_accepts_everything(backend):
    B, K, V, H = 3, 4, 100, 16
    case = random_case(B, K, V, seed=2, hidden=H)
    drafts = (case["logits"][:, :K].argmax(-1) + 1) % V  # never the argmax: greedy rejects all
    n = torch.tensor([4, 2, 0])
    out = verify(drafts, n, case["logits"], temperature=0.0, backend=backend,
                 judge=JudgeInputs(hidden_states=case["h"], weight=case["w"], bias=1e4, threshold=0.0))
    valid = torch.arange(K)[None] < n[:, None]
    assert torch.equal(out.num_accepted, n)
    assert torch.equal(out.judge_accepted, valid)
    assert not out.align_accepted.any()
    bonus = case["logits"][torch.arange(B), n].argmax(-1)
    for b in range(B):
        assert out.output_token_ids[b, : n[b]].tolist() == drafts[b, : n[b]].tolist()
        assert out.output_token_ids[b, n[b]].item() == bonus[b].item()
    assert torch.isnan(out.judge_logits[~valid]).all() and torch.isfinite(out.judge_logits[valid]).all()


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_judge_forced_off_equals_no_judge(backend):
    B, K, V, H = 3, 7, 100, 16
    case = random_case(B, K, V, seed=4, hidden=H)
    noise = draw_noise(B, K, V, "cpu", seed=4)
    args = (case["drafts"], case["n"], case["logits"], case["q"])
    plain = verify(*args, temperature=1.0, backend=backend, randomness=Randomness(noise=noise))
    off = verify(*args, temperature=1.0, backend=backend, randomness=Randomness(noise=noise),
                 judge=JudgeInputs(hidden_states=case["h"], weight=case["w"], bias=-1e4, threshold=0.0))
    assert torch.equal(plain.output_token_ids, off.output_token_ids)
    assert torch.equal(plain.align_accepted, off.align_accepted)
    assert not off.judge_accepted.any()
    assert plain.judge_logits is None and off.judge_logits is not None


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_judge_threshold_per_position_and_relaxed(backend):
    """Judge accepts exactly where logit > threshold; relaxed_accept OR-ed in."""
    B, K, V, H = 1, 4, 7, 4
    logits = torch.zeros(B, K + 1, V)
    logits[..., 0] = 5.0  # argmax 0 everywhere
    drafts = torch.tensor([[1, 2, 3, 4]])  # greedy rejects every position
    h = torch.eye(4)[None]  # h_i = e_i
    w = torch.tensor([1.0, 1.0, -1.0, 1.0])  # logits 1, 1, -1, 1 -> position 2 fails
    out = verify(drafts, None, logits, backend=backend, judge=JudgeInputs(hidden_states=h, weight=w, threshold=0.5))
    assert out.output_token_ids.tolist() == [[1, 2, 0, -1, -1]]
    assert out.judge_accepted.tolist() == [[True, True, False, False]]
    relaxed = torch.tensor([[False, False, True, False]])
    out = verify(drafts, None, logits, backend=backend,
                 judge=JudgeInputs(hidden_states=h, weight=w, threshold=0.5), rules=RelaxedRules(accept=relaxed))
    assert out.output_token_ids.tolist() == [[1, 2, 3, 4, 0]]
    assert out.judge_accepted.tolist() == [[True, True, True, True]]
    out = verify(drafts, None, logits, backend=backend, rules=RelaxedRules(accept=relaxed))  # relaxations without a judge
    assert out.output_token_ids.tolist() == [[0, -1, -1, -1, -1]]
    assert out.judge_logits is None
    # a blocked position needs the lossless rule: the judge (position 1) and relaxed_accept (position 2) are
    # overridden there; position 0 stays judge-accepted
    blocked = torch.tensor([[False, True, True, False]])
    out = verify(drafts, None, logits, backend=backend,
                 judge=JudgeInputs(hidden_states=h, weight=w, threshold=0.5),
                 rules=RelaxedRules(accept=relaxed, blocked=blocked))
    assert out.output_token_ids.tolist() == [[1, 0, -1, -1, -1]]
    assert out.judge_accepted.tolist() == [[True, False, False, False]]
    # blocking a position the lossless rule accepts changes nothing
    aligned = torch.tensor([[0, 2, 3, 4]])
    out = verify(aligned, None, logits, backend=backend,
                 judge=JudgeInputs(hidden_states=h, weight=w, threshold=0.5),
                 rules=RelaxedRules(blocked=torch.tensor([[True, False, False, False]])))
    assert out.output_token_ids.tolist() == [[0, 2, 0, -1, -1]]
    assert out.align_accepted.tolist() == [[True, False, False, False]]


# ---------------------------------------------------------------- degenerate rows


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("temp", [0.0, 1.0])
@pytest.mark.parametrize("V", [100, 8193])
def test_nan_inf_and_zero_mass_tail_never_emit_out_of_range(backend, temp, V):
    B, K = 3, 4
    g = torch.Generator().manual_seed(9)
    logits = torch.randn(B, K + 1, V, generator=g)
    logits[0] = float("nan")  # all-NaN request
    logits[1] = float("-inf")  # all -inf request
    logits[2, :, -1] = float("-inf")  # zero-mass tail (the only real lane of the last tile at V=8193)
    logits[2, 1, :] = float("-inf")
    logits[2, 1, :5] = torch.tensor([0.0, float("nan"), 1.0, float("inf"), 2.0])
    q = torch.zeros(B, K, V)
    q[..., -1] = 1.0  # the draft puts all its mass on the last id
    drafts = torch.full((B, K), V - 1)
    drafts[2, 0] = V + 5  # out-of-range draft ids are clamped
    drafts[1, 1] = -3
    for draft_probs in (q, None):
        noise = draw_noise(B, K, V, "cpu", seed=1)
        out = verify(drafts, None, logits, draft_probs, temperature=temp, backend=backend,
                     randomness=Randomness(noise=noise))
        ids = out.output_token_ids
        emitted = ids[ids >= 0]
        assert emitted.numel() == (out.num_accepted + 1).sum().item()
        assert (emitted < V).all(), ids
        twin = verify(drafts, None, logits, draft_probs, temperature=temp, backend="torch",
                      randomness=Randomness(noise=noise))
        assert torch.equal(twin.output_token_ids, ids)


def test_all_inf_row_emits_id_zero_and_rejects():
    V = 50
    logits = torch.full((2, 3, V), float("-inf"))
    out = verify(torch.tensor([[4, 5], [6, 7]]), None, logits, temperature=1.0, backend="torch",
                 randomness=Randomness(seed=0))
    assert out.output_token_ids.tolist() == [[0, -1, -1], [0, -1, -1]]


def test_q_zero_never_accepts_and_no_nan():
    B, K, V = 4, 2, 7
    logits = torch.zeros(B, K + 1, V)
    q = torch.full((B, K, V), 1.0 / (V - 1))
    q[..., 2] = 0.0
    drafts = torch.full((B, K), 2)
    out = verify(drafts, None, logits, q, temperature=1.0, backend="torch", randomness=Randomness(seed=0))
    assert (out.num_accepted == 0).all()
    assert not out.align_accepted.any()


# ---------------------------------------------------------------- flat layout


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("temp", [0.0, 1.0])
def test_verify_flat_equals_padded(backend, temp):
    B, K, V = 3, 4, 100
    case = random_case(B, K, V, seed=21, hidden=8)
    case["n"] = torch.tensor([4, 0, 2])
    d, cu, lg, qf, hf = to_flat(case)
    assert lg.shape[0] == d.shape[0] + B
    noise = draw_noise(B, K, V, "cpu", seed=2)
    kw = dict(temperature=temp, backend=backend, randomness=Randomness(noise=noise))
    judge_pad = JudgeInputs(case["h"], case["w"], threshold=0.3)
    judge_flat = JudgeInputs(hf, case["w"], threshold=0.3)
    padded = verify(case["drafts"], case["n"], case["logits"], case["q"], judge=judge_pad, **kw)
    flat = verify_flat(d, cu, lg, qf, max_spec_len=K, judge=judge_flat, **kw)
    # per-position masks in the flat layout: rows 0..3 of request 0, none of request 1, 4..5 of request 2
    blocked_flat = torch.tensor([True, False, False, True, False, True])
    relaxed_flat = torch.tensor([False, True, True, True, False, False])
    blocked_pad = torch.tensor([[True, False, False, True], [False] * 4, [False, True, False, False]])
    relaxed_pad = torch.tensor([[False, True, True, True], [False] * 4, [False, False, False, False]])
    pm = verify(case["drafts"], case["n"], case["logits"], case["q"], judge=judge_pad,
                rules=RelaxedRules(accept=relaxed_pad, blocked=blocked_pad), **kw)
    fm = verify_flat(d, cu, lg, qf, max_spec_len=K, judge=judge_flat,
                     rules=RelaxedRules(accept=relaxed_flat, blocked=blocked_flat), **kw)
    assert torch.equal(fm.output_token_ids, pm.output_token_ids)
    assert torch.equal(fm.judge_accepted, pm.judge_accepted)
    assert torch.equal(flat.output_token_ids, padded.output_token_ids)
    assert torch.equal(flat.num_accepted, padded.num_accepted)
    assert torch.equal(flat.align_accepted, padded.align_accepted)
    assert torch.equal(flat.judge_accepted, padded.judge_accepted)
    torch.testing.assert_close(flat.judge_logits, padded.judge_logits, equal_nan=True)
    # max_spec_len inferred (one host sync) gives the same
    flat2 = verify_flat(d, cu, lg, qf, judge=judge_flat, **kw)
    assert torch.equal(flat2.output_token_ids, padded.output_token_ids)


def test_verify_flat_all_zero_drafts():
    B, V = 2, 7
    lg = torch.randn(B, V)
    out = verify_flat(torch.zeros(0, dtype=torch.long), torch.zeros(B, dtype=torch.long), lg, max_spec_len=0,
                      backend="torch")
    assert out.output_token_ids.tolist() == lg.argmax(-1)[:, None].tolist()
    out = verify_flat(torch.zeros(0, dtype=torch.long), torch.zeros(B, dtype=torch.long), lg, max_spec_len=2,
                      backend="triton")
    assert out.output_token_ids[:, 0].tolist() == lg.argmax(-1).tolist()
    assert (out.output_token_ids[:, 1:] == -1).all()


# ---------------------------------------------------------------- randomness


def test_seed_and_offset_replay():
    B, K, V = 3, 4, 100
    case = random_case(B, K, V, seed=0)
    args = (case["drafts"], case["n"], case["logits"], case["q"])
    outs = [verify(*args, temperature=1.0, backend="torch", randomness=Randomness(seed=42, offset=o)).output_token_ids for o in (0, 0, 1)]
    assert torch.equal(outs[0], outs[1])
    u0, e0 = draw_noise(B, K, V, "cpu", seed=42, offset=0)
    u1, e1 = draw_noise(B, K, V, "cpu", seed=42, offset=1)
    assert not torch.equal(e0, e1) and not torch.equal(u0, u1)
    assert (u0 > 0).all() and (u0 <= 1).all() and u0.dtype == torch.float64 and (e0 > 0).all()
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    a = verify(*args, temperature=1.0, backend="torch", randomness=Randomness(generator=g1)).output_token_ids
    b = verify(*args, temperature=1.0, backend="torch", randomness=Randomness(generator=g2)).output_token_ids
    assert torch.equal(a, b)


def test_auto_backend_is_torch_on_cpu(monkeypatch):
    import selfjudge.kernels.verify.launch as vt

    def boom(*a, **k):
        raise AssertionError("triton must not be used for CPU tensors under backend='auto'")

    monkeypatch.setattr(vt, "verify_triton", boom)
    case = random_case(1, 1, 7)
    verify(case["drafts"], case["n"], case["logits"], backend="auto")


def test_kernel_compiles_for_h200_without_a_gpu():
    """Compile the fused kernel and the four split kernels ahead of time for sm_90 (Triton's
    bundled ptxas), in a process without the interpreter: catches code that the interpreter
    accepts but the compiler rejects."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    code = (
        "from selfjudge.kernels.verify.launch import aot_compile\n"
        "for flags in [(True, True, True, True), (False, False, False, False), (False, False, True, True)]:\n"
        "    k = aot_compile(90, HAS_Q=flags[0], HAS_JUDGE=flags[1], HAS_RELAXED=flags[2], SAMPLING=flags[3],\n"
        "                    HAS_PHI=flags[1])\n"
        "    assert 'ld.global' in k.asm['ptx'] and len(k.asm['cubin']) > 0\n"
        "from selfjudge.kernels.verify import split as sk\n"
        "for kernel in (sk._chunk_stats_kernel, sk._split_walk_kernel, sk._race_chunk_kernel, sk._race_reduce_kernel):\n"
        "    for on in (True, False):\n"
        "        k = aot_compile(90, kernel=kernel, HAS_Q=on, HAS_JUDGE=on, HAS_RELAXED=on, SAMPLING=on, HAS_PHI=on,\n"
        "                        BLOCK_V=2048)\n"
        "        assert 'ld.global' in k.asm['ptx'] and len(k.asm['cubin']) > 0, kernel\n"
        "import triton\n"
        "from triton.backends.compiler import GPUTarget\n"
        "from triton.compiler import ASTSource\n"
        "from selfjudge.kernels.scorer.kernel import _scorer_partial_kernel\n"
        "sig = {'inputs': ('*bf16', '*bf16', '*i64'), 'outs': ('*fp32',) * 3, 'sizes': ('i32',) * 4,\n"
        "       'strides': ('i64',) * 4, 'TILES': 'constexpr', 'MATH': 'constexpr'}\n"
        "k = triton.compile(ASTSource(_scorer_partial_kernel, sig, {'TILES': (4, 64, 128, 64), 'MATH': ('tf32', False)}),\n"
        "                   target=GPUTarget('cuda', 90, 32), options={'num_warps': 8})\n"
        "assert 'ld.global' in k.asm['ptx'], 'scorer'\n"
        "print('compiled')\n"
    )
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and "compiled" in res.stdout, res.stderr[-3000:]


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("temp", [0.0, 1.0])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_invalid_position_rejects_and_emits_zero(backend, temp, bad):
    """A position whose logits hold NaN or +inf is invalid: nothing aligns there, it emits id 0."""
    V = 100
    logits = torch.zeros(2, 3, V)
    logits[:, :, 7] = 10.0  # argmax 7 everywhere
    logits[0, 0, 50] = bad  # request 0: position 0 invalid
    logits[1, 2, 3] = bad  # request 1: the bonus position invalid
    drafts = torch.full((2, 2), 7)
    noise = draw_noise(2, 2, V, "cpu", seed=0)
    out = verify(drafts, None, logits, temperature=temp, backend=backend, randomness=Randomness(noise=noise))
    assert out.output_token_ids[0].tolist() == [0, -1, -1]
    assert not out.align_accepted[0].any()
    assert out.output_token_ids[1, :2].tolist() == [7, 7]
    assert out.output_token_ids[1, 2].item() == 0
    # the judge may still accept an invalid position
    h = torch.ones(2, 2, 1)
    out = verify(drafts, None, logits, temperature=temp, backend=backend, randomness=Randomness(noise=noise),
                 judge=JudgeInputs(hidden_states=h, weight=torch.ones(1), threshold=0.0))
    assert out.output_token_ids[0, :2].tolist() == [7, 7]


@pytest.mark.parametrize("temp", [0.0, 1.0])
def test_strided_logits_slice_matches_contiguous(temp):
    """target_logits may be a [:, -(K+1):] slice of the model output (no copy in the kernel)."""
    B, K, V, L = 3, 4, 100, 9
    g = torch.Generator().manual_seed(0)
    full = torch.randn(B, L, V, generator=g)
    sliced = full[:, -(K + 1):]
    assert not sliced.is_contiguous()
    drafts = sliced[:, :K].argmax(-1)
    drafts[1, 2] = (drafts[1, 2] + 1) % V
    noise = draw_noise(B, K, V, "cpu", seed=0)
    ref = verify(drafts, None, sliced.contiguous(), temperature=temp, backend="torch",
                 randomness=Randomness(noise=noise))
    for backend in ("torch", "triton"):
        out = verify(drafts, None, sliced, temperature=temp, backend=backend, randomness=Randomness(noise=noise))
        assert torch.equal(out.output_token_ids, ref.output_token_ids)


def test_twin_cpu_chunks_match_plain_formula():
    """The CPU twin walks large batches in cache-sized chunks of requests / rows; check a
    shape with several chunks against the plain formula."""
    from selfjudge.kernels.verify.reference import _CHUNK_ELEMS, _ROW_CHUNK_ELEMS

    B, K, V = 6, 4, 30000
    assert _CHUNK_ELEMS // ((K + 1) * V) < B and _ROW_CHUNK_ELEMS // V < B  # really several chunks
    case = random_case(B, K, V, seed=3, hidden=4)
    u, E = draw_noise(B, K, V, "cpu", seed=0)
    out = verify(case["drafts"], case["n"], case["logits"], case["q"], temperature=0.9, backend="torch",
                 randomness=Randomness(noise=(u, E)))
    ref_ids, ref_acc = reference_verify(case["drafts"], case["n"], case["logits"], case["q"],
                                        torch.full((B,), 0.9), u, E)
    assert torch.equal(out.output_token_ids, ref_ids)
    assert torch.equal(out.num_accepted, ref_acc)
