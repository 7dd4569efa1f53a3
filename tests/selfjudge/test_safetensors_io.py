"""save_safetensors: the file gets the umask's mode, where safetensors' save_file alone gives 0600."""

import os
import stat

import torch
from safetensors.torch import load_file, save_file

from selfjudge.judge import Verifier, load_verifier
from selfjudge.judge.verifier import save_verifier
from selfjudge.safetensors_io import save_safetensors


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_files_get_the_umask_mode_and_the_same_content(tmp_path):
    old = os.umask(0o022)
    try:
        save_file({"a": torch.arange(3)}, str(tmp_path / "plain.safetensors"))
        save_safetensors({"a": torch.arange(3)}, tmp_path / "ours.safetensors", metadata={"k": "v"})
        save_verifier(Verifier(weight=torch.zeros(4), bias=0.5, thresholds={"F": 0.1}), tmp_path / "v.safetensors")
        os.umask(0o077)
        save_safetensors({"a": torch.arange(3)}, tmp_path / "private.safetensors")
    finally:
        os.umask(old)
    assert mode(tmp_path / "plain.safetensors") == 0o600  # why the helper exists (the negative control)
    assert mode(tmp_path / "ours.safetensors") == 0o644 and mode(tmp_path / "v.safetensors") == 0o644
    assert mode(tmp_path / "private.safetensors") == 0o600
    assert torch.equal(load_file(str(tmp_path / "ours.safetensors"))["a"], torch.arange(3))
    assert load_verifier(tmp_path / "v.safetensors").bias == 0.5
