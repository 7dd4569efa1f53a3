"""The wall-clock matrix's measurement core and report (selfjudge.evaluation) on tiny random Llamas."""

import json
import math

import pytest
import torch

from selfjudge.evaluation import block_run
from selfjudge.evaluation import matrix as wm
from selfjudge.evaluation import report as rep
from selfjudge.judge import Verifier
from selfjudge.tasks import Task


def tiny_llama(tiny, vocab_size, layers, seed):
    """A random Llama with large initial weights, so that target and draft disagree often."""
    return tiny.llama(seed, vocab_size=vocab_size, num_hidden_layers=layers, initializer_range=0.3,
                      bos_token_id=1, eos_token_id=2, pad_token_id=2)


class WordTask(Task):
    """A checkable toy task: the 'answer' is the last word of the text."""

    name = "toy"

    def score(self, text, example):
        return float(text.split()[-1:] == ["cat"])

    def same_answer(self, a, b, example):
        return a.split()[-1:] == b.split()[-1:]


class Ex:
    def __init__(self, i):
        self.prompt_id = f"toy/{i}"


def _setup(tiny):
    tok = tiny.tokenizer()
    target, draft = tiny_llama(tiny, len(tok), 3, seed=0), tiny_llama(tiny, len(tok), 1, seed=1)
    g = torch.Generator().manual_seed(0)
    verifier = Verifier(weight=torch.randn(32, generator=g), bias=0.0,
                        thresholds={"all": -1e9, "none": 1e9, "F": 0.0}, metadata={"method": "selfjudge"})
    prompts = ["the cat sat on", "a dog ran fast and", "one two three", "red blue big small the"]
    return tok, target, draft, verifier, prompts


def test_matrix_configs_and_block_rows(tiny):
    tok, target, draft, verifier, prompts = _setup(tiny)
    judges = {"SelfJudge": verifier}
    cfgs = wm.make_configs([2, 3], [2], judges, ["none", "all"], ["F"], sweep_ks=[2])
    names = [c.key for c in cfgs]
    assert names[0] == "target-only@K0"
    assert "SelfJudge-F@K2" in names and "SelfJudge-F@K3" not in names  # sweep only at K=2
    with pytest.raises(ValueError, match="missing"):  # an unknown threshold name is an error, not a skip
        wm.make_configs([2], [2], judges, ["none", "missing"], [], sweep_ks=[2])
    engines = wm.build_engines(target, draft, tok, cfgs, judges)
    examples = [Ex(i) for i in range(len(prompts))]
    rows = block_run.run_block(engines, cfgs, block_run.TaskScorer(WordTask(), target, tok), examples, prompts, batch=3,
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
        pp = r["per_prompt"]
        pg = r["per_group"]  # prompt groups of 3 (the batch): their timings add up to the row's
        assert len(pg["wall_s"]) == math.ceil(len(prompts) / 3) and math.isclose(sum(pg["wall_s"]), r["wall_s"])
        assert sum(pg["tokens"]) == r["tokens"]
        if r["K"]:  # the per-prompt cycles and accepted drafts give back the block's m (the bootstrap's input)
            assert len(pp["cycles"]) == len(prompts) and sum(pp["cycles"]) > 0
            m = (sum(pp["accepted"]) + sum(pp["cycles"])) / sum(pp["cycles"])
            assert math.isclose(m, r["mean_accepted_length"])


def test_adaptive_configurations_run_beside_the_fixed_ones(tiny, tmp_path):
    tok, target, draft, verifier, prompts = _setup(tiny)
    judges = {"SelfJudge": verifier}
    cfgs = wm.make_configs([2], [2], judges, ["none", "all"], [], [], adaptive_ks=[3])
    adaptive = [c.key for c in cfgs if c.adaptive]
    assert adaptive == ["standard adaptive@K3", "top-2 adaptive@K3", "SelfJudge-none adaptive@K3",
                        "SelfJudge-all adaptive@K3"]
    engines = wm.build_engines(target, draft, tok, cfgs, judges)
    assert engines["standard adaptive@K3"].adaptive is not None and engines["standard@K2"].adaptive is None
    from selfjudge.engine.cost_profile import CostProfile

    for key in adaptive:  # a made-up table on which drafting pays, so the figures do not hang on this machine's
        engines[key].adaptive.profile = CostProfile((1, 2), (1, 2, 3, 4), ((1.0, 1.1, 1.2, 1.3), (1.5, 1.6, 1.7, 1.8)))
    rows = block_run.run_block(engines, cfgs, block_run.TaskScorer(WordTask(), target, tok), [Ex(i) for i in range(4)], prompts,
                        batch=2, max_new_tokens=6, progress=False)
    by = {r["name"]: r for r in rows}
    std, allj = by["standard adaptive"], by["SelfJudge-all adaptive"]
    assert std["same_tokens_as_target_only"] and std["family"] == "standard adaptive" and std["adaptive"]
    assert math.isclose(std["speedup_vs_standard"], 1.0)  # against standard under the same controller
    # cycles the controller decided (a last one-token step has no decision), some of them with drafts
    assert 0 < sum(std["drafts_verified"]) <= std["cycles"] and any(std["drafts_verified"][1:])
    assert std["expected_accepted"] > 0 and allj["judge_accepted_tokens"] > 0
    assert by["standard"]["drafts_verified"] == []  # fixed K: no controller
    (tmp_path / rep.BLOCKS).mkdir()
    block = {"task": "toy", "batch": 2, "max_new_tokens": 6, "environment": {"torch_threads": 1}, "rows": rows}
    (tmp_path / rep.BLOCKS / "toy_b2.json").write_text(json.dumps(block))
    rep.write_report(tmp_path)
    md = (tmp_path / "results.md").read_text()
    assert "row-cycles by drafts verified" in md
    assert f"| standard adaptive | {' | '.join(map(str, std['drafts_verified']))} |" in md


def test_report_writes_tables_and_plots(tmp_path, tiny):
    tok, target, draft, verifier, prompts = _setup(tiny)
    judges = {"SelfJudge": verifier}
    cfgs = wm.make_configs([2], [2], judges, ["none", "all"], [], [])
    rows = block_run.run_block(wm.build_engines(target, draft, tok, cfgs, judges), cfgs,
                        block_run.TaskScorer(WordTask(), target, tok), [Ex(i) for i in range(2)], prompts[:2], 1, 4,
                        progress=False)
    (tmp_path / rep.BLOCKS).mkdir()
    block = {"task": "toy", "batch": 1, "max_new_tokens": 4, "environment": {"torch_threads": 1}, "rows": rows}
    (tmp_path / rep.BLOCKS / "toy_b1.json").write_text(json.dumps(block))
    outside = tmp_path.parent / f"{tmp_path.name}-outside"  # links planted under every output name
    for name in ("results.json", "results.md", "pareto.png", "speed_vs_fidelity.png"):
        (tmp_path / name).symlink_to(outside / name)
    merged = rep.write_report(tmp_path)
    assert not outside.exists() and not any(p.is_symlink() for p in tmp_path.iterdir())
    assert merged["blocks"][0]["rows"][0]["name"] == "target-only"
    md = (tmp_path / "results.md").read_text()
    assert "| SelfJudge-all | 2 |" in md and "## toy, batch 1" in md
    pareto = md.split("## Pareto curves")[1].split("## Accepted length")[0]
    assert "## Headline" in md and "| toy | 1 | 2 | top-k |" not in pareto  # one top-k point: no curve to compare
    assert "## Accepted length at semantic fidelity >= 0.97" in md and "| toy | 1 | 2 | SelfJudge |" in md
    for png in ("pareto.png", "speed_vs_fidelity.png"):
        assert (tmp_path / png).read_bytes()[:4] == b"\x89PNG"


def test_block_needs_target_only_first():
    cfg = [wm.Config("standard", "standard", "standard", 2)]
    try:
        block_run.run_block({}, cfg, None, [], [], 1, 4, progress=False)
    except ValueError as e:
        assert "target-only" in str(e)
    else:
        raise AssertionError("run_block accepted a matrix without the target-only reference")


def test_hf_baselines_write_the_target_greedy_output(tiny):
    tok, target, draft, verifier, prompts = _setup(tiny)
    cfgs = wm.make_configs([2], [], {}, [], [], [], hf_baselines=True)
    assert [c.name for c in cfgs] == ["target-only", "HF generate", "HF assisted", "standard"]
    rows = block_run.run_block(wm.build_engines(target, draft, tok, cfgs, {}), cfgs,
                        block_run.TaskScorer(WordTask(), target, tok), [Ex(i) for i in range(2)], prompts[:2], 1, 5,
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


def _row(family, K, m, fidelity, name=None):
    return {"family": family, "K": K, "mean_accepted_length": m, "fidelity": fidelity, "task_score": 0.0,
            "name": name or family}


def test_pareto_gap_measures_the_envelopes_over_the_common_range():
    rows = [
        _row("target-only", 0, 1.0, 1.0),
        _row("standard", 4, 1.5, 1.0),
        # SelfJudge: 0.8 up to m = 2, 0.6 up to m = 3; AutoJudge: 0.4 up to m = 3, reaches m = 4
        _row("SelfJudge", 4, 2.0, 0.8), _row("SelfJudge", 4, 3.0, 0.6),
        _row("AutoJudge", 4, 3.0, 0.4), _row("AutoJudge", 4, 4.0, 0.0),
        _row("top-k", 8, 2.0, 1.0),  # another K: ignored
    ]
    g = rep.pareto_gap(rows, "SelfJudge", "AutoJudge", K=4, steps=1000, envelope="step")
    assert (g["m_from"], g["m_to"]) == (1.5, 3.0) and (g["points_a"], g["points_b"]) == (2, 2)
    # at m in (1.5, 2]: 0.8 - 0.4; in (2, 3]: 0.6 - 0.4; at m = 1.5 both reach the standard point: 0
    assert math.isclose(g["mean"], (0.4 * 0.5 + 0.2 * 1.0) / 1.5, abs_tol=2e-3)
    assert math.isclose(g["max"], 0.4) and math.isclose(g["min"], 0.0)
    flipped = rep.pareto_gap(rows, "AutoJudge", "SelfJudge", K=4, steps=1000, envelope="step")
    assert math.isclose(flipped["mean"], -g["mean"], abs_tol=1e-9)
    assert rep.pareto_gap(rows, "SelfJudge", "top-k", K=4) is None  # top-k has no point at K = 4


def test_headline_lists_the_named_configurations_of_every_block():
    rows = [dict(_row("target-only", 0, 1.0, 1.0), tokens_per_s=10.0, speedup_vs_target_only=1.0,
                 speedup_vs_standard=float("nan")),
            dict(_row("SelfJudge", 4, 2.0, 0.5, name="SelfJudge-F"), tokens_per_s=12.0,
                 speedup_vs_target_only=1.2, speedup_vs_standard=1.9),
            dict(_row("SelfJudge", 8, 2.5, 0.5, name="SelfJudge-F"), tokens_per_s=13.0,
                 speedup_vs_target_only=1.3, speedup_vs_standard=2.0)]
    md = rep.headline([{"task": "toy", "batch": 1, "rows": rows}], K=4)
    assert "| toy | 1 | target-only | 10.00 | 1.00 | – | 1.00 | 1.000 | 0.000 |" in md
    assert "| toy | 1 | SelfJudge-F | 12.00 | 1.20 | 1.90 | 2.00 | 0.500 | 0.000 |" in md
    assert "13.00" not in md  # K = 8 row left out
    block = {"task": "toy", "batch": 1, "rows": rows}
    assert rep.headline_k([block]) == 4
    no_k4 = {"task": "toy", "batch": 1, "rows": [r for r in rows if r["K"] != 4]}
    assert rep.headline_k([no_k4]) == 8
    assert "13.00" in rep.headline([no_k4], rep.headline_k([no_k4]))


def test_engines_draft_with_the_given_drafter(tiny):
    from selfjudge.engine.prompt_lookup import PromptLookupDrafter

    tok, target, draft, verifier, prompts = _setup(tiny)
    cfgs = wm.make_configs([3], [], {}, [], [], [])
    engines = wm.build_engines(target, draft, tok, cfgs, {}, drafter=PromptLookupDrafter(len(tok)))
    assert isinstance(engines["standard@K3"].drafter, PromptLookupDrafter)
    rows = block_run.run_block(engines, cfgs, block_run.TaskScorer(WordTask(), target, tok), [Ex(i) for i in range(2)],
                        prompts[:2], 1, 6, progress=False)
    by = {r["name"]: r for r in rows}
    assert by["standard"]["same_tokens_as_target_only"] and by["standard"]["fidelity"] == 1.0


def test_rule_configs_and_engines(tiny):
    tok, target, draft, verifier, prompts = _setup(tiny)
    judges = {"SelfJudge": verifier}
    cfgs = wm.make_configs([3], [], judges, [], [], [3],
                           rules=["typical", "relaxed", "fly", "selfjudge+fly", "selfjudge+gate"])
    fams = {c.family for c in cfgs}
    assert {"typical", "relaxed top-N", "FLy", "SelfJudge+FLy", "SelfJudge top-N gated"} <= fams
    gated = [c for c in cfgs if c.family == "SelfJudge top-N gated"]
    assert gated and all(c.threshold in verifier.thresholds for c in gated)  # only the verifier's named points
    assert {dict(c.params)["top_n"] for c in gated} == {2, 5}
    assert all(dict(c.params)["window"] < 3 for c in cfgs if c.family == "FLy")
    engines = wm.build_engines(target, draft, tok, cfgs, judges)
    assert repr(engines[next(c.key for c in cfgs if c.family == "SelfJudge+FLy")].policy).startswith("FlyPolicy(")
    assert engines[gated[0].key].policy.top_n_gate == dict(gated[0].params)["top_n"]
    with pytest.raises(ValueError, match="rules"):
        wm.make_configs([3], [], judges, [], [], [3], rules=["nope"])
    assert not [c for c in wm.make_configs([3], [], judges, [], [], [], rules=["typical"]) if c.params]  # K not swept


def test_label_oracle_configs_use_the_verifiers_tau(tiny):
    """The oracle rule: at the tau the verifier's labels used (when recorded) and at 0; its engine asks
    the target (a headroom measure: it runs and accepts at least what standard accepts, greedy)."""
    from selfjudge.engine.oracle import LabelOraclePolicy

    tok, target, draft, verifier, prompts = _setup(tiny)
    judges = {"SelfJudge": verifier}
    verifier.metadata = {**verifier.metadata, "tau": -3.5, "window": 4}
    cfgs = [c for c in wm.make_configs([3], [], judges, [], [], [3], rules=["oracle"]) if c.family == "label oracle"]
    assert [dict(c.params)["tau"] for c in cfgs] == ["verifier", 0.0]
    engines = wm.build_engines(target, draft, tok, cfgs, judges)
    policies = [engines[c.key].policy for c in cfgs]
    assert all(isinstance(p, LabelOraclePolicy) for p in policies)
    assert [p.tau for p in policies] == [-3.5, 0.0] and policies[0].window == 4
    verifier.metadata = {k: v for k, v in verifier.metadata.items() if k != "tau"}
    untold = [c for c in wm.make_configs([3], [], judges, [], [], [3], rules=["oracle"]) if c.family == "label oracle"]
    assert [dict(c.params)["tau"] for c in untold] == [0.0]  # a verifier without its labels' tau: SPEC's 0 only
    cfgs = wm.make_configs([3], [], judges, [], [], [3], rules=["oracle"])
    rows = block_run.run_block(wm.build_engines(target, draft, tok, cfgs, judges), cfgs,
                        block_run.TaskScorer(WordTask(), target, tok), [Ex(i) for i in range(2)], prompts[:2], 2, 6,
                        progress=False)
    by = {r["name"]: r for r in rows}
    assert by["label oracle(0)"]["mean_accepted_length"] >= by["standard"]["mean_accepted_length"]


def test_hf_prompt_lookup_baseline_is_lossless_and_batch_one_only(tiny):
    """With the prompt-lookup drafter the matrix adds Hugging Face's own prompt lookup per K, the
    engine's lossless peer: it writes the target's greedy output."""
    from selfjudge.engine.drafter_factory import make_drafter

    tok, target, draft, verifier, prompts = _setup(tiny)
    cfgs = wm.make_configs([2, 3], [], {}, [], [], [], hf_baselines=True, hf_prompt_lookup=True)
    assert [c.key for c in cfgs if c.policy == "hf_prompt_lookup"] == ["HF prompt lookup@K2", "HF prompt lookup@K3"]
    assert not [c for c in wm.make_configs([2], [], {}, [], [], [], hf_prompt_lookup=True) if c.family == "HF"]
    lookup = make_drafter("prompt-lookup", target, max_ngram=2, min_ngram=1)
    engines = wm.build_engines(target, draft, tok, cfgs, {}, drafter=lookup)
    assert engines["HF prompt lookup@K3"].prompt_lookup == (3, 2)
    rows = block_run.run_block(engines, cfgs, block_run.TaskScorer(WordTask(), target, tok), [Ex(i) for i in range(2)], prompts[:2],
                        1, 5, progress=False)
    by = {r["name"] + str(r["K"]): r for r in rows}
    assert by["HF prompt lookup2"]["same_tokens_as_target_only"] and by["HF prompt lookup3"]["same_tokens_as_target_only"]
    with pytest.raises(ValueError, match="batch size 1"):
        wm.HFGenerate(target, tok, prompt_lookup=(2, 2)).generate(prompts[:2], 4)


class _Recording:
    """An engine that logs which configuration ran, then runs the real one."""

    def __init__(self, key, engine, log):
        self.key, self.engine, self.log = key, engine, log

    def generate(self, prompts, max_new_tokens):
        self.log.append(self.key)
        return self.engine.generate(prompts, max_new_tokens=max_new_tokens)

    @property
    def last_batch_stats(self):
        return self.engine.last_batch_stats


def test_block_alternates_configuration_order_and_repeats_only_the_timing(tiny):
    tok, target, draft, verifier, prompts = _setup(tiny)
    cfgs = wm.make_configs([2], [2], {"SelfJudge": verifier}, ["all"], [], sweep_ks=[2])
    engines = wm.build_engines(target, draft, tok, cfgs, {"SelfJudge": verifier})
    keys = [c.key for c in cfgs]
    scorer, examples = block_run.TaskScorer(WordTask(), target, tok), [Ex(i) for i in range(len(prompts))]

    def run(batch, rounds):
        log = []
        recording = {k: _Recording(k, e, log) for k, e in engines.items()}
        rows = block_run.run_block(recording, cfgs, scorer, examples, prompts, batch=batch, max_new_tokens=5,
                            progress=False, semantic=False, timing_rounds=rounds)
        return rows, log

    once, log = run(batch=2, rounds=1)  # two prompt groups: A B C then C B A
    assert log == keys + keys[::-1]
    one_group, log = run(batch=4, rounds=1)  # one group, one round: nothing alternates
    assert log == keys
    twice, log = run(batch=4, rounds=2)  # the second round times the group again in reverse order
    assert log == keys + keys[::-1]
    for a, b, c in zip(once, one_group, twice):
        # greedy outputs, scores and statistics come from the first round only
        assert a["tokens"] == b["tokens"] == c["tokens"]
        assert a["per_prompt"]["tokens"] == c["per_prompt"]["tokens"]
        assert b["mean_accepted_length"] == c["mean_accepted_length"] and b["cycles"] == c["cycles"]
        assert c["timing_rounds"] == 2 and b["timing_rounds"] == 1
        assert math.isclose(c["tokens_per_s"], 2 * c["tokens"] / c["wall_s"])
    with pytest.raises(ValueError, match="timing_rounds"):
        block_run.run_block(engines, cfgs, scorer, examples, prompts, batch=4, max_new_tokens=5, progress=False,
                     timing_rounds=0)


def test_rules_at_a_budget_take_the_setting_their_validation_curve_picks():
    from selfjudge.judge import Verifier

    curves = {"SelfJudge": [{"name": "SelfJudge-R", "m": 1.4, "semantic_fidelity": 0.99, "logit": 1.0}],
              "relaxed top-N": [{"name": "relaxed top-N(3,0.1)", "m": 1.5, "semantic_fidelity": 0.98,
                                 "params": {"top_n": 3, "delta": 0.1}},
                                {"name": "relaxed top-N(10,0.8)", "m": 1.9, "semantic_fidelity": 0.90,
                                 "params": {"top_n": 10, "delta": 0.8}}],
              "FLy": [{"name": "FLy(1,0)", "m": 1.8, "semantic_fidelity": 0.93, "params": {"window": 1}}]}
    verifier = Verifier(weight=torch.ones(4), bias=0.0, thresholds={"R": 1.0}, metadata={"validation": {"curves": curves}})
    judges = {"SelfJudge": verifier}
    names = lambda cfgs: [c.name for c in cfgs if c.family in ("relaxed top-N", "FLy")]  # noqa: E731
    swept = wm.make_configs([3], [], judges, ["R"], [], [3], rules=["relaxed", "fly"])
    assert len(names(swept)) == 8 + 8  # negative control: without a budget, every setting (FLy window < K)
    at_budget = wm.make_configs([3], [], judges, ["R"], [], [3], rules=["relaxed", "fly"], rules_budget=0.97)
    assert names(at_budget) == ["relaxed top-N(3,0.1)"]  # FLy kept no setting within 0.97
    with pytest.raises(ValueError, match="no validation curve of 'typical'"):
        wm.make_configs([3], [], judges, ["R"], [], [3], rules=["typical"], rules_budget=0.97)
    with pytest.raises(ValueError, match="rules_budget must lie in"):
        wm.make_configs([3], [], judges, ["R"], [], [3], rules=["relaxed"], rules_budget=1.5)
