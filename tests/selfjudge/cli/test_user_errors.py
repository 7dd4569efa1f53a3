"""Bad numbers, undecodable arguments and a verifier made for another target end in one-line errors,
with nothing written; limit 0 means no examples."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch


def test_examples_limit_zero_is_empty():
    from selfjudge.tasks import load_task

    assert load_task("gsm8k").examples("eval", limit=0) == []
    assert len(load_task("gsm8k").examples("eval", limit=1)) == 1


@pytest.mark.parametrize("argv", [
    ["label", "--task", "gsm8k", "--out", "x", "--tau", "0", "--limit", "0"],
    ["autojudge-label", "--task", "gsm8k", "--out", "x", "--limit", "0"],
    ["label", "--task", "gsm8k", "--out", "x", "--tau", "nan"],
    ["label", "--task", "gsm8k", "--out", "x", "--tau", "inf"],
    ["train", "--labels", "x", "--out", "v.safetensors", "--tau", "nan"],
    ["generate", "--prompt", "hi", "--temperature", "nan"],
    ["generate", "--prompt", "hi", "--temperature", "inf"],
    ["generate", "--prompt", "hi", "--max-new-tokens", "0"],
    ["bench", "--limit", "0"],
])
def test_bad_numbers_are_one_line_errors(argv, tmp_path):
    res = subprocess.run([sys.executable, "-m", "selfjudge.cli", *argv], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().count("\n") == 0 and "Traceback" not in res.stderr
    assert not (tmp_path / "x").exists()  # nothing written


def test_threshold_nan_refused():
    from selfjudge.cli.common import parse_threshold

    with pytest.raises(ValueError, match="--threshold"):
        parse_threshold("nan")
    assert parse_threshold("F") == "F" and parse_threshold("0.5") == 0.5


@pytest.mark.default_pair
def test_generate_cli_non_utf8_argument_is_one_line(tmp_path):
    res = subprocess.run([sys.executable.encode(), b"-m", b"selfjudge.cli", b"generate", b"--max-new-tokens", b"2",
                          b"--prompt", b"caf\xe9"], capture_output=True, timeout=300, cwd=tmp_path)
    err = res.stderr.decode(errors="replace")
    assert res.returncode == 2 and "not valid UTF-8" in err and "Traceback" not in err


@pytest.mark.default_pair
def test_generate_refuses_a_verifier_made_for_another_target(tmp_path):
    from selfjudge.judge import Verifier

    path = tmp_path / "other.safetensors"
    Verifier(weight=torch.zeros(576), bias=0.0, thresholds={"F": 0.0},
             metadata={"target": "meta-llama/Llama-3.1-8B-Instruct"}).save(path)
    res = subprocess.run([sys.executable, "-m", "selfjudge.cli", "generate", "--policy", "judge", "--verifier",
                          str(path), "--max-new-tokens", "2", "--prompt", "hi"], capture_output=True, text=True,
                         timeout=300, cwd=tmp_path)
    assert res.returncode == 2 and "Llama-3.1-8B-Instruct" in res.stderr and "smollm2-135m" in res.stderr
