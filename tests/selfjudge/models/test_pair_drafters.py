"""load_pair(..., drafter=): what fills a pair's draft slot, and the engine decoding with each.

The slot holds a draft model, an EAGLE head (with the sub-vocabulary it drafts from) or
prompt lookup's settings; SpeculativeEngine takes each as its draft. Greedy standard SD
with every kind must equal target-only decoding token for token.
"""

from __future__ import annotations

import json

import pytest
import torch

from selfjudge.engine import SpeculativeEngine
from selfjudge.engine.eagle_drafter import EagleDrafter
from selfjudge.engine.prompt_lookup import PromptLookupDrafter
from selfjudge.models import load_pair
from selfjudge.models.eagle import DRAFT_VOCAB_FILE, EagleHead, save_eagle_head
from selfjudge.models.eagle_train import new_head
from selfjudge.models.lookup import NgramLookup
from selfjudge.models.pair import DEFAULT_DRAFTER_FILE, DRAFTER_KINDS, default_drafter

PROMPTS = [[5, 7, 9, 11, 5, 7], [12, 13, 14], [20, 21, 20, 21, 20]]


@pytest.fixture(scope="module")
def folders(tiny, tmp_path_factory):
    """A tiny target folder, a draft folder and an EAGLE head folder (published layout, with a
    sub-vocabulary) for that target."""
    root = tmp_path_factory.mktemp("pair")
    tok = tiny.tokenizer()
    target_dir = tiny.save(root / "target", tok, layers=2, seed=0)
    draft_dir = tiny.save(root / "draft", tok, layers=1, seed=1)
    target = load_pair(str(target_dir), str(draft_dir)).target
    torch.manual_seed(0)
    head = new_head(target)
    head_dir = save_eagle_head(head, root / "head")
    from safetensors.torch import save_file

    vocab = torch.arange(0, int(target.config.vocab_size), 2, dtype=torch.int64)
    save_file({"vocab_ids": vocab}, str(head_dir / DRAFT_VOCAB_FILE))
    return target_dir, draft_dir, head_dir, vocab


def greedy(target, draft, prompts, n=12):
    eng = SpeculativeEngine(target, draft, None, num_draft_tokens=3, eos_token_id=[])
    return [r.token_ids for r in eng.generate(prompts, max_new_tokens=n)], eng


def test_each_drafter_kind_fills_the_slot_and_decodes_losslessly(folders):
    target_dir, draft_dir, head_dir, vocab = folders
    ref_pair = load_pair(str(target_dir), str(draft_dir))  # a draft folder: the model drafter by default
    assert hasattr(ref_pair.draft, "generate") and not isinstance(ref_pair.draft, EagleHead)
    ref = [r.token_ids for r in SpeculativeEngine(ref_pair.target, None, None, policy="autoregressive", eos_token_id=[])
           .generate(PROMPTS, max_new_tokens=12)]

    out, _ = greedy(ref_pair.target, ref_pair.draft, PROMPTS)
    assert out == ref

    lookup = load_pair(str(target_dir), drafter="prompt-lookup")  # no draft model needed
    assert lookup.draft == NgramLookup(int(lookup.target.config.vocab_size))
    out, eng = greedy(lookup.target, lookup.draft, PROMPTS)
    assert isinstance(eng.drafter, PromptLookupDrafter) and out == ref

    eagle = load_pair(str(target_dir), str(head_dir), drafter="eagle")
    assert isinstance(eagle.draft, EagleHead) and torch.equal(eagle.draft.draft_vocab, vocab)
    out, eng = greedy(eagle.target, eagle.draft, PROMPTS)
    assert isinstance(eng.drafter, EagleDrafter) and out == ref
    assert torch.equal(eng.draft_vocab, vocab)  # proposals come from the head's sub-vocabulary


def test_bad_drafter_arguments_name_the_argument(folders):
    target_dir, draft_dir, _, _ = folders
    with pytest.raises(ValueError, match="drafter must be one of"):
        load_pair(str(target_dir), str(draft_dir), drafter="medusa")
    with pytest.raises(ValueError, match="draft: prompt lookup"):
        load_pair(str(target_dir), str(draft_dir), drafter="prompt-lookup")
    with pytest.raises(ValueError, match="draft: give the EAGLE head folder"):
        load_pair(str(target_dir), drafter="eagle")
    with pytest.raises(ValueError, match="name_or_target"):
        load_pair(str(target_dir))  # a target folder and no draft: nothing to draft with
    with pytest.raises(ValueError, match="min_ngram"):
        NgramLookup(10, max_ngram=1, min_ngram=2)
    with pytest.raises(ValueError, match="draft_vocab applies"):
        SpeculativeEngine(load_pair(str(target_dir), drafter="prompt-lookup").target, NgramLookup(10), None,
                          draft_vocab=torch.arange(4))


def test_default_drafter_is_the_recorded_measurement():
    """The built-in pair's default is what default.json records (with the measurement behind it);
    a pair given as folders drafts with its draft model."""
    record = json.loads(DEFAULT_DRAFTER_FILE.read_text())
    assert record["pair"] == "smollm2-135m" and record["drafter"] in DRAFTER_KINDS
    assert default_drafter() == record["drafter"]
    assert default_drafter("smollm2-135m", "some/draft") == "model"
    assert default_drafter("path/to/target") == "model"
    import argparse

    from selfjudge.cli.common import add_drafter_arguments

    cli = argparse.ArgumentParser()
    add_drafter_arguments(cli, "drafts")
    assert tuple(next(a for a in cli._actions if a.dest == "drafter").choices) == DRAFTER_KINDS  # the CLI's copy
    from selfjudge.models.pair import default_num_draft_tokens

    assert default_num_draft_tokens() == record["num_draft_tokens"] >= 1  # the sweep's K, for the default drafter
    other = next(k for k in DRAFTER_KINDS if k != record["drafter"])
    assert default_num_draft_tokens("smollm2-135m", other) == 4 and default_num_draft_tokens("path/to/target") == 4


def test_prompt_lookup_settings_come_from_the_record_for_the_builtin_pair(tmp_path, monkeypatch):
    """load_pair's and make_drafter's prompt lookup use the n-gram lengths default.json records for
    the built-in pair, the class defaults for another target; explicit lengths win; a record with
    an unknown setting is refused by name."""
    import selfjudge.models.pair as pair_mod
    from selfjudge.engine.drafter_factory import make_drafter
    from selfjudge.models.pair import default_lookup

    record = json.loads(DEFAULT_DRAFTER_FILE.read_text())
    fake = tmp_path / "default.json"
    fake.write_text(json.dumps({**record, "lookup": {"max_ngram": 4, "min_ngram": 2}}))
    monkeypatch.setattr(pair_mod, "DEFAULT_DRAFTER_FILE", fake)
    assert default_lookup(100) == NgramLookup(100, max_ngram=4, min_ngram=2)
    assert default_lookup(100, "path/to/target") == NgramLookup(100)

    class Target:
        config = type("Config", (), {"vocab_size": 50})()

    d = make_drafter("prompt-lookup", Target(), pair="smollm2-135m")
    assert (d.max_ngram, d.min_ngram, d.vocab_size) == (4, 2, 50)
    d = make_drafter("prompt-lookup", Target(), pair="smollm2-135m", min_ngram=1)
    assert (d.max_ngram, d.min_ngram) == (4, 1)
    d = make_drafter("prompt-lookup", Target())
    assert (d.max_ngram, d.min_ngram) == (NgramLookup(1).max_ngram, NgramLookup(1).min_ngram)
    fake.write_text(json.dumps({**record, "lookup": {"min_n": 2}}))
    with pytest.raises(ValueError, match="min_n"):
        default_lookup(100)


def test_the_recorded_lookup_settings_are_valid():
    from selfjudge.models.pair import default_lookup

    record = json.loads(DEFAULT_DRAFTER_FILE.read_text())
    lookup = default_lookup(49152)
    recorded = dict(record.get("lookup", {"max_ngram": NgramLookup(1).max_ngram, "min_ngram": NgramLookup(1).min_ngram}))
    store = recorded.pop("store", None)
    assert recorded.pop("store_min_accepted", None) == lookup.store_min_accepted
    assert {"max_ngram": lookup.max_ngram, "min_ngram": lookup.min_ngram} == recorded
    assert (lookup.store is None) == (store is None)  # a recorded store lies beside the record and loads
    if store is not None:
        assert (DEFAULT_DRAFTER_FILE.parent / store).is_file() and len(lookup.store) > 0


@pytest.mark.default_pair
def test_default_pair_loads_its_default_drafter():
    pair = load_pair("smollm2-135m")
    kind = default_drafter()
    expected = {"model": torch.nn.Module, "eagle": EagleHead, "prompt-lookup": NgramLookup}[kind]
    assert isinstance(pair.draft, expected)
    p = pair.tokenizer.apply_chat_template([{"role": "user", "content": "Repeat: one two three, one two three."}],
                                           tokenize=False, add_generation_prompt=True)
    eng = SpeculativeEngine(pair.target, pair.draft, pair.tokenizer, num_draft_tokens=3)
    ref = SpeculativeEngine(pair.target, None, pair.tokenizer, policy="autoregressive")
    assert eng.generate([p], max_new_tokens=16)[0].token_ids == ref.generate([p], max_new_tokens=16)[0].token_ids
