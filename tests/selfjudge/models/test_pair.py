"""load_pair / draft assembly / cache atomicity on tiny local Llama folders."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from selfjudge.models import TokenizerMismatchError, load_pair
from selfjudge.models.cache_dir import COMPLETE_MARKER, atomic_folder, default_cache_dir, is_complete
from selfjudge.models.draft_model import SubVocabHead, build_draft_from_target, restrict_head, trainable_state


def test_default_cache_dir_env(monkeypatch, tmp_path):
    monkeypatch.setenv("SELFJUDGE_CACHE", str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("SELFJUDGE_CACHE")
    assert default_cache_dir() == Path.home() / ".cache" / "selfjudge"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_atomic_folder_leaves_nothing_on_failure(tmp_path):
    final = tmp_path / "model"
    with pytest.raises(RuntimeError):
        with atomic_folder(final) as tmp:
            (tmp / "half.bin").write_bytes(b"x")
            raise RuntimeError("interrupted")
    assert not final.exists()
    assert list(tmp_path.iterdir()) == []
    with atomic_folder(final, marker_text='{"ok": 1}') as tmp:
        (tmp / "w.bin").write_bytes(b"y")
        assert not is_complete(tmp)
    assert is_complete(final) and (final / "w.bin").read_bytes() == b"y"
    assert json.loads((final / COMPLETE_MARKER).read_text()) == {"ok": 1, "files": {"w.bin": 1}}
    assert (final / "w.bin").stat().st_mode & 0o777 == 0o666 & ~_umask()  # the umask's mode, not 0600
    (final / "w.bin").write_bytes(b"")  # truncated after completion: made again on the next use
    assert not is_complete(final)
    (final / "w.bin").write_bytes(b"y")
    assert is_complete(final)
    (final / COMPLETE_MARKER).write_text('{"ok": 1}')  # an older marker without sizes
    assert not is_complete(final)
    # replacing an existing folder keeps only the new content
    with atomic_folder(final) as tmp:
        (tmp / "v2.bin").write_bytes(b"z")
    assert sorted(p.name for p in final.iterdir()) == [COMPLETE_MARKER, "v2.bin"]
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_tokenizer_mismatch_is_refused(tmp_path, tiny):
    tok = tiny.tokenizer()
    target = tiny.save(tmp_path / "t", tok, layers=3, seed=0)
    same = tiny.save(tmp_path / "d", tok, layers=1, seed=1)
    pair = load_pair(str(target), str(same))
    assert pair.target.config.num_hidden_layers == 3 and pair.draft.config.num_hidden_layers == 1
    other = tiny.save(tmp_path / "o", tiny.tokenizer(["zebra"] + tiny.WORDS[1:]), layers=1)  # one word differs
    with pytest.raises(TokenizerMismatchError, match="draft"):
        load_pair(str(target), str(other))
    assert isinstance(TokenizerMismatchError("x"), ValueError)


def test_tokenizer_special_token_mismatch(tmp_path, tiny):
    from selfjudge.models import check_same_tokenizer

    a = tiny.tokenizer()
    b = tiny.tokenizer()
    b.pad_token = "<unk>"
    check_same_tokenizer(a, tiny.tokenizer())
    with pytest.raises(TokenizerMismatchError, match="special"):
        check_same_tokenizer(a, b)


def test_unknown_pair_name():
    with pytest.raises(ValueError, match="name_or_target"):
        load_pair("no-such-pair")


def test_draft_copies_layers_and_shares_embeddings(tiny):
    target = tiny.chat_llama(40, layers=4)
    draft = build_draft_from_target(target, [0, 3])
    assert draft.config.num_hidden_layers == 2
    tsd, dsd = target.state_dict(), draft.state_dict()
    for k in tsd:
        if k.startswith("model.layers.3."):
            assert torch.equal(dsd["model.layers.1." + k[len("model.layers.3."):]], tsd[k])
    assert torch.equal(dsd["model.embed_tokens.weight"], tsd["model.embed_tokens.weight"])
    assert draft.lm_head.weight.data_ptr() == draft.model.embed_tokens.weight.data_ptr()
    assert set(trainable_state(draft)) == {k for k in dsd if k.startswith("model.layers.")} | {"model.norm.weight"}
    with pytest.raises(ValueError, match="layers"):
        build_draft_from_target(target, [4])


def test_restricted_head_matches_full_head_on_subvocab(tiny):
    model = tiny.chat_llama(40, layers=1)
    ids = torch.tensor([1, 2, 5, 7, 30])
    x = torch.randint(0, 40, (2, 6))
    full = model(x).logits  # [2, 6, 40]
    restrict_head(model, ids)
    assert isinstance(model.lm_head, SubVocabHead)
    out = model(x).logits  # [2, 6, 40]
    assert out.shape == full.shape
    torch.testing.assert_close(out[..., ids], full[..., ids])
    rest = torch.ones(40, dtype=torch.bool)
    rest[ids] = False
    assert (out[..., rest] == torch.finfo(out.dtype).min).all()
    p = torch.softmax(out, -1)
    assert torch.isfinite(torch.log_softmax(out, -1)).all() and (p[..., rest] == 0).all()
    torch.testing.assert_close(p[..., ids], torch.softmax(full[..., ids], -1))


def test_export_assemble_and_load(tmp_path, tiny):
    from selfjudge.models.distill import distill, export_draft
    from selfjudge.models.pair import assemble_default_draft

    tok = tiny.tokenizer()
    target_dir = tiny.save(tmp_path / "t", tok, layers=3)
    seqs = tiny.sequences(8, 12, len(tok))
    distill(str(target_dir), tmp_path / "ck", layers=[0, 2], head_vocab=10, max_steps=2, teacher_bs=2, train_bs=2,
            topk=4, sequences=seqs, heldout=seqs[:2], verbose=False, eval_every=1)
    asset = export_draft(tmp_path / "ck", tmp_path / "asset")
    info = json.loads((asset / "draft.json").read_text())
    assert info["source_layers"] == [0, 2] and info["steps"] == 2 and info["seed"] == 0
    folder = assemble_default_draft(target_dir, asset, tmp_path / "cache", verbose=False)
    assert is_complete(folder)
    assert assemble_default_draft(target_dir, asset, tmp_path / "cache", verbose=False) == folder  # cached
    pair = load_pair(str(target_dir), str(folder))
    assert isinstance(pair.draft.lm_head, SubVocabHead) and pair.draft.lm_head.weight.shape[0] == 10
    torch.testing.assert_close(pair.draft.model.embed_tokens.weight, pair.target.model.embed_tokens.weight)
    from safetensors.torch import load_file

    shipped = load_file(str(asset / "draft.safetensors"))
    torch.testing.assert_close(pair.draft.state_dict()["model.layers.1.mlp.up_proj.weight"],
                               shipped["model.layers.1.mlp.up_proj.weight"].float())
    x = torch.tensor([seqs[0][0]])
    assert pair.draft(x).logits.shape == pair.target(x).logits.shape == (1, 12, len(tok))


def test_damaged_tokenizer_file_is_one_value_error_naming_the_folder(tmp_path, tiny):
    tok = tiny.tokenizer()
    target = tiny.save(tmp_path / "t", tok, layers=2, seed=0)
    draft = tiny.save(tmp_path / "d", tok, layers=1, seed=1)
    raw = (target / "tokenizer.json").read_text()
    (target / "tokenizer.json").write_text(raw[: len(raw) // 2])  # truncated: a JSON error naming no file
    with pytest.raises(ValueError, match=f"target: no tokenizer could be loaded from {target}"):
        load_pair(str(target), str(draft))
