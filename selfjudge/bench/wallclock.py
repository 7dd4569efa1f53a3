"""Wall-clock matrix of the speculative-decoding engine on the default pair.

Policies: target-only, standard SD, top-k (k in {2, 5}), AutoJudge and SelfJudge at
their named thresholds ("F", "R") plus a threshold sweep for both judges (the
Pareto curves); tasks GSM8K, HumanEval, GPQA-diamond and open-ended ShareGPT
prompts (evaluation splits only); K in {4, 8}; batch 1 and 8. Per configuration:
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
    selfjudge bench --out bench/results/wallclock # a full matrix (states its duration first)
    bash bench/run_wallclock_full.sh              # README's matrix: two lanes on a 2-core CPU
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path

from selfjudge.bench.report import BLOCKS, write_report

DEFAULT_MAX_NEW = {"gsm8k": 256, "humaneval": 256, "gpqa": 256, "sharegpt": 128}
SWEEP = ["q0.50", "q0.80", "q0.90", "q0.95", "q0.98", "q0.99"]


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


def load_judges(args, task: str, hidden_size: int) -> tuple[dict, dict]:
    """{family: Verifier} for one task, and {family: path}; a missing verifier is left out."""
    from selfjudge.judge import load_verifier
    from selfjudge.judge.verifier import shipped_verifier_path

    judges, paths = {}, {}
    for family, method, override in (("SelfJudge", "selfjudge", args.selfjudge_verifier),
                                     ("AutoJudge", "autojudge", args.autojudge_verifier)):
        if family not in args.judges:
            continue
        path = override
        if path is None:
            for t in (task, "gsm8k"):  # a task's own verifier, else the GSM8K one
                try:
                    path = shipped_verifier_path(method, args.pair, t)
                    break
                except ValueError:
                    continue
        if path is None:
            print(f"[wallclock] no {family} verifier for {task}: its configurations are skipped", file=sys.stderr)
            continue
        judges[family] = load_verifier(path, expect_hidden_size=hidden_size)
        paths[family] = str(path)
    return judges, paths


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--pair", default="smollm2-135m")
    ap.add_argument("--tasks", nargs="+", default=["gsm8k", "humaneval", "gpqa", "sharegpt"])
    ap.add_argument("--limit", type=int, default=8, help="evaluation prompts per task")
    ap.add_argument("--max-new-tokens", type=int, default=None,
                    help=f"new-token cap for every task (default per task: {DEFAULT_MAX_NEW})")
    ap.add_argument("--ks", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--top-ks", type=int, nargs="+", default=[2, 5])
    ap.add_argument("--judges", nargs="+", default=["SelfJudge", "AutoJudge"], choices=["SelfJudge", "AutoJudge"])
    ap.add_argument("--thresholds", nargs="+", default=["F", "R"], help="named judge thresholds")
    ap.add_argument("--sweep", nargs="*", default=SWEEP, help="extra judge thresholds for the Pareto curves")
    ap.add_argument("--sweep-ks", type=int, nargs="*", default=None, help="K values with the sweep (default: first K)")
    ap.add_argument("--sweep-batches", type=int, nargs="*", default=None,
                    help="batch sizes with the sweep (default: the largest)")
    ap.add_argument("--selfjudge-verifier", default=None, help="verifier file (default: shipped, per task)")
    ap.add_argument("--autojudge-verifier", default=None, help="verifier file (default: shipped GSM8K one)")
    ap.add_argument("--protect-digits", action="store_true",
                    help="judges may not accept or replace digit tokens (the lossless rule decides there)")
    ap.add_argument("--hf-baselines", action="store_true",
                    help="batch-1 blocks also run Hugging Face generate and assisted generation (same draft)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: steadiest on a shared CPU)")
    ap.add_argument("--out", type=Path, default=Path("bench/results/wallclock"), help="results folder")
    ap.add_argument("--force", action="store_true", help="redo blocks that are already written")
    ap.add_argument("--estimate-only", action="store_true", help="print the expected duration and stop")
    ap.add_argument("--quick", action="store_true",
                    help="GSM8K, 2 prompts, 32 new tokens, K=4, batch 1, top-2, F/R, no sweep (out: OUT-quick)")


def finalize_args(ap: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    """Apply --quick and the defaults that depend on other arguments; reject bad values."""
    if args.quick:
        args.tasks, args.limit, args.max_new_tokens = ["gsm8k"], 2, 32
        args.ks, args.batch_sizes, args.top_ks, args.sweep = [4], [1], [2], []
        if args.out == Path("bench/results/wallclock"):
            args.out = Path("bench/results/wallclock-quick")
    args.sweep_ks = args.ks[:1] if args.sweep_ks is None else args.sweep_ks
    args.sweep_batches = [max(args.batch_sizes)] if args.sweep_batches is None else args.sweep_batches
    for name in ("limit",):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be >= 1")
    if any(k < 1 for k in args.ks) or any(b < 1 for b in args.batch_sizes):
        ap.error("--ks and --batch-sizes must be >= 1")
    return args


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(ap)
    return finalize_args(ap, ap.parse_args(argv))


def register(subparsers) -> None:
    p = subparsers.add_parser("bench", help="wall-clock matrix of decoding policies (tables, Pareto plots)")
    add_arguments(p)
    p.set_defaults(func=lambda args: run(finalize_args(p, args), "selfjudge " + " ".join(
        shlex.quote(a) for a in sys.argv[1:])))


def main(argv=None) -> int:
    args = parse_args(argv)
    return run(args, "python bench/run_wallclock.py " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])))


def run(args: argparse.Namespace, command: str) -> int:
    """Run every block of the matrix that is not written yet, then rebuild the report."""
    import torch

    from selfjudge.bench.matrix import TaskScorer, build_engines, make_configs, run_block

    torch.set_num_threads(args.threads)
    from selfjudge.engine import SpeculativeEngine
    from selfjudge.models import load_pair
    from selfjudge.tasks import load_task

    target, draft, tok = load_pair(args.pair)
    hidden = int(target.config.hidden_size)
    (args.out / BLOCKS).mkdir(parents=True, exist_ok=True)

    plan = []  # (task, batch, configs, judges, paths)
    for task_name in args.tasks:
        judges, paths = load_judges(args, task_name, hidden)
        for b in args.batch_sizes:
            sweep = args.sweep if b in args.sweep_batches else []
            configs = make_configs(args.ks, args.top_ks, judges, args.thresholds, sweep, args.sweep_ks,
                                   hf_baselines=args.hf_baselines and b == 1)
            plan.append((task_name, b, configs, judges, paths))

    # expected duration: a measured target-only step times every configuration's tokens
    warm = SpeculativeEngine(target, None, tok, policy="autoregressive")
    probe = tok.apply_chat_template([{"role": "user", "content": "Say hello."}], tokenize=False,
                                    add_generation_prompt=True)
    warm.generate([probe], max_new_tokens=4)
    t0 = time.perf_counter()
    n = len(warm.generate([probe], max_new_tokens=16)[0].token_ids)
    step = (time.perf_counter() - t0) / max(n, 1)
    todo = [p for p in plan if args.force or not (args.out / BLOCKS / f"{p[0]}_b{p[1]}.json").exists()]
    est = sum(len(cfgs) * args.limit * (args.max_new_tokens or DEFAULT_MAX_NEW.get(t, 128)) * step / b ** 0.5
              for t, b, cfgs, _, _ in todo)
    print(f"[wallclock] {len(todo)} of {len(plan)} blocks to run, "
          f"{sum(len(p[2]) for p in todo)} configurations x {args.limit} prompts; target-only step "
          f"{1000 * step:.0f} ms -> expected about {est / 60:.0f} min", file=sys.stderr, flush=True)
    if args.estimate_only:
        return 0

    protected = None
    if args.protect_digits:
        from selfjudge.engine import digit_token_ids

        protected = digit_token_ids(tok)
    for task_name, b, configs, judges, paths in todo:
        task = load_task(task_name)
        examples = task.examples("eval", limit=args.limit)
        prompts = [task.build_prompt(tok, ex) for ex in examples]
        max_new = args.max_new_tokens or DEFAULT_MAX_NEW.get(task_name, 128)
        engines = build_engines(target, draft, tok, configs, judges, protected_token_ids=protected)
        for c in configs[:2]:  # warm-up: first-call allocations of the target-only and SD paths
            engines[c.key].generate(prompts[:1], max_new_tokens=4)
        t_block = time.perf_counter()
        rows = run_block(engines, configs, TaskScorer(task, target, tok), examples, prompts, b, max_new)
        block = {
            "task": task_name, "batch": b, "max_new_tokens": max_new, "split": "eval",
            "prompt_ids": [ex.prompt_id for ex in examples], "verifiers": paths, "command": command,
            "protected_token_ids": protected,
            "environment": environment(), "block_seconds": time.perf_counter() - t_block, "rows": rows,
        }
        path = args.out / BLOCKS / f"{task_name}_b{b}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(block, indent=1))
        os.replace(tmp, path)  # a block is either whole or absent
        write_report(args.out)
        best = max((r for r in rows if r["policy"] != "autoregressive"), key=lambda r: r["tokens_per_s"], default=None)
        print(f"[wallclock] {task_name} batch {b}: {len(rows)} configurations in {block['block_seconds']:.0f} s"
              + (f"; fastest {best['name']}@K{best['K']} {best['speedup_vs_target_only']:.2f}x target-only"
                 if best else ""), file=sys.stderr, flush=True)
    if not todo:
        write_report(args.out)
    print(f"[wallclock] wrote {args.out}/results.json, results.md, pareto.png, speed_vs_fidelity.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
