"""Build a vLLM engine for one compared method and time greedy generations on it.

The methods a peer comparison needs: ``plain`` (no speculation), ``speculative`` (vLLM's
speculation, prompt lookup unless ``speculative=`` says otherwise, with vLLM's own rejection
sampler), ``plugin-lossless`` (the same with this package's verify op through the plugin) and
``plugin-selfjudge`` (the plugin with a verifier). Engines run in this process with vLLM's
single-process executor, so the plugin's counters are one call away.
"""

from __future__ import annotations

import os
import time
from typing import Any

from . import WORKER_EXTENSION

METHODS = ("plain", "speculative", "plugin-lossless", "plugin-selfjudge")


def ngram_config(num_speculative_tokens: int = 3, prompt_lookup_max: int = 3, prompt_lookup_min: int = 2) -> dict:
    return {"method": "ngram", "num_speculative_tokens": num_speculative_tokens,
            "prompt_lookup_max": prompt_lookup_max, "prompt_lookup_min": prompt_lookup_min}


def engine_kwargs(method: str, model: str, *, verifier: str | None = None, threshold: Any = None,
                  speculative: dict | None = None, max_num_seqs: int = 8, max_model_len: int = 2048,
                  kv_cache_gib: float = 1.0, seed: int = 0, enforce_eager: bool = True,
                  prefix_caching: bool = False) -> dict:
    """``LLM(**kwargs)`` for ``method`` (greedy benchmarks and tests: a fixed KV cache of
    ``kv_cache_gib``, so several engines share one machine; no prefix caching unless asked, so
    a prompt decoded twice costs the same both times); raises ``ValueError`` naming a bad
    ``method`` or a missing ``verifier``."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {list(METHODS)}, got {method!r}")
    kwargs = {"model": model, "dtype": "float32", "seed": seed, "max_num_seqs": max_num_seqs,
              "max_model_len": max_model_len, "kv_cache_memory_bytes": int(kv_cache_gib * 2**30),
              "enforce_eager": enforce_eager, "distributed_executor_backend": "uni",
              "worker_extension_cls": WORKER_EXTENSION, "disable_log_stats": False,
              "enable_prefix_caching": prefix_caching}
    if method != "plain":
        kwargs["speculative_config"] = speculative or ngram_config()
    if method == "plugin-lossless":
        kwargs["additional_config"] = {"selfjudge": {}}
    if method == "plugin-selfjudge":
        if verifier is None:
            raise ValueError("method 'plugin-selfjudge' needs a verifier")
        entry = {"verifier": verifier}
        if threshold is not None:
            entry["threshold"] = threshold
        kwargs["additional_config"] = {"selfjudge": entry}
    return kwargs


def build_llm(kwargs: dict):
    """A vLLM ``LLM`` whose engine core runs in this process (so counters are readable directly)."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm import LLM

    return LLM(**kwargs)


def generate_timed(llm, prompt_token_ids: list[list[int]], max_tokens: int, concurrency: int) -> dict:
    """Greedy generations of every prompt, ``concurrency`` prompts per ``generate`` call; returns the
    emitted ids per prompt, each call's seconds and the plugin's counters over the run."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(temperature=0.0, max_tokens=int(max_tokens), ignore_eos=False)
    llm.collective_rpc("selfjudge_reset_stats")
    before = spec_decode_counts(llm)
    outputs, seconds = [], []
    for start in range(0, len(prompt_token_ids), concurrency):
        group = [TokensPrompt(prompt_token_ids=list(p)) for p in prompt_token_ids[start:start + concurrency]]
        t0 = time.perf_counter()
        result = llm.generate(group, params, use_tqdm=False)
        seconds.append(time.perf_counter() - t0)
        outputs += [list(r.outputs[0].token_ids) for r in result]
    stats = llm.collective_rpc("selfjudge_stats")[0]
    after = spec_decode_counts(llm)
    spec = {key: _minus(after[key], before[key]) for key in after}
    return {"token_ids": outputs, "seconds": seconds, "plugin": stats, "spec_decode": spec}


def spec_decode_counts(llm) -> dict:
    """vLLM's own speculative-decoding counters (cumulative over the engine's life): verify steps
    with drafts, drafted and accepted tokens, accepted tokens per draft position."""
    counts = {"num_drafts": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0, "accepted_per_position": []}
    for metric in llm.get_metrics():
        name = metric.name.removeprefix("vllm:spec_decode_")
        if name == "num_accepted_tokens_per_pos":
            counts["accepted_per_position"] = [int(v) for v in metric.values]
        elif name in counts:
            counts[name] = int(metric.value)
    return counts


def _minus(a, b):
    if isinstance(a, list):
        b = b + [0] * (len(a) - len(b))
        return [x - y for x, y in zip(a, b)]
    return a - b
