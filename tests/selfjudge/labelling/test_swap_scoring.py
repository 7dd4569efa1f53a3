"""One-pass block-masked swap scoring equals naive re-encoding on tiny random Llamas."""

import pytest
import torch

from selfjudge.labelling.naive import naive_score_swaps
from selfjudge.labelling.swap_scoring import plan_chunks, score_swaps


@pytest.fixture(scope="module")
def tiny_llama(tiny):
    def make(attn="sdpa", seed=0, tie=False):
        # peaky distributions (initializer_range 0.2) so scores are far from 0
        return tiny.llama(seed, vocab_size=97, max_position_embeddings=256, tie_word_embeddings=tie,
                          attn_implementation=attn, initializer_range=0.2)

    return make


def case(Lx=7, Ly=24, seed=1, V=97):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, V, (Lx,), generator=g)
    y = torch.randint(0, V, (Ly,), generator=g)
    pos = torch.tensor([0, 1, 5, 9, 13, Ly - 6, Ly - 2, Ly - 1])  # first, last, windows cut by the end
    pos = torch.unique(pos[pos < Ly])
    z = (y[pos] + 1 + torch.randint(0, V - 1, (pos.shape[0],), generator=g)) % V  # z != y
    return x, y, pos, z


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("window", [0, 1, 5, 20])
def test_one_pass_equals_naive(attn, window, tiny_llama):
    model = tiny_llama(attn, tie=(attn == "eager"))
    x, y, pos, z = case()
    perm = torch.tensor([3, 0, 7, 1, 5, 2, 6, 4])  # unsorted input order must be preserved
    assert pos.shape[0] == 8
    one = score_swaps(model, x, y, pos[perm], z[perm], window, backend="torch")
    ref = naive_score_swaps(model, x, y, pos[perm], z[perm], window)
    torch.testing.assert_close(one.scores, ref.scores, atol=1e-4, rtol=0)
    torch.testing.assert_close(one.prefix_terms, ref.prefix_terms, atol=1e-4, rtol=0)
    torch.testing.assert_close(one.features, ref.features, atol=1e-4, rtol=0)
    torch.testing.assert_close(one.confidence_scores, ref.confidence_scores, atol=1e-4, rtol=0)
    for name in ("phi", "orig_features", "orig_phi"):  # the judge's extra inputs, from an independent path
        torch.testing.assert_close(getattr(one, name), getattr(ref, name), atol=1e-4, rtol=0)
    assert (one.phi[:, 1] > 0.1).all() and (one.orig_phi[:, 1] >= 0).all()  # z is not y: a real margin
    assert ref.scores.abs().max() > 0.5  # the comparison is not between zeros
    assert ref.confidence_scores.abs().max() > 0.05 and not torch.allclose(one.confidence_scores, one.scores)
    if window == 0:
        torch.testing.assert_close(one.scores, one.prefix_terms)


def test_chunking_matches_single_forward_and_triton_backend(tiny_llama):
    model = tiny_llama(seed=3)
    x, y, pos, z = case(seed=4)
    full = score_swaps(model, x, y, pos, z, 5, max_tokens=10_000, backend="torch")
    assert len(plan_chunks(pos.tolist(), 7, 24, 5, 40)) >= 3
    chunked = score_swaps(model, x, y, pos, z, 5, max_tokens=40, backend="torch")
    torch.testing.assert_close(chunked.scores, full.scores, atol=1e-5, rtol=0)
    torch.testing.assert_close(chunked.features, full.features, atol=1e-5, rtol=0)
    tri = score_swaps(model, x, y, pos, z, 5, backend="triton")
    torch.testing.assert_close(tri.scores, full.scores, atol=1e-4, rtol=0)


def test_hand_computed_score_for_one_swap(tiny_llama):
    # independent check of the formula itself on one swap, from full logits
    model = tiny_llama(seed=5)
    x, y, _, _ = case(Lx=4, Ly=10, seed=6)
    i, zi, N = 3, int((y[3] + 7) % 97), 4
    one = score_swaps(model, x, y, torch.tensor([i]), torch.tensor([zi]), N, backend="torch")
    with torch.no_grad():
        lo = torch.log_softmax(model(torch.cat([x, y])[None]).logits[0].double(), -1)
        sw = torch.cat([x, y[:i], torch.tensor([zi]), y[i + 1 :]])
        ls = torch.log_softmax(model(sw[None]).logits[0].double(), -1)
    Lx = 4
    s = ls[Lx + i - 1, zi] - lo[Lx + i - 1, y[i]]
    for t in range(i + 1, i + N + 1):
        s += ls[Lx + t - 1, y[t]] - lo[Lx + t - 1, y[t]]
    assert abs(float(one.scores[0]) - float(s)) < 1e-4


def test_last_hidden_state_is_post_norm_and_equals_hidden_states_last(tiny_llama):
    model = tiny_llama(seed=7)
    ids = torch.randint(0, 97, (1, 9))
    with torch.no_grad():
        out = model(ids, output_hidden_states=True)
        base = model.model(ids).last_hidden_state
    torch.testing.assert_close(out.hidden_states[-1], base)
    torch.testing.assert_close(out.logits, model.lm_head(base))


def test_empty_and_bad_inputs(tiny_llama):
    model = tiny_llama(seed=8)
    x, y, pos, z = case()
    e = score_swaps(model, x, y, pos[:0], z[:0], 5)
    assert e.scores.shape == (0,) and e.features.shape == (0, 32)
    with pytest.raises(ValueError, match="positions"):
        score_swaps(model, x, y, torch.tensor([24]), torch.tensor([1]), 5)
    with pytest.raises(ValueError, match="positions"):
        score_swaps(model, x, y, torch.tensor([2, 2]), torch.tensor([1, 3]), 5)
    with pytest.raises(ValueError, match="window"):
        score_swaps(model, x, y, pos, z, -1)
    with pytest.raises(ValueError, match="prompt_ids"):
        score_swaps(model, x[:0], y, pos, z, 5)


@pytest.mark.default_pair
def test_one_pass_equals_naive_on_default_pair():
    from selfjudge.models import load_pair

    target, _, tok = load_pair("smollm2-135m")
    target.eval()
    msgs = [[{"role": "user", "content": "What is 2+3?"}]]
    g = torch.Generator().manual_seed(0)
    for m in msgs:
        x = torch.tensor(tok(tok.apply_chat_template(m, tokenize=False, add_generation_prompt=True),
                             add_special_tokens=False)["input_ids"])
        y = torch.randint(0, target.config.vocab_size, (14,), generator=g)  # any response works for the identity
        pos = torch.tensor([0, 9, 13])  # first; window cut by the end; last (N_j = 0)
        z = (y[pos] + 17) % target.config.vocab_size
        for window in (5,):
            one = score_swaps(target, x, y, pos, z, window)
            ref = naive_score_swaps(target, x, y, pos, z, window)
            torch.testing.assert_close(one.scores, ref.scores, atol=1e-4, rtol=0)
            torch.testing.assert_close(one.features, ref.features, atol=1e-4, rtol=1e-4)
