"""bench/studies/compare_judges.py on synthetic label dirs with known costs and agreements."""

import json

import numpy as np
import torch

from selfjudge.labelling.shards import ShardWriter

def write(d, method, n_prompts, labels_fn, cost, h=8, seed=0):
    rng = np.random.default_rng(seed)
    w_true = rng.normal(0, 1, h)
    man = {"method": method, "target": "toy/t", "draft": "toy/d", "task": "gsm8k", "window": 20, "tau": 0.0,
           "hidden_size": h}
    w = ShardWriter(str(d), man)
    for p in range(n_prompts):
        X = rng.normal(0, 1, (10, h)).astype(np.float32)
        rows = []
        for k in range(10):
            lab = labels_fn(p, k, X[k] @ w_true)
            rows.append({"prompt_id": f"p{p}", "position": k, "target_token_id": k, "draft_token_id": 100 + k,
                         "target_token": "t", "draft_token": "d", "score": 0.0, "label": lab,
                         "original_prefix": k < 5})
        w.write([f"p{p}"], rows, torch.from_numpy(X),
                stats={"wall_seconds": cost[0], "target_forward_tokens": cost[1],
                       "reference_wall_seconds": 1.0, "reference_forward_tokens": 300,
                       "reference_ids": list(range(10)) if p != 11 else [0] * 10})


def test_compare_judges_numbers(bench_script, tmp_path):
    bench = bench_script("compare_judges")
    # same features for both (same seed) so that labels are a function of the same x
    write(tmp_path / "sj", "selfjudge", 12, lambda p, k, s: int(s > 0), cost=(0.5, 100))
    # AutoJudge flips the label at position 0 of every prompt; positions >= 5 are not on the original prefix
    write(tmp_path / "aj", "autojudge", 12, lambda p, k, s: int(s > 0) ^ int(k == 0), cost=(20.0, 5000))
    out = tmp_path / "cmp.json"
    assert bench.main(["--selfjudge", str(tmp_path / "sj"), "--autojudge", str(tmp_path / "aj"), "--out", str(out),
                       "--c-grid", "0.01,1"]) == 0
    r = json.loads(out.read_text())
    c = r["cost"]
    assert c["selfjudge"]["n_labels"] == 120 and c["selfjudge"]["seconds_per_label"] == 0.05
    assert c["autojudge"]["target_forward_tokens_per_label"] == 500.0
    assert c["autojudge_over_selfjudge"]["seconds_per_label"] == 40.0
    assert c["autojudge_over_selfjudge"]["target_forward_tokens_per_label_incl_response"] == (5000 + 300) / (100 + 300)
    a = r["agreement"]
    # prompt p11's stored response disagrees with the SelfJudge rows: left out of the agreement
    assert r["n_prompts_same_response"] == 11
    assert a["n_shared"] == 11 * 5 and a["agreement"] == 4 / 5
    assert sum(a["table"].values()) == 55 and a["table"]["sj0_aj1"] + a["table"]["sj1_aj0"] == 11
    auc = r["roc_auc"]
    assert auc["verifier_selfjudge_on_selfjudge_labels"] > 0.9
    assert auc["verifier_autojudge_on_selfjudge_labels"] > 0.75
    assert auc["n_val_prompts"] + auc["n_train_prompts"] == 12
