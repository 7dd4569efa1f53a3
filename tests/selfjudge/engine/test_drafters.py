"""Every drafter behind the engine's seam: lossless greedy output, batching, state after rollbacks.

Drafters: the standalone model (covered at length in test_engine.py), prompt lookup and
an EAGLE feature head (briefly trained on the tiny target, so it is partly right: rows
accept different numbers of drafts per cycle).
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from selfjudge.engine import SpeculativeEngine
from selfjudge.engine.eagle_drafter import EagleDrafter
from selfjudge.engine.prompt_lookup import PromptLookupDrafter, lookup
from selfjudge.models.records import read_checkpoint
from selfjudge.models.eagle import load_draft_vocab, load_eagle_head, save_eagle_head
from selfjudge.models.eagle_train import eagle_loss, export_eagle, new_head, target_features, train_eagle

V = 48
N = 20
PROMPTS = [[5, 7, 9, 11], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], [42, 17], [30, 31, 30, 31, 30, 31, 30]]


@pytest.fixture(scope="module")
def target(tiny):
    # a small random Llama's greedy continuations fall into repeating patterns: prompt lookup can
    # exploit them and a head can learn them
    return tiny.llama(0, vocab_size=V, max_position_embeddings=256)


def hf_greedy(model, prompt, n):
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False, min_new_tokens=n,
                             pad_token_id=0, eos_token_id=None)
    return out[0, len(prompt):].tolist()


@pytest.fixture(scope="module")
def refs(target):
    return [hf_greedy(target, p, N) for p in PROMPTS]


@pytest.fixture(scope="module")
def trained_head(target, tmp_path_factory, tiny):
    """A head trained for a few hundred steps on the target's own greedy text (seconds on a CPU)."""
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(1, V, (4,), generator=g).tolist() for _ in range(208)]
    text = [(p + hf_greedy(target, p, 24), len(p)) for p in prompts]
    out = tmp_path_factory.mktemp("eagle")
    state = train_eagle(target, text[:200], text[200:], out, pad_id=0, steps=300, batch_size=8, lr=3e-3, warmup=20,
                        noise=0.0, eval_every=100, progress=False)
    head = new_head(target, init_layer=None)
    head.load_state_dict(read_checkpoint(out, state, "head"), strict=False)
    return head.eval(), state, out


# ------------------------------------------------------------------ prompt lookup
def test_lookup_takes_the_longest_most_recent_match():
    assert lookup([1, 2, 3, 4, 1, 2, 3, 9, 1, 2, 3], 2, 3, 1) == [9, 1]  # the 3-gram's latest earlier occurrence
    assert lookup([1, 2, 5, 2], 4, 3, 1) == [5, 2]  # only the 1-gram "2" matches; bounded by the history
    assert lookup([1, 2, 3], 3, 3, 1) == []  # nothing repeats
    assert lookup([7], 3, 3, 1) == []
    assert lookup([4, 4, 4, 4], 2, 2, 2) == [4]  # the match right before the suffix proposes what followed it


def test_prompt_lookup_is_lossless_batched_and_one_by_one(target, refs):
    drafter = PromptLookupDrafter(V, max_ngram=3)
    eng = SpeculativeEngine(target, drafter, None, num_draft_tokens=4, eos_token_id=[])
    batched = eng.generate(PROMPTS, max_new_tokens=N)
    assert [r.token_ids for r in batched] == refs
    assert [eng.generate([p], max_new_tokens=N)[0].token_ids for p in PROMPTS] == refs
    stats = eng.last_batch_stats
    assert sum(r.stats.draft_tokens for r in batched) > 0 and sum(r.stats.accepted_tokens for r in batched) > 0
    assert stats.draft_forwards == 0  # no model ran
    # sampling: no draft distribution (q one-hot) is still a valid input to the verify op
    sampled = eng.generate(PROMPTS, max_new_tokens=N, temperature=0.9, seed=1)
    assert all(len(r.token_ids) == N and all(0 <= t < V for t in r.token_ids) for r in sampled)


def test_prompt_lookup_without_a_match_proposes_nothing(target):
    prompt = [3, 9, 27, 14, 40]  # no token repeats
    drafter = PromptLookupDrafter(V, max_ngram=2, min_ngram=2)
    drafter.prefill(torch.tensor([prompt]), torch.ones(1, 5, dtype=torch.bool))
    proposal = drafter.propose(4, 0.0, None)
    ids, probs, counts = proposal.ids, proposal.probs, proposal.counts
    assert ids.shape == (1, 0) and probs is None and counts == [0]
    # an 8-gram never repeats within 5 + 6 tokens: every cycle is one plain target step
    eng = SpeculativeEngine(target, PromptLookupDrafter(V, max_ngram=8, min_ngram=8), None, num_draft_tokens=4,
                            eos_token_id=[])
    res = eng.generate([prompt], max_new_tokens=6)[0]
    assert res.token_ids == hf_greedy(target, prompt, 6)
    assert res.stats.draft_tokens == 0 and res.stats.cycles == 6 and res.stats.draft_forwards == 0


# ------------------------------------------------------------------ EAGLE head
def test_eagle_training_learns_and_resumes(trained_head):
    _, state, out = trained_head
    curve = [h["agreement"] for h in state["history"]]
    assert state["step"] == 300 and curve[-1] > curve[0] + 0.2, curve  # it learns the target's next token
    assert (out / state["checkpoint"]["head"]).exists() and (out / "state.json").exists()
    assert sorted(p.name for p in out.glob("head-*.safetensors")) == [state["checkpoint"]["head"]]  # older steps gone


def test_eagle_is_lossless_and_partly_accepted(target, refs, trained_head):
    head, _, _ = trained_head
    for K in (1, 3):
        eng = SpeculativeEngine(target, EagleDrafter(head, target), None, num_draft_tokens=K, eos_token_id=[])
        batched = eng.generate(PROMPTS, max_new_tokens=N)
        assert [r.token_ids for r in batched] == refs
        acc = sum(r.stats.accepted_tokens for r in batched)
        prop = sum(r.stats.draft_tokens for r in batched)
        assert 0 < acc < prop  # partly right: ragged acceptance across rows and cycles
    alone = [eng.generate([p], max_new_tokens=N)[0].token_ids for p in PROMPTS]
    assert alone == refs
    one_token = eng.generate([[33]], max_new_tokens=5)[0]  # no target state before the first cycle
    assert one_token.token_ids == hf_greedy(target, [33], 5)


def test_eagle_under_adaptive_speculation_with_filler_columns_is_lossless(target, refs, trained_head):
    """A 1-row table where 3 drafts cost less than 1 or 2: a single row verifies its 1-2 drafts in a
    wider forward with filler columns; the EAGLE drafter, which reads the target's states of the
    verified columns, still gives the target's greedy output."""
    from selfjudge.engine.adaptive import AdaptiveController
    from selfjudge.engine.cost_profile import CostProfile

    head, _, _ = trained_head
    per_position = (1.0, 1.6, 1.7, 1.2, 1.5)
    table = CostProfile((1, 8), (1, 2, 3, 4, 5), (per_position, tuple(8 * s for s in per_position)))
    eng = SpeculativeEngine(target, EagleDrafter(head, target), None, num_draft_tokens=None, eos_token_id=[],
                            adaptive=AdaptiveController(4, cost_profile=table))
    alone = [eng.generate([p], max_new_tokens=N)[0] for p in PROMPTS]
    assert [r.token_ids for r in alone] == refs
    assert any(r.stats.drafts_verified[1] + r.stats.drafts_verified[2] for r in alone)  # 1-2 drafts were verified


def test_eagle_proposals_equal_a_fresh_head_after_every_rollback(target, refs, trained_head, recording_policy,
                                                                  replay_proposals):
    """After partial acceptances the head's cache holds what a fresh prefill of the same text would:
    each cycle's proposals equal the head's greedy chain recomputed without a cache."""
    head, _, _ = trained_head
    eng = SpeculativeEngine(target, EagleDrafter(head, target), None, num_draft_tokens=3, policy=recording_policy,
                            eos_token_id=[])
    prompt = PROMPTS[1]
    out = eng.generate([prompt], max_new_tokens=N)[0].token_ids
    assert out == refs[1]
    lm_head = target.get_output_embeddings().weight

    @torch.no_grad()
    def fresh_chain(pos, k):
        prefix = prompt + out[:pos]
        f = target_features(target, [(prefix, 0)], 0)[0]["features"].float()  # [L, H]
        tokens, feats = torch.tensor(prefix[1:]), f[:-1]
        # the head's state for y_m = prefix[-1]: entries (f_j, x_{j+1}) up to j = L-2 (target read prefix[:-1])
        pred = head(tokens[None], feats[None]).last_hidden_state[0, -1]
        chain = []
        for _ in range(k):
            d = int((pred @ lm_head.T).argmax())
            chain.append(d)
            tokens, feats = torch.cat([tokens, torch.tensor([d])]), torch.cat([feats, pred[None]])
            pred = head(tokens[None], feats[None]).last_hidden_state[0, -1]
        return chain

    assert replay_proposals(recording_policy.drafts, out, fresh_chain) > 0

def test_eagle_sampling_keeps_the_target_distribution(tiny, tmp_path, token_pvalue):
    """Standard sampling with the head's q emits the target's distribution (chi-square over the first
    token of 3,000 rows), and a wrong q is caught (negative control). A peaky target, so that the
    distribution is far from uniform, with its own briefly trained head."""
    peaky = tiny.llama(1, vocab_size=V, initializer_range=0.3, max_position_embeddings=256)
    g = torch.Generator().manual_seed(4)
    prompts = [torch.randint(1, V, (4,), generator=g).tolist() for _ in range(104)]
    text = [(p + hf_greedy(peaky, p, 16), len(p)) for p in prompts]
    state = train_eagle(peaky, text[:100], text[100:], tmp_path, pad_id=0, steps=200, lr=3e-3, warmup=20, noise=0.0,
                        eval_every=200, progress=False)
    head = new_head(peaky, init_layer=None)
    head.load_state_dict(read_checkpoint(tmp_path, state, "head"), strict=False)
    prompt, T, rows = [5, 7, 9, 11], 1.0, 3000
    with torch.no_grad():
        p1 = torch.softmax(peaky(torch.tensor([prompt])).logits[0, -1] / T, -1).double()

    def pvalue(results) -> float:  # the first token of every row
        return token_pvalue([r.token_ids[0] for r in results], p1)

    assert p1.max() > 3 / V  # far from uniform
    eng = SpeculativeEngine(peaky, EagleDrafter(head, peaky), None, num_draft_tokens=2, eos_token_id=[])
    res = eng.generate([prompt] * rows, max_new_tokens=2, temperature=T, seed=0)
    assert sum(r.stats.accepted_tokens for r in res) > rows // 10  # the head's drafts were really used
    assert pvalue(res) > 1e-3

    class WrongQ(EagleDrafter):  # claims the draft is uniform: the verify op then over-accepts its tokens
        def propose(self, num_tokens, temperature, generator):
            proposal = super().propose(num_tokens, temperature, generator)
            return dataclasses.replace(proposal, probs=torch.full_like(proposal.probs, 1.0 / V))

    bad = SpeculativeEngine(peaky, WrongQ(head, peaky), None, num_draft_tokens=2, eos_token_id=[])
    assert pvalue(bad.generate([prompt] * rows, max_new_tokens=2, temperature=T, seed=0)) < 1e-3


# ------------------------------------------------------------------ published layout
def test_a_head_in_the_published_layout_loads_and_decodes(target, refs, trained_head, tmp_path):
    head, _, out = trained_head
    folder = export_eagle(out, target, tmp_path / "exported")
    # EAGLE-1/2 checkpoints also carry these; they must be ignored, not refused
    from safetensors.torch import load_file, save_file

    weights = load_file(str(folder / "model.safetensors"))
    weights["embed_tokens.weight"] = torch.zeros(V, 32)
    weights["layers.0.input_layernorm.weight"] = torch.ones(32)
    save_file(weights, str(folder / "model.safetensors"))
    loaded = load_eagle_head(folder, target)
    assert load_draft_vocab(folder) is None
    eng = SpeculativeEngine(target, EagleDrafter(loaded, target), None, num_draft_tokens=3, eos_token_id=[])
    assert [r.token_ids for r in eng.generate(PROMPTS, max_new_tokens=N)] == refs
    x = torch.randn(1, 5, 32)
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    torch.testing.assert_close(loaded(ids, x).last_hidden_state, head(ids, x).last_hidden_state)


def test_pickled_or_mismatched_heads_are_refused(target, trained_head, tmp_path, tiny):
    head, _, _ = trained_head
    folder = save_eagle_head(head, tmp_path / "h")
    (folder / "model.safetensors").rename(folder / "pytorch_model.bin")
    with pytest.raises(ValueError, match="pickle.*safetensors"):
        load_eagle_head(folder, target)
    other = tiny.llama(0, vocab_size=V + 1)
    folder = save_eagle_head(head, tmp_path / "ok")
    with pytest.raises(ValueError, match="vocabulary"):
        load_eagle_head(folder, other)
    with pytest.raises(ValueError, match="config.json"):
        load_eagle_head(tmp_path, target)


def test_eagle_loss_is_the_formula(target):
    """Feature smooth-L1 + weighted soft cross-entropy over the scored (response) entries only."""
    head = new_head(target)
    recs = target_features(target, [([1, 2, 3, 4, 5, 6], 2), ([7, 8, 9], 1)], 0)
    loss, agree = eagle_loss(head, target.get_output_embeddings().weight.detach(), recs, 0, token_weight=0.5)
    W = target.get_output_embeddings().weight.detach()
    preds, trues = [], []
    for r in recs:
        f = r["features"].float()
        out = head(r["ids"][None, 1:], f[None, :-1]).last_hidden_state[0]
        scored = r["response"][1:]
        preds.append(out[scored])
        trues.append(f[1:][scored])
    pred, true = torch.cat(preds), torch.cat(trues)
    expect = torch.nn.functional.smooth_l1_loss(pred, true) + 0.5 * -(
        torch.softmax(true @ W.T, -1) * torch.log_softmax(pred @ W.T, -1)).sum(-1).mean()
    torch.testing.assert_close(loss, expect, atol=1e-5, rtol=1e-5)
    assert agree.shape == (pred.shape[0],) and pred.shape[0] == 4 + 2


# ------------------------------------------------------------------ label miners take any drafter
def test_teacher_forced_top1_is_each_drafters_first_proposal(target, trained_head):
    """What the label miners compare with the target's tokens: the first proposal the drafter
    makes after each true prefix (checked against a fresh prefill + one proposal)."""
    from selfjudge.models.generation import draft_top1, mismatches

    head, _, _ = trained_head
    prompt, response = [5, 7, 9, 11], [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]
    for drafter in (EagleDrafter(head, target), PromptLookupDrafter(V, max_ngram=2)):
        z = draft_top1(drafter, prompt, response)
        assert len(z) == len(response)
        for i in (0, 3, len(response) - 1):
            text = torch.tensor([prompt + response[:i]])
            drafter.prefill(text, torch.ones_like(text, dtype=torch.bool),
                            target_hidden=target_features(target, [(text[0, :-1].tolist(), 0)], 0)[0]["features"]
                            .float()[None])
            proposal = drafter.propose(1, 0.0, None)
            ids, counts = proposal.ids, proposal.counts
            expect = None if (counts is not None and counts[0] == 0) or ids.shape[1] == 0 else int(ids[0, 0])
            assert z[i] == expect, (type(drafter).__name__, i)
        assert mismatches(z, response) == [i for i, (a, b) in enumerate(zip(z, response)) if a is not None and a != b]


def test_shipped_eagle_head_is_the_default_eagle_dir(tiny):
    """--drafter eagle without --eagle: the head shipped for the default pair, refused for another target."""
    from selfjudge.engine.drafter_factory import make_drafter
    from selfjudge.models.eagle import SHIPPED_EAGLE_DIR

    assert (SHIPPED_EAGLE_DIR / "config.json").is_file() and (SHIPPED_EAGLE_DIR / "model.safetensors").is_file()
    with pytest.raises(ValueError, match="hidden size"):
        make_drafter("eagle", tiny.llama(0))


@pytest.mark.default_pair
def test_shipped_eagle_head_decodes_losslessly_on_the_default_pair():
    from selfjudge.engine import SpeculativeEngine
    from selfjudge.engine.drafter_factory import make_drafter
    from selfjudge.models import load_pair

    target, draft, tok = load_pair("smollm2-135m", drafter="model")
    eng = SpeculativeEngine(target, make_drafter("eagle", target, draft), tok, num_draft_tokens=3)
    ref = SpeculativeEngine(target, None, tok, policy="autoregressive")
    p = tok.apply_chat_template([{"role": "user", "content": "What is 3 + 4?"}], tokenize=False, add_generation_prompt=True)
    assert eng.generate([p], max_new_tokens=16)[0].token_ids == ref.generate([p], max_new_tokens=16)[0].token_ids


def _damaged_heads(folder):
    """(what, change) pairs: each change damages a copy of a valid head folder."""
    from safetensors.torch import load_file, save_file

    def config(**edits):
        def apply(d):
            raw = json.loads((d / "config.json").read_text())
            raw.update(edits)
            raw = {k: v for k, v in raw.items() if v is not _DROP}
            (d / "config.json").write_text(json.dumps(raw))
        return apply

    def weights(edit):
        def apply(d):
            w = load_file(str(d / "model.safetensors"))
            edit(w)
            save_file(w, str(d / "model.safetensors"))
        return apply

    def truncate(d):
        raw = (d / "model.safetensors").read_bytes()
        (d / "model.safetensors").write_bytes(raw[: len(raw) // 2])

    yield "huge intermediate_size", config(intermediate_size=10 ** 9)  # used to allocate before any check
    yield "string hidden_size", config(hidden_size="32")
    yield "NaN size", config(intermediate_size=float("nan"))
    yield "missing num_attention_heads", config(num_attention_heads=_DROP)
    yield "config a list", lambda d: (d / "config.json").write_text("[1, 2]")
    yield "config not json", lambda d: (d / "config.json").write_text("{")
    yield "wrong-shape tensor", weights(lambda w: w.update({"fc.weight": w["fc.weight"][:, :-1].contiguous()}))
    yield "missing tensor", weights(lambda w: w.pop("layers.0.mlp.up_proj.weight"))
    yield "extra fc key", weights(lambda w: w.update({"fc.extra": torch.zeros(2)}))
    yield "truncated weights", truncate


_DROP = object()


def test_damaged_head_folders_fail_in_one_value_error(target, trained_head, tmp_path):
    import shutil

    head, _, _ = trained_head
    good = save_eagle_head(head, tmp_path / "good")
    for n, (what, damage) in enumerate(_damaged_heads(good)):
        bad = tmp_path / f"bad{n}"
        shutil.copytree(good, bad)
        damage(bad)
        with pytest.raises(ValueError, match=f"bad{n}"):  # the huge size: refused before allocating it
            load_eagle_head(bad, target)
    load_eagle_head(good, target)  # negative control
