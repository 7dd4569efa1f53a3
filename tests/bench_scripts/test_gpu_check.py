"""bench/gpu_check.py runs end to end on the CPU in --dry-run mode (interpreter, tiny shapes)."""

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gpu_check.py"


def test_gpu_check_dry_run(tmp_path):
    out = tmp_path / "dry.json"
    res = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--only", "verify", "--out", str(out)],
                         capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert res.returncode == 0, res.stderr[-3000:]
    report = json.loads(out.read_text())
    verify = report["checks"]["verify"]
    assert verify["ok"] is True
    modes = {(r["B"], r["mode"]) for r in verify["rows"]}
    assert len(modes) == 6
    assert all(r["rows_equal_to_twin"] == r["rows"] and r["ids_in_range"] for r in verify["rows"])


def test_gpu_check_rejects_unknown_check(tmp_path):
    res = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--only", "nope", "--out",
                          str(tmp_path / "x.json")], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "unknown checks" in res.stderr
