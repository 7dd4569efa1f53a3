"""One's own model end to end through the command line, on tiny random local folders: build a
store, label, train a verifier, then generate, bench and demo with it; a target folder alone
(prompt lookup) and a target + draft folder pair."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest


def run_cli(*args: str, ok: bool = True) -> subprocess.CompletedProcess:
    res = subprocess.run([sys.executable, "-m", "selfjudge.cli", *map(str, args)], capture_output=True, text=True,
                         timeout=300)
    if ok:
        assert res.returncode == 0, res.stderr[-3000:]
    return res


def _save(model, tok, folder):
    model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def folders(tiny, tmp_path_factory):
    """A target whose greedy text varies (large initial weights: a default-scale random model repeats
    one token, which leaves prompt lookup nothing to get wrong), another target, and a draft."""
    root = tmp_path_factory.mktemp("own")
    tok = tiny.tokenizer()
    config = dict(vocab_size=len(tok), num_hidden_layers=2, tie_word_embeddings=True, bos_token_id=1,
                  eos_token_id=2, pad_token_id=2, initializer_range=0.3)
    target = tiny.llama(3, **config)
    return {"root": root, "target": _save(target, tok, root / "target"),
            "other": _save(tiny.llama(4, **config), tok, root / "other-target"),
            "draft": _save(tiny.noisy_copy(target, 0.3), tok, root / "draft")}


def _tokens(res: subprocess.CompletedProcess) -> list[list[int]]:
    return [json.loads(line)["token_ids"] for line in res.stdout.splitlines() if line.startswith("{")]


PROMPTS = ["the cat sat on the mat and the dog ran", "one two three four five one two three"]


def test_the_whole_workflow_on_ones_own_target(folders):
    root, target = folders["root"], folders["target"]
    store = root / "store.safetensors"
    common = ["--target", target, "--device", "cpu"]
    run_cli("build-store", *common, "--tasks", "sharegpt", "--prompts", "4", "--heldout", "2",
            "--max-new-tokens", "16", "--out", store)
    report = json.loads(store.with_suffix(".json").read_text())
    assert report["written"]["tokens"] > 0 and len(report["sweep"]) == 16 and report["chosen_by"]

    lookup = ["--drafter", "prompt-lookup", "--lookup-store", store]
    labels = root / "labels"
    run_cli("label", *common, *lookup, "--task", "sharegpt", "--limit", "6", "--max-new-tokens", "24",
            "--tau-quantile", "0.5", "--out", labels)
    summary = json.loads((labels / "summary.json").read_text())
    assert summary["labels"] > 10 and summary["positive"] > 0 and summary["negative"] > 0
    verifier = root / "v.safetensors"
    run_cli("train", "--labels", labels, "--out", verifier, "--features", "h+phi", "--val-fraction", "0.3",
            "--test-fraction", "0")

    greedy = run_cli("generate", *common, "--policy", "autoregressive", "--max-new-tokens", "12", "--json",
                     "--prompt", *PROMPTS)
    standard = run_cli("generate", *common, *lookup, "-k", "3", "--max-new-tokens", "12", "--json", "--prompt", *PROMPTS)
    assert _tokens(standard) == _tokens(greedy) and len(_tokens(greedy)) == 2  # lossless with prompt lookup
    # a fixed K: under adaptive speculation a lossy policy's output follows the widths, which follow
    # measured step times, so two runs may differ (csrc_docs/adaptive.md)
    judged = run_cli("generate", *common, *lookup, "-k", "3", "--policy", "judge", "--verifier", verifier,
                     "--threshold", "F", "--max-new-tokens", "12", "--json", "--prompt", *PROMPTS)
    assert all(0 < len(t) <= 12 for t in _tokens(judged))

    refused = run_cli("generate", "--target", folders["other"], "--device", "cpu", "--drafter", "prompt-lookup",
                      "--policy", "judge", "--verifier", verifier, "--prompt", "hi", ok=False)
    assert refused.returncode == 2 and "verifier" in refused.stderr
    # the verifier and the store know the target by its fingerprint, not its path: a moved folder still matches
    moved = shutil.copytree(target, root / "moved" / "target")
    again = run_cli("generate", "--target", moved, "--device", "cpu", "--drafter", "prompt-lookup", "--lookup-store",
                    store, "-k", "3", "--policy", "judge", "--verifier", verifier, "--threshold", "F",
                    "--max-new-tokens", "12", "--json", "--prompt", *PROMPTS)
    assert _tokens(again) == _tokens(judged)
    refused = run_cli("generate", "--target", folders["other"], "--device", "cpu", "--drafter", "prompt-lookup",
                      "--lookup-store", store, "--prompt", "hi", ok=False)
    assert refused.returncode == 2 and "n-gram store" in refused.stderr

    out = root / "bench"
    run_cli("bench", *common, *lookup, "--tasks", "sharegpt", "--limit", "2", "--max-new-tokens", "8", "--ks", "2",
            "--adaptive-ks", "--batch-sizes", "1", "--top-ks", "--judges", "SelfJudge", "--thresholds", "F",
            "--sweep", "--selfjudge-verifier", verifier, "--out", out)
    assert list(out.glob("**/*.json"))
    demo = run_cli("demo", *common, "--drafter", "prompt-lookup", "--task", "sharegpt", "--prompts", "2",
                   "--max-new-tokens", "8", "--threshold", "F", "--verifier", verifier, "--out", root / "demo")
    assert (root / "demo" / "demo.json").exists(), demo.stdout[-2000:]


def test_a_target_and_draft_folder_pair(folders):
    common = ["--target", folders["target"], "--device", "cpu", "--max-new-tokens", "12", "--json", "--prompt", *PROMPTS]
    greedy = run_cli("generate", "--policy", "autoregressive", *common)
    with_draft = run_cli("generate", "--draft", folders["draft"], "-k", "3", *common)
    assert _tokens(with_draft) == _tokens(greedy)
    refused = run_cli("generate", "--draft", folders["draft"], "--drafter", "prompt-lookup", *common, ok=False)
    assert refused.returncode == 2 and "--draft" in refused.stderr
