"""Build a vLLM engine for one compared method and time greedy generations on it.

The methods a peer comparison needs: ``plain`` (no speculation), ``ngram`` (vLLM's prompt-lookup
speculation with vLLM's own rejection sampler), ``ngram+lossless`` (the same with this package's
verify op through the plugin) and ``ngram+selfjudge`` (the plugin with a verifier). Engines run in
this process with vLLM's single-process executor, so the plugin's counters are one call away.
"""

from __future__ import annotations

import os
import time
from typing import Any

from . import WORKER_EXTENSION

METHODS = ("plain", "ngram", "ngram+lossless", "ngram+selfjudge")


def ngram_config(num_speculative_tokens: int = 3, prompt_lookup_max: int = 3, prompt_lookup_min: int = 2) -> dict:
    return {"method": "ngram", "num_speculative_tokens": num_speculative_tokens,
            "prompt_lookup_max": prompt_lookup_max, "prompt_lookup_min": prompt_lookup_min}


def engine_kwargs(method: str, model: str, *, verifier: str | None = None, threshold: Any = None,
                  speculative: dict | None = None, max_num_seqs: int = 8, max_model_len: int = 2048,
                  memory_fraction: float = 0.1, seed: int = 0, enforce_eager: bool = True) -> dict:
    """``LLM(**kwargs)`` for ``method``; raises ``ValueError`` naming a bad ``method`` or a missing
    ``verifier``."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {list(METHODS)}, got {method!r}")
    kwargs = {"model": model, "dtype": "float32", "seed": seed, "max_num_seqs": max_num_seqs,
              "max_model_len": max_model_len, "gpu_memory_utilization": memory_fraction,
              "enforce_eager": enforce_eager, "distributed_executor_backend": "uni",
              "worker_extension_cls": WORKER_EXTENSION}
    if method != "plain":
        kwargs["speculative_config"] = speculative or ngram_config()
    if method == "ngram+lossless":
        kwargs["additional_config"] = {"selfjudge": {}}
    if method == "ngram+selfjudge":
        if verifier is None:
            raise ValueError("method 'ngram+selfjudge' needs a verifier")
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
    outputs, seconds = [], []
    for start in range(0, len(prompt_token_ids), concurrency):
        group = [TokensPrompt(prompt_token_ids=list(p)) for p in prompt_token_ids[start:start + concurrency]]
        t0 = time.perf_counter()
        result = llm.generate(group, params, use_tqdm=False)
        seconds.append(time.perf_counter() - t0)
        outputs += [list(r.outputs[0].token_ids) for r in result]
    stats = llm.collective_rpc("selfjudge_stats")[0]
    return {"token_ids": outputs, "seconds": seconds, "plugin": stats}
