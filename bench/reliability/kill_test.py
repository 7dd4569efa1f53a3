"""Kill test: every resumable job, SIGKILLed at random instants, ends with the output of an uninterrupted run.

For each job (label, autojudge-label, train, distill-draft, train-eagle, bench) on the
default pair, with small settings: run it once to the end into ``ref/``; then run the
same command into ``killed/`` and SIGKILL it at a random instant (uniform over 20-65 % of
the reference run's duration, so a resumed run is usually still working) ``--kills``
times, rerunning the same command each time (``killed_runs`` counts the runs the kill hit);
then let it finish. The two outputs are compared on everything that does not measure
time (label rows and features; verifier tensors and thresholds; checkpoint tensors and
state; bench rows without timings).

    python bench/reliability/kill_test.py --out /tmp/kill --kills 3          # ~15 min on 2 CPU cores
    python bench/reliability/kill_test.py --jobs label train --kills 2        # a subset
    python bench/reliability/kill_test.py --planted-links --report bench/results/planted_links.json

``--planted-links`` runs each job instead into a folder where every file name the reference
run wrote is a dangling symbolic link to a path outside: the job must end with the reference's
output and nothing may appear outside (no job writes through a link).

Writes ``--report`` (default ``bench/results/kill_test.json``). Exit status 1 if any
job's outputs differ.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[2]
TIMING = ("second", "per_s", "speedup", "time", "environment", "wall", "command", "load_average", "_ms", "share_")


def _untimed(obj):
    """``obj`` without the fields that measure time (they differ between any two runs)."""
    if isinstance(obj, dict):
        return {k: _untimed(v) for k, v in obj.items() if not any(t in k for t in TIMING)}
    if isinstance(obj, list):
        return [_untimed(v) for v in obj]
    return obj


def _tensors_equal(a: Path, b: Path) -> bool:
    ta, tb = load_file(str(a)), load_file(str(b))
    return ta.keys() == tb.keys() and all(torch.equal(ta[k], tb[k]) for k in ta)


def same_labels(a: Path, b: Path) -> bool:
    from selfjudge.labelling.shards import read_labels

    fa, ra, _ = read_labels(a)
    fb, rb, _ = read_labels(b)
    return torch.equal(fa, fb) and _untimed(ra) == _untimed(rb)


def same_verifier(a: Path, b: Path) -> bool:
    from selfjudge.judge import load_verifier

    va, vb = load_verifier(a / "v.safetensors"), load_verifier(b / "v.safetensors")
    return torch.equal(va.weight, vb.weight) and va.bias == vb.bias and va.thresholds == vb.thresholds


def same_checkpoint(a: Path, b: Path) -> bool:
    sa, sb = json.loads((a / "state.json").read_text()), json.loads((b / "state.json").read_text())
    if _untimed(sa) != _untimed(sb):
        return False
    return all(_tensors_equal(a / name, b / sb["checkpoint"][group]) for group, name in sa["checkpoint"].items())


def same_bench(a: Path, b: Path) -> bool:
    blocks = sorted(p.name for p in (a / "blocks").glob("*.json"))
    if blocks != sorted(p.name for p in (b / "blocks").glob("*.json")) or not blocks:
        return False
    for name in blocks:
        ra = json.loads((a / "blocks" / name).read_text())["rows"]
        rb = json.loads((b / "blocks" / name).read_text())["rows"]
        if _untimed(ra) != _untimed(rb):
            return False
    return True


def jobs(work: Path) -> dict:
    """name -> (argv with OUT standing for the output folder, comparator of two outputs)."""
    labels = work / "label" / "ref"
    return {
        "label": (["label", "--task", "gsm8k", "--split", "train", "--limit", "6", "--tau-quantile", "0.5", "--batch-size", "1",
                   "--max-new-tokens", "24", "--out", "OUT"], same_labels),
        "autojudge-label": (["autojudge-label", "--task", "gsm8k", "--limit", "3", "--max-new-tokens", "20",
                             "--out", "OUT"], same_labels),
        "train": (["train", "--labels", str(labels), "--out", "OUT/v.safetensors"], same_verifier),
        "distill-draft": (["distill-draft", "--out", "OUT", "--max-steps", "8", "--teacher-bs", "2", "--train-bs", "2",
                           "--max-len", "64", "--sharegpt", "16", "--ckpt-minutes", "0"], same_checkpoint),
        "train-eagle": (["train-eagle", "--out", "OUT", "--gsm8k", "2", "--sharegpt", "2", "--heldout", "2",
                         "--max-new-tokens", "16", "--steps", "8", "--eval-every", "4", "--batch-size", "2",
                         "--ckpt-minutes", "0"], same_checkpoint),
        "bench": (["bench", "--tasks", "gsm8k", "sharegpt", "--limit", "1", "--max-new-tokens", "12", "--ks", "3",
                   "--batch-sizes", "1", "--top-ks", "2", "--thresholds", "F", "--sweep", "--out", "OUT"], same_bench),
    }


def run(argv: list[str], out: Path, kill_after: float | None) -> tuple[int, float]:
    args = [a.replace("OUT", str(out)) for a in argv]
    if args[0] == "train":
        out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "selfjudge.cli", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        _, err = proc.communicate(timeout=kill_after)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        return -9, time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({proc.returncode}): {err[-2000:]}")
    return proc.returncode, time.perf_counter() - t0


def planted_links_run(cmd: list[str], same, ref: Path, planted: Path, outside: Path) -> dict:
    """Rerun ``cmd`` into ``planted``, where every file ``ref`` holds (but the lock, which has its
    own test) is a dangling link into ``outside``."""
    from selfjudge.folders import LOCK_FILE

    names = [p.relative_to(ref) for p in sorted(ref.rglob("*")) if p.is_file() and p.name != LOCK_FILE]
    for rel in names:
        (planted / rel).parent.mkdir(parents=True, exist_ok=True)
        (planted / rel).symlink_to(outside / "__".join(rel.parts))
    run(cmd, planted, None)
    escaped = sorted(p.name for p in outside.iterdir()) if outside.exists() else []
    links_left = sorted(str(p.relative_to(planted)) for p in planted.rglob("*") if p.is_symlink())
    return {"planted": len(names), "written_outside": escaped, "links_left": links_left,
            "equal": bool(same(ref, planted)) and not escaped}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/selfjudge-kill-test"))
    ap.add_argument("--jobs", nargs="+", default=None, help="subset of the jobs (default: all)")
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--planted-links", action="store_true", help="rerun into folders of planted links, no kills")
    ap.add_argument("--report", type=Path, default=ROOT / "bench" / "results" / "kill_test.json")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    shutil.rmtree(args.out, ignore_errors=True)
    table = jobs(args.out)
    names = args.jobs or list(table)
    report = {"command": " ".join(["python", "bench/reliability/kill_test.py", *(argv if argv is not None else sys.argv[1:])]),
              "kills_per_job": args.kills, "jobs": {}}
    ok_all = True
    for name in names:
        cmd, same = table[name]
        ref, killed = args.out / name / "ref", args.out / name / "killed"
        if name == "train" and not (args.out / "label" / "ref").exists():
            run(table["label"][0], args.out / "label" / "ref", None)
        _, duration = run(cmd, ref, None)
        if args.planted_links:
            result = planted_links_run(cmd, same, ref, args.out / name / "planted", args.out / name / "outside")
            ok_all &= result["equal"]
            report["jobs"][name] = result
            print(f"[planted-links] {name}: {result['planted']} links, outside {result['written_outside']}, "
                  f"{'equal' if result['equal'] else 'DIFFERENT'}", flush=True)
            args.report.parent.mkdir(parents=True, exist_ok=True)
            args.report.write_text(json.dumps(report, indent=1))
            continue
        kills = []
        for _ in range(args.kills):
            # early enough that a resumed run (model loading included) is usually still working
            at = rng.uniform(0.2, 0.65) * duration
            rc, _ = run(cmd, killed, at)
            kills.append({"at_s": round(at, 1), "killed": rc == -9})
        _, final = run(cmd, killed, None)
        ok = bool(same(ref, killed))
        ok_all &= ok
        report["jobs"][name] = {"uninterrupted_s": round(duration, 1), "kills": kills, "final_run_s": round(final, 1),
                                "killed_runs": sum(k["killed"] for k in kills), "equal": ok}
        print(f"[kill-test] {name}: {'equal' if ok else 'DIFFERENT'} after kills at "
              f"{[k['at_s'] for k in kills]} s of a {duration:.0f} s run", flush=True)
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(json.dumps(report, indent=1))
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
