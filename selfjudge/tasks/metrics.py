"""Reference-based and reference-free scores for open-ended generations.

- ``rouge_l``: ROUGE-L F-measure (``rouge-score`` package) against a reference text,
  normally the target's own greedy output. Tokenisation is Unicode-aware (lower-cased
  ``\\w+`` runs) instead of rouge-score's default ASCII-only tokenizer, which would
  turn non-English ShareGPT text into nothing.
- ``mean_logprob``: the target's mean per-token log-likelihood of a completion given
  the prompt — a reference-free quality score.
"""

from __future__ import annotations

import functools
import re

_WORD_RE = re.compile(r"\w+", re.UNICODE)


class _UnicodeTokenizer:
    """rouge-score tokenizer protocol: ``tokenize(text) -> list[str]``."""

    def tokenize(self, text: str) -> list[str]:
        return _WORD_RE.findall(text.lower())


@functools.lru_cache(maxsize=1)
def _scorer():
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"], tokenizer=_UnicodeTokenizer())


def rouge_l(prediction: str, reference: str) -> float:
    """ROUGE-L F-measure of ``prediction`` against ``reference`` in [0, 1]."""
    if not isinstance(prediction, str):
        raise ValueError(f"prediction must be a str, got {type(prediction).__name__}")
    if not isinstance(reference, str):
        raise ValueError(f"reference must be a str, got {type(reference).__name__}")
    return float(_scorer().score(reference, prediction)["rougeL"].fmeasure)


def mean_logprob(model, tokenizer, prompt_text: str, completion_text: str | None = None, *,
                 completion_ids=None) -> float:
    """Mean log p_model(completion token | prompt, earlier completion tokens), natural log.

    ``prompt_text`` is the already chat-formatted prompt (``task.build_prompt``), tokenised
    without extra special tokens. Give either ``completion_text`` (re-tokenised) or the
    exact generated ``completion_ids`` (1-D ints; preferred, avoids re-tokenisation drift).
    Computed in fp32 from the model's logits.
    """
    import torch

    if (completion_text is None) == (completion_ids is None):
        raise ValueError("give exactly one of completion_text or completion_ids")
    prompt_ids = tokenizer(prompt_text, add_special_tokens=False, return_tensors="pt")["input_ids"][0]
    if completion_ids is None:
        comp = tokenizer(completion_text, add_special_tokens=False, return_tensors="pt")["input_ids"][0]
    else:
        comp = torch.as_tensor(completion_ids, dtype=torch.long).reshape(-1)
    if comp.numel() == 0:
        raise ValueError("completion is empty: no tokens to score")
    if prompt_ids.numel() == 0:
        raise ValueError("prompt_text is empty: the first completion token needs a context")
    device = next(model.parameters()).device
    ids = torch.cat([prompt_ids, comp]).to(device)[None]  # [1, P+C]
    P, C = prompt_ids.numel(), comp.numel()
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, P - 1 : P + C - 1].float()  # [C, V]
    logp = torch.log_softmax(logits, dim=-1).gather(-1, ids[0, P:, None]).squeeze(-1)  # [C]
    return float(logp.mean())
