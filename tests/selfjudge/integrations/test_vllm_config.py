"""The vLLM plugin's configuration: checked options, the served model's name, verifier refusal.
(No vLLM needed: this part of the plugin imports none.)"""

import pytest
import torch

from selfjudge.integrations.vllm.config import (DEFAULT_THRESHOLD, PluginOptions, load_judge, options_from,
                                                served_target_name)
from selfjudge.judge.verifier import Verifier


def test_no_selfjudge_entry_leaves_vllm_alone():
    assert options_from({}) is None and options_from(None) is None and options_from({"other": 1}) is None


def test_an_empty_entry_is_lossless_with_defaults():
    assert options_from({"selfjudge": {}}) == PluginOptions()
    assert options_from({"selfjudge": True}) == PluginOptions(threshold=None)  # the engine's default


def test_the_plugin_and_the_engine_resolve_the_same_default(tmp_path):
    from selfjudge.engine.policies import JudgePolicy

    calibrated = Verifier(weight=torch.ones(16), bias=0.0, thresholds={"F": 1.25},
                          metadata={"target": "m", "validation": {"curves": {"SelfJudge": [
                              {"m": 1.5, "semantic_fidelity": 0.99, "logit": 2.0},
                              {"m": 2.0, "semantic_fidelity": 0.90, "logit": -1.0}]}}})
    for verifier, expect in ((calibrated, 2.0), (Verifier(weight=torch.ones(16), bias=0.0, thresholds={"F": 1.25},
                                                          metadata={"target": "m"}), 1.25)):
        path = str(tmp_path / "v.safetensors")
        verifier.save(path)
        plugin = load_judge(PluginOptions(verifier=path, target="m"), "m", 16, torch.device("cpu"))
        assert plugin.threshold == JudgePolicy(verifier).threshold == expect
    assert DEFAULT_THRESHOLD == "quality:0.97"


@pytest.mark.parametrize("entry, named", [
    ({"verfier": "x"}, "verfier"), ({"threshold": True}, "threshold"), ({"threshold": [1]}, "threshold"),
    ({"backend": "cuda"}, "backend"), ({"target": 3}, "target"), ({"verifier": 5}, "verifier"),
])
def test_bad_entries_name_the_key(entry, named):
    with pytest.raises(ValueError, match=named):
        options_from({"selfjudge": entry})


def test_a_non_object_entry_is_refused():
    with pytest.raises(ValueError, match="JSON object"):
        options_from({"selfjudge": "on"})


def test_the_builtin_target_folder_is_served_under_the_pair_name(tmp_path):
    folder = tmp_path / "smollm2-135m-instruct"
    folder.mkdir()
    assert served_target_name(str(folder), cache_dir=tmp_path) == "smollm2-135m"
    assert served_target_name(str(tmp_path / "other"), cache_dir=tmp_path) == str(tmp_path / "other")


def _verifier(path, target="smollm2-135m", hidden=16):
    Verifier(weight=torch.linspace(-1, 1, hidden), bias=0.5, thresholds={"F": 1.25},
             metadata={"target": target}).save(path)
    return str(path)


def test_the_judge_loads_at_its_threshold(tmp_path):
    path = _verifier(tmp_path / "v.safetensors")
    judge = load_judge(PluginOptions(verifier=path, threshold="F", target="smollm2-135m"), "m", 16,
                       torch.device("cpu"))
    assert judge.threshold == 1.25 and judge.bias == 0.5 and judge.weight.shape == (16,)
    assert judge.phi_weight is None and judge.source == path


def test_lossless_options_load_no_judge():
    assert load_judge(PluginOptions(), "m", 16, torch.device("cpu")) is None


def test_a_verifier_for_another_model_is_refused(tmp_path):
    path = _verifier(tmp_path / "v.safetensors", target="other-model")
    with pytest.raises(ValueError, match="trained for target model 'other-model'"):
        load_judge(PluginOptions(verifier=path, threshold=0.0), "/models/smollm2", 16, torch.device("cpu"))


def test_a_verifier_for_another_hidden_size_is_refused(tmp_path):
    path = _verifier(tmp_path / "v.safetensors", hidden=8)
    with pytest.raises(ValueError, match="hidden size 8"):
        load_judge(PluginOptions(verifier=path, threshold=0.0, target="smollm2-135m"), "m", 16, torch.device("cpu"))
