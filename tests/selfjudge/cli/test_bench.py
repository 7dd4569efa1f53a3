"""The ``selfjudge bench`` / ``bench/run_wallclock.py`` command line: arguments and the ``selfjudge report`` rebuild."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from selfjudge.cli import bench as bench_cli
from selfjudge.cli import build_parser

ROOT = Path(__file__).resolve().parents[3]


def test_quick_sets_a_small_matrix_and_its_own_folder():
    a = bench_cli.parse_args(["--quick"])
    w = a.workload
    assert (w.tasks, w.limit, w.max_new_tokens, a.methods.ks, w.batch_sizes, a.sweeps.sweep) == (["gsm8k"], 2, 32, [4], [1], [])
    assert a.execution.out == Path("selfjudge-bench-quick")
    full = bench_cli.parse_args([])
    assert full.execution.out == Path("selfjudge-bench")
    assert full.methods.ks == [4, 8] and full.workload.batch_sizes == [1, 8]
    assert full.sweeps.sweep_ks == [4] and full.sweeps.sweep_batches == [8]
    assert {"gsm8k", "humaneval", "gpqa", "sharegpt"} == set(full.workload.tasks)
    assert full.workload.split == "eval" and bench_cli.parse_args(["--split", "val"]).workload.split == "val"


def test_flat_options_go_to_their_groups_and_unknown_ones_are_named():
    from selfjudge.evaluation.matrix_spec import MatrixSpec

    spec = MatrixSpec.from_options(limit=3, ks=[2, 5], rules=["fly"], drafter="prompt-lookup", timing_rounds=2)
    assert (spec.workload.limit, spec.methods.ks, spec.sweeps.rules) == (3, [2, 5], ["fly"])
    assert (spec.drafting.drafter, spec.execution.timing_rounds) == ("prompt-lookup", 2)
    assert spec.sweeps.sweep_ks == [2] and spec.sweeps.sweep_batches == [8]  # first K, largest batch
    with pytest.raises(TypeError, match="limt"):
        MatrixSpec.from_options(limt=3)


@pytest.mark.parametrize("bad", [["--limit", "0"], ["--ks", "0"], ["--batch-sizes", "0"], ["--judges", "Nope"],
                                 ["--split", "train"]])
def test_bad_arguments_are_refused(bad):
    with pytest.raises(SystemExit) as e:
        bench_cli.parse_args(bad)
    assert e.value.code == 2


def test_selfjudge_cli_has_bench():
    args = build_parser().parse_args(["bench", "--tasks", "sharegpt", "--limit", "3"])
    assert args.tasks == ["sharegpt"] and args.limit == 3 and callable(args.func)


def test_report_only_rebuild_from_blocks(tmp_path):
    """``selfjudge report DIR`` merges finished blocks; an empty folder is a one-line error."""
    blocks = tmp_path / "blocks"
    blocks.mkdir()
    res = subprocess.run([sys.executable, "-m", "selfjudge.cli", "report", str(tmp_path)], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 2 and "no finished blocks" in res.stderr and "Traceback" not in res.stderr
    row = {"name": "target-only", "family": "target-only", "policy": "autoregressive", "K": 0, "prompts": 1,
           "tokens_per_s": 2.0, "speedup_vs_target_only": 1.0, "speedup_vs_standard": float("nan"),
           "mean_accepted_length": 1.0, "judge_accepted_tokens": 0, "fidelity": 1.0, "task_score": 0.5,
           "fidelity_name": "f", "task_score_name": "s", "share_draft": 0.0, "share_target": 1.0,
           "share_verify": 0.0, "share_other": 0.0}
    (blocks / "t_b1.json").write_text(json.dumps({"task": "t", "batch": 1, "max_new_tokens": 4,
                                                  "environment": {"torch_threads": 1}, "rows": [row]}))
    res = subprocess.run([sys.executable, str(ROOT / "bench" / "run_wallclock.py"), "--help"], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0 and "--quick" in res.stdout
    res = subprocess.run([sys.executable, "-m", "selfjudge.cli", "report", str(tmp_path)], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "| target-only | – | 2.00 |" in (tmp_path / "results.md").read_text()
