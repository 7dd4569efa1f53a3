"""Job folders: --no-resume removes only what its own job made, one writer per folder (never through a
planted link), training rows read once, and a run that committed nothing never blocks its corrected rerun."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from selfjudge.folders import LOCK_FILE, lock_folder, remove_job_folder
from selfjudge.labelling.shards import ShardWriter, read_label_dirs, read_rows


def _manifest(**over):
    return {"method": "autojudge", "target": "t", "draft": "d", "task": "gsm8k", "hidden_size": 4, **over}


def _rows(pids, position=3):
    return [{"prompt_id": p, "position": position, "draft_token_id": 7, "target_token_id": 8, "score": 1.0,
             "label": 1} for p in pids]


def test_no_resume_refuses_a_folder_it_did_not_make(tmp_path):
    precious = tmp_path / "home"
    precious.mkdir()
    (precious / "thesis.tex").write_text("years of work")
    (precious / "src").mkdir()
    with pytest.raises(ValueError, match="not made by this job"):
        ShardWriter(precious, _manifest(), start_over=True)
    assert (precious / "thesis.tex").read_text() == "years of work" and (precious / "src").is_dir()


def test_no_resume_through_mine_task_refuses_foreign_folder(tmp_path):
    """The library entry point autojudge-label --no-resume calls (used to rmtree the folder)."""
    from selfjudge.labelling.autojudge import mine_task

    precious = tmp_path / "notes"
    precious.mkdir()
    (precious / "keep.txt").write_text("x")
    target = SimpleNamespace(config=SimpleNamespace(hidden_size=4, _name_or_path="t"))
    with pytest.raises(ValueError, match="not made by this job"):
        mine_task(target, target, None, SimpleNamespace(name="gsm8k"), [], str(precious), resume=False)
    assert (precious / "keep.txt").read_text() == "x"


def test_no_resume_refuses_same_job_folder_with_foreign_files(tmp_path):
    out = tmp_path / "labels"
    w = ShardWriter(out, _manifest())
    w.write(["p0"], _rows(["p0"]), torch.zeros(1, 4))
    w.close()
    (out / "my-notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="my-notes.txt"):
        ShardWriter(out, _manifest(), start_over=True)
    assert (out / "shard-00000.parquet").exists()


def test_no_resume_starts_over_in_its_own_folder(tmp_path):
    out = tmp_path / "labels"
    w = ShardWriter(out, _manifest())
    w.write(["p0"], _rows(["p0"]), torch.zeros(1, 4))
    w.close()
    w = ShardWriter(out, _manifest(), start_over=True)
    assert w.done_prompt_ids == set() and read_rows(out) == []
    w.close()
    with pytest.raises(ValueError, match="method='selfjudge'"):  # another job's folder
        remove_job_folder(out, manifest="manifest.json", key="method", value="selfjudge", patterns=[])


_HOLD = """
import sys, time
from selfjudge.folders import lock_folder
lock = lock_folder(sys.argv[1], "holder job")
print("locked", flush=True)
time.sleep(60)
"""


def test_second_run_into_a_locked_folder_fails_at_once(tmp_path):
    out = tmp_path / "labels"
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(ValueError, match=r"in use by another selfjudge job \(pid \d+: holder job\)"):
            ShardWriter(out, _manifest())
    finally:
        holder.kill()
        holder.wait()
    w = ShardWriter(out, _manifest())  # a killed holder leaves no stale lock
    w.close()
    assert (out / LOCK_FILE).exists()


def test_lock_is_exclusive_within_one_process_and_released(tmp_path):
    a = lock_folder(tmp_path / "x")
    with pytest.raises(ValueError, match="in use"):
        lock_folder(tmp_path / "x")
    a.release()
    with lock_folder(tmp_path / "x"):
        pass


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_lock_never_writes_through_a_planted_link(tmp_path, kind):
    """A lock file that is a link to a file outside the folder is refused; the outside file is untouched."""
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me")
    out = tmp_path / "out"
    out.mkdir()
    (os.symlink if kind == "symlink" else os.link)(outside, out / LOCK_FILE)
    with pytest.raises(ValueError, match="out: .*" + LOCK_FILE):
        lock_folder(out, "job")
    assert outside.read_text() == "keep me"
    dangling = tmp_path / "out2"
    dangling.mkdir()
    os.symlink(tmp_path / "would-be-created", dangling / LOCK_FILE)
    with pytest.raises(ValueError, match="symbolic link"):
        lock_folder(dangling, "job")
    assert not (tmp_path / "would-be-created").exists()
    lock_folder(tmp_path / "fresh", "job").release()  # negative control: a plain folder locks


def test_training_rows_are_deduplicated(tmp_path):
    out = tmp_path / "labels"
    w = ShardWriter(out, _manifest())
    w.write(["p0", "p1"], _rows(["p0", "p1"]), torch.arange(8.0).view(2, 4))
    w.close()
    feats, rows, _ = read_label_dirs([str(out), str(out)])  # the same folder given twice
    assert len(rows) == 2 and feats.shape == (2, 4)
    assert torch.equal(feats, torch.arange(8.0).view(2, 4))


def test_a_run_that_committed_nothing_does_not_block_the_corrected_rerun(tmp_path):
    out = tmp_path / "labels"
    ShardWriter(out, _manifest(task="humaneval"), compare_keys=("task",)).close()  # then it failed
    w = ShardWriter(out, _manifest(task="gsm8k"), compare_keys=("task",))
    w.write(["p0"], _rows(["p0"]), torch.zeros(1, 4))
    w.close()
    with pytest.raises(ValueError, match="task='gsm8k'"):  # committed work still protects itself
        ShardWriter(out, _manifest(task="humaneval"), compare_keys=("task",))
