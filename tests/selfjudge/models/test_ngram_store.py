"""Prompt lookup's n-gram store (selfjudge.models.ngram_store): its table against a brute-force
count, its chained continuations, its file, and the drafter that asks it."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch

from selfjudge.engine import SpeculativeEngine
from selfjudge.engine.prompt_lookup import PromptLookupDrafter
from selfjudge.models.ngram_store import NgramStore, load_ngram_store

SEQS = [[1, 2, 3, 4, 1, 2, 3, 5], [1, 2, 3, 4, 9], [7, 2, 3, 4], [8, 8, 6]]


def brute_force_next(seqs, gram, min_count, min_share):
    """The confident follower of ``gram`` by direct counting (None if there is none)."""
    n = len(gram)
    followers = Counter(s[i] for s in seqs for i in range(n, len(s)) if tuple(s[i - n:i]) == tuple(gram))
    if not followers:
        return None
    token, count = followers.most_common(1)[0]
    return token if count >= min_count and count >= min_share * sum(followers.values()) else None


@pytest.mark.parametrize("min_count,min_share", [(1, 0.0), (2, 0.5), (3, 0.6), (1, 0.9)])
def test_table_keeps_the_confident_follower_of_every_ngram(min_count, min_share):
    store = NgramStore(SEQS, max_ngram=3, min_ngram=1, min_count=min_count, min_share=min_share)
    grams = {tuple(s[i - n:i]) for s in SEQS for n in (1, 2, 3) for i in range(n, len(s) + 1)}
    kept = 0
    for gram in grams:
        expect = brute_force_next(SEQS, gram, min_count, min_share)
        assert store._next.get(gram) == expect, gram
        kept += expect is not None
    assert len(store) == kept


def test_longest_ngram_first_and_chained_continuations():
    store = NgramStore(SEQS, max_ngram=3, min_ngram=2, min_count=1, min_share=0.0)
    # "2 3" is followed by 4 three times and 5 once; the 3-gram "1 2 3" by 4 twice, 5 once
    assert store.next_token([0, 1, 2, 3]) == 4
    assert store.next_token([5, 7, 2, 3]) == 4  # the 3-gram "7 2 3" -> 4
    assert store.next_token([8, 8]) == 6
    assert store.next_token([6]) is None  # shorter than min_ngram
    assert store.next_token([0, 5, 5]) is None  # never seen
    assert store.continuation([9, 1, 2], 4) == [3, 4, 1, 2]  # chained: each guess extends the n-gram
    assert store.continuation([9, 1, 2], 1) == [3]
    assert store.continuation([0, 5, 5], 3) == [] and store.continuation([1, 2], 0) == []
    # with min_share 0.9 "2 3" (4 of its 4+1 continuations: 0.8) is no longer confident
    strict = NgramStore(SEQS, max_ngram=2, min_ngram=2, min_count=1, min_share=0.9)
    assert strict.next_token([2, 3]) is None and strict.next_token([3, 4]) is None


def test_file_round_trip_and_refusals(tmp_path):
    store = NgramStore(SEQS, max_ngram=3, min_ngram=2, min_count=1, min_share=0.5, source="toy")
    path = store.save(tmp_path / "store.safetensors")
    again = load_ngram_store(path, vocab_size=16)
    assert again._next == store._next and again.settings() == store.settings() == {
        "max_ngram": 3, "min_ngram": 2, "min_count": 1, "min_share": 0.5, "tokens": 20, "source": "toy"}
    with pytest.raises(ValueError, match="vocabulary of 6"):  # it proposes 6 after "8 8": no room in 6 ids
        load_ngram_store(path, vocab_size=6)
    with pytest.raises(ValueError, match=r"\.safetensors"):
        load_ngram_store(tmp_path / "store.pkl")
    with pytest.raises(FileNotFoundError):
        load_ngram_store(tmp_path / "missing.safetensors")
    from safetensors.torch import save_file

    save_file({"tokens": torch.zeros(3, dtype=torch.int32)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(ValueError, match="not an n-gram store"):
        load_ngram_store(tmp_path / "other.safetensors")
    for bad in ({"min_count": 0}, {"min_share": 1.5}, {"min_ngram": 3, "max_ngram": 2}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            NgramStore(SEQS, **bad)


def test_drafter_asks_the_store_only_where_the_context_has_no_match():
    store = NgramStore([[10, 11, 12, 13, 14]], max_ngram=2, min_ngram=2, min_count=1, min_share=0.0)
    with_store = PromptLookupDrafter(20, max_ngram=2, min_ngram=2, store=store)
    alone = PromptLookupDrafter(20, max_ngram=2, min_ngram=2)
    histories = [[3, 10, 11],  # no repeat in the context: the store continues "10 11"
                 [10, 11, 5, 10, 11],  # the context's own match wins: 5
                 [1, 2, 3]]  # neither
    for drafter in (with_store, alone):
        ids = torch.nn.utils.rnn.pad_sequence([torch.tensor(h) for h in histories], batch_first=True)
        valid = torch.nn.utils.rnn.pad_sequence([torch.ones(len(h), dtype=torch.bool) for h in histories],
                                                batch_first=True)
        drafter.prefill(ids, valid)
    proposal = with_store.propose(3, 0.0, None)
    ids, probs, counts = proposal.ids, proposal.probs, proposal.counts
    assert probs is None and counts == [3, 3, 0]
    assert ids[0].tolist() == [12, 13, 14] and ids[1].tolist() == [5, 10, 11]
    counts = alone.propose(3, 0.0, None).counts
    assert counts == [0, 3, 0]
    assert with_store.teacher_forced_top1([3, 10], [11, 12, 7]) == [None, 12, 13]
    with pytest.raises(ValueError, match="store"):  # a store for a larger vocabulary
        PromptLookupDrafter(12, store=store)


def test_engine_with_a_store_is_lossless(tiny):
    """Greedy standard SD with store proposals (mostly wrong on a random target) writes the
    target's own tokens, batched and one by one, and the store does propose."""
    V, N = 48, 16
    target = tiny.llama(0, vocab_size=V, max_position_embeddings=256)
    prompts = [[5, 7, 9, 11], [42, 17], [1, 2, 3, 4, 5, 6]]
    with torch.no_grad():
        refs = [target.generate(torch.tensor([p]), max_new_tokens=N, do_sample=False, min_new_tokens=N,
                                pad_token_id=0, eos_token_id=None)[0, len(p):].tolist() for p in prompts]
    g = torch.Generator().manual_seed(0)
    store = NgramStore([torch.randint(0, V, (400,), generator=g).tolist()], max_ngram=2, min_ngram=1, min_count=1,
                       min_share=0.0)
    eng = SpeculativeEngine(target, PromptLookupDrafter(V, max_ngram=3, min_ngram=3, store=store), None,
                            num_draft_tokens=3, eos_token_id=[])
    batched = eng.generate(prompts, max_new_tokens=N)
    assert [r.token_ids for r in batched] == refs
    assert [eng.generate([p], max_new_tokens=N)[0].token_ids for p in prompts] == refs
    assert sum(r.stats.draft_tokens for r in batched) > 0


def test_shipped_store_loads_for_the_default_pair():
    from pathlib import Path

    import selfjudge

    path = Path(selfjudge.__file__).parent / "assets" / "drafters" / "smollm2-135m-self-ngrams.safetensors"
    store = load_ngram_store(path, vocab_size=49152)
    report = json.loads((Path(__file__).resolve().parents[3] / "bench" / "results" / "ngram-store.json").read_text())
    assert len(store) == report["written"]["ngrams"] > 1000
    assert {k: v for k, v in store.settings().items()} == {k: v for k, v in report["written"].items()
                                                           if k not in ("path", "ngrams")}


def test_make_drafter_loads_a_store_for_prompt_lookup_only(tiny, tmp_path):
    from selfjudge.engine.drafter_factory import make_drafter

    target = tiny.llama(0, vocab_size=48)
    path = NgramStore(SEQS, max_ngram=2, min_ngram=2, min_count=1).save(tmp_path / "s.safetensors")
    drafter = make_drafter("prompt-lookup", target, min_ngram=2, lookup_store=path)
    assert isinstance(drafter, PromptLookupDrafter) and drafter.store is not None and drafter.min_ngram == 2
    assert make_drafter("prompt-lookup", target).store is None
    with pytest.raises(ValueError, match="lookup_store"):
        make_drafter("model", target, target, lookup_store=path)


def test_a_row_stops_asking_a_store_whose_proposals_are_not_kept():
    """The gate counts the drafts each row's store proposals kept; after ``store_min_tries`` tries
    a row below ``store_min_accepted`` per try proposes nothing from the store, the others go on."""
    store = NgramStore([[10, 11, 12, 13]], max_ngram=2, min_ngram=2, min_count=1, min_share=0.0)
    drafter = PromptLookupDrafter(20, max_ngram=2, min_ngram=2, store=store, store_min_accepted=1.0, store_min_tries=2)
    drafter.prefill(torch.tensor([[3, 10, 11], [4, 10, 11]]), torch.ones(2, 3, dtype=torch.bool))
    for _ in range(2):  # row 0 keeps nothing of [12, 13]; row 1 keeps both drafts, then returns to "10 11"
        proposal = drafter.propose(2, 0.0, None)
        ids, counts = proposal.ids, proposal.counts
        assert counts == [2, 2] and ids[0].tolist() == [12, 13]
        drafter.rollback(torch.tensor([0, 2]), 3, None, [[5], [12, 13, 0]])
        drafter._history = [[3, 10, 11], [4, 10, 11]]  # back to the store's n-gram, nothing repeated
    assert not drafter.store_open(0) and drafter.store_open(1)
    counts = drafter.propose(2, 0.0, None).counts
    assert counts == [0, 2]
    drafter.select(torch.tensor([1]))  # rows leave: the counts follow their rows
    assert drafter.store_open(0) and drafter._store_tries == [2] and drafter._store_kept == [4]
    ungated = PromptLookupDrafter(20, max_ngram=2, min_ngram=2, store=store)
    ungated.prefill(torch.tensor([[3, 10, 11]]), torch.ones(1, 3, dtype=torch.bool))
    for _ in range(3):
        assert ungated.propose(2, 0.0, None).counts == [2]
        ungated.rollback(torch.tensor([0]), 1, None, [[5]])
        ungated._history = [[3, 10, 11]]
    with pytest.raises(ValueError, match="store_min_tries"):
        PromptLookupDrafter(20, store=store, store_min_tries=0)


def _store_variants(path):
    """Damaged variants of a valid store file: (what, bytes | (tensors, metadata))."""
    from safetensors import safe_open

    raw = path.read_bytes()
    with safe_open(str(path), framework="pt") as f:
        meta = dict(f.metadata())
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    settings = json.loads(meta["settings"])
    yield "truncated", raw[: len(raw) // 2]
    yield "random", bytes(range(256)) * 3
    yield "empty", b""
    yield "no lengths", ({"tokens": tensors["tokens"]}, meta)
    yield "extra tensor", ({**tensors, "x": torch.zeros(1)}, meta)
    yield "no settings", (tensors, {k: v for k, v in meta.items() if k != "settings"})
    yield "settings a list", (tensors, {**meta, "settings": "[1, 2]"})
    yield "settings not json", (tensors, {**meta, "settings": "{"})
    yield "huge max_ngram", (tensors, {**meta, "settings": json.dumps({**settings, "max_ngram": 10 ** 9})})
    yield "string min_count", (tensors, {**meta, "settings": json.dumps({**settings, "min_count": "2"})})
    yield "unknown setting", (tensors, {**meta, "settings": json.dumps({**settings, "depth": 2})})
    lengths = tensors["lengths"].clone()
    lengths[0], lengths[1] = lengths[0] + lengths[1] + 1, -1  # still sums to the token count
    yield "negative length", ({**tensors, "lengths": lengths}, meta)
    yield "float tokens", ({**tensors, "tokens": tensors["tokens"].float()}, meta)
    yield "2-D tokens", ({**tensors, "tokens": tensors["tokens"][None]}, meta)


def test_damaged_store_files_fail_in_one_value_error_naming_the_file(tmp_path):
    from safetensors.torch import save_file

    good = NgramStore(SEQS, max_ngram=3, min_ngram=2, min_count=1, min_share=0.5, source="toy").save(
        tmp_path / "good.safetensors")
    seen = 0
    for n, (what, damaged) in enumerate(_store_variants(good)):
        bad = tmp_path / f"bad{n}.safetensors"
        if isinstance(damaged, bytes):
            bad.write_bytes(damaged)
        else:
            save_file(damaged[0], str(bad), metadata=damaged[1])
        with pytest.raises(ValueError, match="bad" + str(n)):
            load_ngram_store(bad, vocab_size=16)
        seen += 1
    assert seen == 14
    assert load_ngram_store(good, vocab_size=16).settings()["source"] == "toy"  # negative control


def test_a_pairs_lookup_proposes_teacher_forced_as_the_engines_drafter():
    """The draft slot of ``load_pair(..., drafter="prompt-lookup")`` labels with the same first
    proposals as the engine's drafter, store or not, so library and command-line labels agree."""
    from selfjudge.models.lookup import NgramLookup, lookup_id_suffix

    store = NgramStore([[10, 11, 12, 13, 14]], max_ngram=2, min_ngram=2, min_count=1, min_share=0.0)
    g = torch.Generator().manual_seed(0)
    for s in (store, None):
        pair_slot = NgramLookup(20, max_ngram=2, min_ngram=2, store=s)
        drafter = PromptLookupDrafter(20, max_ngram=2, min_ngram=2, store=s)
        for _ in range(20):
            prompt = torch.randint(0, 20, (6,), generator=g).tolist()
            response = torch.randint(0, 20, (12,), generator=g).tolist()
            assert pair_slot.teacher_forced_top1(prompt, response) == drafter.teacher_forced_top1(prompt, response)
        assert lookup_id_suffix(pair_slot) == lookup_id_suffix(drafter)
    assert NgramLookup(20, 2, 2, store=store).teacher_forced_top1([3, 10], [11, 12, 7]) == [None, 12, 13]
    assert lookup_id_suffix(NgramLookup(20, 3, 1)) == ":ngrams3-1"
    assert lookup_id_suffix(NgramLookup(20, 3, 2, store=store)) == f":ngrams3-2:store-{store.fingerprint()}"
