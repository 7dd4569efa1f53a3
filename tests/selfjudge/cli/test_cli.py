"""The command line's shared behaviour: one-line errors with exit status 2, --debug, the recorded command."""

from __future__ import annotations

import subprocess
import sys

import pytest

from selfjudge.cli import build_parser, main
from selfjudge.cli.common import command_line, parse_threshold


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "selfjudge.cli", *args], capture_output=True, text=True, timeout=300)


def test_every_subcommand_is_registered():
    names = set(build_parser()._subparsers._group_actions[0].choices)
    assert names == {"demo", "generate", "label", "autojudge-label", "train", "distill-draft", "train-eagle", "bench",
                     "report", "import-head", "calibrate", "build-store", "convert-labels"}


def test_argument_error_is_one_line_with_status_2():
    res = run_cli("train", "--out", "x.safetensors")  # --labels missing
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and "--labels" in res.stderr and "Traceback" not in res.stderr


def test_library_value_error_is_one_line_with_status_2(tmp_path, capsys):
    # a folder with no label shards: the library raises ValueError naming the argument
    assert main(["train", "--labels", str(tmp_path), "--out", str(tmp_path / "v.safetensors")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("selfjudge train: error: ") and err.count("\n") == 1 and "manifest.json" in err


def test_debug_shows_the_traceback(tmp_path):
    res = run_cli("--debug", "train", "--labels", str(tmp_path), "--out", str(tmp_path / "v.safetensors"))
    assert res.returncode != 0 and "Traceback" in res.stderr and "ValueError" in res.stderr
    res = run_cli("train", "--labels", str(tmp_path), "--out", str(tmp_path / "v.safetensors"), "--debug")
    assert "Traceback" in res.stderr  # also after the subcommand's name


def test_generate_judge_needs_a_verifier(capsys):
    assert main(["generate", "--policy", "judge", "--prompt", "hi"]) == 2
    assert "--verifier" in capsys.readouterr().err


def test_no_subcommand_prints_help(capsys):
    assert main([]) == 2
    assert "COMMAND" in capsys.readouterr().out


def test_command_line_quotes_arguments():
    assert command_line(["train", "--labels", "a b", "--out", "v.st"]) == "selfjudge train --labels 'a b' --out v.st"
    assert command_line(["--quick"], "python bench/run_wallclock.py") == "python bench/run_wallclock.py --quick"


def test_parse_threshold():
    assert parse_threshold(None) is None
    assert parse_threshold("F") == "F" and parse_threshold("q0.90") == "q0.90"
    assert parse_threshold("-1.5") == -1.5 and isinstance(parse_threshold("2"), float)


@pytest.mark.parametrize("args", [["--help"], ["train", "--help"], ["bench", "--help"]])
def test_help_exits_zero(args):
    res = run_cli(*args)
    assert res.returncode == 0 and "usage:" in res.stdout


@pytest.mark.default_pair
def test_generate_with_prompt_lookup_on_the_default_pair():
    import json

    res = run_cli("generate", "--drafter", "prompt-lookup", "--max-new-tokens", "12", "--json",
                  "--prompt", "Repeat after me: one two three four, one two three four")
    assert res.returncode == 0, res.stderr[-2000:]
    line = json.loads(res.stdout.strip().splitlines()[-1])
    assert 0 < len(line["token_ids"]) <= 12 and line["stats"]["draft_forwards"] == 0
    same = run_cli("generate", "--policy", "autoregressive", "--max-new-tokens", "12", "--json",
                   "--prompt", "Repeat after me: one two three four, one two three four")
    assert json.loads(same.stdout.strip().splitlines()[-1])["token_ids"] == line["token_ids"]  # lossless


@pytest.mark.default_pair
def test_train_eagle_end_to_end_then_generate_with_the_head(tmp_path):
    """A tiny ``train-eagle`` run on the default pair (2 prompts, 2 steps), resumed, exported, and
    decoded with: the CLI wiring of the head's whole life, not its quality."""
    import json

    out, head = tmp_path / "run", tmp_path / "head"
    args = ["train-eagle", "--out", str(out), "--gsm8k", "1", "--sharegpt", "1", "--heldout", "2",
            "--max-new-tokens", "8", "--steps", "2", "--eval-every", "1", "--batch-size", "2"]
    res = run_cli(*args)
    assert res.returncode == 0, res.stderr[-2000:]
    res = run_cli(*args[:-6], "--steps", "3", "--eval-every", "1", "--batch-size", "2", "--export", str(head))
    assert res.returncode == 0, res.stderr[-2000:]
    state = json.loads((out / "state.json").read_text())
    assert state["step"] == 3 and [h["step"] for h in state["history"]] == [0, 1, 2, 3]
    meta = json.loads((head / "eagle.json").read_text())
    assert meta["step"] == 3 and meta["data"]["source"] == "self"
    assert (head / "draft_vocab.safetensors").exists() and (head / "config.json").exists()
    res = run_cli("generate", "--drafter", "eagle", "--eagle", str(head), "--max-new-tokens", "6", "--json",
                  "--prompt", "What is 2 + 3?")
    assert res.returncode == 0, res.stderr[-2000:]
    ref = run_cli("generate", "--policy", "autoregressive", "--max-new-tokens", "6", "--json", "--prompt", "What is 2 + 3?")
    assert json.loads(res.stdout.splitlines()[-1])["token_ids"] == json.loads(ref.stdout.splitlines()[-1])["token_ids"]


def test_label_draft_id_names_prompt_lookup_lengths():
    """Label runs record prompt lookup's n-gram lengths in their draft id, so a resume with other
    lengths is refused."""
    from selfjudge.cli.common import lookup_suffix
    from selfjudge.engine.prompt_lookup import PromptLookupDrafter

    assert lookup_suffix(PromptLookupDrafter(10)) == ":ngrams3-1"
    assert lookup_suffix(PromptLookupDrafter(10, max_ngram=3, min_ngram=2)) == ":ngrams3-2"
    assert lookup_suffix(PromptLookupDrafter(10, max_ngram=4, min_ngram=1)) == ":ngrams4-1"
    assert lookup_suffix(object()) == ""
