"""The vLLM plugin on vLLM's CPU build (``-m vllm``; ``bash scripts/test_vllm.sh`` installs and runs).

Unit level: the plugin's sampler against vLLM's own ``RejectionSampler`` in vLLM's flattened batch
layout (greedy: equal outputs; sampling: the target's distribution, with a negative control).
Engine level: greedy outputs through the plugin equal vLLM's own sampler and plain vLLM on mixed
prompts; the judge accepts judge-only tokens (counted) with logits equal to the plain formula on
Hugging Face's hidden states; a verifier made for another model is refused.
"""

import json
import os
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.vllm
vllm = pytest.importorskip("vllm")

from vllm.v1.sample.logits_processor import LogitsProcessors  # noqa: E402
from vllm.v1.sample.metadata import SamplingMetadata  # noqa: E402
from vllm.v1.sample.rejection_sampler import RejectionSampler  # noqa: E402
from vllm.v1.sample.sampler import Sampler  # noqa: E402
from vllm.v1.spec_decode.metadata import SpecDecodeMetadata  # noqa: E402

from selfjudge.integrations.vllm.config import JudgeWeights, PluginOptions  # noqa: E402
from selfjudge.integrations.vllm.sampler import SelfJudgeRejectionSampler  # noqa: E402

CPU = torch.device("cpu")


@pytest.fixture(scope="module", autouse=True)
def vllm_platform_kernels():
    """vLLM's CPU build runs its rejection kernels as C++ fallbacks, which its engine registers
    at start-up; the unit tests call vLLM's sampler outside an engine, so they register them."""
    from vllm.platforms import current_platform

    register = getattr(current_platform, "register_triton_kernel_overrides", None)
    if register is not None:
        register()


def flat_metadata(drafts: list[list[int]]) -> SpecDecodeMetadata:
    """vLLM's metadata for these per-request drafts: request b's logits rows are its n_b draft
    positions then its bonus position."""
    n = [len(d) for d in drafts]
    cu = np.cumsum(n)
    target, bonus, start = [], [], 0
    for b, count in enumerate(n):
        target += [start + b + j for j in range(count)]
        bonus.append(start + b + count)
        start += count
    as_int = lambda x: torch.tensor(x, dtype=torch.int32)  # noqa: E731
    return SpecDecodeMetadata(
        draft_token_ids=as_int(sum(drafts, [])), num_draft_tokens=n, cu_num_draft_tokens=as_int(cu.tolist()),
        cu_num_sampled_tokens=as_int(np.cumsum([c + 1 for c in n]).tolist()),
        target_logits_indices=as_int(target), bonus_logits_indices=as_int(bonus),
        logits_indices=as_int(list(range(len(target) + len(n)))))


def sampling_metadata(batch: int, temperature: float | None) -> SamplingMetadata:
    greedy = temperature is None
    empty = torch.tensor([])
    return SamplingMetadata(
        temperature=None if greedy else torch.full((batch,), float(temperature)), all_greedy=greedy,
        all_random=not greedy, top_p=None, top_k=None, generators={}, max_num_logprobs=None, no_penalties=True,
        prompt_token_ids=None, frequency_penalties=empty, presence_penalties=empty, repetition_penalties=empty,
        output_token_ids=[[] for _ in range(batch)], allowed_token_ids_mask=None, bad_words_token_ids={},
        logitsprocs=LogitsProcessors())


def plugin_sampler(judge: JudgeWeights | None = None, positions: int = 4) -> SelfJudgeRejectionSampler:
    sampler = SelfJudgeRejectionSampler(Sampler())
    sampler.enable(PluginOptions(backend="torch"), judge, positions, CPU)
    return sampler


def random_batch(seed: int, counts: list[int], vocab: int):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(sum(counts) + len(counts), vocab, generator=g) * 3  # [T+B, V]
    meta0 = flat_metadata([[0] * c for c in counts])
    argmax = logits[meta0.target_logits_indices.long()].argmax(-1)
    coin = torch.rand(argmax.shape[0], generator=g) < 0.6
    drafts = torch.where(coin, argmax, torch.randint(0, vocab, argmax.shape, generator=g)).tolist()
    per_request, at = [], 0
    for c in counts:
        per_request.append(drafts[at:at + c])
        at += c
    return flat_metadata(per_request), logits


@pytest.mark.parametrize("counts", [[3, 0, 2, 1], [0, 0, 0], [4], [1, 4, 4, 0, 2, 3]])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_outputs_equal_vllms_sampler(counts, seed):
    meta, logits = random_batch(seed, counts, vocab=37)
    sm = sampling_metadata(len(counts), None)
    ours = plugin_sampler().forward(meta, None, logits.clone(), sm).sampled_token_ids
    theirs = RejectionSampler(Sampler()).forward(meta, None, logits.clone(), sm).sampled_token_ids
    assert ours.dtype == theirs.dtype == torch.int32 and torch.equal(ours, theirs), (ours, theirs)


def test_draft_rows_get_their_requests_temperature_and_top_k():
    """The plugin's constraint step against the plain per-row formula on a mixed batch: a greedy
    request (temperature 0: unscaled, top-k of the vocabulary), a request with no drafts, and two
    sampled requests with their own temperature and top-k."""
    from selfjudge.integrations.vllm.sampler import constrain_draft_rows

    counts, V = [2, 0, 3, 1], 9
    logits = torch.randn(sum(counts), V, generator=torch.Generator().manual_seed(3))  # [T, V]
    sm = replace(sampling_metadata(len(counts), 1.0), all_random=False,
                 temperature=torch.tensor([0.0, 0.7, 0.5, 2.0]), top_k=torch.tensor([V, V, 3, 2]))
    got = constrain_draft_rows(logits.clone(), flat_metadata([[0] * c for c in counts]).cu_num_draft_tokens, sm)
    expected, row = [], 0
    for b, count in enumerate(counts):
        for _ in range(count):
            scaled = logits[row] / (sm.temperature[b] if sm.temperature[b] > 0 else 1.0)
            kth = scaled.topk(int(sm.top_k[b])).values[-1]
            expected.append(torch.where(scaled >= kth, scaled, -float("inf")))
            row += 1
    torch.testing.assert_close(got, torch.stack(expected))


def chi_square(counts: np.ndarray, probs: np.ndarray) -> float:
    expected = probs * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


@pytest.mark.parametrize("accept_all,temperature", [(False, 1.0), (False, 0.5), (True, 1.0)])
def test_sampling_follows_the_target_and_an_accept_all_judge_does_not(accept_all, temperature):
    """One draft per request, drawn from q; the first emitted token must follow p, the target's
    distribution at the request's temperature (the negative control, a judge that accepts
    everything, follows q instead and must fail the same test)."""
    V, B, H = 6, 20000, 4
    g = torch.Generator().manual_seed(5)
    p = torch.softmax(torch.tensor([1.0, 0.2, -0.5, 0.8, -1.0, 0.0]), -1)
    q = torch.softmax(torch.tensor([-1.0, 1.0, 0.5, -0.5, 0.9, 0.1]), -1)
    drafts = torch.multinomial(q, B, replacement=True, generator=g)
    meta = flat_metadata([[int(d)] for d in drafts])
    logits = (p.log() * temperature).repeat(2 * B, 1)  # [T+B, V]: softmax(logits / temperature) = p
    judge = JudgeWeights(torch.zeros(H), 100.0, None, 0.0, source="always") if accept_all else None
    sampler = plugin_sampler(judge)
    sampler.captured_hidden = torch.zeros(2 * B, H)
    torch.manual_seed(7)
    draft_probs = q.repeat(B, 1).contiguous()  # [T, V]
    out = sampler.forward(meta, draft_probs, logits, sampling_metadata(B, temperature)).sampled_token_ids
    first = np.bincount(out[:, 0].numpy(), minlength=V)
    stat = chi_square(first, p.numpy())
    critical = 20.52  # chi-square, 5 degrees of freedom, p = 0.001
    assert (stat > critical) if accept_all else (stat < critical), stat
    if accept_all:
        assert sampler.counters.summary()["judge_only_total"] > 0


# --- engine level: vLLM's CPU build with the built-in target ------------------------------------

PROMPTS = [
    "<|im_start|>user\nSummarise: The city council met on Tuesday and voted to repair the old bridge. "
    "The repairs will take six months.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nWhat is 12 times 7? Show your steps.<|im_end|>\n<|im_start|>assistant\n",
    "Repeat after me: the cat sat on the mat. the cat sat on the mat. the cat",
    "<|im_start|>user\nWrite a short poem about the sea.<|im_end|>\n<|im_start|>assistant\n",
    "def fibonacci(n):\n",
]
MAX_TOKENS = 40


@pytest.fixture(scope="module")
def target_dir():
    from selfjudge.models.gguf_convert import ensure_smollm2_target

    return str(ensure_smollm2_target(verbose=False))


@pytest.fixture(scope="module")
def prompt_ids(target_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(target_dir)
    return [tok(p, add_special_tokens=False)["input_ids"] for p in PROMPTS]


def run_engine(method: str, target_dir: str, prompt_ids, concurrency: int = 5, record: bool = False, **kw) -> dict:
    """One engine in a fresh process (vLLM keeps process-wide state): the outputs, the plugin's
    counters and, with ``record``, every step's decision."""
    from selfjudge.integrations.vllm.runner import engine_kwargs

    spec = json.dumps({"engine": engine_kwargs(method, target_dir, **kw), "prompts": prompt_ids,
                       "max_tokens": MAX_TOKENS, "concurrency": concurrency, "record": record})
    code = f"""
import json, sys
from selfjudge.integrations.vllm.runner import build_llm, generate_timed
spec = json.loads({spec!r})
llm = build_llm(spec["engine"])
if spec["record"]:
    llm.collective_rpc("selfjudge_record_steps")
out = generate_timed(llm, spec["prompts"], spec["max_tokens"], spec["concurrency"])
out["steps"] = llm.collective_rpc("selfjudge_recorded_steps")[0]
print("RESULT " + json.dumps(out))
"""
    env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900, env=env)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{method} failed:\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def test_lossless_plugin_equals_vllms_sampler_and_plain_vllm(target_dir, prompt_ids):
    plain = run_engine("plain", target_dir, prompt_ids)
    ngram = run_engine("speculative", target_dir, prompt_ids)
    plugin = run_engine("plugin-lossless", target_dir, prompt_ids)
    assert plugin["token_ids"] == ngram["token_ids"] == plain["token_ids"]
    counters = plugin["plugin"]
    assert counters["drafted_total"] > 0 and counters["accepted_total"] > 0 and counters["judge_only_total"] == 0
    assert ngram["plugin"] is None and plain["plugin"] is None


def test_draft_model_speculation_goes_through_the_plugin_losslessly(target_dir, prompt_ids):
    """vLLM's draft-model speculation (the target as its own draft: the one model on this disk)
    calls the same sampler: through the plugin its greedy output equals plain vLLM's, and the
    plugin counts every draft as accepted (a draft equal to the target is always right)."""
    draft = {"method": "draft_model", "model": target_dir, "num_speculative_tokens": 2}
    plain = run_engine("plain", target_dir, prompt_ids[:3], concurrency=3)
    plugin = run_engine("plugin-lossless", target_dir, prompt_ids[:3], concurrency=3, speculative=draft)
    assert plugin["token_ids"] == plain["token_ids"]
    counters = plugin["plugin"]
    assert counters["drafted_total"] > 0 and counters["accepted_total"] == counters["drafted_total"]


def _judge_file(tmp_path, target="smollm2-135m", seed=0):
    from selfjudge.judge.verifier import Verifier

    w = torch.randn(576, generator=torch.Generator().manual_seed(seed)) * 0.05
    path = tmp_path / f"judge-{target}.safetensors"
    Verifier(weight=w, bias=0.3, thresholds={"F": 0.0}, metadata={"target": target}).save(path)
    return str(path), w


def test_the_judge_accepts_counted_tokens_with_the_plain_formulas_logits(tmp_path, target_dir, prompt_ids):
    """Judge-only tokens are accepted and counted, and every judge logit the plugin used equals
    ``h @ w + b`` with ``h`` Hugging Face's final hidden state after that draft token, replayed
    on the request's context of that step."""
    path, w = _judge_file(tmp_path)
    out = run_engine("plugin-selfjudge", target_dir, prompt_ids, concurrency=5, record=True,
                     verifier=path, threshold=-1.0)
    assert out["plugin"]["judge_only_total"] > 0 and out["plugin"]["threshold"] == -1.0
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    checked = 0
    for step in out["steps"]:
        start = 0
        for context, count, logits in zip(step["contexts"], step["num_draft_tokens"], step["judge_logits"]):
            drafts = step["draft_token_ids"][start:start + count]
            start += count
            if count == 0 or checked >= 8:
                continue
            with torch.no_grad():
                h = model(torch.tensor([context + drafts]), output_hidden_states=True).hidden_states[-1][0]
            expected = h[len(context):] @ w + 0.3  # [count]
            torch.testing.assert_close(torch.tensor(logits[:count]), expected, atol=2e-3, rtol=2e-3)
            checked += 1
    assert checked == 8, checked


def test_a_verifier_for_another_model_is_refused_at_start_up(tmp_path, target_dir, prompt_ids):
    path, _ = _judge_file(tmp_path, target="another-model")
    with pytest.raises(RuntimeError, match="trained for target model 'another-model'"):
        run_engine("plugin-selfjudge", target_dir, prompt_ids[:1], verifier=path, threshold=0.0)
