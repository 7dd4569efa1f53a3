"""A user's model folder: a config naming huge sizes is refused before anything is allocated, and
any damage is one ValueError naming the role and the folder."""

import json

import pytest

from selfjudge.models.hf_folder import check_config_fits_weights, load_causal_lm, load_tokenizer


@pytest.fixture
def folder(tmp_path, tiny):
    return tiny.save(tmp_path / "m", tiny.tokenizer(), layers=2)


def edit_config(folder, **changes):
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))


def test_a_valid_folder_loads(folder):
    check_config_fits_weights(folder, "draft")
    assert load_causal_lm(folder, role="draft").config.num_hidden_layers == 2
    assert len(load_tokenizer(folder, "draft")) > 3


@pytest.mark.parametrize("key", ["hidden_size", "intermediate_size", "vocab_size", "num_hidden_layers"])
def test_huge_sizes_are_refused_from_the_headers(folder, key):
    edit_config(folder, **{key: 10 ** 7})
    with pytest.raises(ValueError, match=f"draft: {folder / 'config.json'} implies at least"):
        load_causal_lm(folder, role="draft")


@pytest.mark.parametrize("value", ["32", -1, 0, True, 1.5])
def test_sizes_of_the_wrong_type_are_refused(folder, value):
    edit_config(folder, hidden_size=value)
    with pytest.raises(ValueError, match="must be positive integers"):
        load_causal_lm(folder, role="draft")


@pytest.mark.parametrize("damage", ["nested", "truncated-weights", "tokenizer"])
def test_damage_is_one_value_error_naming_the_folder(folder, damage):
    if damage == "nested":
        (folder / "generation_config.json").write_text("[" * 5000 + "]" * 5000)
    elif damage == "truncated-weights":
        data = (folder / "model.safetensors").read_bytes()
        (folder / "model.safetensors").write_bytes(data[: len(data) // 3])
    else:
        (folder / "tokenizer.json").write_text('{"model": {"type": "WordLevel", "vocab": "x"}}')
    with pytest.raises(ValueError, match=f"draft: .*{folder}"):
        if damage == "tokenizer":
            load_tokenizer(folder, "draft")
        else:
            load_causal_lm(folder, role="draft")
