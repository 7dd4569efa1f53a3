"""SpeculativeEngine: a thin batched speculative-decoding loop over Hugging Face causal LMs.

One cycle, for all active rows at once:

1. the draft proposes up to K tokens autoregressively with its own KV cache
   (argmax at temperature 0; otherwise a draw from softmax(logits / T) with the
   run's seeded generator, keeping those probabilities ``[B, K, V]``);
2. the target runs one forward over ``[last emitted token, d_1..d_K]`` and returns
   K+1 logits and, for judge policies, its final-norm hidden states at the input
   positions of d_1..d_K (the state after reading d_i; in transformers 5.x
   ``hidden_states[-1]`` of Llama is taken after the final norm);
3. one :func:`selfjudge.verify` call decides how many drafts to keep and emits one
   recovered or bonus token;
4. both caches are rolled back to what was kept (:mod:`selfjudge.engine.cache`).

Cache invariants (per row, sequence y_1..y_m = prompt + emitted tokens):
the target cache holds y_1..y_{m-1} and y_m is fed next; the draft cache holds
y_1..y_{m-2} and the pair (y_{m-1}, y_m) is fed next. Keeping the draft one token
further behind makes the all-accepted (bonus) case free: the draft never read d_K,
and the next cycle's first draft forward reads (d_K, bonus) together. Both caches
then keep exactly ``num_accepted + 1`` of the K+1 columns the cycle appended.

Rows that finish (EOS, a stop string, the length limit) are removed from the
batch and the caches. The loop synchronises with the host once per cycle (the
accepted counts and emitted ids, needed to roll back and to detect termination).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from selfjudge.engine.cache import RaggedCache
from selfjudge.engine.policies import Policy, make_policy
from selfjudge.engine.stats import GenerationStats

__all__ = ["SpeculativeEngine", "GenerationResult", "frequent_token_ids"]


@dataclass
class GenerationResult:
    """One request's output: the new tokens only, their text and statistics."""

    token_ids: list[int]
    text: str
    stats: GenerationStats = field(default_factory=GenerationStats)
    # per new token, who chose it: "draft" (draft token the lossless rule accepted), "judge" (draft
    # token only the relaxed rule accepted: the judge, or top-k), "target" (sampled from the target:
    # autoregressive step, recovery or bonus token)
    token_sources: list[str] = field(default_factory=list)


class _Timer:
    """Accumulates wall seconds per phase; synchronises CUDA so phases are honest."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.t = time.perf_counter()

    def lap(self) -> float:
        if self.cuda:
            torch.cuda.synchronize()
        now = time.perf_counter()
        dt, self.t = now - self.t, now
        return dt


class SpeculativeEngine:
    """Batched speculative decoding with pluggable acceptance policies.

    Args:
        target: Hugging Face causal LM whose distribution is reproduced.
        draft: smaller causal LM with the same vocabulary (unused by
            ``policy="autoregressive"``; may then be None).
        tokenizer: tokenizer shared by both (needed for string prompts, ``text``,
            stop strings and ``chat=True``); may be None for token-id prompts.
        num_draft_tokens: K, drafts per cycle.
        policy: "autoregressive", "standard", "topk", "judge" or a
            :class:`~selfjudge.engine.policies.Policy`.
        verifier: for "judge": a :class:`selfjudge.judge.Verifier` or a
            ``(weight [H], bias)`` pair.
        threshold: judge threshold (name in the verifier file or logit value).
        top_k: k of the "topk" policy.
        protected_token_ids: for "judge": token ids the judge may not accept or
            replace (e.g. :func:`~selfjudge.engine.policies.digit_token_ids`);
            only the lossless rule decides there.
        eos_token_id: int or list of ints; default: the target's generation
            config, else the tokenizer's.
        verify_backend: passed to :func:`selfjudge.verify` ("auto", "torch", "triton").
        draft_vocab: restrict the draft's LM head to these token ids (``[Vd]``
            int tensor, e.g. from :func:`frequent_token_ids`): its head costs
            ``Vd/V`` of the full one, which dominates a few-layer draft. Lossless:
            the draft just never proposes other tokens (greedy), or proposes from
            its distribution renormalised over the subset, which is the q the
            verify op sees (sampling). None = full vocabulary.
        compact_min_columns: compact the caches (see
            :meth:`RaggedCache.compact`) when at least this many columns, and a
            quarter of the cache, can be reclaimed.
    """

    def __init__(
        self,
        target,
        draft=None,
        tokenizer=None,
        num_draft_tokens: int = 4,
        policy: str | Policy = "standard",
        verifier=None,
        *,
        threshold: str | float | None = None,
        top_k: int = 2,
        eos_token_id: int | list[int] | None = None,
        verify_backend: str = "auto",
        draft_vocab: torch.Tensor | None = None,
        compact_min_columns: int = 32,
        protected_token_ids=None,
    ):
        self.policy = make_policy(policy, verifier=verifier, threshold=threshold, top_k=top_k,
                                  protected_token_ids=protected_token_ids)
        if int(num_draft_tokens) < 1 and self.policy.uses_draft:
            raise ValueError(f"num_draft_tokens must be >= 1, got {num_draft_tokens}")
        if self.policy.uses_draft and draft is None:
            raise ValueError(f"policy {self.policy.name!r} needs a draft model")
        if draft is not None:
            tv, dv = _vocab_size(target), _vocab_size(draft)
            if tv != dv:
                raise ValueError(f"draft vocabulary ({dv}) must equal the target's ({tv})")
        self.target = target.eval()
        self.draft = draft.eval() if draft is not None else None
        self.tokenizer = tokenizer
        self.K = int(num_draft_tokens)
        self.verify_backend = verify_backend
        self.compact_min_columns = int(compact_min_columns)
        self.eos_token_ids = _eos_ids(eos_token_id, target, tokenizer)
        self.device = next(target.parameters()).device
        self.last_batch_stats = GenerationStats()
        self.draft_vocab = None
        self._draft_head = None
        if draft_vocab is not None:
            if draft is None:
                raise ValueError("draft_vocab needs a draft model")
            ids = torch.as_tensor(draft_vocab, dtype=torch.long).flatten().unique()
            V = _vocab_size(draft)
            if ids.numel() == 0 or int(ids.min()) < 0 or int(ids.max()) >= V:
                raise ValueError(f"draft_vocab must be non-empty token ids in [0, {V})")
            head = draft.get_output_embeddings()
            if hasattr(head, "vocab_ids"):
                raise ValueError("draft_vocab: this draft's LM head is already restricted to a sub-vocabulary")
            self.draft_vocab = ids.to(self.device)  # [Vd]
            self._draft_head = (
                head.weight.detach()[self.draft_vocab].contiguous(),  # [Vd, H]
                None if getattr(head, "bias", None) is None else head.bias.detach()[self.draft_vocab],
            )
            self._vocab = V
        elif draft is not None and hasattr(draft.get_output_embeddings(), "vocab_ids"):
            # a draft whose head is already restricted (selfjudge.models SubVocabHead): use
            # its sub-vocabulary logits directly instead of the min-filled [B, V] logits
            head = draft.get_output_embeddings()
            self.draft_vocab = head.vocab_ids.to(self.device)  # [Vs]
            self._draft_head = (head.weight.detach(), None)  # [Vs, H]
            self._vocab = _vocab_size(draft)

    # ------------------------------------------------------------------ inputs
    def _encode(self, prompts, chat: bool) -> list[list[int]]:
        if isinstance(prompts, (str, dict)) or (
            isinstance(prompts, (list, tuple)) and prompts and isinstance(prompts[0], int)
        ):
            prompts = [prompts]
        out = []
        for p in prompts:
            if isinstance(p, torch.Tensor):
                p = p.tolist()
            if chat:
                if self.tokenizer is None:
                    raise ValueError("chat=True needs a tokenizer")
                msgs = [{"role": "user", "content": p}] if isinstance(p, str) else p
                p = self.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
            if isinstance(p, str):
                if self.tokenizer is None:
                    raise ValueError("string prompts need a tokenizer")
                p = self.tokenizer(p, add_special_tokens=False)["input_ids"]
            ids = [int(t) for t in p]
            if not ids:
                raise ValueError("prompts must not be empty")
            out.append(ids)
        return out

    def _decode(self, ids: list[int]) -> str:
        if self.tokenizer is None:
            return ""
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    # ------------------------------------------------------------------ public
    @torch.inference_mode()
    def generate(
        self,
        prompts,
        max_new_tokens: int = 128,
        temperature: float = 0.0,
        seed: int | None = None,
        stop: str | list[str] | None = None,
        *,
        chat: bool = False,
    ) -> list[GenerationResult]:
        """Generate for a batch of prompts; one :class:`GenerationResult` per prompt.

        Args:
            prompts: a string, a token-id list, or a list of either (strings are
                tokenised without special tokens: apply the chat template first,
                or pass ``chat=True`` with plain user messages / message lists).
            max_new_tokens: hard limit on new tokens per prompt (never exceeded).
            temperature: 0 = greedy; > 0 samples (draft and target at this T).
            seed: seeds the run's generator (draft sampling and verify noise),
                so a run with the same seed, prompts and batch is replayed exactly.
            stop: stop string(s); the output ends with the token that completes one.
        """
        if int(max_new_tokens) < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if float(temperature) < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        if stops and self.tokenizer is None:
            raise ValueError("stop strings need a tokenizer")
        ids = self._encode(prompts, chat)
        gen = torch.Generator(device=self.device)
        if seed is not None:
            gen.manual_seed(int(seed))
        else:
            gen.seed()
        return self._run(ids, int(max_new_tokens), float(temperature), gen, stops)

    # ------------------------------------------------------------------ loop
    def _choose(self, logits: torch.Tensor, temperature: float, gen) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Next token from logits [B, V]: argmax, or a draw at T (returns probs [B, V] too)."""
        if temperature <= 0:
            return logits.argmax(-1), None
        probs = torch.softmax(logits.float() / temperature, dim=-1)
        return torch.multinomial(probs, 1, generator=gen).squeeze(1), probs

    def _draft_choose(self, out, temperature: float, gen):
        """Draft token [B] (and probs [B, V] when sampling) from a draft forward's output."""
        if self.draft_vocab is None:
            return self._choose(out.logits[:, -1], temperature, gen)
        w, b = self._draft_head
        logits = torch.nn.functional.linear(out.last_hidden_state[:, -1], w, b)  # [B, Vd]
        sub, probs = self._choose(logits, temperature, gen)
        tok = self.draft_vocab[sub]
        if probs is not None:  # scatter the subset distribution back to the full vocabulary
            full = probs.new_zeros(probs.shape[0], self._vocab)
            probs = full.index_copy_(1, self.draft_vocab, probs)
        return tok, probs

    def _run(self, prompts: list[list[int]], max_new: int, temperature: float, gen, stops) -> list[GenerationResult]:
        from selfjudge.kernels import verify

        dev = self.device
        policy = self.policy
        use_draft = policy.uses_draft
        B = len(prompts)
        P = max(2, max(len(p) for p in prompts))
        inp = torch.zeros(B, P, dtype=torch.long, device=dev)  # [B, P] left padded
        valid = torch.zeros(B, P, dtype=torch.bool, device=dev)  # [B, P]
        for b, p in enumerate(prompts):
            inp[b, P - len(p) :] = torch.tensor(p, dtype=torch.long)
            valid[b, P - len(p) :] = True

        stats = [GenerationStats() for _ in range(B)]
        batch = GenerationStats()
        outputs: list[list[int]] = [[] for _ in range(B)]
        sources: list[list[str]] = [[] for _ in range(B)]  # token_sources of each request
        done: list[GenerationResult | None] = [None] * B
        rows = list(range(B))  # batch row -> request index

        timer = _Timer(dev)
        tcache = RaggedCache(self.target, B, dev)
        tcache.feed(inp[:, : P - 1], valid[:, : P - 1])
        pend_t = inp[:, P - 1 :]  # [B, 1] next target input
        for s in stats:
            s.target_forwards += 1
        if use_draft:
            dcache = RaggedCache(self.draft, B, dev, decoder_only=self.draft_vocab is not None)
            if P > 2:
                dcache.feed(inp[:, : P - 2], valid[:, : P - 2])
                for s in stats:
                    s.draft_forwards += 1
            pend_d, pend_d_valid = inp[:, P - 2 :], valid[:, P - 2 :]  # [B, 2]
        dt = timer.lap()
        batch.time_prefill += dt
        for s in stats:
            s.time_prefill += dt

        while rows:
            nb = len(rows)
            active = list(rows)
            remaining = [max_new - len(outputs[r]) for r in rows]
            n_draft = [min(self.K, rem - 1) for rem in remaining] if use_draft else [0] * nb
            k = max(n_draft)
            t_draft = t_target = t_verify = 0.0
            if k == 0:
                # target-only step (autoregressive policy, or every row needs exactly one token)
                out = tcache.feed(pend_t)
                tok, _ = self._choose(out.logits[:, -1], temperature, gen)  # [nb]
                t_target = timer.lap()
                emitted = tok.tolist()
                emit = [[t] for t in emitted]
                emit_src = [["target"]] * nb
                acc = [0] * nb
                n_align = n_judge = [0] * nb
                pend_t = tok[:, None]
                nd_fwd = 0
            else:
                # 1. draft proposes k tokens
                drafts, dprobs = [], []
                x, xv = pend_d, pend_d_valid
                for i in range(k):
                    out = dcache.feed(x, xv)
                    tok, probs = self._draft_choose(out, temperature, gen)
                    drafts.append(tok)
                    if probs is not None:
                        dprobs.append(probs)
                    x, xv = tok[:, None], None
                draft_ids = torch.stack(drafts, 1)  # [nb, k]
                draft_probs = torch.stack(dprobs, 1) if dprobs else None  # [nb, k, V]
                nd_fwd = k
                t_draft = timer.lap()
                # 2. one target forward over [last token, d_1..d_k]
                tin = torch.cat([pend_t, draft_ids], 1)  # [nb, k+1]
                out = tcache.feed(tin, logits_to_keep=k + 1, output_hidden_states=policy.needs_hidden)
                logits = out.logits  # [nb, k+1, V]
                hidden = out.hidden_states[-1][:, 1:] if policy.needs_hidden else None  # [nb, k, H]
                t_target = timer.lap()
                # 3. verify
                num = None
                if min(n_draft) < k:
                    num = torch.tensor(n_draft, dtype=torch.long, device=dev)
                extra = policy.verify_kwargs(logits, draft_ids, hidden)
                v = verify(
                    draft_ids,
                    num,
                    logits,
                    draft_probs,
                    temperature=temperature,
                    generator=gen,
                    backend=self.verify_backend,
                    **extra,
                )
                # the one host sync of the cycle
                host = torch.cat(
                    [v.output_token_ids, v.num_accepted[:, None], v.align_accepted.long()], 1
                ).tolist()  # [nb, (k+1) + 1 + k]
                t_verify = timer.lap()
                acc = [h[k + 1] for h in host]
                emit = [h[: a + 1] for h, a in zip(host, acc)]
                # a kept draft the lossless rule did not accept was kept by the relaxed rule alone
                emit_src = [["draft" if h[k + 2 + i] else "judge" for i in range(a)] + ["target"]
                            for h, a in zip(host, acc)]
                n_align = [src.count("draft") for src in emit_src]
                n_judge = [a - n for a, n in zip(acc, n_align)]
                # 4. roll both caches back to the kept tokens
                keep = v.num_accepted + 1  # [nb]
                keep_max = max(acc) + 1
                tcache.rollback(keep, k + 1, keep_max)
                dcache.rollback(keep, k + 1, keep_max)
                last = v.output_token_ids.gather(1, v.num_accepted[:, None])  # [nb, 1]
                prev = tin.gather(1, v.num_accepted[:, None])  # [nb, 1] d_a, or the old last token
                pend_t = last
                pend_d, pend_d_valid = torch.cat([prev, last], 1), None

            # 5. emit, detect the end of each row
            finished = []
            for j, r in enumerate(rows):
                s = stats[r]
                s.cycles += 1
                s.steps += 1
                s.target_forwards += 1
                s.draft_forwards += nd_fwd
                s.draft_tokens += n_draft[j]
                s.accepted_tokens += acc[j]
                s.align_accepted += n_align[j]
                s.judge_accepted += n_judge[j]
                reason = self._append(outputs[r], emit[j], max_new, stops)
                sources[r] = (sources[r] + emit_src[j])[: len(outputs[r])]
                if reason:
                    s.finish_reason = reason
                    finished.append(j)
            batch.steps += 1
            batch.cycles += nb
            batch.target_forwards += 1
            batch.draft_forwards += nd_fwd
            if finished:
                for j in finished:
                    r = rows[j]
                    done[r] = GenerationResult(outputs[r], self._decode(outputs[r]), stats[r], sources[r])
                keep_rows = [j for j in range(nb) if j not in set(finished)]
                rows = [rows[j] for j in keep_rows]
                if rows:
                    idx = torch.tensor(keep_rows, dtype=torch.long, device=dev)
                    tcache.select(idx)
                    pend_t = pend_t[idx]
                    if use_draft:
                        dcache.select(idx)
                        pend_d = pend_d[idx]
                        pend_d_valid = pend_d_valid[idx] if pend_d_valid is not None else None
            # checking costs a host sync: only after rows left or every 16 cycles
            if rows and nb > 1 and (finished or batch.cycles % 16 == 0):
                self._maybe_compact(tcache)
                if use_draft:
                    self._maybe_compact(dcache)
            t_other = timer.lap()
            for r in active:
                s = stats[r]
                s.time_draft += t_draft
                s.time_target += t_target
                s.time_verify += t_verify
                s.time_other += t_other
            batch.time_draft += t_draft
            batch.time_target += t_target
            batch.time_verify += t_verify
            batch.time_other += t_other
        batch.new_tokens = sum(len(o) for o in outputs)
        batch.accepted_tokens = sum(s.accepted_tokens for s in stats)
        batch.draft_tokens = sum(s.draft_tokens for s in stats)
        batch.align_accepted = sum(s.align_accepted for s in stats)
        batch.judge_accepted = sum(s.judge_accepted for s in stats)
        for r, s in enumerate(stats):
            s.new_tokens = len(outputs[r])
        self.last_batch_stats = batch
        return done  # type: ignore[return-value]

    def _append(self, out: list[int], new: list[int], max_new: int, stops: list[str]) -> str:
        """Append emitted tokens to one row, cut at EOS / a stop string / the limit.

        Returns the finish reason, or "" if the row goes on.
        """
        start = len(out)
        reason = ""
        for t in new:
            out.append(t)
            if t in self.eos_token_ids:
                reason = "eos"
                break
            if len(out) >= max_new:
                reason = "length"
                break
        if stops:
            text = self._decode(out)
            if any(st in text for st in stops):
                # shortest prefix whose text contains a stop string (search only the new tokens)
                for n in range(start + 1, len(out) + 1):
                    t = self._decode(out[:n])
                    if any(st in t for st in stops):
                        del out[n:]
                        return "stop"
        return reason

    def _maybe_compact(self, cache: RaggedCache) -> None:
        free = cache.reclaimable()
        if free >= self.compact_min_columns and 4 * free >= cache.length:
            cache.compact()


def _vocab_size(model) -> int:
    """Output vocabulary size (config first: a restricted head has fewer weight rows)."""
    v = getattr(model.config, "vocab_size", None)
    return int(v) if v is not None else int(model.get_output_embeddings().weight.shape[0])


def _eos_ids(eos_token_id, target, tokenizer) -> set[int]:
    if eos_token_id is None:
        gc = getattr(target, "generation_config", None)
        eos_token_id = getattr(gc, "eos_token_id", None) if gc is not None else None
        if eos_token_id is None and tokenizer is not None:
            eos_token_id = tokenizer.eos_token_id
    if eos_token_id is None:
        return set()
    if isinstance(eos_token_id, int):
        return {eos_token_id}
    return {int(t) for t in eos_token_id}


def frequent_token_ids(tokenizer, texts, n: int, always=None) -> torch.Tensor:
    """The ``n`` most frequent token ids of ``texts`` (plus ``always`` and the special tokens).

    For ``SpeculativeEngine(draft_vocab=...)``: compute it on text like the outputs
    to be generated (e.g. a task's training references), never on the evaluation set.
    Returns a sorted ``[<= n + extras]`` int64 tensor.
    """
    from collections import Counter

    if int(n) < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    counts: Counter = Counter()
    for t in texts:
        counts.update(tokenizer(t, add_special_tokens=False)["input_ids"])
    ids = {i for i, _ in counts.most_common(int(n))}
    ids.update(int(i) for i in (getattr(tokenizer, "all_special_ids", None) or []))
    ids.update(int(i) for i in (always or []))
    return torch.tensor(sorted(ids), dtype=torch.long)
