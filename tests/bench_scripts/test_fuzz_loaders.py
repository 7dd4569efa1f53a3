"""The loader fuzzer: every user-facing loader survives CI's share of mutations, and the fuzzer
itself reports what it hunts (negative controls)."""

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_loader_loads_or_refuses_in_one_value_error(tmp_path):
    out = tmp_path / "fuzz.json"
    res = subprocess.run([sys.executable, str(ROOT / "bench" / "reliability" / "fuzz_loaders.py"), "--per-loader", "24",
                          "--seed", "0", "--out", str(out)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    report = json.loads(out.read_text())
    assert len(report["results"]) == 10  # every loader, the draft model folder and Parquet label rows included
    for r in report["results"]:
        assert r["mutations"] == 24 and r["failed"] == 0 and r["loaded"] + r["refused"] == 24, r


def test_the_fuzzer_catches_stray_exceptions_unnamed_errors_and_hangs(bench_script, tmp_path):
    mod = bench_script("fuzz_loaders")

    def parse_plainly(path):  # json.loads raises errors that do not name the file
        return json.loads(Path(path).read_text())

    res = mod.fuzz_loader("plain-json", mod.make_head_json, parse_plainly, 30, 0, 5.0, tmp_path)
    assert res["failed"] > 0 and any("ValueError without the path" in f["detail"] or "Error" in f["detail"]
                                     for f in res["failures"])

    def slow(path):
        time.sleep(0.5)

    outcome, detail = mod.run_one(slow, tmp_path, timeout=0.1)
    assert outcome == "failed" and "no answer" in detail
    outcome, _ = mod.run_one(lambda p: (_ for _ in ()).throw(KeyError("x")), tmp_path, timeout=1.0)
    assert outcome == "failed"
    outcome, _ = mod.run_one(lambda p: (_ for _ in ()).throw(ValueError(f"{p}: damaged")), tmp_path, timeout=1.0)
    assert outcome == "refused"
