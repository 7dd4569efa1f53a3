"""Target fingerprints: a moved folder is the same model, another model under the same name is not;
verifiers, n-gram stores and EAGLE heads made for one target are refused for another."""

import json
import shutil

import pytest
import torch

from selfjudge.judge import Verifier, load_verifier
from selfjudge.models.eagle import load_eagle_head, save_eagle_head
from selfjudge.models.eagle_train import new_head
from selfjudge.models.fingerprint import check_target, folder_fingerprint, model_fingerprint, target_fingerprint
from selfjudge.models.ngram_store import NgramStore, load_ngram_store


@pytest.fixture(scope="module")
def folders(tiny, tmp_path_factory):
    root = tmp_path_factory.mktemp("fingerprint")
    tok = tiny.tokenizer()
    a = tiny.save(root / "a", tok, layers=2, seed=0)
    moved = root / "elsewhere" / "a-moved"
    shutil.copytree(a, moved)
    return {"a": a, "moved": moved,
            "retrained": tiny.save(root / "retrained", tok, layers=2, seed=1),  # same sizes, other weights
            "deeper": tiny.save(root / "deeper", tok, layers=3, seed=0),
            "other-tokenizer": tiny.save(root / "other-tokenizer", tiny.tokenizer(tiny.WORDS[:-1] + ["zebra"]),
                                         layers=2, seed=0)}


def test_a_moved_folder_matches_and_every_other_model_differs(folders):
    fp = {name: folder_fingerprint(path) for name, path in folders.items()}
    assert fp["a"].startswith("sha256:") and fp["moved"] == fp["a"]
    assert len({fp["a"], fp["retrained"], fp["deeper"], fp["other-tokenizer"]}) == 4
    assert target_fingerprint(str(folders["a"])) == fp["a"]
    assert target_fingerprint("smollm2-135m") is None and target_fingerprint(None) is None  # names match by name


def test_path_fields_of_the_config_do_not_count(folders, tmp_path):
    copy = shutil.copytree(folders["a"], tmp_path / "copy")
    config = json.loads((copy / "config.json").read_text())
    config.update(_name_or_path="/somewhere/else", transformers_version="0.0.0")
    (copy / "config.json").write_text(json.dumps(config))
    assert folder_fingerprint(copy) == folder_fingerprint(folders["a"])
    config["hidden_size"] += 1  # negative control: a field of the model does count
    (copy / "config.json").write_text(json.dumps(config))
    assert folder_fingerprint(copy) != folder_fingerprint(folders["a"])


def test_a_folder_without_config_is_named(tmp_path):
    with pytest.raises(ValueError, match="no config.json"):
        folder_fingerprint(tmp_path)


def test_check_target_fingerprints_decide_else_names():
    meta = {"target": "/old/place", "target_fingerprint": "sha256:aa"}
    check_target(meta, "file", name="/new/place", fingerprint="sha256:aa")  # moved: accepted
    with pytest.raises(ValueError, match="another target model"):
        check_target(meta, "file", name="/old/place", fingerprint="sha256:bb")  # same name, other model
    with pytest.raises(ValueError, match="made for target model '/old/place', not '/new/place'"):
        check_target(meta, "file", name="/new/place")  # no fingerprint to compare: the names decide
    check_target({"target": "smollm2-135m"}, "file", name="smollm2-135m", fingerprint="sha256:cc")


def test_verifier_for_a_moved_target_loads_and_for_a_retrained_one_is_refused(folders, tmp_path):
    path = tmp_path / "v.safetensors"
    Verifier(weight=torch.ones(4), bias=0.0, thresholds={"F": 0.0},
             metadata={"target": str(folders["a"]), "target_fingerprint": folder_fingerprint(folders["a"])}).save(path)
    moved = str(folders["moved"])
    assert load_verifier(path, expect_model=moved, expect_fingerprint=target_fingerprint(moved)).bias == 0.0
    other = str(folders["retrained"])
    with pytest.raises(ValueError, match="trained for another target model"):
        load_verifier(path, expect_model=other, expect_fingerprint=target_fingerprint(other))


def test_store_records_its_target_and_is_refused_for_another(folders, tmp_path):
    path = NgramStore([[5, 6, 7, 5, 6, 7, 5, 6, 8]], min_count=1).save(
        tmp_path / "s.safetensors", target_fingerprint=folder_fingerprint(folders["a"]))
    assert load_ngram_store(path, target_fingerprint=folder_fingerprint(folders["moved"])).sequences
    assert load_ngram_store(path).sequences  # nothing to compare with: loaded
    with pytest.raises(ValueError, match="n-gram store .* built for another target model"):
        load_ngram_store(path, target_fingerprint=folder_fingerprint(folders["deeper"]))


def test_eagle_head_is_refused_for_another_target(folders, tmp_path):
    from transformers import AutoModelForCausalLM

    a = AutoModelForCausalLM.from_pretrained(folders["a"])
    retrained = AutoModelForCausalLM.from_pretrained(folders["retrained"])
    assert model_fingerprint(a) == folder_fingerprint(folders["a"])
    folder = save_eagle_head(new_head(a), tmp_path / "head", {"target_fingerprint": model_fingerprint(a)})
    assert load_eagle_head(folder, a) is not None
    with pytest.raises(ValueError, match="EAGLE head .* trained for another target model"):
        load_eagle_head(folder, retrained)
