"""bench/drafters/measure_drafters.py's choice of the default drafter and per-block best, on synthetic rows."""

import pytest


def row(task, drafter, K, x, m, batch=1):
    return {"task": task, "batch": batch, "drafter": drafter, "K": K, "x_target_only": x, "m": m,
            "tokens_per_s": 10 * x}


def test_default_is_the_best_mean_speedup_over_every_task(bench_script):
    mod = bench_script("measure_drafters")
    rows = [row("gsm8k", "model", 3, 0.7, 1.3), row("sharegpt", "model", 3, 0.6, 1.2),
            row("gsm8k", "prompt-lookup", 3, 1.2, 1.5), row("sharegpt", "prompt-lookup", 3, 0.9, 1.4),
            row("gsm8k", "prompt-lookup", 4, 1.1, 1.6), row("sharegpt", "prompt-lookup", 4, 1.3, 1.9),
            row("gsm8k", "eagle", 3, 1.9, 1.5),  # best on one task, but not measured on the other: not eligible
            row("gsm8k", "model", 3, 5.0, 3.0, batch=8), row("sharegpt", "model", 3, 5.0, 3.0, batch=8)]
    rec = mod.default_record(rows, "cmd")
    assert (rec["drafter"], rec["num_draft_tokens"]) == ("prompt-lookup", 4)
    assert rec["mean_x_target_only"] == pytest.approx(1.2) and rec["per_task"]["sharegpt"]["m"] == 1.9
    assert rec["others"]["model@K3"] == pytest.approx(0.65) and "eagle@K3" not in rec["others"]
    best = {(b["task"], b["batch"]): b for b in mod.best_configurations(rows)}
    assert best[("gsm8k", 1)]["best_drafter"] == "eagle" and best[("sharegpt", 1)]["best_K"] == 4
    with pytest.raises(ValueError, match="batch-1"):
        mod.default_record([r for r in rows if r["batch"] == 8], "cmd")


def test_a_prompt_lookup_winner_records_its_ngram_lengths(bench_script):
    """When several shortest n-grams are compared, the winner's is written to the record (which
    load_pair reads); a plain drafter records none."""
    mod = bench_script("measure_drafters")
    rows = [row("gsm8k", "prompt-lookup-min1", 4, 1.1, 1.6), row("sharegpt", "prompt-lookup-min1", 4, 1.1, 1.6),
            row("gsm8k", "prompt-lookup-min2", 4, 1.3, 1.4), row("sharegpt", "prompt-lookup-min2", 4, 1.2, 1.5),
            row("gsm8k", "model", 3, 0.7, 1.3), row("sharegpt", "model", 3, 0.6, 1.2)]
    rec = mod.default_record(rows, "cmd", [1, 2], results="out.json")
    assert (rec["drafter"], rec["num_draft_tokens"]) == ("prompt-lookup", 4)
    assert rec["lookup"] == {"max_ngram": 3, "min_ngram": 2} and rec["results"] == "out.json"
    assert mod.lookup_name(2, [2]) == "prompt-lookup" and mod.lookup_name(2, [1, 2]) == "prompt-lookup-min2"
    only_model = [r for r in rows if r["drafter"] == "model"]
    assert "lookup" not in mod.default_record(only_model, "cmd", [1, 2])


def test_draft_folder_takes_hf_folders_as_they_are_and_refuses_others_by_name(bench_script, tmp_path):
    import pytest

    mod = bench_script("measure_drafters")
    assert mod.draft_folder(None) is None
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text("{}")
    assert mod.draft_folder(str(tmp_path / "hf")) == str(tmp_path / "hf")
    with pytest.raises(FileNotFoundError, match="--draft: .* neither config.json nor an exported draft.json"):
        mod.draft_folder(str(tmp_path))


def test_a_winner_with_an_ngram_store_records_the_store_file(bench_script):
    mod = bench_script("measure_drafters")
    rows = [row("gsm8k", "prompt-lookup", 3, 1.1, 1.4), row("sharegpt", "prompt-lookup", 3, 1.2, 1.4),
            row("gsm8k", "prompt-lookup+store", 3, 1.3, 1.8), row("sharegpt", "prompt-lookup+store", 3, 1.2, 1.6)]
    rec = mod.default_record(rows, "cmd", [2], lookup_store="some/dir/store.safetensors")
    assert rec["drafter"] == "prompt-lookup"
    assert rec["lookup"] == {"max_ngram": 3, "min_ngram": 2, "store": "store.safetensors"}
    assert rec["others"]["prompt-lookup@K3"] == pytest.approx(1.15)
    with pytest.raises(ValueError, match="lookup_store"):
        mod.default_record(rows, "cmd", [2])
    assert "store" not in mod.default_record(rows[:2], "cmd", [2])["lookup"]


def test_a_gated_store_winner_records_its_gate(bench_script):
    mod = bench_script("measure_drafters")
    rows = [row("gsm8k", "prompt-lookup+store", 3, 1.1, 1.8), row("sharegpt", "prompt-lookup+store", 3, 1.1, 1.6),
            row("gsm8k", "prompt-lookup+store-g0.5", 3, 1.3, 1.7), row("sharegpt", "prompt-lookup+store-g0.5", 3, 1.2, 1.5)]
    rec = mod.default_record(rows, "cmd", [2], lookup_store="store.safetensors")
    assert rec["lookup"] == {"max_ngram": 3, "min_ngram": 2, "store": "store.safetensors", "store_min_accepted": 0.5}
