"""AutoJudge mining on tiny random Llama models, against a plain no-cache re-implementation."""

import json
from types import SimpleNamespace

import pytest
import torch

from selfjudge.labelling.autojudge import mine_prompt, mine_task
from selfjudge.labelling.autojudge_batch import mine_batch
from selfjudge.models.generation import greedy_generate, greedy_responses, new_cache
from selfjudge.labelling.shards import read_labels, read_progress

EOS = 3


@pytest.fixture(scope="module")
def pair(tiny):
    config = dict(vocab_size=32, initializer_range=0.3, eos_token_id=EOS, bos_token_id=1, pad_token_id=0)
    return tiny.llama(0, num_hidden_layers=2, **config), tiny.llama(1, num_hidden_layers=1, **config)


def parity_same(a, b):
    """Stub task: the 'final answer' of a response is the parity of the sum of its token ids."""
    return sum(a) % 2 == sum(b) % 2


@torch.no_grad()
def naive_greedy(model, ctx, max_tokens, eos):
    new = []
    if max_tokens <= 0 or ctx[-1] in eos:
        return new
    while True:
        nxt = int(model(input_ids=torch.tensor([ctx + new])).logits[0, -1].argmax())
        new.append(nxt)
        if len(new) >= max_tokens or nxt in eos:
            return new


@torch.no_grad()
def naive_mine(target, draft, x, same, max_new, eos):
    """SPEC §3 written the slow, obvious way: full re-encoding for every step."""
    y = naive_greedy(target, x, max_new, eos)
    ref = list(y)
    out = []
    cursor = 0
    while True:
        z = draft(input_ids=torch.tensor([x + y[:-1]])).logits[0, len(x) - 1:].argmax(-1).tolist()
        i = next((j for j in range(cursor, len(y)) if z[j] != y[j]), None)
        if i is None:
            return out, y, ref
        ctx = x + y[:i] + [z[i]]
        h = target(input_ids=torch.tensor([ctx]), output_hidden_states=True).hidden_states[-1][0, -1]
        cand = y[:i] + [z[i]] + naive_greedy(target, ctx, max_new - i - 1, eos)
        ok = same(cand, ref)
        out.append((i, y[i], z[i], int(ok), h))
        if ok:
            y = cand
        cursor = i + 1


@pytest.mark.parametrize("prompt", [[5, 9, 17, 2], [7, 30, 11]])
def test_mine_prompt_matches_naive_walk(pair, prompt):
    target, draft = pair
    r = mine_prompt(target, draft, prompt, parity_same, 20, {EOS})
    ref_labels, final, ref = naive_mine(target, draft, prompt, parity_same, 20, {EOS})
    assert r.reference_ids == ref and r.final_ids == final
    assert [(p, t, d, l) for p, t, d, l, _ in ref_labels] == list(
        zip(r.positions, r.target_token_ids, r.draft_token_ids, r.labels))
    for (_, _, _, _, h), f in zip(ref_labels, r.features):
        torch.testing.assert_close(f, h, atol=1e-4, rtol=1e-4)
    # the walk moves strictly right; labels before the first accepted swap sit on the original prefix
    assert r.positions == sorted(set(r.positions))
    first_ok = next((k for k, l in enumerate(r.labels) if l), len(r.labels))
    assert r.original_prefix == [k <= first_ok for k in range(len(r.labels))]
    # one regeneration per label: the swapped token plus all regenerated tokens but the last
    assert r.target_forward_tokens == sum(max(1, n) for n in r.regen_tokens)
    assert r.reference_forward_tokens == len(prompt) + len(r.reference_ids) - 1


def test_both_branches_exercised(pair):
    target, draft = pair
    labels = []
    for prompt in ([5, 9, 17, 2], [7, 30, 11], [12, 4, 4, 8, 21]):
        labels += mine_prompt(target, draft, prompt, parity_same, 20, {EOS}).labels
    assert 0 in labels and 1 in labels, labels
    # an always-different judge keeps y: every label 0 and final == reference
    r = mine_prompt(target, draft, [5, 9, 17, 2], lambda a, b: False, 20, {EOS})
    assert r.labels and set(r.labels) == {0} and r.final_ids == r.reference_ids
    # always-same: y changes at every mismatch and the draft agrees with it thereafter at swapped spots
    r = mine_prompt(target, draft, [5, 9, 17, 2], lambda a, b: True, 20, {EOS}, max_labels=3)
    assert len(r.labels) == 3 and set(r.labels) == {1}
    assert [r.final_ids[p] for p in r.positions] == r.draft_token_ids


def test_greedy_generate_stops_at_eos_and_cap(pair):
    target, _ = pair
    free, _, _, _ = greedy_generate(target, torch.tensor([[5, 9]]), new_cache(target), 8, set())
    assert len(free) == 8
    stop = free[3]
    k = free.index(stop)
    new, _, cache, fed = greedy_generate(target, torch.tensor([[5, 9]]), new_cache(target), 8, {stop})
    assert new == free[: k + 1] and fed == 2 + k and cache.get_seq_length() == 2 + k
    new, h, _, fed = greedy_generate(target, torch.tensor([[5, stop]]), new_cache(target), 8, {stop}, want_hidden=True)
    assert new == [] and fed == 2 and h.shape == (32,)


class FakeTok:
    eos_token_id = EOS

    def encode(self, text, add_special_tokens=False):
        return [int(t) for t in text.split()]

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(str(i) for i in ids)


class StubTask:
    name = "stub"

    def build_prompt(self, tok, ex):
        return ex.messages[0]["content"]

    def extract_answer(self, text):
        return sum(int(t) for t in text.split()) % 2

    def same_answer(self, a, b, ex):
        return self.extract_answer(a) == self.extract_answer(b)


def test_mine_task_writes_shards_and_resumes(pair, tmp_path):
    target, draft = pair
    exs = [SimpleNamespace(prompt_id=f"p{k}", messages=[{"role": "user", "content": c}])
           for k, c in enumerate(["5 9 17 2", "7 30 11", "12 4 4 8 21"])]
    out = tmp_path / "aj"
    s = mine_task(target, draft, FakeTok(), StubTask(), exs[:2], str(out), max_new_tokens=20, progress=False,
                  target_id="toy/t", draft_id="toy/d")
    assert s["n_prompts"] == 2 and s["n_labels"] > 0
    s2 = mine_task(target, draft, FakeTok(), StubTask(), exs, str(out), max_new_tokens=20, progress=False,
                   target_id="toy/t", draft_id="toy/d")
    assert s2["n_prompts"] == 3
    feats, rows, man = read_labels(str(out))
    assert man["method"] == "autojudge" and man["hidden_size"] == 32 and man["target"] == "toy/t"
    assert feats.shape == (len(rows), 32) and len(rows) == s2["n_labels"]
    assert [r["prompt_id"] for r in rows].count("p0") == s["n_labels"] - [r["prompt_id"] for r in rows].count("p1")
    direct = mine_prompt(target, draft, [12, 4, 4, 8, 21], parity_same, 20, {EOS})
    mine_rows = [r for r in rows if r["prompt_id"] == "p2"]
    assert [r["label"] for r in mine_rows] == direct.labels
    recs = read_progress(out)
    assert sorted(p for r in recs for p in r["prompt_ids"]) == ["p0", "p1", "p2"]
    assert s2["target_forward_tokens"] == sum(r["stats"]["target_forward_tokens"] for r in recs) > 0
    assert json.loads((out / "summary.json").read_text())["n_labels"] == len(rows)
    with pytest.raises(ValueError, match="target"):
        mine_task(target, draft, FakeTok(), StubTask(), exs, str(out), max_new_tokens=20, progress=False,
                  target_id="other", draft_id="toy/d")


def test_label_fraction_steps_over_mismatches(pair):
    target, draft = pair
    full = mine_prompt(target, draft, [5, 9, 17, 2], lambda a, b: False, 20, {EOS})
    part = mine_prompt(target, draft, [5, 9, 17, 2], lambda a, b: False, 20, {EOS}, label_fraction=0.5, seed=7)
    # with y never changing, the mismatch set is fixed: the subsample is a strict, ordered subset
    assert set(part.positions) < set(full.positions) and part.positions
    again = mine_prompt(target, draft, [5, 9, 17, 2], lambda a, b: False, 20, {EOS}, label_fraction=0.5, seed=7)
    assert again.positions == part.positions
    with pytest.raises(ValueError, match="label_fraction"):
        mine_prompt(target, draft, [5, 9], lambda a, b: False, 20, {EOS}, label_fraction=0.0)


def test_forward_token_counters_match_a_hook(pair):
    target, draft = pair
    seen = []
    h = target.model.register_forward_pre_hook(
        lambda m, a, k: seen.append(int(k["input_ids"].numel())), with_kwargs=True)
    try:
        r = mine_prompt(target, draft, [7, 30, 11], parity_same, 16, {EOS})
    finally:
        h.remove()
    assert sum(seen) == r.reference_forward_tokens + r.target_forward_tokens


def engine_generate(target):
    """The batched greedy generator the CLI hands to the lock-step walks: the engine's target-only path."""
    from selfjudge.engine import SpeculativeEngine

    engine = SpeculativeEngine(target, None, None, policy="autoregressive", eos_token_id=[EOS])
    return lambda prompts, n: [r.token_ids for r in engine.generate(prompts, max_new_tokens=n)]


def hf_generate(target):
    """The library default: the model's own batched ``generate``."""
    return lambda prompts, n: greedy_responses(target, FakeTok(), prompts, n)


@pytest.mark.parametrize("make_generate", [engine_generate, hf_generate])
def test_mine_batch_equals_one_walk_per_prompt(pair, make_generate):
    target, draft = pair
    prompts = [[5, 9, 17, 2], [7, 30, 11], [12, 4, 4, 8, 21], [6]]
    generate = make_generate(target)
    for kw in ({}, {"max_labels": 2}, {"label_fraction": 0.5}):
        seeds = [11, 12, 13, 14]
        batched = mine_batch(target, draft, prompts, [parity_same] * 4, 20, {EOS}, generate=generate, seeds=seeds,
                             **kw)
        for p, s, b in zip(prompts, seeds, batched):
            one = mine_prompt(target, draft, p, parity_same, 20, {EOS}, seed=s, **kw)
            assert b.reference_ids == one.reference_ids and b.final_ids == one.final_ids
            assert (b.positions, b.labels, b.draft_token_ids, b.target_token_ids) == \
                   (one.positions, one.labels, one.draft_token_ids, one.target_token_ids)
            assert b.original_prefix == one.original_prefix and b.regen_tokens == one.regen_tokens
            if b.features:
                torch.testing.assert_close(b.feature_matrix(32), one.feature_matrix(32), atol=1e-4, rtol=1e-4)
            # the cache-shared count is what the one-prompt walk really fed
            assert b.cache_shared_forward_tokens == one.target_forward_tokens
            assert b.target_forward_tokens >= b.cache_shared_forward_tokens
    assert sum(len(r.labels) for r in batched) > 0


def test_mine_batch_rejects_bad_input(pair):
    target, draft = pair
    with pytest.raises(ValueError, match="one entry per prompt"):
        mine_batch(target, draft, [[5, 9]], [parity_same] * 2, 20, {EOS}, generate=hf_generate(target), seeds=[0])
    with pytest.raises(ValueError, match="empty prompt"):
        mine_batch(target, draft, [[5, 9], []], [parity_same] * 2, 20, {EOS}, generate=hf_generate(target),
                   seeds=[0, 1])


def test_mine_task_batched_writes_the_same_labels(pair, tmp_path):
    target, draft = pair
    exs = [SimpleNamespace(prompt_id=f"p{k}", messages=[{"role": "user", "content": c}])
           for k, c in enumerate(["5 9 17 2", "7 30 11", "12 4 4 8 21"])]
    one = mine_task(target, draft, FakeTok(), StubTask(), exs, str(tmp_path / "one"), max_new_tokens=20,
                    progress=False, target_id="toy/t", draft_id="toy/d")
    two = mine_task(target, draft, FakeTok(), StubTask(), exs, str(tmp_path / "two"), max_new_tokens=20,
                    progress=False, target_id="toy/t", draft_id="toy/d", batch_size=2)
    _, rows1, _ = read_labels(str(tmp_path / "one"))
    _, rows2, _ = read_labels(str(tmp_path / "two"))
    key = lambda r: (r["prompt_id"], r["position"], r["draft_token_id"], r["label"])  # noqa: E731
    assert sorted(map(key, rows1)) == sorted(map(key, rows2)) and one["n_labels"] == two["n_labels"]
    assert two["cache_shared_forward_tokens"] == one["target_forward_tokens"] == one["cache_shared_forward_tokens"]
    assert len(read_progress(tmp_path / "two")) == 3  # one committed record per prompt
    with pytest.raises(ValueError, match="batch_size"):
        mine_task(target, draft, FakeTok(), StubTask(), exs, str(tmp_path / "x"), max_new_tokens=20,
                  progress=False, batch_size=0)


def test_the_walk_takes_any_drafter(pair):
    """With a drafter (here prompt lookup) mismatches are its proposals that differ from y; where it
    proposes nothing there is no label."""
    from selfjudge.engine.prompt_lookup import PromptLookupDrafter
    from selfjudge.models.generation import draft_top1, mismatches

    target, _ = pair
    drafter = PromptLookupDrafter(32, max_ngram=2)
    prompt = [5, 9, 5, 9, 5, 9, 17]
    # an always-different answer keeps y: every mismatch of the drafter on y is labelled, in order
    r = mine_prompt(target, drafter, prompt, lambda a, b: False, 20, {EOS})
    z = draft_top1(drafter, prompt, r.reference_ids)
    assert r.positions == mismatches(z, r.reference_ids) and r.positions
    assert r.draft_token_ids == [z[i] for i in r.positions] and set(r.labels) == {0}
    assert any(t is None for t in z)  # positions without a proposal exist, and carry no label
    silent = PromptLookupDrafter(32, max_ngram=8, min_ngram=8)  # needs an 8-gram repeat: proposes nothing
    assert mine_prompt(target, silent, [1, 2, 3], parity_same, 12, {EOS}).labels == []
