"""Training checkpoints commit through state.json: a kill between writing tensors and the commit
leaves the previous checkpoint whole (tensors and state of one step)."""

import json

import pytest
import torch
from safetensors.torch import save_file

from selfjudge.models.records import read_checkpoint, require_checkpoint, write_checkpoint


def test_commit_names_the_step_and_removes_older_files(tmp_path):
    write_checkpoint(tmp_path, {"head": {"w": torch.ones(2)}, "optim": {"0.m": torch.zeros(2)}}, {"step": 1})
    write_checkpoint(tmp_path, {"head": {"w": torch.full((2,), 2.0)}, "optim": {"0.m": torch.ones(2)}}, {"step": 2})
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["checkpoint"] == {"head": "head-00000002.safetensors", "optim": "optim-00000002.safetensors"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["head-00000002.safetensors", "optim-00000002.safetensors",
                                                         "state.json"]
    assert torch.equal(read_checkpoint(tmp_path, state, "head")["w"], torch.full((2,), 2.0))


def test_a_kill_before_the_commit_keeps_the_previous_step(tmp_path):
    write_checkpoint(tmp_path, {"head": {"w": torch.ones(2)}}, {"step": 1})
    # killed after writing step 2's tensors, before state.json was replaced
    save_file({"w": torch.full((2,), 9.0)}, str(tmp_path / "head-00000002.safetensors"))
    (tmp_path / "state.json.tmp").write_text('{"step": 2, "chec')  # torn temporary
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["step"] == 1
    assert torch.equal(read_checkpoint(tmp_path, state, "head")["w"], torch.ones(2))
    write_checkpoint(tmp_path, {"head": {"w": torch.full((2,), 3.0)}}, {"step": 3})  # the resumed run commits
    assert not (tmp_path / "head-00000002.safetensors").exists()


def test_a_file_the_state_does_not_name_is_not_read(tmp_path):
    """Only what ``state.json`` committed is a checkpoint: a stray file of the group's old name is ignored."""
    save_file({"w": torch.ones(3)}, str(tmp_path / "head.safetensors"))
    assert read_checkpoint(tmp_path, {"step": 5}, "head") is None
    assert read_checkpoint(tmp_path, {"step": 0}, "optim") is None
    with pytest.raises(ValueError, match=r"step 5\) names no committed 'head' checkpoint.*--no-resume"):
        require_checkpoint(tmp_path, {"step": 5}, "head")
