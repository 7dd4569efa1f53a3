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


@pytest.mark.parametrize("counts, host", [([4, 1, 3, 2], False), ([4, 1, 3, 2], True), ([1, 1, 1, 1], True),
                                          ([1, 4, 1, 1], True), ([4, 4, 4, 4], False)])
def test_packed_feed_equals_padded_feed_and_a_plain_forward(model, counts, host):
    """Rows feeding ``counts`` valid columns of 4 (the rest padding; ``host``: the counts passed on
    the host, else read from the mask), the second row's prompt short: the packed forward's logits and hidden states
    at the valid columns equal the padded forward's, both caches end equal, and the next step after
    a rollback equals a plain forward over each row's tokens (GQA: 4 query heads, 2 key heads)."""
    g = torch.Generator().manual_seed(1)
    B, S = 4, 4
    prompts = [[3, 4, 5, 6, 7], [8, 9], [10, 11, 12], [13]]
    P = max(map(len, prompts))
    ids = torch.zeros(B, P, dtype=torch.long)
    valid = torch.zeros(B, P, dtype=torch.bool)
    for b, p in enumerate(prompts):
        ids[b, P - len(p):], valid[b, P - len(p):] = torch.tensor(p), True
    padded, packed = RaggedCache(model, B, torch.device("cpu")), RaggedCache(model, B, torch.device("cpu"))
    new = torch.randint(0, 61, (B, S), generator=g)
    n = torch.tensor(counts)
    new_valid = torch.arange(S)[None] < n[:, None]  # [B, S]
    with torch.no_grad():
        for c in (padded, packed):
            c.feed(ids, valid)
        ref = padded.feed(new, new_valid, logits_to_keep=S, output_hidden_states=True)
        logits, hidden = packed.feed_packed(new, new_valid, output_hidden_states=True, counts=counts if host else None,
                                            starts=[0] * B if host else None)
        assert torch.allclose(logits[new_valid], ref.logits[new_valid], atol=1e-5)
        assert torch.allclose(hidden[new_valid], ref.hidden_states[-1][new_valid], atol=1e-5)
        assert (logits[~new_valid] == 0).all()
        assert torch.equal(packed.valid, padded.valid) and torch.equal(packed.next_pos, padded.next_pos)
        for a, b in zip(packed.cache.layers, padded.cache.layers):
            mask = packed.valid[:, None, :, None]
            assert torch.allclose(a.keys * mask, b.keys * mask, atol=1e-5)
        keep = torch.minimum(torch.tensor([2, 1, 3, 0]), n)
        packed.rollback(keep, S, int(keep.max()))
        nxt = torch.randint(0, 61, (B, 1), generator=g)
        last = packed.feed(nxt).logits[:, -1]
    for b, p in enumerate(prompts):
        seq = p + new[b, : keep[b]].tolist() + nxt[b].tolist()
        assert torch.allclose(last[b], _plain_last_logits(model, seq), atol=1e-4)
    with pytest.raises(ValueError, match="decoder_only"):
        RaggedCache(model, 1, torch.device("cpu"), decoder_only=True).feed_packed(new[:1], new_valid[:1])
    with pytest.raises(ValueError, match="counts"):
        RaggedCache(model, B, torch.device("cpu")).feed_packed(new, new_valid, counts=[1, 0, 1, 1], starts=[0] * B)


@pytest.mark.parametrize("lengths", [[5, 2, 3, 1], [5, 1, 1, 1], [2, 5, 5, 4]])
def test_packed_prefill_of_left_padded_prompts_equals_the_padded_one(model, lengths):
    """Left-padded prompts read packed (only their tokens computed) leave a cache on which the
    next step's logits equal those after the padded read, and the hidden states at the prompt
    tokens are the padded read's; rows whose valid columns are not one run are refused."""
    g = torch.Generator().manual_seed(2)
    B, S = len(lengths), max(lengths)
    ids = torch.randint(0, 61, (B, S), generator=g)
    valid = torch.arange(S)[None] >= torch.tensor([S - n for n in lengths])[:, None]  # [B, S] left padded
    padded, packed = RaggedCache(model, B, torch.device("cpu")), RaggedCache(model, B, torch.device("cpu"))
    nxt = torch.randint(0, 61, (B, 1), generator=g)
    with torch.no_grad():
        ref = padded.feed(ids, valid, output_hidden_states=True).hidden_states[-1]
        logits, hidden = packed.feed_packed(ids, valid, output_hidden_states=True, logits=False)
        assert logits is None
        assert torch.allclose(hidden[valid], ref[valid], atol=1e-5) and (hidden[~valid] == 0).all()
        assert torch.equal(packed.valid, padded.valid) and torch.equal(packed.next_pos, padded.next_pos)
        assert torch.allclose(packed.feed(nxt).logits, padded.feed(nxt).logits, atol=1e-5)
        holes = valid.clone()
        holes[lengths.index(S), S - 2] = False  # the longest row: two runs
        with pytest.raises(ValueError, match="contiguous"):
            RaggedCache(model, B, torch.device("cpu")).feed_packed(ids, holes)
