"""The split-vocabulary verify kernels == the fused kernel == the PyTorch twin.

Rows are cut into several chunks of several tiles (V = 100, tiles of 16, chunks of 32: four
chunks, the last with 4 real lanes), with ties placed across chunk borders (the first index
must win, the top-3 is a multiset) and every mode: greedy, sampling with and without draft
probabilities, per-row temperatures, the judge with and without probability features, the
per-position override, placeholders and invalid rows.
"""

import pytest
import torch

from dataclasses import replace

from selfjudge.kernels.verify import draw_noise
from selfjudge.kernels.verify.launch import prepare_launch, verify_triton
from selfjudge.kernels.verify.prepare import PaddedInputs, VerifyOptions
from selfjudge.kernels.verify.reference import native_verify
from selfjudge.kernels.verify.split_plan import split_plan


def make(B, K, V, seed, *, H=8):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, K + 1, V, generator=g) * 2.0
    if V >= 64:  # equal maxima in different chunks (chunks of 32): the first index wins
        logits[0, :, 5] = logits[0, :, 40] = logits[0].max() + 1.0
        logits[-1, :, [3, 33, 65]] = 9.0  # three copies of the max in three chunks (top-3 multiset)
    am = logits[:, :K].argmax(-1)
    drafts = torch.where(torch.rand(B, K, generator=g) < 0.6, am, torch.randint(0, V, (B, K), generator=g))
    n = torch.randint(0, K + 1, (B,), generator=g)
    n[0] = K
    q = torch.softmax(torch.randn(B, K, V, generator=g) + logits[:, :K], -1)
    h = torch.randn(B, K, H, generator=g)
    w = torch.randn(H, generator=g) * 0.3
    override = torch.randint(-1, 2, (B, K), generator=g).to(torch.int8)
    return dict(drafts=drafts, n=n, logits=logits, q=q, h=h, w=w, override=override)


MODES = {
    "greedy": dict(temp=0.0),
    "sample": dict(temp=1.0),
    "sample_q": dict(temp=0.7, q=True),
    "mixed_rows": dict(temp=[0.0, 1.3, 0.5, 0.0, 1.0]),
    "judge": dict(temp=0.0, judge=True),
    "judge_phi_sample": dict(temp=1.0, judge=True, phi=True),
    "override_q": dict(temp=1.0, q=True, override=True),
}


def inputs_for(case, mode, **options) -> PaddedInputs:
    B, K = case["drafts"].shape
    V = case["logits"].shape[-1]
    temp = torch.tensor(mode["temp"], dtype=torch.float32).expand(B) if isinstance(mode["temp"], list) \
        else torch.full((B,), mode["temp"])
    greedy = temp <= 0
    inv_t = torch.where(greedy, 1.0, 1.0 / temp.clamp(min=1e-6))
    all_greedy = bool(greedy.all())
    u, e = (None, None) if all_greedy else draw_noise(B, K, V, "cpu", seed=3)
    judge = mode.get("judge", False)
    opts = VerifyOptions(inv_t, greedy, all_greedy, any_greedy=True, unit_scale=False,
                         judge_weight=case["w"] if judge else None,
                         judge_bias=torch.full((B,), -0.2) if judge else None, judge_threshold=0.1,
                         phi_weight=torch.tensor([0.4, -0.3, 0.8]) if mode.get("phi") else None,
                         uniforms=u, exponentials=e, **options)
    return PaddedInputs(case["drafts"], case["n"], case["logits"], opts,
                        draft_probs=case["q"] if mode.get("q") else None, hidden=case["h"] if judge else None,
                        override=case["override"] if mode.get("override") else None)


def assert_same(a, b, what):
    for i, name in enumerate(("tokens", "accepted", "align", "judge")):
        assert torch.equal(a[i], b[i]), (what, name, a[i], b[i])
    if a[4] is None:
        assert b[4] is None
    else:
        torch.testing.assert_close(a[4], b[4], equal_nan=True, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("B,K,V,chunk", [(5, 4, 100, 32), (5, 3, 100, 16), (5, 2, 7, 16), (5, 1, 1, 16)])
def test_split_equals_fused_and_twin(mode, B, K, V, chunk):
    for seed in range(2):
        case = make(B, K, V, seed=seed * 7 + V)
        inputs = inputs_for(case, MODES[mode])
        twin = native_verify(inputs)
        split = verify_triton(inputs, split=True, block_v=16, chunk=chunk)
        fused = verify_triton(inputs, split=False, block_v=16)
        assert_same(twin, split, ("split", mode, seed))
        assert_same(fused, split, ("fused", mode, seed))


def test_placeholders_and_invalid_rows_split_like_the_twin():
    """A -1 draft stops the walk (the recovery race draws from p); NaN / +inf / all -inf rows emit 0."""
    case = make(5, 4, 100, seed=9)
    case["drafts"][1, 1] = -1
    case["drafts"][2, 0] = 100
    case["logits"][3, 0, 50] = float("nan")
    case["logits"][4, :, :] = float("-inf")
    case["logits"][0, 4, 70] = float("inf")
    for mode in ("greedy", "sample", "sample_q", "judge_phi_sample"):
        inputs = inputs_for(case, MODES[mode])
        twin = native_verify(inputs)
        split = verify_triton(inputs, split=True, block_v=16, chunk=32)
        assert_same(twin, split, mode)
        assert ((split[0] >= -1) & (split[0] < 100)).all()


def test_split_plan_covers_the_vocabulary_in_whole_tiles():
    for V, bv, chunk in [(100, 16, 32), (100, 16, 33), (7, 16, 1), (128256, 2048, 5000), (1, 16, 16)]:
        got_bv, got_chunk, nc = split_plan(20, V, torch.device("cpu"), bv, chunk)
        assert got_bv == bv and got_chunk % bv == 0 and got_chunk >= chunk
        assert (nc - 1) * got_chunk < V <= nc * got_chunk
    assert split_plan(20, 100, torch.device("cpu"))[2] == 1  # the interpreter: one chunk per row
    with pytest.raises(ValueError, match="chunk"):
        split_plan(20, 100, torch.device("cpu"), 16, 0)


def test_fly_needs_the_fused_kernel():
    case = make(2, 3, 20, seed=1)
    inputs = inputs_for(case, MODES["greedy"], fly=(1, 0.3, 3))
    with pytest.raises(ValueError, match="fused"):
        verify_triton(inputs, split=True)
    out = verify_triton(inputs)  # default: the fused kernel
    assert_same(native_verify(inputs), out, "fly")
    assert_same(native_verify(replace(inputs, options=replace(inputs.options, fly=None))),
                verify_triton(replace(inputs, options=replace(inputs.options, fly=None))), "no fly")


@pytest.mark.parametrize("split", [True, False])
def test_a_prepared_launch_reruns_on_its_buffers_and_finishes_like_the_op(split):
    """``prepare_launch`` launches nothing until ``run``; rerunning it (as the GPU timer does)
    rewrites the same outputs, and ``finish`` equals a plain ``verify_triton`` call."""
    case = make(5, 3, 100, seed=3)
    inputs = inputs_for(case, MODES["judge_phi_sample"])
    launch = prepare_launch(inputs, split=split, block_v=16)
    before = launch.finish()[0].clone()
    assert (before == -1).all()  # prepared, not yet launched: the output still holds its placeholder fill
    launch.run()
    first = [t.clone() if t is not None else None for t in launch.finish()]
    launch.run()
    assert_same(first, launch.finish(), ("rerun", split))
    assert_same(verify_triton(inputs, split=split, block_v=16), first, ("op", split))


def test_every_verify_kernel_takes_its_grouped_parameters():
    """Each kernel's ``*_ARGS`` names its parameters in order, no launch passes more than 16 and no group
    holds more than 5, and the launcher builds exactly those groups (a missing member name fails here,
    not on a GPU)."""
    import inspect

    from selfjudge.kernels.kernel_args import kernel_args
    from selfjudge.kernels.verify.launch import _kernel_specs

    from selfjudge.kernels.scorer import kernel as scorer

    specs = {**_kernel_specs(), scorer._scorer_partial_kernel: scorer.SCORER_PARTIAL_ARGS}
    assert len(specs) == 6
    for kernel, spec in specs.items():
        params = list(inspect.signature(kernel.fn).parameters)
        assert params == [name for name, _ in spec], kernel.fn.__name__
        assert len(params) <= 16
        assert all(len(members or ()) <= 5 for _, members in spec), kernel.fn.__name__  # no long positional tuple
    values = {m: i for _, spec in specs.items() for name, members in spec for i, m in enumerate(members or (name,))}
    for spec in specs.values():
        assert len(kernel_args(spec, values)) == len(spec)
    with pytest.raises(KeyError):  # negative control: a value the launcher did not provide
        kernel_args(specs[next(iter(specs))], {})
