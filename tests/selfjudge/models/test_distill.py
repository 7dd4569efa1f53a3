"""Distillation on a tiny model: it learns, and resuming from a checkpoint equals an
uninterrupted run."""

from __future__ import annotations

import json

import torch

from selfjudge.models.distill import choose_head_vocab, distill, distill_loss


def _run(target_dir, out, steps, seqs):
    return distill(str(target_dir), out, layers=[0, 2], head_vocab=12, max_steps=steps, teacher_bs=2, train_bs=3,
                   steps_per_teacher=2, topk=4, lr=3e-3, warmup=1, sequences=seqs, heldout=seqs[:2], verbose=False,
                   eval_every=2)


def test_resume_equals_uninterrupted(tmp_path, tiny):
    from selfjudge.models.records import read_checkpoint

    tok = tiny.tokenizer()
    target_dir = tiny.save(tmp_path / "t", tok, layers=3)
    seqs = tiny.sequences(10, 10, len(tok), seed=1)
    straight = _run(target_dir, tmp_path / "a", 4, seqs)
    _run(target_dir, tmp_path / "b", 2, seqs)
    state_b = json.loads((tmp_path / "b" / "state.json").read_text())
    assert state_b["step"] == 2 and state_b["n_records"] == 2
    resumed = _run(target_dir, tmp_path / "b", 4, seqs)
    assert straight["step"] == resumed["step"] == 4 and resumed["next_seq"] == 4
    a = read_checkpoint(tmp_path / "a", straight, "draft")
    b = read_checkpoint(tmp_path / "b", resumed, "draft")
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6)
    assert resumed["seed"] == 0 and resumed["layers"] == [0, 2] and resumed["history"]


def test_distill_loss_matches_formula():
    torch.manual_seed(0)
    V, Vs, N, k = 20, 6, 5, 3
    vocab_ids = torch.tensor([0, 3, 4, 9, 12, 19])
    full_to_sub = torch.full((V,), -1)
    full_to_sub[vocab_ids] = torch.arange(Vs)
    sub_logits = torch.randn(N, Vs)
    top_ids = torch.stack([torch.randperm(V)[:k] for _ in range(N)]).to(torch.int32)
    top_logp = torch.log_softmax(torch.randn(N, k), -1).to(torch.float16)
    loss, agree = distill_loss(sub_logits, {"top_ids": top_ids, "top_logp": top_logp}, full_to_sub)
    logq = torch.log_softmax(sub_logits, -1)
    ref = 0.0
    for n in range(N):
        for j in range(k):
            t = int(top_ids[n, j])
            if full_to_sub[t] >= 0:
                ref -= float(top_logp[n, j].float().exp()) * float(logq[n, full_to_sub[t]])
    assert abs(float(loss) - ref / N) < 1e-5
    expect = [int(full_to_sub[int(top_ids[n, 0])]) == int(sub_logits[n].argmax()) for n in range(N)]
    assert agree.tolist() == expect


def test_head_vocab_keeps_special_and_frequent_tokens(tiny):
    tok = tiny.tokenizer()
    seqs = [([5, 5, 5, 6, 6, 7, 8], 0), ([5, 6, 9], 0)]
    ids = choose_head_vocab(tok, seqs, 5).tolist()
    assert set(ids) == {0, 1, 2, 5, 6}  # 3 special ids + the two most frequent


def test_given_vocabulary_and_data_are_recorded_and_a_resume_on_other_data_is_refused(tmp_path, tiny):
    """``vocab_ids`` fixes the head's sub-vocabulary (the EAGLE head's, for a fair comparison) and
    ``data`` is recorded; resuming the folder with other data would mix two runs, so it is refused."""
    import pytest

    tok = tiny.tokenizer()
    target_dir = tiny.save(tmp_path / "t", tok, layers=3)
    seqs = tiny.sequences(6, 10, len(tok), seed=1)
    vocab = torch.tensor([9, 3, 5, 1, 0, 7, 2, 11])
    state = distill(str(target_dir), tmp_path / "d", layers=[0, 2], max_steps=2, teacher_bs=2, train_bs=3, topk=4,
                    sequences=seqs, heldout=seqs[:2], data={"text": "self.jsonl"}, vocab_ids=vocab, verbose=False)
    assert state["head_vocab_ids"] == sorted(vocab.tolist()) and state["head_vocab"] == 8
    assert state["data"] == {"source": "given", "n": 6, "heldout": "given: 2 sequences", "text": "self.jsonl"}
    with pytest.raises(ValueError, match="other data"):
        distill(str(target_dir), tmp_path / "d", layers=[0, 2], max_steps=3, teacher_bs=2, train_bs=3, topk=4,
                sequences=seqs, heldout=seqs[:2], data={"text": "reference.jsonl"}, verbose=False)
    resumed = distill(str(target_dir), tmp_path / "d", layers=[0, 2], max_steps=3, teacher_bs=2, train_bs=3, topk=4,
                      sequences=seqs, heldout=seqs[:2], data={"text": "self.jsonl"}, verbose=False)
    assert resumed["step"] == 3 and resumed["head_vocab_ids"] == sorted(vocab.tolist())
