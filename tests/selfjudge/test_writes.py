"""selfjudge.writes: output files get the umask's mode (safetensors' save_file alone gives 0600), are
written whole or not at all, and never through a link planted under their name; and no module of
the package writes a file any other way."""

import os
import stat

import torch
from safetensors.torch import load_file, save_file

from selfjudge.judge import Verifier, load_verifier
from selfjudge.judge.verifier import save_verifier
import ast
from pathlib import Path

import pytest

from selfjudge.writes import open_append, replacing, save_figure, save_safetensors, write_json, write_text


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


def plant(folder: Path, name: str, outside: Path, dangling: bool) -> Path:
    """A symbolic link ``folder/name`` to a file outside (existing, or not yet: ``dangling``)."""
    target = outside / f"{name}.target"
    if not dangling:
        target.write_text("keep me")
    (folder / name).symlink_to(target)
    return target


WRITERS = {
    "text": lambda p: write_text(p, "new"),
    "json": lambda p: write_json(p, {"a": 1}),
    "safetensors": lambda p: save_safetensors({"a": torch.arange(2)}, p),
    "figure": lambda p: save_figure(__import__("matplotlib.figure", fromlist=["Figure"]).Figure(), p),
}


@pytest.mark.parametrize("writer", list(WRITERS))
@pytest.mark.parametrize("dangling", [False, True])
def test_a_planted_link_is_replaced_never_written_through(tmp_path, writer, dangling):
    outside, out = tmp_path / "outside", tmp_path / "out"
    outside.mkdir()
    out.mkdir()
    target = plant(out, "file.png" if writer == "figure" else "file", outside, dangling)
    WRITERS[writer](out / ("file.png" if writer == "figure" else "file"))
    written = out / ("file.png" if writer == "figure" else "file")
    assert not written.is_symlink() and written.stat().st_size > 0
    assert (target.read_text() == "keep me") if not dangling else not target.exists()
    assert sorted(p.name for p in out.iterdir()) == [written.name]  # no temporary left behind


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    write_text(tmp_path / "f", "old")
    with pytest.raises(RuntimeError):
        with replacing(tmp_path / "f") as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed")
    assert (tmp_path / "f").read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["f"]
    with pytest.raises(IsADirectoryError):
        write_text(tmp_path, "x")  # a folder is never replaced


def test_append_replaces_a_link_by_a_fresh_file_and_appends_to_a_file(tmp_path):
    outside = tmp_path / "outside.log"
    outside.write_text("keep me")
    (tmp_path / "job.log").symlink_to(outside)
    with open_append(tmp_path / "job.log") as f:
        f.write("mine\n")
    assert outside.read_text() == "keep me" and not (tmp_path / "job.log").is_symlink()
    assert (tmp_path / "job.log").read_text() == "mine\n"
    for line in ("a\n", "b\n"):
        with open_append(tmp_path / "fresh.log") as f:
            f.write(line)
    assert (tmp_path / "fresh.log").read_text() == "a\nb\n"


#: the calls that create or overwrite a file by name; only selfjudge/writes.py may make them
#: (the code-execution sandbox writes in its own fresh temporary folder)
RAW_METHODS = {"write_text", "write_bytes", "savefig", "save_file", "dump"}  # p.write_text(...), json.dump(...)
RAW_FUNCTIONS = {"save_file"}  # safetensors' save_file(...)
ALLOWED = {"selfjudge/writes.py", "selfjudge/tasks/sandbox.py"}


def raw_writes(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        method = isinstance(node.func, ast.Attribute)
        name = node.func.attr if method else getattr(node.func, "id", "")
        if name in (RAW_METHODS if method else RAW_FUNCTIONS):
            found.append(f"{path}:{node.lineno} {name}(...)")
        if name == "open" and len(node.args) > 1 and isinstance(node.args[1], ast.Constant):
            if any(c in str(node.args[1].value) for c in "wax+"):
                found.append(f"{path}:{node.lineno} open(..., {node.args[1].value!r})")
    return found


def test_no_module_writes_a_file_except_through_selfjudge_writes():
    root = Path(__file__).resolve().parents[2]
    files = sorted((root / "selfjudge").rglob("*.py")) + sorted((root / "kernels").rglob("*.py"))
    offenders = [w for f in files if str(f.relative_to(root)) not in ALLOWED for w in raw_writes(f)]
    assert not offenders, "\n".join(offenders)


def test_the_scan_finds_each_kind_of_raw_write(tmp_path):
    """Negative control: every pattern the scan looks for is found in a file that has it."""
    sample = tmp_path / "sample.py"
    sample.write_text("p.write_text('x')\nopen(p, 'w')\nopen(p, 'ab')\nfig.savefig(p)\nsave_file(t, p)\n"
                      "json.dump(o, f)\nopen(p)\nopen(p, 'rb')\nwrite_text(p, 'x')\nwrite_json(p, {})\n")
    assert len(raw_writes(sample)) == 6  # the last four are reads and this package's writers
