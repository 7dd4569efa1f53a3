"""Train/serve parity of the judge's inputs: the hidden state h and the probability features phi
that labelling stores for a swapped token equal what the engine hands the verify op when a drafter
proposes that token at that position (batch 1 and a left-padded batch of two prompts)."""

from __future__ import annotations

import torch

from selfjudge.engine import SpeculativeEngine
from selfjudge.engine.drafter import Drafter, Proposal
from selfjudge.engine.policies import JudgePolicy
from selfjudge.kernels.judge_features import position_features
from selfjudge.labelling.swap_scoring import score_swaps
from selfjudge.models.generation import greedy_responses


class ScriptedDrafter(Drafter):
    """Proposes ``script[row][i]`` (one token) when row ``row`` has emitted exactly ``i`` tokens."""

    name = "scripted"

    def __init__(self, vocab: int, script: list[dict[int, int]]):
        self.vocab_size, self.script = vocab, script

    def prefill(self, input_ids, valid, target_hidden=None) -> int:
        self.emitted = [0] * input_ids.shape[0]
        self.rows = list(range(input_ids.shape[0]))
        return 0

    def propose(self, num_tokens, temperature, generator):
        ids = [self.script[r].get(self.emitted[j]) for j, r in enumerate(self.rows)]
        counts = [0 if t is None else 1 for t in ids]
        return Proposal(torch.tensor([[t or 0] for t in ids]), None, counts)

    def rollback(self, num_accepted, keep_max, emitted, emitted_host, target_hidden=None) -> None:
        self.emitted = [e + len(h) for e, h in zip(self.emitted, emitted_host)]

    def select(self, rows) -> None:
        self.rows = [self.rows[int(r)] for r in rows]
        self.emitted = [self.emitted[int(r)] for r in rows]


class RecordingJudge(JudgePolicy):
    """A judge that never accepts (so the output stays the target's own) and records its inputs."""

    def __init__(self, H):
        super().__init__((torch.zeros(H), 0.0), threshold=1e9)
        self.seen = []

    def relax(self, cycle):
        self.seen.append((cycle.target_logits.clone(), cycle.draft_token_ids.clone(), cycle.hidden_states.clone()))
        return super().relax(cycle)


def _serve_inputs(policy, row, z):
    """(h [H], phi [F]) the verify op saw for draft token z in batch row ``row``."""
    for logits, drafts, hidden in policy.seen:
        if row < drafts.shape[0] and int(drafts[row, 0]) == z:
            return hidden[row, 0], position_features(logits[row, :1].float(), drafts[row, :1])[0]
    raise AssertionError("the drafter's token never reached the verify op")


def test_labelling_and_verify_see_the_same_h_and_phi(tiny):
    target = tiny.llama(0, vocab_size=61, max_position_embeddings=128, initializer_range=0.2)
    prompts = [[1, 5, 9, 2, 7, 3], [4, 8]]  # different lengths: the batch is left-padded
    ys = greedy_responses(target, None, prompts, 10)
    cases = [(0, 3), (1, 5)]  # (row, response position) of each swap
    zs = [(ys[r][i] + 7) % 61 for r, i in cases]
    script = [{}, {}]
    for (r, i), z in zip(cases, zs):
        script[r][i] = z
    for batch in ([0], [0, 1]):
        policy = RecordingJudge(target.config.hidden_size)
        engine = SpeculativeEngine(target, ScriptedDrafter(61, [script[r] for r in batch]), None,
                                   num_draft_tokens=1, policy=policy)
        out = engine.generate([prompts[r] for r in batch], max_new_tokens=10)
        for j, r in enumerate(batch):
            assert out[j].token_ids == ys[r][: len(out[j].token_ids)]  # the judge kept nothing
            (_, i), z = cases[r], zs[r]
            h_serve, phi_serve = _serve_inputs(policy, j, z)
            lab = score_swaps(target, torch.tensor(prompts[r]), torch.tensor(ys[r]), torch.tensor([i]),
                              torch.tensor([z]), 5, backend="torch")
            torch.testing.assert_close(h_serve.float(), lab.features[0], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(phi_serve, lab.phi[0], atol=1e-5, rtol=1e-5)
            assert float(lab.phi[0, 1]) > 0  # z is not the target's token: the comparison is not trivial
