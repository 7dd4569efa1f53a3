"""The wall-clock matrix's measurement core and report (selfjudge.bench) on tiny random Llamas."""

import json
import math
import sys
from pathlib import Path

import torch

from selfjudge.bench import matrix as wm
from selfjudge.bench import report as rep
from selfjudge.judge import Verifier

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))

from _tiny import make_tokenizer  # noqa: E402


def tiny_llama(vocab_size, layers, seed):
    """A random Llama with large initial weights, so that target and draft disagree often."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      initializer_range=0.3, bos_token_id=1, eos_token_id=2, pad_token_id=2)
    return LlamaForCausalLM(cfg).eval()




class WordTask:
    """A checkable toy task: the 'answer' is the last word of the text."""

    name = "toy"

    def score(self, text, example):
        return float(text.split()[-1:] == ["cat"])

    def same_answer(self, a, b, example):
        return a.split()[-1:] == b.split()[-1:]


class Ex:
    def __init__(self, i):
        self.prompt_id = f"toy/{i}"


def _setup():
    tok = make_tokenizer()
    target, draft = tiny_llama(len(tok), 3, seed=0), tiny_llama(len(tok), 1, seed=1)
    g = torch.Generator().manual_seed(0)
    verifier = Verifier(weight=torch.randn(32, generator=g), bias=0.0,
                        thresholds={"all": -1e9, "none": 1e9, "F": 0.0}, metadata={"method": "selfjudge"})
    prompts = ["the cat sat on", "a dog ran fast and", "one two three", "red blue big small the"]
    return tok, target, draft, verifier, prompts


def test_matrix_configs_and_block_rows():
    tok, target, draft, verifier, prompts = _setup()
    judges = {"SelfJudge": verifier}
    cfgs = wm.make_configs([2, 3], [2], judges, ["none", "all", "missing"], ["F"], sweep_ks=[2])
    names = [c.key for c in cfgs]
    assert names[0] == "target-only@K0"
    assert "SelfJudge-F@K2" in names and "SelfJudge-F@K3" not in names  # sweep only at K=2
    assert not any("missing" in n for n in names)  # unknown threshold names are skipped
    engines = wm.build_engines(target, draft, tok, cfgs, judges)
    examples = [Ex(i) for i in range(len(prompts))]
    rows = wm.run_block(engines, cfgs, wm.TaskScorer(WordTask(), target, tok), examples, prompts, batch=3,
                        max_new_tokens=6, progress=False)
    by = {f"{r['name']}@K{r['K']}": r for r in rows}
    assert by["target-only@K0"]["fidelity"] == 1.0 and by["target-only@K0"]["speedup_vs_target_only"] == 1.0
    for K in (2, 3):
        std, none, allj = by[f"standard@K{K}"], by[f"SelfJudge-none@K{K}"], by[f"SelfJudge-all@K{K}"]
        # greedy standard SD writes the target's own tokens; a judge that never fires changes nothing
        assert std["same_tokens_as_target_only"] and std["fidelity"] == 1.0
        assert none["same_tokens_as_target_only"] and none["judge_accepted_tokens"] == 0
        # a judge that accepts everything keeps every draft token: m = K + 1 per full cycle
        assert allj["acceptance_rate"] == 1.0 and allj["mean_accepted_length"] > std["mean_accepted_length"]
        assert allj["judge_accepted_tokens"] > 0
        assert math.isclose(std["speedup_vs_standard"], 1.0)
    for r in rows:
        assert r["tokens"] == sum(r["per_prompt"]["tokens"]) and 0 < r["tokens"] <= 6 * len(prompts)
        assert len(r["per_prompt"]["fidelity"]) == len(prompts)


def test_report_writes_tables_and_plots(tmp_path):
    tok, target, draft, verifier, prompts = _setup()
    judges = {"SelfJudge": verifier}
    cfgs = wm.make_configs([2], [2], judges, ["none", "all"], [], [])
    rows = wm.run_block(wm.build_engines(target, draft, tok, cfgs, judges), cfgs,
                        wm.TaskScorer(WordTask(), target, tok), [Ex(i) for i in range(2)], prompts[:2], 1, 4,
                        progress=False)
    (tmp_path / rep.BLOCKS).mkdir()
    block = {"task": "toy", "batch": 1, "max_new_tokens": 4, "environment": {"torch_threads": 1}, "rows": rows}
    (tmp_path / rep.BLOCKS / "toy_b1.json").write_text(json.dumps(block))
    merged = rep.write_report(tmp_path)
    assert merged["blocks"][0]["rows"][0]["name"] == "target-only"
    md = (tmp_path / "results.md").read_text()
    assert "| SelfJudge-all | 2 |" in md and "## toy, batch 1" in md
    for png in ("pareto.png", "speed_vs_fidelity.png"):
        assert (tmp_path / png).read_bytes()[:4] == b"\x89PNG"


def test_block_needs_target_only_first():
    cfg = [wm.Config("standard", "standard", "standard", 2)]
    try:
        wm.run_block({}, cfg, None, [], [], 1, 4, progress=False)
    except ValueError as e:
        assert "target-only" in str(e)
    else:
        raise AssertionError("run_block accepted a matrix without the target-only reference")


def test_hf_baselines_write_the_target_greedy_output():
    tok, target, draft, verifier, prompts = _setup()
    cfgs = wm.make_configs([2], [], {}, [], [], [], hf_baselines=True)
    assert [c.name for c in cfgs] == ["target-only", "HF generate", "HF assisted", "standard"]
    rows = wm.run_block(wm.build_engines(target, draft, tok, cfgs, {}), cfgs,
                        wm.TaskScorer(WordTask(), target, tok), [Ex(i) for i in range(2)], prompts[:2], 1, 5,
                        progress=False)
    by = {r["name"]: r for r in rows}
    for name in ("HF generate", "HF assisted", "standard"):
        assert by[name]["same_tokens_as_target_only"], name
    assert math.isnan(by["HF assisted"]["mean_accepted_length"])  # Hugging Face reports no m
    try:
        wm.HFGenerate(target, tok, assistant=draft).generate(prompts[:2], 4)
    except ValueError as e:
        assert "batch size 1" in str(e)
    else:
        raise AssertionError("assisted generation at batch 2 was not refused")
