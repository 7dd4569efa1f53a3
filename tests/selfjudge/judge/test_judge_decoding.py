"""A verifier file drives the engine's judge policy end to end (tiny random Llamas), and the shipped files load."""

import math

import pytest
import torch

from selfjudge.engine import SpeculativeEngine
from selfjudge.judge import Verifier, load_verifier, shipped_verifier_path


def test_verifier_file_drives_judge_policy(tmp_path, tiny):
    config = dict(vocab_size=32, initializer_range=0.3, eos_token_id=3, bos_token_id=1, pad_token_id=0)
    target, draft = tiny.llama(0, num_hidden_layers=2, **config), tiny.llama(1, num_hidden_layers=1, **config)
    g = torch.Generator().manual_seed(0)
    v = Verifier(weight=torch.randn(32, generator=g), bias=0.0, thresholds={"none": 1e9, "all": -1e9},
                 metadata={"method": "selfjudge", "target": "toy"})
    path = tmp_path / "v.safetensors"
    v.save(path)
    loaded = load_verifier(path, expect_model="toy", expect_hidden_size=32)
    prompt = [[5, 9, 17, 2]]
    std = SpeculativeEngine(target, draft, None, num_draft_tokens=3, policy="standard").generate(prompt, 12)[0]
    none = SpeculativeEngine(target, draft, None, num_draft_tokens=3, policy="judge", verifier=loaded,
                             threshold="none").generate(prompt, 12)[0]
    allj = SpeculativeEngine(target, draft, None, num_draft_tokens=3, policy="judge", verifier=loaded,
                             threshold="all").generate(prompt, 12)[0]
    assert none.token_ids == std.token_ids and none.stats.judge_accepted == 0
    assert allj.stats.judge_accepted > 0
    assert allj.stats.mean_accepted_length > std.stats.mean_accepted_length


SHIPPED = [("selfjudge", "gsm8k", "model"), ("autojudge", "gsm8k", "model"), ("selfjudge", "sharegpt", "model"),
           ("selfjudge", "gsm8k", "prompt-lookup"), ("selfjudge", "sharegpt", "prompt-lookup"),
           ("selfjudge", "summarize", "prompt-lookup"), ("selfjudge", "general", "prompt-lookup")]


@pytest.mark.parametrize("method,task,drafter", SHIPPED)
def test_shipped_verifiers_load_for_the_default_pair(method, task, drafter):
    v = load_verifier(shipped_verifier_path(method, "smollm2-135m", task, drafter), expect_model="smollm2-135m",
                      expect_hidden_size=576)
    m = v.metadata
    assert m["method"] == method and m["task"] == (task if task != "general" else "gsm8k+sharegpt+summarize")
    # labels of that drafter (the default one: with its n-gram lengths and store fingerprint)
    assert m["draft"] == "smollm2-135m:draft" if drafter == "model" else m["draft"].startswith(f"smollm2-135m:{drafter}")
    if drafter == "prompt-lookup" and method == "selfjudge":  # the judge reads h and the probability features
        assert m["feature_set"] == "h+phi" and v.phi_weight is not None and v.phi_features
        assert 0.5 < m["metrics"]["test"]["roc_auc"] <= 1.0 and {"J", "R80"} <= set(v.thresholds)
    assert m["command"].startswith("selfjudge train") and m["training_set"]["n"] > 0
    assert m["labels_command"].startswith("selfjudge " + ("label" if method == "selfjudge" else "autojudge-label"))
    assert {"F", "R", "q0.50", "q0.99"} <= set(v.thresholds) and all(math.isfinite(t) for t in v.thresholds.values())
    assert 0.0 <= m["metrics"]["val_roc_auc"] <= 1.0
    if method == "selfjudge":
        # tau: a quantile of the swap scores, chosen per task (bench/studies/make_default_verifiers.sh sweeps 0.8..0.95)
        assert m["window"] == 20 and 0.5 <= m["tau_quantile"] <= 0.95 and math.isfinite(m["tau"])
    assert torch.isfinite(v.weight).all()
    # a different model's verifier is refused
    with pytest.raises(ValueError):
        load_verifier(shipped_verifier_path(method, "smollm2-135m", task, drafter), expect_hidden_size=577)
