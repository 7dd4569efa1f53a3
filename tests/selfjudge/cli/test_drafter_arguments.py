"""The drafter options of the labelling and distillation commands: prompt lookup's n-gram
lengths, and distill-draft's data files. Wrong uses fail by name before any model loads."""

from __future__ import annotations

import argparse
import json

import pytest

from selfjudge.cli import main
from selfjudge.cli.common import lookup_lengths


def test_lookup_lengths_pass_through_for_prompt_lookup_only():
    ns = argparse.Namespace(drafter="prompt-lookup", max_ngram=3, min_ngram=1)
    assert lookup_lengths(ns) == {"max_ngram": 3, "min_ngram": 1}
    assert lookup_lengths(argparse.Namespace(drafter="prompt-lookup", max_ngram=None, min_ngram=2)) == {"min_ngram": 2}
    assert lookup_lengths(argparse.Namespace(drafter="model", max_ngram=None, min_ngram=None)) == {}
    with pytest.raises(ValueError, match="--min-ngram only apply to --drafter prompt-lookup, not 'eagle'"):
        lookup_lengths(argparse.Namespace(drafter="eagle", max_ngram=None, min_ngram=1))
    with pytest.raises(ValueError, match=r"--min-ngram \(4\) must not exceed --max-ngram \(3\)"):
        lookup_lengths(argparse.Namespace(drafter="prompt-lookup", max_ngram=3, min_ngram=4))
    store = argparse.Namespace(drafter="prompt-lookup", max_ngram=None, min_ngram=None, lookup_store="none")
    assert lookup_lengths(store) == {"lookup_store": "none"}
    with pytest.raises(ValueError, match="--lookup-store only apply to --drafter prompt-lookup, not 'model'"):
        lookup_lengths(argparse.Namespace(drafter="model", max_ngram=None, min_ngram=None, lookup_store="x"))


def test_label_draft_ids_name_the_ngram_store(tmp_path):
    """A label run's draft id names the store's fingerprint, so a run resumed with another store (or
    none) is refused; two stores of other data differ, the same data saved twice does not."""
    from selfjudge.cli.common import lookup_suffix
    from selfjudge.engine.prompt_lookup import PromptLookupDrafter
    from selfjudge.models.ngram_store import NgramStore, load_ngram_store

    a, b = NgramStore([[1, 2, 3, 1, 2, 4]], min_count=1), NgramStore([[1, 2, 3, 1, 2, 5]], min_count=1)
    again = load_ngram_store(a.save(tmp_path / "a.safetensors"))
    assert lookup_suffix(PromptLookupDrafter(8)) == ":ngrams3-1"
    assert lookup_suffix(PromptLookupDrafter(8, min_ngram=2)) == ":ngrams3-2"
    with_a = lookup_suffix(PromptLookupDrafter(8, min_ngram=2, store=a))
    assert with_a == f":ngrams3-2:store-{a.fingerprint()}" == lookup_suffix(PromptLookupDrafter(8, min_ngram=2, store=again))
    assert with_a != lookup_suffix(PromptLookupDrafter(8, min_ngram=2, store=b))


@pytest.mark.parametrize("command", [["label", "--task", "gsm8k", "--tau", "0"], ["autojudge-label", "--task", "gsm8k"]])
def test_label_commands_refuse_ngram_lengths_for_a_model_drafter(command, tmp_path, capsys):
    assert main([*command, "--drafter", "model", "--max-ngram", "4", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "--max-ngram only apply to --drafter prompt-lookup" in err and err.count("\n") == 1
    assert not (tmp_path / "run").exists()


def test_distill_draft_refuses_missing_or_empty_text_by_name(tmp_path, capsys):
    assert main(["distill-draft", "--out", str(tmp_path / "d"), "--text", str(tmp_path / "none.jsonl")]) == 2
    assert "--text: no such file" in capsys.readouterr().err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert main(["distill-draft", "--out", str(tmp_path / "d"), "--heldout-text", str(empty)]) == 2
    err = capsys.readouterr().err
    assert "--heldout-text" in err and "holds no sequences" in err


def test_distill_draft_head_vocab_takes_a_size_or_shipped(capsys):
    with pytest.raises(SystemExit):
        main(["distill-draft", "--head-vocab", "many"])
    assert "expected an integer >= 1 or 'shipped'" in capsys.readouterr().err


def test_read_sequences_stops_at_a_torn_last_line(tmp_path):
    from selfjudge.models.eagle_train import read_sequences

    path = tmp_path / "text.jsonl"
    path.write_text(json.dumps({"ids": [1, 2, 3], "start": 1}) + "\n" + json.dumps({"ids": [4, 5], "start": 0})
                    + "\n" + '{"ids": [6, 7')
    assert read_sequences(path) == [([1, 2, 3], 1), ([4, 5], 0)]


def test_distill_text_provenance_is_name_and_content(tmp_path):
    """The same bytes under another folder are the same data (a resume from another checkout);
    other bytes under the same name are not."""
    from selfjudge.cli.distill_draft import text_provenance

    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    line = json.dumps({"ids": [1, 2], "start": 1}) + "\n"
    (tmp_path / "a" / "train-text.jsonl").write_text(line)
    (tmp_path / "b" / "train-text.jsonl").write_text(line)
    here = text_provenance({"text": str(tmp_path / "a" / "train-text.jsonl"), "heldout_text": None})
    assert here == text_provenance({"text": str(tmp_path / "b" / "train-text.jsonl"), "heldout_text": None})
    assert here["text"] == "train-text.jsonl" and len(here["text_sha256"]) == 16 and "heldout_text" not in here
    (tmp_path / "b" / "train-text.jsonl").write_text(line * 2)
    assert here != text_provenance({"text": str(tmp_path / "b" / "train-text.jsonl"), "heldout_text": None})


def test_bench_takes_a_lookup_store_for_prompt_lookup_only(capsys):
    from selfjudge.cli.bench import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--drafter", "model", "--lookup-store", "none"])
    assert "--lookup-store only applies to --drafter prompt-lookup" in capsys.readouterr().err
    assert parse_args(["--drafter", "prompt-lookup", "--lookup-store", "none"]).drafting.lookup_store == "none"
    assert parse_args(["--drafter", "prompt-lookup"]).drafting.lookup_store is None
