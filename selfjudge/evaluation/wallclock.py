"""Wall-clock matrix of the speculative-decoding engine on the default pair.

Policies: target-only, standard SD, top-k (k in {2, 5}), AutoJudge and SelfJudge at
their named thresholds ("F", "R") plus a threshold sweep for both judges (the
Pareto curves); tasks GSM8K, HumanEval, GPQA-diamond and open-ended ShareGPT
prompts (the evaluation split; ``--split val`` for choosing thresholds); K in {4, 8}; batch 1 and 8. Per configuration:
tokens/s, speed-up against target-only and against standard SD at the same K,
mean accepted length m (accepted drafts + 1 per cycle, the SelfJudge paper's m),
judge-accepted tokens, the task score and the *fidelity* (agreement with the
target's own greedy output, written in the same run), and the cycle-time split.

Every (task, batch) block runs its configurations interleaved prompt group by
prompt group, so speed ratios inside a block survive a noisy machine. Finished
blocks are written to ``OUT/blocks/`` at once and skipped when the command is
rerun (``--force`` redoes them), so a long run resumes; two processes may fill
one folder with different ``--tasks``. ``OUT/results.{json,md}``, ``pareto.png``
and ``speed_vs_fidelity.png`` are rebuilt from the blocks after each block.

    selfjudge bench --quick                       # ~2 minutes (= python bench/run_wallclock.py --quick)
    selfjudge bench --out runs/wallclock          # a full matrix (states its duration first)

:class:`~selfjudge.evaluation.matrix_spec.MatrixSpec` says what to run, :func:`run_matrix` runs it (progress goes to
the ``selfjudge.evaluation.wallclock`` logger); the command line is :mod:`selfjudge.cli.bench`.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import time
from pathlib import Path

from selfjudge.evaluation.block_schema import file_digest
from selfjudge.evaluation.report import BLOCKS, write_report
from selfjudge.evaluation.matrix_spec import MatrixSpec
from selfjudge.models.fingerprint import target_fingerprint
from selfjudge.writes import write_json

#: open-ended tasks without a verifier of their own use the open-ended ShareGPT one (else GSM8K's)
OPEN_ENDED_FALLBACK = {"summarize": "sharegpt"}

_log = logging.getLogger(__name__)


def environment() -> dict:
    import torch
    import transformers

    try:
        import triton

        triton_version = triton.__version__
    except Exception:  # noqa: BLE001 - triton is optional on a CPU machine
        triton_version = None
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "triton": triton_version,
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def load_judges(spec: MatrixSpec, task: str, hidden_size: int) -> tuple[dict, dict]:
    """{family: Verifier} for one task, and {family: path}; a missing verifier is left out."""
    from selfjudge.judge import load_verifier
    from selfjudge.judge.verifier import shipped_verifier_for

    judges, paths = {}, {}
    for family, method, override in (("SelfJudge", "selfjudge", spec.methods.selfjudge_verifier),
                                     ("AutoJudge", "autojudge", spec.methods.autojudge_verifier)):
        if family not in spec.methods.judges:
            continue
        path = override
        if path is None:  # its own task's, else the nearest; labels of this drafter, else the draft model's
            path = shipped_verifier_for(method, spec.workload.pair, (task, OPEN_ENDED_FALLBACK.get(task, "gsm8k"), "gsm8k"),
                                        spec.drafting.drafter)
        if path is None:
            _log.warning(f"[wallclock] no {family} verifier for {task}: its configurations are skipped")
            continue
        judges[family] = load_verifier(path, expect_model=spec.workload.pair, expect_hidden_size=hidden_size,
                                       expect_fingerprint=target_fingerprint(spec.workload.pair))
        paths[family] = str(path)
    return judges, paths


def block_settings(spec: MatrixSpec, task: str, verifier_paths: dict, prompt_ids: list[str]) -> dict:
    """What a block's numbers depend on, as written into it: a rerun reuses the block only if equal."""
    return {"pair": spec.workload.pair, "max_new_tokens": spec.workload.new_tokens(task),
            "prompt_ids": list(prompt_ids), "verifiers": dict(verifier_paths),
            "verifier_sha256": {family: file_digest(path) for family, path in verifier_paths.items()},
            "drafter": spec.drafting.drafter,
            "eagle_dir": spec.drafting.eagle_dir, "lookup": _lookup_settings(spec), "protect_digits": spec.methods.protect_digits,
            "rules": sorted(spec.sweeps.rules), "device": _device_name(spec.execution.device), "dtype": _dtype_name(spec),
            "timing_rounds": spec.execution.timing_rounds, "rules_budget": spec.sweeps.rules_budget}


def _lookup_settings(spec: MatrixSpec) -> dict | None:
    """Prompt lookup's n-gram lengths and n-gram store (its fingerprint; absent without one) when it
    drafts (they change every speculative number), else None."""
    if spec.drafting.drafter != "prompt-lookup":
        return None
    from selfjudge.models.pair import default_lookup

    lookup = default_lookup(1, spec.workload.pair)
    store = lookup.store
    if spec.drafting.lookup_store is not None:
        from selfjudge.models.ngram_store import load_ngram_store

        store = None if spec.drafting.lookup_store == "none" else load_ngram_store(spec.drafting.lookup_store)
    settings = {"max_ngram": lookup.max_ngram, "min_ngram": lookup.min_ngram}
    if store is not None:
        settings["store"] = store.fingerprint()
        if lookup.store_min_accepted is not None:
            settings["store_min_accepted"] = lookup.store_min_accepted
    return settings


def _device_name(device: str) -> str:
    from selfjudge.devices import resolve_device

    return resolve_device(device).type


def _dtype_name(spec: MatrixSpec) -> str:
    from selfjudge.devices import resolve_device, resolve_dtype

    return str(resolve_dtype(spec.execution.dtype, resolve_device(spec.execution.device))).replace("torch.", "")


def stale_settings(block: dict, settings: dict) -> list[str]:
    """The settings a written block was measured with that differ from ``settings`` (a setting the
    block does not record differs unless it is None; verifier digests are compared only where both
    sides have one)."""
    def comparable(key, value):
        if key == "verifiers":  # the same file in another checkout is the same verifier
            value = {family: Path(path).name for family, path in (value or {}).items()}
        return value

    def differs(key, value) -> bool:
        if key == "verifier_sha256":  # a block written before digests were recorded, or a file not at hand
            old = block.get(key) or {}
            return any(old.get(f) and d and old[f] != d for f, d in (value or {}).items())
        return comparable(key, block.get(key)) != comparable(key, value)

    return [f"{k}={comparable(k, block.get(k))!r} (now {comparable(k, v)!r})" for k, v in settings.items()
            if differs(k, v)]


def _reusable(spec: MatrixSpec, task: str, batch: int, verifier_paths: dict) -> bool:
    """Whether the block is written with this run's settings; ``ValueError`` if it is written
    with others (reusing it would mix two settings in one table, redoing it would lose it)."""
    path = spec.execution.out / BLOCKS / f"{task}_b{batch}.json"
    if not path.exists():
        return False
    from selfjudge.tasks import load_task

    prompt_ids = [ex.prompt_id for ex in load_task(task).examples(spec.workload.split, limit=spec.workload.limit)]
    stale = stale_settings(json.loads(path.read_text()), block_settings(spec, task, verifier_paths, prompt_ids))
    if stale:
        raise ValueError(f"out: {path} was measured with {'; '.join(stale)}: rerun with --force to redo it, "
                         "or choose another --out")
    return True


def _load_models(spec: MatrixSpec):
    """The target, the draft model (None where nothing needs one), the tokenizer and the drafter."""
    from selfjudge.engine.drafter_factory import make_drafter
    from selfjudge.models import load_pair

    # a draft model only where one drafts or Hugging Face's assisted generation runs ("prompt-lookup"
    # loads the target alone, so a target folder without a draft works)
    needs_draft = spec.drafting.drafter == "model" or spec.methods.hf_baselines
    target, draft, tok = load_pair(spec.workload.pair, device=spec.execution.device, dtype=spec.execution.dtype,
                                   drafter="model" if needs_draft else "prompt-lookup")
    draft = draft if needs_draft else None
    drafter = make_drafter(spec.drafting.drafter, target, draft, eagle_dir=spec.drafting.eagle_dir, pair=spec.workload.pair,
                           lookup_store=spec.drafting.lookup_store)
    return target, draft, tok, drafter


def _plan(spec: MatrixSpec, hidden: int) -> list[tuple]:
    """Every block of the matrix: (task, batch, configs, judges, verifier paths)."""
    from selfjudge.evaluation.matrix import make_configs

    plan = []
    for task_name in spec.workload.tasks:
        judges, paths = load_judges(spec, task_name, hidden)
        for b in spec.workload.batch_sizes:
            sweep = spec.sweeps.sweep if b in spec.sweeps.sweep_batches else []
            configs = make_configs(spec.methods.ks, spec.methods.top_ks, judges, spec.methods.thresholds, sweep, spec.sweeps.sweep_ks,
                                   hf_baselines=spec.methods.hf_baselines and b == 1,
                                   hf_prompt_lookup=spec.drafting.drafter == "prompt-lookup",
                                   rules=spec.sweeps.rules if b in spec.sweeps.sweep_batches else (), adaptive_ks=spec.methods.adaptive_ks,
                                   rules_budget=spec.sweeps.rules_budget)
            plan.append((task_name, b, configs, judges, paths))
    return plan


def _estimate(spec: MatrixSpec, plan: list[tuple], todo: list[tuple], target, tok) -> None:
    """Log the expected duration: a measured target-only step times every configuration's tokens."""
    from selfjudge.engine import SpeculativeEngine

    warm = SpeculativeEngine(target, None, tok, policy="autoregressive")
    probe = tok.apply_chat_template([{"role": "user", "content": "Say hello."}], tokenize=False,
                                    add_generation_prompt=True)
    warm.generate([probe], max_new_tokens=4)
    t0 = time.perf_counter()
    n = len(warm.generate([probe], max_new_tokens=16)[0].token_ids)
    step = (time.perf_counter() - t0) / max(n, 1)
    est = sum(len(cfgs) * spec.execution.timing_rounds * spec.workload.limit * spec.workload.new_tokens(t) * step / b ** 0.5
              for t, b, cfgs, _, _ in todo)
    _log.info(f"[wallclock] {len(todo)} of {len(plan)} blocks to run, "
              f"{sum(len(p[2]) for p in todo)} configurations x {spec.workload.limit} prompts; target-only step "
              f"{1000 * step:.0f} ms -> expected about {est / 60:.0f} min")


def _run_one_block(spec: MatrixSpec, command: str, planned: tuple, models: tuple, protected) -> None:
    """Run one block and write it whole (then the report)."""
    from selfjudge.evaluation.block_run import TaskScorer, run_block
    from selfjudge.evaluation.matrix import build_engines
    from selfjudge.tasks import load_task

    task_name, b, configs, judges, paths = planned
    target, draft, tok, drafter = models
    task = load_task(task_name)
    examples = task.examples(spec.workload.split, limit=spec.workload.limit)
    prompts = [task.build_prompt(tok, ex) for ex in examples]
    max_new = spec.workload.new_tokens(task_name)
    engines = build_engines(target, draft, tok, configs, judges, protected_token_ids=protected, drafter=drafter)
    for c in configs[:2]:  # warm-up: first-call allocations of the target-only and SD paths
        engines[c.key].generate(prompts[:1], max_new_tokens=4)
    t_block = time.perf_counter()
    rows = run_block(engines, configs, TaskScorer(task, target, tok), examples, prompts, b, max_new,
                     timing_rounds=spec.execution.timing_rounds)
    block = {
        "task": task_name, "batch": b, "split": spec.workload.split, "command": command,
        **block_settings(spec, task_name, paths, [ex.prompt_id for ex in examples]),
        "protected_token_ids": protected,
        "environment": environment(), "block_seconds": time.perf_counter() - t_block, "rows": rows,
    }
    write_json(spec.execution.out / BLOCKS / f"{task_name}_b{b}.json", block)  # a block is either whole or absent
    write_report(spec.execution.out)
    best = max((r for r in rows if r["policy"] != "autoregressive"), key=lambda r: r["tokens_per_s"], default=None)
    _log.info(f"[wallclock] {task_name} batch {b}: {len(rows)} configurations in {block['block_seconds']:.0f} s"
              + (f"; fastest {best['name']}@K{best['K']} {best['speedup_vs_target_only']:.2f}x target-only"
                 if best else ""))


def run_matrix(spec: MatrixSpec, command: str) -> Path:
    """Run every block of the matrix that is not written yet, then rebuild the report;
    returns the results folder. ``command`` is recorded in every block."""
    import torch

    from selfjudge.folders import lock_folder

    torch.set_num_threads(spec.execution.threads)
    models = _load_models(spec)
    target, tok = models[0], models[2]
    lock = lock_folder(spec.execution.out, command)  # noqa: F841 - held to the end: runs share a folder one after the other
    (spec.execution.out / BLOCKS).mkdir(parents=True, exist_ok=True)
    plan = _plan(spec, int(target.config.hidden_size))
    todo = [p for p in plan if spec.execution.force or not _reusable(spec, p[0], p[1], p[4])]
    _estimate(spec, plan, todo, target, tok)
    if spec.execution.estimate_only:
        return spec.execution.out
    protected = None
    if spec.methods.protect_digits:
        from selfjudge.engine import digit_token_ids

        protected = digit_token_ids(tok)
    for planned in todo:
        _run_one_block(spec, command, planned, models, protected)
    if not todo:
        write_report(spec.execution.out)
    return spec.execution.out
