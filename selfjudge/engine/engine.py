"""SpeculativeEngine: a thin batched speculative-decoding loop over Hugging Face causal LMs.

The loop is five named steps over the rows still running:

1. **prefill** (once): both caches read the left-padded prompts;
2. **propose**: the drafter (:mod:`selfjudge.engine.drafter`, the seam other
   drafters plug into) proposes up to K tokens per row (argmax at temperature 0;
   otherwise draws from softmax(logits / T) with the run's seeded generator, whose
   probabilities ``[B, K, V]`` go to the verify op);
3. **score**: the target runs one forward over ``[last emitted token, d_1..d_K]``
   and returns K+1 logits and, for judge policies, its final-norm hidden states at
   the input positions of d_1..d_K (the state after reading d_i; in transformers
   5.x ``hidden_states[-1]`` of Llama is taken after the final norm);
4. **accept and roll back**: one :func:`selfjudge.verify` call decides how many
   drafts to keep and emits one recovered or bonus token; the one host sync of the
   cycle brings the emitted ids home; both caches keep ``num_accepted + 1`` of the
   K+1 columns the cycle appended (:mod:`selfjudge.engine.cache`);
5. **retire**: emitted tokens are appended per request, cut at EOS / a stop string
   / the length limit; finished rows leave the batch and the caches.

Cache invariant of the target (per row, y_1..y_m = prompt + emitted tokens): the
cache holds y_1..y_{m-1} and y_m is fed next (the drafter's is in its module).
Per-cycle counters are recorded by :class:`~selfjudge.engine.stats.GenerationStats`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from selfjudge.engine.adaptive import AdaptiveController, Observation
from selfjudge.engine.cache import RaggedCache
from selfjudge.engine.drafter import Proposal, choose, frequent_token_ids, vocab_size  # noqa: F401 (frequent_token_ids: re-export)
from selfjudge.engine.drafter_factory import as_drafter
from selfjudge.engine.inputs import append_tokens, check_context, encode_prompts, stop_strings
from selfjudge.engine.policies import CycleInputs, Policy, make_policy
from selfjudge.engine.state import Batch, Cycle, Run
from selfjudge.engine.stats import GenerationStats
from selfjudge.models.generation import eos_token_ids

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
        draft: a :class:`~selfjudge.engine.drafter.Drafter` (e.g. an EAGLE head or
            prompt lookup), or a smaller causal LM with the same vocabulary (wrapped in a
            :class:`~selfjudge.engine.drafter.ModelDrafter`); unused by
            ``policy="autoregressive"`` (may then be None).
        tokenizer: tokenizer shared by both (needed for string prompts, ``text``,
            stop strings and ``chat=True``); may be None for token-id prompts.
        num_draft_tokens: a fixed K, drafts per row every cycle; None (the default):
            adaptive speculation, each cycle 0..``max_draft_tokens`` drafts per row chosen
            by an :class:`~selfjudge.engine.adaptive.AdaptiveController` from the machine's
            measured step costs and online acceptance estimates (0: a plain decode step),
            so speculation is never paid for where it cannot win. Lossless policies emit
            the same tokens either way; a lossy one (a judge, a relaxed rule) keeps what
            the verified drafts offer, and the widths follow measured step times, so fix K
            where a lossy run must repeat token for token.
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
        max_draft_tokens: the most drafts per row under adaptive speculation.
        adaptive: the controller of adaptive speculation (default: one with
            ``max_draft_tokens`` that measures, or reads from its cache, this machine's cost
            profile on the first ``generate``); only with ``num_draft_tokens=None``.
        packed_verify: the verify forward and the prompt prefill compute only each row's own
            positions, as one packed sequence (:mod:`selfjudge.engine.packed`); False: every row
            is padded to the widest (for models whose attention layers the packed path cannot drive).
    """

    def __init__(
        self,
        target,
        draft=None,
        tokenizer=None,
        num_draft_tokens: int | None = None,
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
        max_draft_tokens: int = 4,
        adaptive: AdaptiveController | None = None,
        packed_verify: bool = True,
    ):
        self.policy = make_policy(policy, verifier=verifier, threshold=threshold, top_k=top_k,
                                  protected_token_ids=protected_token_ids)
        if num_draft_tokens is not None and int(num_draft_tokens) < 1 and self.policy.uses_draft:
            raise ValueError(f"num_draft_tokens must be >= 1 or None (adaptive), got {num_draft_tokens}")
        if adaptive is not None and num_draft_tokens is not None:
            raise ValueError("adaptive: a controller chooses the drafts per cycle; pass num_draft_tokens=None")
        self.adaptive = None  # the controller of adaptive speculation (None: K drafts every cycle)
        if num_draft_tokens is None and self.policy.uses_draft:
            self.adaptive = adaptive or AdaptiveController(max_draft_tokens)
        if self.policy.uses_draft and draft is None:
            raise ValueError(f"policy {self.policy.name!r} needs a draft model or a drafter")
        if draft_vocab is not None and draft is None:
            raise ValueError("draft_vocab needs a draft model")
        self.target = target.eval()
        self.device = next(target.parameters()).device
        self.drafter = as_drafter(draft, self.device, draft_vocab, target) if draft is not None else None
        if self.drafter is not None and self.drafter.vocab_size != vocab_size(target):
            raise ValueError(f"draft vocabulary ({self.drafter.vocab_size}) must equal the target's ({vocab_size(target)})")
        self.tokenizer = tokenizer
        self.K = self.adaptive.max_draft_tokens if self.adaptive else int(num_draft_tokens or max_draft_tokens)
        self.verify_backend = verify_backend
        self.packed_verify = bool(packed_verify)
        if self.adaptive is not None:  # the controller prices what the engine's verify forward costs
            self.adaptive.packed = self.packed_verify
        self.compact_min_columns = int(compact_min_columns)
        self.eos_token_ids = eos_token_ids(target, tokenizer, eos_token_id)
        self.last_batch_stats = GenerationStats()

    @property
    def draft_vocab(self) -> torch.Tensor | None:
        """``[Vd]`` token ids the draft may propose (None: the full vocabulary)."""
        return getattr(self.drafter, "vocab_ids", None)

    @property
    def _drafter_needs_hidden(self) -> bool:
        return self.policy.uses_draft and self.drafter.needs_target_hidden

    # ------------------------------------------------------------------ inputs
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
            stop: stop string(s); the output ends with the token that completes one. An empty
                string (which every text contains) or a non-string is refused.
        """
        if int(max_new_tokens) < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if not 0 <= float(temperature) < float("inf"):
            raise ValueError(f"temperature must be finite and >= 0, got {temperature}")
        stops = stop_strings(stop)
        if stops and self.tokenizer is None:
            raise ValueError("stop strings need a tokenizer")
        ids = encode_prompts(prompts, chat, self.tokenizer, getattr(self.target.config, "vocab_size", None))
        if not ids:
            return []  # no prompts, no results
        check_context(ids, int(max_new_tokens), getattr(self.target.config, "max_position_embeddings", None))
        generator = torch.Generator(device=self.device)
        if seed is not None:
            generator.manual_seed(int(seed))
        else:
            generator.seed()
        run = Run(int(max_new_tokens), float(temperature), generator, stops)
        batch = self._prefill(ids)
        if self.adaptive is not None:
            self.adaptive.start(self.target, len(ids))
            batch.timer.lap()  # a first call may measure the cost profile: not a cycle's time
        while batch.rows:
            cycle = self._cycle(batch, run)
            self._retire(batch, cycle, run)
        results, self.last_batch_stats = batch.finish()
        return results

    # ------------------------------------------------------------------ steps
    def _prefill(self, prompts: list[list[int]]) -> Batch:
        """Step 1: left-pad the prompts; the target reads all but the last token, the drafter its part."""
        timer = _Timer(self.device)
        B = len(prompts)
        P = max(2, max(len(p) for p in prompts))
        ids = torch.zeros(B, P, dtype=torch.long, device=self.device)  # [B, P] left padded
        valid = torch.zeros(B, P, dtype=torch.bool, device=self.device)  # [B, P]
        for b, p in enumerate(prompts):
            ids[b, P - len(p):] = torch.tensor(p, dtype=torch.long)
            valid[b, P - len(p):] = True
        batch = Batch(B, RaggedCache(self.target, B, self.device), ids[:, P - 1:], timer)
        batch.prompts = prompts
        needs_hidden = self._drafter_needs_hidden
        hidden = self._prefill_target(batch.target_cache, ids[:, : P - 1], valid[:, : P - 1],
                                      [len(p) - 1 for p in prompts], needs_hidden)  # [B, P-1, H] or None
        draft_forwards = 0
        if self.policy.uses_draft:
            draft_forwards = self.drafter.prefill(ids, valid, target_hidden=hidden)
        seconds = timer.lap()
        batch.totals.add_times(prefill=seconds)
        for s in batch.stats:
            s.target_forwards += 1
            s.draft_forwards += draft_forwards
            s.add_times(prefill=seconds)
        return batch

    def _prefill_target(self, cache: RaggedCache, ids: torch.Tensor, valid: torch.Tensor, lengths: list[int],
                        needs_hidden: bool) -> torch.Tensor | None:
        """The target reads the left-padded ``ids`` [B, P-1] (row b's last ``lengths[b]`` columns
        valid); packed when the prompts differ in length, so padding costs nothing. Returns the
        final-norm states [B, P-1, H] when ``needs_hidden``."""
        S = ids.shape[1]
        if self.packed_verify and min(lengths) >= 1 and min(lengths) < max(lengths):
            _, hidden = cache.feed_packed(ids, valid, output_hidden_states=needs_hidden, counts=lengths,
                                          starts=[S - n for n in lengths], logits=False)
            return hidden
        out = cache.feed(ids, valid, output_hidden_states=needs_hidden)
        return out.hidden_states[-1] if needs_hidden else None

    def _cycle(self, batch: Batch, run: Run) -> Cycle:
        """Steps 2-4 for every running row, or one target-only step when no row drafts."""
        remaining = [run.max_new_tokens - len(batch.outputs[r]) for r in batch.rows]
        if not self.policy.uses_draft:
            num_draft = [0] * len(remaining)
        else:  # a cycle emits at most drafts + 1 tokens: max_new_tokens is never exceeded
            num_draft = [min(self.K, rem - 1) for rem in remaining]
        if max(num_draft) == 0:  # every row needs exactly one more token: they all finish now
            return self._target_step(batch, run)
        cycle = Cycle(num_draft)
        proposal = self._propose(batch, cycle, run)
        draft_ids, draft_probs = proposal.ids, proposal.probs
        if self.adaptive is not None and draft_ids.shape[1]:
            draft_ids, draft_probs = self._adapt(cycle, proposal)
        verified = draft_ids.shape[1] > 0 and max(cycle.num_draft) > 0  # else no proposal, or none worth its cost
        if verified:
            logits, hidden = self._score(batch, cycle, draft_ids)
            self._accept_and_roll_back(batch, cycle, run, draft_ids, draft_probs, logits, hidden)
        else:
            cycle = self._target_step(batch, run, cycle)
        if self.adaptive is not None:  # what was kept and what the step cost, against the controller's table
            self.adaptive.observe(Observation(
                cycle.decision, kept=[len(e) - 1 for e in cycle.emitted] if verified else None,
                seconds=cycle.seconds["target"] + cycle.seconds.get("verify", 0.0) if cycle.decision else 0.0,
                asked=cycle.asked if cycle.draft_forwards else 0, draft_seconds=cycle.seconds["draft"]))
        return cycle

    def _adapt(self, cycle: Cycle, proposal: Proposal):
        """The controller's width for this cycle: the proposal's ids [B, k'] and probs [B, k', V]
        (or None) cut to it; width 0 leaves no columns (a plain step follows)."""
        decision = self.adaptive.plan(cycle.num_draft, proposal.row_sources(self.drafter.name),
                                      filler=proposal.probs is None)
        cycle.num_draft, cycle.decision = decision.num_draft, decision
        width, wide, draft_probs = decision.width, decision.columns, proposal.probs
        draft_ids, draft_probs = proposal.ids[:, :width], (draft_probs[:, :width] if draft_probs is not None else None)
        if wide > width:  # a cheaper forward: filler columns the verify op never keeps (num_draft stays)
            draft_ids = torch.cat([draft_ids, draft_ids[:, -1:].expand(-1, wide - width)], 1)  # [1, wide]
        return draft_ids, draft_probs

    def _target_step(self, batch: Batch, run: Run, cycle: Cycle | None = None) -> Cycle:
        """One plain target step: the autoregressive policy, rows that need exactly one token, or a
        cycle whose drafter proposed nothing (``cycle`` given: the drafter is told what was emitted)."""
        tell_drafter = cycle is not None
        cycle = cycle or Cycle([0] * len(batch.rows))
        cycle.num_draft = [0] * len(batch.rows)
        needs_hidden = tell_drafter and self.drafter.needs_target_hidden
        out = batch.target_cache.feed(batch.target_next, output_hidden_states=needs_hidden)
        token, _ = choose(out.logits[:, -1], run.temperature, run.generator)  # [B]
        cycle.seconds["target"] = batch.timer.lap()
        cycle.emitted = [[t] for t in token.tolist()]
        cycle.sources = [["target"] for _ in batch.rows]
        batch.target_next = token[:, None]
        if tell_drafter:
            none_kept = torch.zeros(len(batch.rows), dtype=torch.long, device=self.device)
            self.drafter.rollback(none_kept, 1, batch.target_next, cycle.emitted,
                                  target_hidden=out.hidden_states[-1] if needs_hidden else None)
        return cycle

    def _propose(self, batch: Batch, cycle: Cycle, run: Run) -> Proposal:
        """Step 2: the drafter proposes up to k = max(num_draft) tokens per row (the drafter seam)."""
        ask = cycle.k
        if self.adaptive is not None:  # a drafter whose drafting costs forwards is asked for what pays
            ask = self.adaptive.tokens_to_ask(len(batch.rows), ask, self.drafter.name)
        proposal = self.drafter.propose(ask, run.temperature, run.generator)  # ids [B, k']
        cycle.num_draft = [min(n, ask, c) for n, c in zip(cycle.num_draft, proposal.row_counts())]
        cycle.draft_forwards, cycle.asked = proposal.forwards, ask
        cycle.seconds["draft"] = batch.timer.lap()
        return proposal

    def _score(self, batch: Batch, cycle: Cycle, draft_ids: torch.Tensor):
        """Step 3: one target forward over [last token, d_1..d_k']: logits [B, k'+1, V] and, when the
        policy or the drafter needs them, the final hidden states of those positions [B, k'+1, H]."""
        fed = torch.cat([batch.target_next, draft_ids], 1)  # [B, k'+1]
        needs_hidden = self.policy.needs_hidden or self._drafter_needs_hidden
        if self.packed_verify and len(cycle.num_draft) > 1:  # rows pay for their own drafts only
            counts = [n + 1 for n in cycle.num_draft]
            columns = torch.arange(fed.shape[1], device=self.device)
            valid = columns[None] < torch.tensor(counts, device=self.device)[:, None]  # [B, k'+1]
            logits, hidden = batch.target_cache.feed_packed(fed, valid, output_hidden_states=needs_hidden,
                                                            counts=counts, starts=[0] * len(counts))
        else:
            out = batch.target_cache.feed(fed, logits_to_keep=fed.shape[1], output_hidden_states=needs_hidden)
            logits, hidden = out.logits, (out.hidden_states[-1] if needs_hidden else None)
        cycle.seconds["target"] = batch.timer.lap()
        return logits, hidden

    def _accept_and_roll_back(self, batch, cycle, run, draft_ids, draft_probs, logits, hidden) -> None:
        """Step 4: verify, bring the emitted ids home (the cycle's one host sync), roll both caches back."""
        from selfjudge.kernels.verify import Randomness, verify

        k = draft_ids.shape[1]
        num = None
        if min(cycle.num_draft) < k:
            num = torch.tensor(cycle.num_draft, dtype=torch.long, device=self.device)
        relaxation = self.policy.relax(self._cycle_inputs(batch, cycle, run, draft_ids, logits, hidden))
        v = verify(draft_ids, num, logits, draft_probs, temperature=run.temperature,
                   randomness=Randomness(generator=run.generator), backend=self.verify_backend,
                   judge=relaxation.judge, rules=relaxation.rules)
        host = torch.cat([v.output_token_ids, v.num_accepted[:, None], v.align_accepted.long()], 1).tolist()
        cycle.seconds["verify"] = batch.timer.lap()
        accepted = [h[k + 1] for h in host]
        cycle.emitted = [h[: a + 1] for h, a in zip(host, accepted)]
        # a kept draft the lossless rule did not accept was kept by the relaxed rule alone
        cycle.sources = [["draft" if h[k + 2 + i] else "judge" for i in range(a)] + ["target"]
                         for h, a in zip(host, accepted)]
        keep_max = max(accepted) + 1
        batch.target_cache.rollback(v.num_accepted + 1, k + 1, keep_max)
        emitted = v.output_token_ids.gather(1, v.num_accepted[:, None])  # [B, 1]
        real = max(cycle.num_draft) + 1  # the columns before any filler (see _adapt)
        self.drafter.rollback(v.num_accepted, keep_max, emitted, cycle.emitted,
                              target_hidden=hidden[:, :real] if self.drafter.needs_target_hidden else None)
        batch.target_next = emitted

    def _cycle_inputs(self, batch, cycle, run, draft_ids, logits, hidden) -> CycleInputs:
        """What the policy reads this cycle: what every policy reads, and what it declares it needs
        (the judge's hidden states [B, k', H]; a measuring policy's row tokens)."""
        needs_context = self.policy.needs_context
        return CycleInputs(
            logits, draft_ids,
            hidden_states=hidden[:, 1:] if hidden is not None and self.policy.needs_hidden else None,
            temperature=run.temperature,
            context=[batch.prompts[r] + batch.outputs[r] for r in batch.rows] if needs_context else None,
            num_draft=list(cycle.num_draft) if needs_context else None)

    def _retire(self, batch: Batch, cycle: Cycle, run: Run) -> None:
        """Step 5: record the cycle, append the emitted tokens, drop the rows that finished."""
        active = list(batch.rows)
        finished = []
        for j, r in enumerate(batch.rows):
            expected = cycle.decision.expected_kept[j] if cycle.decision is not None else None
            batch.stats[r].record_cycle(cycle.num_draft[j], cycle.sources[j], cycle.draft_forwards, expected)
            reason = append_tokens(batch.outputs[r], cycle.emitted[j], run.max_new_tokens, run.stops,
                                   self.eos_token_ids, self._decode)
            batch.sources[r] = (batch.sources[r] + cycle.sources[j])[: len(batch.outputs[r])]
            if reason:
                batch.stats[r].finish_reason = reason
                finished.append(j)
        batch.totals.record_batched_cycle(len(active), cycle.draft_forwards)
        if finished:
            for j in finished:
                r = batch.rows[j]
                batch.done[r] = GenerationResult(batch.outputs[r], self._decode(batch.outputs[r]), batch.stats[r],
                                                 batch.sources[r])
            keep = [j for j in range(len(active)) if j not in set(finished)]
            batch.rows = [batch.rows[j] for j in keep]
            if batch.rows:
                rows = torch.tensor(keep, dtype=torch.long, device=self.device)
                batch.target_cache.select(rows)
                batch.target_next = batch.target_next[rows]
                if self.policy.uses_draft:
                    self.drafter.select(rows)
                if self.adaptive is not None:
                    self.adaptive.select(keep)
        # checking costs a host sync: only after rows left or every 16 cycles
        if batch.rows and len(active) > 1 and (finished or batch.totals.cycles % 16 == 0):
            batch.target_cache.maybe_compact(self.compact_min_columns)
            if self.policy.uses_draft:
                self.drafter.maybe_compact(self.compact_min_columns)
        seconds = dict(cycle.seconds, other=batch.timer.lap())
        for r in active:
            batch.stats[r].add_times(**seconds)
        batch.totals.add_times(**seconds)
