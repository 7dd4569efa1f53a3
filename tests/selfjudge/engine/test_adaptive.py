"""Adaptive speculation: the cost profile, the acceptance estimates, the width controller, and
the engine under it (exact greedy output, the target's sampling distribution).

The controller is tested on made-up cost tables and acceptance streams, where the right answer
is known; the engine under tiny random Llamas with a given table, so no test measures this
machine (the suite's ``SELFJUDGE_PROFILE_DIR`` is a temporary folder in any case).
"""

from __future__ import annotations

import dataclasses
import json
import random

import pytest
import torch

from selfjudge.engine import SpeculativeEngine
from selfjudge.engine import cost_profile as cp
from selfjudge.engine.acceptance import AcceptanceEstimates
from selfjudge.engine.adaptive import AdaptiveController, Decision, Observation
from selfjudge.engine.cache import RaggedCache
from selfjudge.engine.cost_profile import CostProfile, load_or_measure_profile
from selfjudge.engine.prompt_lookup import PromptLookupDrafter

V = 48
N = 20


def profile(per_position: list[float], rows=(1, 8), row_slope: float = 0.0) -> CostProfile:
    """A made-up table: ``per_position[T-1]`` seconds at 1 row, growing by ``row_slope`` per extra row."""
    return CostProfile(tuple(rows), tuple(range(1, len(per_position) + 1)),
                       tuple(tuple(s * (1 + row_slope * (r - 1)) for s in per_position) for r in rows))


# ------------------------------------------------------------------ cost profile
def test_profile_is_linear_in_rows_and_refuses_bad_tables():
    p = CostProfile((1, 4), (1, 2), ((1.0, 2.0), (4.0, 5.0)))
    assert p.step_seconds(1, 0) == 1.0 and p.step_seconds(4, 1) == 5.0
    assert p.step_seconds(2, 0) == pytest.approx(2.0)  # between measured sizes
    assert p.step_seconds(7, 0) == pytest.approx(7.0)  # beyond them, on the last segment's line
    assert p.covers(4, 2) and not p.covers(5, 2) and not p.covers(4, 3)
    with pytest.raises(ValueError, match="positions"):
        p.step_seconds(1, 2)
    for bad in [((2, 1), (1, 2), ((1, 1), (1, 1))), ((1,), (2, 3), ((1, 1),)), ((1,), (1, 2), ((1, 0),)),
                ((1,), (1, 2), ((1, float("nan")),)), ((1,), (1, 2), ((1.0,),))]:
        with pytest.raises(ValueError):
            CostProfile(*bad)
    assert CostProfile.from_json(json.loads(json.dumps(p.to_json()))) == p
    with pytest.raises(ValueError, match="not a cost profile"):
        CostProfile.from_json({"rows": [1]})


def test_profile_is_measured_once_cached_and_widened(tiny, tmp_path, monkeypatch):
    target = tiny.llama(0, vocab_size=V, max_position_embeddings=512)
    calls = []
    real = cp.measure_cost_profile

    def counting(target, rows, positions, **kw):
        calls.append((rows, positions))
        return real(target, rows, positions, context=16, repeats=1, progress=False)

    monkeypatch.setattr(cp, "measure_cost_profile", counting)
    first = load_or_measure_profile(target, 2, 3, tmp_path)
    assert calls == [((1, 2), (1, 2, 3))] and first.covers(2, 3)
    assert first.key == cp.profile_key(target, torch.device("cpu"))
    (path,) = tmp_path.glob("profile-*.json")
    assert load_or_measure_profile(target, 2, 2, tmp_path) == first and len(calls) == 1  # read, not measured
    wider = load_or_measure_profile(target, 3, 4, tmp_path)  # a wider batch: measured again, old sizes kept
    assert calls[-1] == ((1, 2, 3), (1, 2, 3, 4)) and wider.covers(3, 4)
    assert CostProfile.from_json(json.loads(path.read_text())) == wider
    path.write_text("{not json")
    load_or_measure_profile(target, 1, 2, tmp_path)  # a damaged cache is measured again, not a traceback
    assert len(calls) == 3
    other = tiny.llama(0, vocab_size=V, hidden_size=48, max_position_embeddings=512)
    load_or_measure_profile(other, 1, 2, tmp_path)  # another target: its own table
    assert len(list(tmp_path.glob("profile-*.json"))) == 2


def test_packed_table_is_read_by_draft_count_then_rows():
    p = CostProfile((1, 4), (1, 2), ((1.0, 2.0), (4.0, 6.0)), None,
                    ((0, 1), (0, 1, 2, 4)), ((1.0, 2.0), (4.0, 5.0, 5.5, 6.0)))
    assert p.has_packed
    assert p.packed_seconds(4, 4) == 4.0 and p.packed_seconds(4, 5) == 5.0  # measured points
    assert p.packed_seconds(4, 7) == pytest.approx(5.75)  # 3 drafts: between 2 and 4
    assert p.packed_seconds(4, 10) == pytest.approx(6.5)  # 6 drafts: on the last segment's line
    assert p.packed_seconds(1, 2) == 2.0
    # 2 rows, 1 draft: 1 row reads 2.0, 4 rows read 5.0; a third of the way from 1 to 4 rows
    assert p.packed_seconds(2, 3) == pytest.approx(2.0 + (5.0 - 2.0) / 3)
    assert CostProfile.from_json(json.loads(json.dumps(p.to_json()))) == p
    for drafts, times in [(((0, 1),), ((1.0, 2.0),)), (((1, 2), (0, 1)), ((1.0, 2.0), (1.0, 2.0))),
                          (((0, 1), (0, 1)), ((1.0,), (1.0, 2.0))), (((0, 1), (0, 1)), ((1.0, 0.0), (1.0, 2.0)))]:
        with pytest.raises(ValueError):
            CostProfile((1, 4), (1, 2), ((1.0, 2.0), (4.0, 6.0)), None, drafts, times)


def test_packed_grid_holds_plain_powers_of_two_and_equal_widths():
    assert cp.packed_grid(1, 4) == (0, 1, 2, 3, 4)
    assert cp.packed_grid(8, 4) == (0, 1, 2, 4, 8, 16, 24, 32)
    assert cp.packed_grid(3, 2) == (0, 1, 2, 3, 4, 6)
    assert cp._round_robin(3, 4) == [2, 1, 1] and cp._round_robin(3, 0) == [0, 0, 0]


def test_timing_a_packed_step_leaves_the_cache_as_it_was(tiny):
    target = tiny.llama(0, vocab_size=V, max_position_embeddings=512)
    cache = RaggedCache(target, 3, torch.device("cpu"))
    g = torch.Generator().manual_seed(0)
    cache.feed(torch.randint(0, V, (3, 5), generator=g))
    before = (cache.length, cache.valid.clone(), cache.next_pos.clone(),
              [layer.keys.clone() for layer in cache.cache.layers])
    for counts, packed in [([0, 0, 0], True), ([2, 0, 1], True), ([2, 2, 2], True), ([2, 2, 2], False)]:
        assert cp._time_step(target, counts, cache, g, packed) > 0
        assert cache.length == before[0] and torch.equal(cache.valid, before[1])
        assert torch.equal(cache.next_pos, before[2])
        assert all(torch.equal(layer.keys, k) for layer, k in zip(cache.cache.layers, before[3]))


def test_a_cached_table_without_packed_steps_is_measured_again(tiny, tmp_path, monkeypatch):
    target = tiny.llama(0, vocab_size=V, max_position_embeddings=512)
    real = cp.measure_cost_profile
    monkeypatch.setattr(cp, "measure_cost_profile",
                        lambda t, rows, positions, **kw: real(t, rows, positions, context=8, repeats=1, progress=False))
    first = load_or_measure_profile(target, 2, 3, tmp_path)
    assert first.has_packed and first.packed_drafts == (cp.packed_grid(1, 2), cp.packed_grid(2, 2))
    assert all(padded[0] == packed[0] for padded, packed in zip(first.seconds, first.packed))  # one plain step
    (path,) = tmp_path.glob("profile-*.json")
    old = {k: v for k, v in first.to_json().items() if k not in ("packed", "packed_drafts")}
    path.write_text(json.dumps({**old, "format": 1}))
    assert load_or_measure_profile(target, 2, 3, tmp_path).has_packed


# ------------------------------------------------------------------ acceptance estimates
def test_expected_kept_is_the_sum_of_survival_probabilities():
    est = AcceptanceEstimates(prior=0.5, prior_weight=2, request_weight=4, decay=1.0, request_decay=1.0)
    est.start(2)
    for kept in [3, 3, 1, 0, 2]:  # row 0, "a": 5 proposals of 3 drafts
        est.observe(0, "a", 3, kept)
    # conditional rates by plain counting: position i tried when the earlier ones were kept
    tried, kept_at = [5, 4, 3], [4, 3, 2]
    shared, prior = [], 0.5  # each position shrunk toward the one before it
    for k, t in zip(kept_at, tried):
        shared.append((k + prior * 2) / (t + 2))
        prior = shared[-1]
    row0 = [(k + s * 4) / (t + 4) for k, t, s in zip(kept_at, tried, shared)]
    assert [est.rate(0, "a", i) for i in range(3)] == pytest.approx(row0)
    assert [est.rate(1, "a", i) for i in range(3)] == pytest.approx(shared)  # row 1: the shared rate
    assert est.rate(0, "b", 0) == 0.5  # another source: the prior
    assert est.rate(1, "a", 3) == pytest.approx(shared[2])  # never tried: the position before it
    survive = [row0[0], row0[0] * row0[1], row0[0] * row0[1] * row0[2]]
    assert est.expected_kept(0, "a", 3) == pytest.approx(sum(survive))
    assert est.expected_kept(0, "a", 0) == 0.0
    est.select([1])  # row 0 finished: row 1 is now row 0
    assert est.rate(0, "a", 0) == pytest.approx(shared[0])


def test_estimates_follow_a_stationary_stream():
    est, rng = AcceptanceEstimates(), random.Random(0)
    est.start(1)
    for _ in range(3000):
        kept = 0
        while kept < 4 and rng.random() < 0.8:
            kept += 1
        est.observe(0, "s", 4, kept)
    assert [est.shared_rate("s", i) for i in range(4)] == pytest.approx([0.8] * 4, abs=0.05)
    # a request's level remembers tens of cycles: noisier, still around the rate
    assert [est.rate(0, "s", i) for i in range(4)] == pytest.approx([0.8] * 4, abs=0.15)


# ------------------------------------------------------------------ the controller
def controller(table: CostProfile, **kw) -> AdaptiveController:
    c = AdaptiveController(4, cost_profile=table, **kw)
    c.start(None, 8)  # the table covers 8 rows: nothing is measured
    return c


def feed(c: AdaptiveController, rate: float, cycles: int, rows: int = 8, seed: int = 0) -> list[int]:
    """Run ``cycles`` cycles of rows that propose 4 tokens each kept with probability ``rate``;
    returns the widths chosen."""
    rng, widths = random.Random(seed), []
    for _ in range(cycles):
        d = c.choose([4] * rows, ["s"] * rows)
        widths.append(d.width)
        kept = []
        for n in d.num_draft:
            k = 0
            while k < n and rng.random() < rate:
                k += 1
            kept.append(k)
        c.observe(Observation(d, kept=kept))
    return widths


def test_controller_takes_the_plain_step_when_drafting_cannot_pay():
    # each extra position doubles the step: even all-kept drafts cannot pay (2 tokens for 2x the time)
    c = controller(profile([1.0, 2.0, 3.0, 4.0, 5.0]), probe_every=0)
    assert feed(c, rate=0.3, cycles=40)[-20:] == [0] * 20
    assert c.choose([0] * 8, ["s"] * 8).width == 0  # nothing proposed: plain


def test_controller_takes_the_maximum_when_acceptance_is_high():
    c = controller(profile([1.0, 1.1, 1.2, 1.3, 1.4]))
    assert feed(c, rate=0.97, cycles=60)[-30:] == [4] * 30
    d = c.choose([4, 2, 0, 4, 1, 4, 4, 4], ["s"] * 8)  # rows with fewer proposals send what they have
    assert d.width == 4 and d.num_draft == [4, 2, 0, 4, 1, 4, 4, 4]
    assert len(d.expected_kept) == 8 and d.expected_kept[2] == 0.0 and d.expected_kept[0] > 3


def test_controller_goes_plain_when_acceptance_collapses_and_probes_back():
    c = controller(profile([1.0, 1.3, 1.5, 1.7, 1.9]), probe_every=8)
    assert feed(c, rate=0.95, cycles=40)[-10:] == [4] * 10
    widths = feed(c, rate=0.0, cycles=120, seed=1)
    assert widths[-40:].count(0) >= 35  # plain steps, with a width-1 probe every 8
    assert 1 in widths[-40:] and max(widths[-40:]) == 1


def test_controller_does_not_flap_on_a_stationary_stream():
    # at keep rate 0.7, widths 3 and 4 score the same on this table: a single request's noisy
    # estimates cross the tie again and again
    table = profile([1.0, 1.25, 1.4, 1.55, 1.697])

    def changes(c: AdaptiveController, seed: int) -> int:
        widths = feed(c, rate=0.7, cycles=600, rows=1, seed=seed)[100:]
        return sum(a != b for a, b in zip(widths, widths[1:]))

    steady = sum(changes(controller(table), seed) for seed in range(2, 6))
    assert steady <= 12
    # negative control: without hysteresis the same streams change width several times as often
    loose = sum(changes(controller(table, hysteresis=0.0), seed) for seed in range(2, 6))
    assert loose >= 3 * max(steady, 5)


def test_controller_picks_the_score_maximising_width():
    table = profile([1.0, 1.2, 1.3, 1.8, 2.5], rows=(1, 8), row_slope=0.5)
    c = controller(table, hysteresis=0.0, probe_every=0)
    counts, sources = [4, 4, 3, 1, 0, 2, 4, 4], ["s"] * 8
    d = c.choose(counts, sources)
    est = c.estimates

    def score(w):
        tokens = 8 + sum(est.expected_kept(b, "s", min(n, w)) for b, n in enumerate(counts))
        return tokens / table.step_seconds(8, w)

    assert d.width == max(range(5), key=score)
    with pytest.raises(ValueError, match="max_draft_tokens"):
        AdaptiveController(0)
    with pytest.raises(ValueError, match="hysteresis"):
        AdaptiveController(4, hysteresis=-1)


def test_packed_cost_reads_the_table_at_positions_per_row():
    p = CostProfile((1, 4), (1, 2, 3), ((1.0, 2.0, 2.5), (4.0, 6.0, 7.0)))
    assert p.packed_seconds(4, 4) == 4.0 and p.packed_seconds(4, 8) == 6.0  # 1 and 2 positions per row
    assert p.packed_seconds(4, 6) == pytest.approx(5.0)  # 1.5 per row: halfway
    assert p.packed_seconds(4, 16) == pytest.approx(8.0)  # 4 per row: on the last segment's line
    assert p.packed_seconds(2, 2) == pytest.approx(2.0)  # rows between measured sizes


def test_packed_controller_admits_only_the_rows_that_pay():
    # 8 rows: row 0's drafts are always kept, the others' never; a draft position costs a fifth of a row's step
    c = controller(profile([1.0, 1.2, 1.4, 1.6, 1.8], row_slope=1.0), packed=True, probe_every=0)
    for _ in range(60):
        d = c.choose([4] * 8, ["s"] * 8)
        c.observe(Observation(d, kept=[n if b == 0 else 0 for b, n in enumerate(d.num_draft)]))
    d = c.choose([4] * 8, ["s"] * 8)
    assert d.num_draft == [4, 0, 0, 0, 0, 0, 0, 0] and d.width == 4
    # negative control: the padded controller cannot single out row 0, so it verifies nothing
    padded = controller(profile([1.0, 1.2, 1.4, 1.6, 1.8], row_slope=1.0), probe_every=0)
    for _ in range(60):
        d = padded.choose([4] * 8, ["s"] * 8)
        padded.observe(Observation(d, kept=[n if b == 0 else 0 for b, n in enumerate(d.num_draft)]))
    assert padded.choose([4] * 8, ["s"] * 8).width == 0


def test_packed_controller_finds_the_best_admission():
    import itertools

    table = profile([1.0, 1.3, 1.45, 1.55, 1.7], row_slope=0.6)
    c = controller(table, packed=True, hysteresis=0.0, probe_every=0, optimism=0.0)
    est = c.estimates
    est.start(3)
    for b, rate in enumerate([0.9, 0.5, 0.2]):  # three rows of different promise
        r = random.Random(b)
        for _ in range(40):
            kept = 0
            while kept < 3 and r.random() < rate:
                kept += 1
            est.observe(b, "s", 3, kept)
    counts, sources = [3, 2, 3], ["s"] * 3

    def score(ks):
        tokens = 3 + sum(est.expected_kept(b, "s", k) for b, k in enumerate(ks))
        return tokens / table.packed_seconds(3, 3 + sum(ks))

    best = max(itertools.product(*(range(c_ + 1) for c_ in counts)), key=score)
    d = c.choose(counts, sources)
    assert score(d.num_draft) == pytest.approx(score(best))
    assert d.num_draft[0] >= d.num_draft[2]  # the promising row first


def test_controller_prices_steps_as_this_context_costs_them():
    """Every row's first draft is kept, no other: by the table one draft per row pays (16 tokens for
    1.3 plain steps); measured speculative steps cost twice the table
    (a long context), plain ones what it says: the controller stops verifying. Negative control:
    measured as the table says, it keeps verifying."""
    def run(spec_factor):
        c = controller(profile([1.0, 1.3, 1.5, 1.7, 1.9], row_slope=1.0), packed=True, probe_every=0)
        for _ in range(40):
            d = c.choose([4] * 8, ["s"] * 8)
            drafts = sum(d.num_draft)
            seconds = c.profile.packed_seconds(8, 8 + drafts) * (spec_factor if drafts else 1.0)
            c.observe(Observation(d, kept=[min(n, 1) for n in d.num_draft], seconds=seconds))
        return c
    slow, fair = run(2.0), run(1.0)
    assert slow.cost_scale["speculative"] == pytest.approx(2.0) and slow.cost_scale["plain"] == pytest.approx(1.0)
    assert slow.choose([4] * 8, ["s"] * 8).width == 0
    assert fair.cost_scale["speculative"] == pytest.approx(1.0) and fair.choose([4] * 8, ["s"] * 8).width > 0


def test_an_unknown_source_is_tried_and_then_judged_on_its_record():
    # one draft costs 0.6 of a row's plain step: a draft must be kept with probability > 0.6 to pay
    table = profile([1.0, 1.6, 2.2, 2.8, 3.4])
    shy = controller(table, packed=True, optimism=0.0, probe_every=0)
    assert shy.choose([1], ["new"]).num_draft == [0]  # the prior 0.5 alone never pays: never learnt
    keen = controller(table, packed=True, probe_every=0)
    assert keen.choose([1], ["new"]).num_draft == [1]  # optimism: an unseen source is tried
    for _ in range(30):  # ... and dropped once its record says it does not pay
        d = keen.choose([1], ["new"])
        keen.observe(Observation(d, kept=[0] * len(d.num_draft)))
    assert keen.choose([1], ["new"]).num_draft == [0]
    with pytest.raises(ValueError, match="optimism"):
        AdaptiveController(4, optimism=-1)


def test_draft_model_cost_shrinks_the_request():
    c = controller(profile([1.0, 1.05, 1.1, 1.15, 1.2]))
    assert c.tokens_to_ask(8, 4, "draft") == 4  # drafting free so far: ask for the most
    c.observe(Observation(asked=4, draft_seconds=4 * 2.0))  # 2 s a drafted token: a long proposal cannot pay
    assert c.tokens_to_ask(8, 4, "draft") == 1


# ------------------------------------------------------------------ the engine under it
@pytest.fixture(scope="module")
def target(tiny):
    return tiny.llama(0, vocab_size=V, max_position_embeddings=256)


def hf_greedy(model, prompt, n, eos=None):
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False, pad_token_id=0,
                             eos_token_id=eos)
    return out[0, len(prompt):].tolist()


PROMPTS = [[5, 7, 9, 11], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], [42, 17], [30, 31, 30, 31, 30, 31, 30],
           [3, 3, 3], [12, 40, 12, 40], [20, 21, 22], [44, 8, 44, 8, 44]]


class RandomWidths(AdaptiveController):
    """Chooses a random width each cycle: exactness must not depend on what the controller picks."""

    def __init__(self, seed: int):
        super().__init__(4, cost_profile=profile([1.0, 1.1, 1.2, 1.3, 1.4]))
        self.rng = random.Random(seed)

    def tokens_to_ask(self, num_rows, cap, source):
        """Always the most drafts: what a drafter is asked for must not depend on measured seconds
        (a loaded machine makes drafting look dear), or the widths tried would."""
        return min(cap, self.max_draft_tokens)

    def choose(self, counts, sources):
        width = self.rng.randint(0, 4)
        num = [min(c, width) for c in counts]
        return Decision(width, num, [self.estimates.expected_kept(b, s, n) for b, (n, s) in
                                     enumerate(zip(num, sources))])


def widths_used(results) -> set[int]:
    return {k for r in results for k, n in enumerate(r.stats.drafts_verified) if n}


@pytest.mark.parametrize("rows", [1, 8])
@pytest.mark.parametrize("make", ["table", "random"])
def test_adaptive_greedy_equals_hf_generate(target, rows, make, monkeypatch):
    prompts = PROMPTS[:rows]
    # an EOS that prompt 1 reaches mid-way, so rows finish at different cycles
    eos = hf_greedy(target, PROMPTS[1], N)[6] if rows > 1 else None
    refs = [hf_greedy(target, p, N, eos) for p in prompts]
    adaptive = RandomWidths(7) if make == "random" else AdaptiveController(
        4, cost_profile=profile([1.0, 1.15, 1.25, 1.3, 1.35], row_slope=0.3))
    eng = SpeculativeEngine(target, PromptLookupDrafter(V, max_ngram=3), None, num_draft_tokens=None,
                            adaptive=adaptive, eos_token_id=[] if eos is None else eos)
    packed_calls = []
    real = RaggedCache.feed_packed

    def counting(self, *a, **kw):
        packed_calls.append(1)
        return real(self, *a, **kw)

    monkeypatch.setattr(RaggedCache, "feed_packed", counting)
    res = eng.generate(prompts, max_new_tokens=N)
    assert [r.token_ids for r in res] == refs
    assert sum(r.stats.accepted_tokens for r in res) > 0  # drafts were really verified and kept
    if rows > 1:
        assert len({len(r.token_ids) for r in res}) > 1  # rows finished at different times
        assert packed_calls  # rows with fewer proposals were verified on the packed path
    if make == "random":
        assert 0 in widths_used(res) and len(widths_used(res)) >= 3  # plain steps and several widths
    assert all(r.stats.expected_accepted >= 0 for r in res)


def test_a_single_row_verifies_at_the_cheapest_width_and_stays_exact(target, monkeypatch):
    """A 1-row table where 3 drafts cost less than 1 or 2 (as a CPU's matrix library can): the row
    verifies 1 or 2 drafts in a 4-position forward (filler columns the verify op never keeps), the
    output still equals Hugging Face's greedy output, and the controller prices that cheaper width."""
    table = profile([1.0, 1.6, 1.7, 1.2, 1.5])
    c = AdaptiveController(4, cost_profile=table)
    assert [c.verify_width(1, w) for w in range(5)] == [0, 3, 3, 3, 4]
    assert c.verify_width(2, 1) == 1  # several rows: no filler
    widths = []
    real = RaggedCache.feed

    def recording(self, ids, *a, **kw):
        widths.append(ids.shape[1])
        return real(self, ids, *a, **kw)

    monkeypatch.setattr(RaggedCache, "feed", recording)
    eng = SpeculativeEngine(target, PromptLookupDrafter(V, max_ngram=3), None, num_draft_tokens=None,
                            adaptive=AdaptiveController(4, cost_profile=table), eos_token_id=[])
    res = eng.generate(PROMPTS[0], max_new_tokens=N)
    assert res[0].token_ids == hf_greedy(target, PROMPTS[0], N)
    verified = {k for k, n in enumerate(res[0].stats.drafts_verified) if n}
    assert verified & {1, 2}, "the test needs cycles that verified 1 or 2 drafts"
    assert 2 not in widths[1:] and 3 not in widths[1:]  # after the prefill: 1 position or at least 4


def test_adaptive_with_a_draft_model_is_exact(tiny, target):
    draft = tiny.noisy_copy(target, 0.3, seed=1)
    refs = [hf_greedy(target, p, N) for p in PROMPTS[:4]]
    eng = SpeculativeEngine(target, draft, None, num_draft_tokens=None, eos_token_id=[],
                            adaptive=RandomWidths(3))
    res = eng.generate(PROMPTS[:4], max_new_tokens=N)
    assert [r.token_ids for r in res] == refs
    assert {0, 4} <= widths_used(res)


def test_adaptive_sampling_keeps_the_target_distribution(tiny, token_pvalue):
    """The second token's marginal under random widths (so cycles of every width, plain steps
    included, produce it) is the target's, chi-square over 3,000 rows; a drafter that lies about
    its probabilities is caught (negative control)."""
    peaky = tiny.llama(1, vocab_size=V, initializer_range=0.3, max_position_embeddings=256)
    draft = tiny.noisy_copy(peaky, 0.5, seed=2)
    prompt, rows = [5, 7, 9, 11], 3000
    with torch.no_grad():
        p1 = torch.softmax(peaky(torch.tensor([prompt])).logits[0, -1].double(), -1)  # [V]
        after = torch.tensor([prompt + [t] for t in range(V)])
        p2_given = torch.softmax(peaky(after).logits[:, -1].double(), -1)  # [V, V]
    p2 = p1 @ p2_given  # the second token's marginal

    def pvalue(results) -> float:  # the second token of every row
        return token_pvalue([r.token_ids[1] for r in results], p2)

    assert p2.max() > 3 / V  # far from uniform
    eng = SpeculativeEngine(peaky, draft, None, num_draft_tokens=None, adaptive=RandomWidths(5), eos_token_id=[])
    res = eng.generate([prompt] * rows, max_new_tokens=3, temperature=1.0, seed=0)
    assert sum(r.stats.accepted_tokens for r in res) > rows // 10
    assert pvalue(res) > 1e-3

    class Overconfident(SpeculativeEngine):  # the draft's q claimed uniform: its tokens are over-accepted
        def _propose(self, batch, cycle, run):
            proposal = super()._propose(batch, cycle, run)
            probs = proposal.probs
            return dataclasses.replace(proposal, probs=torch.full_like(probs, 1.0 / V) if probs is not None else None)

    bad = Overconfident(peaky, draft, None, num_draft_tokens=None, adaptive=RandomWidths(5), eos_token_id=[])
    assert pvalue(bad.generate([prompt] * rows, max_new_tokens=3, temperature=1.0, seed=0)) < 1e-3
