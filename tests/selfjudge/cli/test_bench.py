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
    assert (a.tasks, a.limit, a.max_new_tokens, a.ks, a.batch_sizes, a.sweep) == (["gsm8k"], 2, 32, [4], [1], [])
    assert a.out == Path("selfjudge-bench-quick")
    assert bench_cli.parse_args([]).out == Path("selfjudge-bench")
    full = bench_cli.parse_args([])
    assert full.ks == [4, 8] and full.batch_sizes == [1, 8] and full.sweep_ks == [4] and full.sweep_batches == [8]
    assert {"gsm8k", "humaneval", "gpqa", "sharegpt"} == set(full.tasks)
    assert full.split == "eval" and bench_cli.parse_args(["--split", "val"]).split == "val"


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
