"""verify / verify_flat reject bad input with a ValueError that names the argument."""

import pytest
import torch

from selfjudge.kernels.verify import JudgeInputs, Randomness, RelaxedRules, verify, verify_flat

B, K, V, H = 2, 3, 11, 5


def good():
    return dict(
        draft_token_ids=torch.zeros(B, K, dtype=torch.long),
        num_draft_tokens=torch.full((B,), K),
        target_logits=torch.randn(B, K + 1, V),
        draft_probs=torch.full((B, K, V), 1.0 / V),
    )


def call(**over):
    kw = good()
    options = {k: over.pop(k) for k in list(over) if k not in kw}
    kw.update(over)
    args = [kw.pop(k) for k in ("draft_token_ids", "num_draft_tokens", "target_logits", "draft_probs")]
    return verify(*args, backend="torch", **options)


def test_good_call_works():
    out = call(temperature=1.0, randomness=Randomness(seed=0), judge=JudgeInputs(torch.randn(B, K, H), torch.randn(H)))
    assert out.output_token_ids.shape == (B, K + 1)


@pytest.mark.parametrize(
    "over, name",
    [
        (dict(draft_token_ids=torch.zeros(B, K)), "draft_token_ids"),  # float ids
        (dict(draft_token_ids=torch.zeros(B * K, dtype=torch.long)), "draft_token_ids"),  # 1-D
        (dict(target_logits=torch.randn(B, K, V)), "target_logits"),  # K > logits positions - 1
        (dict(target_logits=torch.randn(B + 1, K + 1, V)), "target_logits"),  # batch mismatch
        (dict(target_logits=torch.zeros(B, K + 1, V, dtype=torch.long)), "target_logits"),  # int logits
        (dict(num_draft_tokens=torch.full((B + 1,), K)), "num_draft_tokens"),
        (dict(num_draft_tokens=torch.full((B,), 1.0)), "num_draft_tokens"),
        (dict(draft_probs=torch.rand(B, K, V + 1)), "draft_probs"),
        (dict(draft_probs=torch.ones(B, K, V, dtype=torch.long)), "draft_probs"),
        (dict(temperature=-1.0), "temperature"),
        (dict(temperature=torch.ones(B + 1)), "temperature"),
        (dict(judge=JudgeInputs(torch.randn(B, K, H), torch.randn(H + 1))), "judge.weight"),
        (dict(judge=(torch.randn(B, K, H), torch.randn(H))), "judge must be a JudgeInputs"),  # not the object
        (dict(rules=torch.zeros(B, K, dtype=torch.bool)), "rules must be a RelaxedRules"),
        (dict(randomness=3), "randomness must be a Randomness"),
        (dict(judge=JudgeInputs(torch.randn(B, K + 1, H), torch.randn(H))), "judge.hidden_states"),
        (dict(judge=JudgeInputs(torch.randn(B, K, H), torch.randn(H), bias=torch.zeros(B + 1))), "judge.bias"),
        (dict(judge=JudgeInputs(torch.randn(B, K, H), torch.randn(H), threshold="high")), "judge.threshold"),
        (dict(rules=RelaxedRules(accept=torch.zeros(B, K))), "rules.accept"),  # not bool
        (dict(rules=RelaxedRules(accept=torch.zeros(B, K + 1, dtype=torch.bool))), "rules.accept"),
        (dict(rules=RelaxedRules(blocked=torch.zeros(B, K))), "rules.blocked"),  # not bool
        (dict(rules=RelaxedRules(blocked=torch.zeros(B, K - 1, dtype=torch.bool))), "rules.blocked"),
    ],
)
def test_bad_input_names_argument(over, name):
    with pytest.raises(ValueError, match=name):
        call(**over)


def test_bad_backend():
    kw = good()
    with pytest.raises(ValueError, match="backend"):
        verify(kw["draft_token_ids"], None, kw["target_logits"], backend="cuda")


def test_flat_bad_inputs():
    T = 4
    d = torch.zeros(T, dtype=torch.long)
    cu = torch.tensor([1, 4])
    with pytest.raises(ValueError, match="target_logits"):
        verify_flat(d, cu, torch.randn(T, V), backend="torch")  # needs T+B rows
    with pytest.raises(ValueError, match="draft_probs"):
        verify_flat(d, cu, torch.randn(T + 2, V), torch.rand(T + 2, V), backend="torch")
    with pytest.raises(ValueError, match="cu_num_draft_tokens"):
        verify_flat(d, cu.float(), torch.randn(T + 2, V), backend="torch")
    with pytest.raises(ValueError, match="judge.hidden_states"):
        verify_flat(d, cu, torch.randn(T + 2, V), backend="torch",
                    judge=JudgeInputs(hidden_states=torch.randn(T + 1, H), weight=torch.randn(H)))
    out = verify_flat(d, cu, torch.randn(T + 2, V), backend="torch")
    assert out.output_token_ids.shape == (2, 4)
