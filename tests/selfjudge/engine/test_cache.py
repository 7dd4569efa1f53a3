"""RaggedCache: holes, rollback and compaction give the logits of a plain forward over the valid tokens."""

import pytest
import torch

from selfjudge.engine.cache import RaggedCache


@pytest.fixture(scope="module")
def model(tiny):
    return tiny.llama(0, vocab_size=61)


def _plain_last_logits(model, seq):
    with torch.no_grad():
        return model(torch.tensor([seq])).logits[0, -1]


@pytest.mark.parametrize("do_compact", [False, True])
def test_rollback_and_compact_match_plain_forward(model, do_compact):
    g = torch.Generator().manual_seed(0)
    prompts = [[3, 4, 5, 6, 7], [8, 9]]
    P = 5
    ids = torch.zeros(2, P, dtype=torch.long)
    valid = torch.zeros(2, P, dtype=torch.bool)
    for b, p in enumerate(prompts):
        ids[b, P - len(p):] = torch.tensor(p)
        valid[b, P - len(p):] = True
    cache = RaggedCache(model, 2, torch.device("cpu"))
    seqs = [list(p) for p in prompts]
    with torch.no_grad():
        cache.feed(ids, valid)
        for keep in ([1, 3], [4, 2], [2, 4]):
            new = torch.randint(0, 61, (2, 4), generator=g)
            cache.feed(new)
            cache.rollback(torch.tensor(keep), 4, max(keep))
            for b in range(2):
                seqs[b] += new[b, : keep[b]].tolist()
        assert cache.next_pos.tolist() == [len(s) for s in seqs]
        assert cache.valid.sum(1).tolist() == [len(s) for s in seqs]
        assert cache.length == P + 4 + 4 + 4 - (4 - 3) - (4 - 4) - (4 - 4)
        if do_compact:
            free = cache.reclaimable()
            assert free == cache.length - max(len(s) for s in seqs) > 0
            assert cache.compact() == free
            assert cache.length == max(len(s) for s in seqs)
        nxt = torch.tensor([[11], [12]])
        out = cache.feed(nxt)
    for b in range(2):
        ref = _plain_last_logits(model, seqs[b] + [int(nxt[b, 0])])
        torch.testing.assert_close(out.logits[b, -1], ref, rtol=1e-4, atol=1e-4)


def test_select_drops_rows(model):
    cache = RaggedCache(model, 3, torch.device("cpu"))
    with torch.no_grad():
        cache.feed(torch.tensor([[1, 2], [3, 4], [5, 6]]))
        cache.select(torch.tensor([2, 0]))
        out = cache.feed(torch.tensor([[7], [8]]))
    torch.testing.assert_close(out.logits[0, -1], _plain_last_logits(model, [5, 6, 7]), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(out.logits[1, -1], _plain_last_logits(model, [1, 2, 8]), rtol=1e-4, atol=1e-4)


def test_rollback_rejects_bad_keep_max(model):
    cache = RaggedCache(model, 1, torch.device("cpu"))
    with torch.no_grad():
        cache.feed(torch.tensor([[1, 2, 3]]))
    with pytest.raises(ValueError, match="keep_max"):
        cache.rollback(torch.tensor([1]), 2, 3)
