"""Correctness of SpeculativeEngine on tiny random Llamas built in code.

The draft is the target with noise added to its weights, so it agrees with the
target on some tokens and not others: rows accept different numbers of drafts
per cycle, which is what exercises the ragged cache.
"""

import copy

import pytest
import torch

from selfjudge.engine import JudgePolicy, SpeculativeEngine, TopKPolicy
from selfjudge.engine.cache import RaggedCache

V = 97
N = 24
PROMPTS = [[5, 7, 9], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], [42], [60, 61, 62, 63, 64, 65]]


@pytest.fixture(scope="module")
def pair(tiny):
    target = tiny.llama(0, vocab_size=V, hidden_size=48, intermediate_size=96, max_position_embeddings=512)
    return target, tiny.noisy_copy(target, 0.3, seed=1)


def _hf_greedy(model, prompt, n, eos=None):
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt]),
            attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
            do_sample=False,
            max_new_tokens=n,
            eos_token_id=eos,
            pad_token_id=0,
        )
    return out[0, len(prompt) :].tolist()


@pytest.fixture(scope="module")
def greedy_refs(pair):
    target, _ = pair
    return [_hf_greedy(target, p, N) for p in PROMPTS]


class CharTokenizer:
    """Minimal tokenizer for the tiny vocabulary: token t <-> one printable char."""

    eos_token_id = None

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(33 + int(t)) for t in ids)

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) - 33 for c in text]}


@pytest.mark.parametrize("K", [1, 3, 6])
def test_greedy_standard_equals_hf_generate(pair, greedy_refs, K):
    target, draft = pair
    eng = SpeculativeEngine(target, draft, None, num_draft_tokens=K, policy="standard", eos_token_id=[])
    batched = eng.generate(PROMPTS, max_new_tokens=N)
    for res, ref in zip(batched, greedy_refs):
        assert res.token_ids == ref
    # the noisy draft must be partly right and partly wrong, else the test is weak
    acc = sum(r.stats.accepted_tokens for r in batched)
    prop = sum(r.stats.draft_tokens for r in batched)
    assert 0 < acc < prop


def test_autoregressive_equals_hf_generate(pair, greedy_refs):
    target, _ = pair
    eng = SpeculativeEngine(target, None, None, policy="autoregressive", eos_token_id=[])
    res = eng.generate(PROMPTS, max_new_tokens=N)
    assert [r.token_ids for r in res] == greedy_refs
    assert all(r.stats.cycles == N and r.stats.mean_accepted_length == 1.0 for r in res)


@pytest.mark.parametrize("policy", ["standard", "topk", "judge"])
@pytest.mark.parametrize("compact", [1, 10_000])
def test_batched_equals_each_prompt_alone(pair, greedy_refs, policy, compact):
    target, draft = pair
    kw = {}
    if policy == "judge":
        w = torch.randn(target.config.hidden_size, generator=torch.Generator().manual_seed(3))
        kw = {"verifier": (w, 0.0), "threshold": 0.5}
    free = SpeculativeEngine(target, draft, None, num_draft_tokens=4, policy=policy, eos_token_id=[], **kw)
    # an EOS that row 0 emits mid-way, so rows leave the batch at different cycles
    eos = free.generate(PROMPTS[:1], max_new_tokens=N)[0].token_ids[9]
    eng = SpeculativeEngine(
        target, draft, None, num_draft_tokens=4, policy=policy, eos_token_id=eos, compact_min_columns=compact, **kw
    )
    batched = eng.generate(PROMPTS, max_new_tokens=N)
    for p, res in zip(PROMPTS, batched):
        alone = eng.generate([p], max_new_tokens=N)[0]
        assert res.token_ids == alone.token_ids
        assert res.stats.accepted_tokens == alone.stats.accepted_tokens
        assert res.stats.judge_accepted == alone.stats.judge_accepted
    assert batched[0].stats.finish_reason == "eos" and batched[0].token_ids[-1] == eos
    assert len(batched[0].token_ids) <= 10
    assert len({r.stats.cycles for r in batched}) > 1  # rows left the batch at different cycles


def test_compaction_happens_and_keeps_output(pair, greedy_refs):
    target, draft = pair
    eng = SpeculativeEngine(target, draft, None, num_draft_tokens=6, eos_token_id=[], compact_min_columns=1)
    calls = []
    orig = RaggedCache.compact

    def spy(self):
        freed = orig(self)
        calls.append(freed)
        return freed

    RaggedCache.compact = spy
    try:
        res = eng.generate(PROMPTS, max_new_tokens=N)
    finally:
        RaggedCache.compact = orig
    assert sum(calls) > 0
    assert [r.token_ids for r in res] == greedy_refs


def test_sampling_standard_reproducible_at_fixed_seed(pair):
    target, draft = pair
    eng = SpeculativeEngine(target, draft, None, num_draft_tokens=3, eos_token_id=[])
    a = eng.generate(PROMPTS, max_new_tokens=N, temperature=1.0, seed=123)
    b = eng.generate(PROMPTS, max_new_tokens=N, temperature=1.0, seed=123)
    c = eng.generate(PROMPTS, max_new_tokens=N, temperature=1.0, seed=124)
    assert [r.token_ids for r in a] == [r.token_ids for r in b]
    assert [r.token_ids for r in a] != [r.token_ids for r in c]
    assert all(len(r.token_ids) == N for r in a)
    assert all(0 <= t < V for r in a for t in r.token_ids)


def test_eos_inside_accepted_draft_stops_exactly_there(pair, greedy_refs):
    target, _ = pair
    ref = greedy_refs[1]
    # first position >= 2 whose token did not occur earlier: EOS must stop at it
    j = next(i for i in range(2, 7) if ref[i] not in ref[:i])
    # draft == target: every draft is accepted, so EOS sits inside an accepted window
    eng = SpeculativeEngine(target, target, None, num_draft_tokens=8, eos_token_id=ref[j])
    res = eng.generate([PROMPTS[1]], max_new_tokens=N)[0]
    assert res.token_ids == ref[: j + 1]
    assert res.stats.finish_reason == "eos"
    assert res.stats.cycles == 1 and res.stats.accepted_tokens == 8


@pytest.mark.parametrize("K", [1, 4])
@pytest.mark.parametrize("max_new", [1, 2, 9])
def test_max_new_tokens_never_exceeded(pair, greedy_refs, K, max_new):
    target, draft = pair
    for d in (target, draft):  # draft == target accepts everything: the worst case for overshoot
        eng = SpeculativeEngine(target, d, None, num_draft_tokens=K, eos_token_id=[])
        res = eng.generate(PROMPTS, max_new_tokens=max_new)
        for r, ref in zip(res, greedy_refs):
            assert len(r.token_ids) == max_new
            assert r.token_ids == ref[:max_new]
            assert r.stats.finish_reason == "length"


def _draft_then_bonus_reference(target, draft, prompt, K, n):
    """Accept-everything reference without caches: K draft-greedy tokens, then the target's argmax."""
    seq = list(prompt)
    out = []
    with torch.no_grad():
        while len(out) < n:
            kk = min(K, n - len(out) - 1)
            for _ in range(kk):
                t = int(draft(torch.tensor([seq])).logits[0, -1].argmax())
                seq.append(t)
                out.append(t)
            t = int(target(torch.tensor([seq])).logits[0, -1].argmax())
            seq.append(t)
            out.append(t)
    return out


def test_judge_accepting_everything_emits_draft_greedy_text(pair):
    target, draft = pair
    H = target.config.hidden_size
    K = 4
    eng = SpeculativeEngine(
        target, draft, None, num_draft_tokens=K, policy=JudgePolicy((torch.zeros(H), 10.0), 0.0), eos_token_id=[]
    )
    res = eng.generate(PROMPTS, max_new_tokens=N)
    for p, r in zip(PROMPTS, res):
        assert r.token_ids == _draft_then_bonus_reference(target, draft, p, K, N)
        assert r.stats.accepted_tokens == r.stats.draft_tokens
        assert r.stats.judge_accepted > 0
        assert r.stats.align_accepted + r.stats.judge_accepted == r.stats.accepted_tokens
    # the first K tokens are the draft's own greedy continuation
    assert res[0].token_ids[:K] == _hf_greedy(draft, PROMPTS[0], K)
    # a top-k policy with k = V accepts everything too
    eng_top = SpeculativeEngine(target, draft, None, num_draft_tokens=K, policy=TopKPolicy(V), eos_token_id=[])
    assert [r.token_ids for r in eng_top.generate(PROMPTS, max_new_tokens=N)] == [r.token_ids for r in res]


def test_judge_accepting_nothing_equals_standard(pair, greedy_refs):
    target, draft = pair
    H = target.config.hidden_size
    eng = SpeculativeEngine(
        target, draft, None, num_draft_tokens=3, policy="judge", verifier=(torch.zeros(H), -10.0), eos_token_id=[]
    )
    std = SpeculativeEngine(target, draft, None, num_draft_tokens=3, eos_token_id=[])
    res = eng.generate(PROMPTS, max_new_tokens=N)
    assert [r.token_ids for r in res] == greedy_refs
    assert all(r.stats.judge_accepted == 0 for r in res)
    # at a fixed seed, sampling with a never-accepting judge replays standard sampling exactly
    a = eng.generate(PROMPTS, max_new_tokens=N, temperature=0.8, seed=7)
    b = std.generate(PROMPTS, max_new_tokens=N, temperature=0.8, seed=7)
    assert [r.token_ids for r in a] == [r.token_ids for r in b]


def test_topk_1_equals_standard_and_topk_relaxes(pair, greedy_refs):
    target, draft = pair
    one = SpeculativeEngine(target, draft, None, num_draft_tokens=3, policy="topk", top_k=1, eos_token_id=[])
    assert [r.token_ids for r in one.generate(PROMPTS, max_new_tokens=N)] == greedy_refs
    five = SpeculativeEngine(target, draft, None, num_draft_tokens=3, policy="topk", top_k=5, eos_token_id=[])
    res = five.generate(PROMPTS, max_new_tokens=N)
    assert sum(r.stats.judge_accepted for r in res) > 0
    assert sum(r.stats.mean_accepted_length for r in res) > sum(
        r.stats.mean_accepted_length for r in one.generate(PROMPTS, max_new_tokens=N)
    )


@pytest.mark.parametrize("policy", ["standard", "topk", "autoregressive"])
def test_token_sources_say_who_chose_each_token(pair, policy):
    target, draft = pair
    kw = {"top_k": 5} if policy == "topk" else {}
    eng = SpeculativeEngine(target, draft if policy != "autoregressive" else None, None, num_draft_tokens=3,
                            policy=policy, eos_token_id=[], **kw)
    res = eng.generate(PROMPTS, max_new_tokens=N)
    for p, r in zip(PROMPTS, res):
        src, s = r.token_sources, r.stats
        assert len(src) == len(r.token_ids) == N
        assert (src.count("draft"), src.count("judge"), src.count("target")) == (
            s.align_accepted, s.judge_accepted, s.cycles)
        # independent check, one teacher-forced target forward: greedy target tokens are the target's argmax;
        # relaxed-only tokens are not, but lie in its top 5
        with torch.no_grad():
            logits = target(torch.tensor([p + r.token_ids])).logits[0, len(p) - 1 : -1]  # [N, V]
        top = logits.topk(5, dim=-1).indices
        for i, (t, who) in enumerate(zip(r.token_ids, src)):
            if who == "judge":
                assert t != int(top[i, 0]) and t in top[i].tolist()
            else:
                assert t == int(top[i, 0])
    if policy == "topk":
        assert any("judge" in r.token_sources for r in res)
    if policy == "autoregressive":
        assert all(set(r.token_sources) == {"target"} for r in res)


def test_protected_tokens_are_never_judge_accepted_or_replaced(pair):
    target, draft = pair
    H = target.config.hidden_size
    protected = list(range(0, V, 3))  # a third of the vocabulary
    eng = SpeculativeEngine(target, draft, None, num_draft_tokens=4, policy="judge",
                            verifier=(torch.zeros(H), 10.0), threshold=0.0, eos_token_id=[],
                            protected_token_ids=protected)
    free = SpeculativeEngine(target, draft, None, num_draft_tokens=4, policy="judge",
                             verifier=(torch.zeros(H), 10.0), threshold=0.0, eos_token_id=[])
    res = eng.generate(PROMPTS, max_new_tokens=N)
    n_judge = 0
    for p, r in zip(PROMPTS, res):
        with torch.no_grad():
            greedy = target(torch.tensor([p + r.token_ids])).logits[0, len(p) - 1 : -1].argmax(-1)  # [N]
        for t, who, g in zip(r.token_ids, r.token_sources, greedy.tolist()):
            if who == "judge":
                n_judge += 1
                assert t not in protected and g not in protected and t != g
            else:
                assert t == g
    assert n_judge > 0  # the judge still accepts elsewhere
    assert sum(r.stats.judge_accepted for r in res) < sum(r.stats.judge_accepted for r in free.generate(PROMPTS, max_new_tokens=N))


def test_stats_are_consistent(pair):
    target, draft = pair
    K = 3
    eng = SpeculativeEngine(target, draft, None, num_draft_tokens=K, eos_token_id=[])
    res = eng.generate(PROMPTS, max_new_tokens=N)
    for p, r in zip(PROMPTS, res):
        s = r.stats
        assert s.new_tokens == len(r.token_ids) == N
        # no EOS: every cycle emits accepted + 1 tokens
        assert s.accepted_tokens + s.cycles == N
        assert s.mean_accepted_length == pytest.approx(N / s.cycles)
        assert s.align_accepted == s.accepted_tokens and s.judge_accepted == 0
        assert s.target_forwards == s.cycles + 1
        assert s.draft_forwards >= s.cycles  # one per draft step, plus the prefill
        assert s.time_draft > 0 and s.time_target > 0 and s.time_verify > 0
    b = eng.last_batch_stats
    assert b.new_tokens == N * len(PROMPTS)
    assert b.steps == max(r.stats.cycles for r in res)
    assert b.cycles == sum(r.stats.cycles for r in res)
    assert b.mean_accepted_length == pytest.approx(
        sum(r.stats.accepted_tokens + r.stats.cycles for r in res) / sum(r.stats.cycles for r in res)
    )


def test_string_prompts_and_stop_strings(pair, greedy_refs):
    target, draft = pair
    tok = CharTokenizer()
    ref = greedy_refs[0]
    stop = tok.decode(ref[5:7])
    first = tok.decode(ref).index(stop)  # first occurrence in the text
    eng = SpeculativeEngine(target, draft, tok, num_draft_tokens=4, eos_token_id=[])
    res = eng.generate(tok.decode(PROMPTS[0]), max_new_tokens=N, stop=stop)[0]
    assert res.stats.finish_reason == "stop"
    assert res.token_ids == ref[: first + 2]
    assert res.text == tok.decode(ref[: first + 2]) and res.text.endswith(stop)


def test_empty_stop_strings_are_refused_and_no_prompts_give_no_results(pair, greedy_refs):
    target, draft = pair
    tok = CharTokenizer()
    eng = SpeculativeEngine(target, draft, tok, num_draft_tokens=4, eos_token_id=[])
    for bad in ("", [""], ["ok", ""], [None]):  # "" is in every text: it used to stop after one token
        with pytest.raises(ValueError, match="stop"):
            eng.generate(tok.decode(PROMPTS[0]), max_new_tokens=N, stop=bad)
    assert eng.generate([], max_new_tokens=N) == []
    res = eng.generate(tok.decode(PROMPTS[0]), max_new_tokens=N, stop=["\x00never"])[0]  # negative control
    assert res.token_ids == greedy_refs[0] and res.stats.finish_reason != "stop"


def test_bad_arguments(pair):
    target, draft = pair
    with pytest.raises(ValueError, match="policy"):
        SpeculativeEngine(target, draft, None, policy="nope")
    with pytest.raises(ValueError, match="verifier"):
        SpeculativeEngine(target, draft, None, policy="judge")
    with pytest.raises(ValueError, match="draft"):
        SpeculativeEngine(target, None, None, policy="standard")
    with pytest.raises(ValueError, match="protected_token_ids"):
        SpeculativeEngine(target, draft, None, policy="topk", protected_token_ids=[1, 2])
    eng = SpeculativeEngine(target, draft, None)
    with pytest.raises(ValueError, match="max_new_tokens"):
        eng.generate(PROMPTS, max_new_tokens=0)
    with pytest.raises(ValueError, match="tokenizer"):
        eng.generate("abc", max_new_tokens=3)


def test_draft_vocab_subset_is_lossless_and_restricts_proposals(pair, greedy_refs):
    target, draft = pair
    full = SpeculativeEngine(target, draft, None, num_draft_tokens=3, eos_token_id=[])
    same = SpeculativeEngine(target, draft, None, num_draft_tokens=3, eos_token_id=[], draft_vocab=torch.arange(V))
    a, b = full.generate(PROMPTS, max_new_tokens=N), same.generate(PROMPTS, max_new_tokens=N)
    assert [r.token_ids for r in a] == [r.token_ids for r in b]
    assert [r.stats.accepted_tokens for r in a] == [r.stats.accepted_tokens for r in b]
    # half the vocabulary: still exactly the target's greedy output
    sub = torch.arange(0, V, 2)
    half = SpeculativeEngine(target, draft, None, num_draft_tokens=3, eos_token_id=[], draft_vocab=sub)
    assert [r.token_ids for r in half.generate(PROMPTS, max_new_tokens=N)] == greedy_refs
    # accept-everything judge: every token but the per-cycle bonus comes from the draft, hence from sub
    H = target.config.hidden_size
    K = 3
    allj = SpeculativeEngine(
        target, draft, None, num_draft_tokens=K, policy=JudgePolicy((torch.zeros(H), 10.0), 0.0),
        eos_token_id=[], draft_vocab=sub,
    )
    allowed = set(sub.tolist())
    for r in allj.generate(PROMPTS, max_new_tokens=N, temperature=1.0, seed=5):
        assert all(t in allowed for i, t in enumerate(r.token_ids) if i % (K + 1) != K)
    with pytest.raises(ValueError, match="draft_vocab"):
        SpeculativeEngine(target, draft, None, draft_vocab=torch.tensor([V]))


def test_draft_with_restricted_head_uses_its_sub_vocabulary(pair, greedy_refs):
    """A draft whose LM head has ``vocab_ids`` (selfjudge.models' SubVocabHead) is run through it."""
    target, draft = pair

    class SubHead(torch.nn.Module):
        def __init__(self, full, ids):
            super().__init__()
            self.weight = torch.nn.Parameter(full.weight.detach()[ids].clone(), requires_grad=False)
            self.register_buffer("vocab_ids", ids)

        def forward(self, h):
            sub = torch.nn.functional.linear(h, self.weight)
            out = sub.new_full((*sub.shape[:-1], V), torch.finfo(sub.dtype).min)
            out[..., self.vocab_ids] = sub
            return out

    ids = torch.arange(1, V, 3)
    restricted = copy.deepcopy(draft)
    restricted.lm_head = SubHead(draft.lm_head, ids)
    eng = SpeculativeEngine(target, restricted, None, num_draft_tokens=3, eos_token_id=[])
    assert eng.draft_vocab is not None and eng.draft_vocab.numel() == ids.numel()
    ref = SpeculativeEngine(target, draft, None, num_draft_tokens=3, eos_token_id=[], draft_vocab=ids)
    a, b = eng.generate(PROMPTS, max_new_tokens=N), ref.generate(PROMPTS, max_new_tokens=N)
    assert [r.token_ids for r in a] == greedy_refs == [r.token_ids for r in b]
    assert [r.stats.accepted_tokens for r in a] == [r.stats.accepted_tokens for r in b]


def test_draft_proposals_are_the_drafts_greedy_continuation_after_rollbacks(pair, greedy_refs, recording_policy,
                                                                           replay_proposals):
    """The draft cache stays right after partial acceptances: every cycle's proposals equal
    the draft's own greedy continuation of the true prefix (recomputed without a cache)."""
    target, draft = pair
    eng = SpeculativeEngine(target, draft, None, num_draft_tokens=4, policy=recording_policy, eos_token_id=[])
    prompt = PROMPTS[1]
    out = eng.generate([prompt], max_new_tokens=N)[0].token_ids
    assert out == greedy_refs[1]
    partial = replay_proposals(recording_policy.drafts, out, lambda pos, k: _hf_greedy(draft, prompt + out[:pos], k))
    assert partial > 0  # some cycles accepted part of the window
