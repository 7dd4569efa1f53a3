"""This package's verify op in the place of vLLM's rejection sampler.

:class:`SelfJudgeRejectionSampler` subclasses vLLM's ``RejectionSampler`` and keeps everything
around the acceptance decision as vLLM does it: the bonus token from vLLM's own sampler (so
top-k / top-p, logits processors and per-request generators apply to it), the logits processors
and sampling constraints on the draft rows, the logprobs. Only the decision itself, which draft
tokens are kept and which token recovers the first rejection, runs through
:func:`selfjudge.kernels.verify.verify_flat`, in vLLM's flattened layout, in one launch. With a
verifier the judge reads the target's final hidden state after each draft token, captured from
the model runner's ``compute_logits`` (:func:`attach_hidden_capture`).

Until :meth:`SelfJudgeRejectionSampler.configure` finds a ``selfjudge`` entry in vLLM's
``additional_config`` it is vLLM's own sampler, unchanged.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from vllm.v1.outputs import SamplerOutput
from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p
from vllm.v1.sample.rejection_sampler import RejectionSampler

from selfjudge.kernels.verify import JudgeInputs, verify_flat

from .config import JudgeWeights, PluginOptions, load_judge, options_from
from .stats import AcceptanceCounters


class SelfJudgeRejectionSampler(RejectionSampler):
    """vLLM's ``RejectionSampler`` whose acceptance decision is this package's verify op (lossless,
    or OR-ed with a SelfJudge verifier) once configured; vLLM's own until then."""

    def __init__(self, sampler, spec_config=None, device=None):
        super().__init__(sampler, spec_config, device)
        self.options: PluginOptions | None = None
        self.judge: JudgeWeights | None = None
        self.counters: AcceptanceCounters | None = None
        self.captured_hidden: torch.Tensor | None = None  # [rows of the last compute_logits, H]
        self.recorded_steps: list[dict] | None = None  # a list: every step's decision, on the host (syncs)
        self.batch_contexts = None  # () -> each request's tokens before this step; set by the runner hook

    def configure(self, vllm_config, device: torch.device) -> None:
        """Read the ``selfjudge`` entry of ``vllm_config.additional_config`` and load its verifier
        (refusing one made for another model); no entry leaves vLLM's sampler in place."""
        self.options = options_from(vllm_config.additional_config)
        if self.options is None:
            return
        if self.synthetic_mode:
            raise ValueError("additional_config['selfjudge'] cannot be combined with vLLM's synthetic "
                             "rejection sampling (rejection_sample_method='synthetic')")
        model_config = vllm_config.model_config
        judge = load_judge(self.options, str(model_config.model), model_config.get_hidden_size(), device)
        self.enable(self.options, judge, vllm_config.speculative_config.num_speculative_tokens, device)

    def enable(self, options: PluginOptions, judge: JudgeWeights | None, num_positions: int,
               device: torch.device) -> None:
        """Decide with this package's verify op from now on (``judge`` None: lossless)."""
        self.options, self.judge = options, judge
        self.counters = AcceptanceCounters(num_positions, device)

    def forward(self, metadata, draft_probs, logits, sampling_metadata) -> SamplerOutput:
        # metadata: vLLM's SpecDecodeMetadata; draft_probs [T, V] | None; logits [T+B, V]
        if self.options is None:
            return super().forward(metadata, draft_probs, logits, sampling_metadata)
        bonus_logits = logits[metadata.bonus_logits_indices]  # [B, V]
        bonus_output = self.sampler(
            logits=bonus_logits,
            sampling_metadata=replace(sampling_metadata, max_num_logprobs=-1),
            predict_bonus_token=True,
            logprobs_mode_override="processed_logits" if self.is_processed_logprobs_mode else "raw_logits",
        )
        raw_target_logits = logits[metadata.target_logits_indices].to(torch.float32)  # [T, V], a copy
        keep_raw = sampling_metadata.max_num_logprobs is not None and not self.is_processed_logprobs_mode
        target_logits = raw_target_logits.clone() if keep_raw else raw_target_logits
        target_logits = self.apply_logits_processors(target_logits, sampling_metadata, metadata)
        target_logits = constrain_draft_rows(target_logits, metadata.cu_num_draft_tokens, sampling_metadata)
        output_token_ids = self._decide(metadata, draft_probs, _flat_logits(logits, target_logits, metadata),
                                        bonus_output.sampled_token_ids, sampling_metadata)
        logprobs_tensors = None
        if sampling_metadata.max_num_logprobs is not None:
            logprobs_tensors = self._get_logprobs_tensors(
                sampling_metadata.max_num_logprobs, metadata, logits,
                target_logits if self.is_processed_logprobs_mode else raw_target_logits,
                bonus_output.logprobs_tensors.logprobs, output_token_ids)
        return SamplerOutput(sampled_token_ids=output_token_ids, logprobs_tensors=logprobs_tensors)

    def _decide(self, metadata, draft_probs, flat_logits, bonus_token_ids,
                sampling_metadata) -> torch.Tensor:  # -> [B, max_spec_len + 1] int32, -1 padded
        # flat_logits [T+B, V] fp32 (draft rows constrained, temperature applied); bonus_token_ids [B, 1]
        judge = self._judge_inputs(metadata)
        out = verify_flat(
            metadata.draft_token_ids, metadata.cu_num_draft_tokens, flat_logits, draft_probs,
            max_spec_len=metadata.max_spec_len, temperature=_op_temperature(sampling_metadata),
            backend=self.options.backend, check_metadata=False, **judge)
        counts = torch.tensor(metadata.num_draft_tokens, device=out.num_accepted.device)  # [B]
        ids = _with_vllm_bonus(out.output_token_ids, out.num_accepted, counts, bonus_token_ids)
        self.counters.add(out, counts, metadata.num_draft_tokens)
        if self.recorded_steps is not None:
            contexts = None if self.batch_contexts is None else self.batch_contexts()
            self.recorded_steps.append(_step_record(metadata, out, ids, contexts))
        return ids.to(torch.int32)

    def _judge_inputs(self, metadata) -> dict:
        if self.judge is None:
            return {}
        hidden = self.captured_hidden
        rows = metadata.target_logits_indices.shape[0] + len(metadata.num_draft_tokens)
        if hidden is None or hidden.shape[0] != rows:
            raise RuntimeError(
                f"selfjudge: the judge needs the target's hidden states at the {rows} logits rows, but the "
                f"model runner's compute_logits gave {None if hidden is None else hidden.shape[0]}; this "
                "vLLM version computes logits in a way the plugin does not capture")
        # the state after draft token t is the row that predicts the token after it
        return {"judge": JudgeInputs(hidden[metadata.target_logits_indices + 1], self.judge.weight, self.judge.bias,
                                     self.judge.phi_weight, self.judge.threshold)}


def _flat_logits(logits, target_logits, metadata) -> torch.Tensor:  # -> [T+B, V] fp32
    """The op's input in vLLM's flattened layout: ``logits`` [T+B, V] with its draft rows replaced
    by the processed ``target_logits`` [T, V]. fp32 logits are overwritten in place (after the
    sampler vLLM reads them only for their shape and a NaN count), saving a [T+B, V] copy per
    step; other dtypes are copied to fp32. The bonus rows stay raw: the op's bonus token is
    replaced by vLLM's."""
    flat = logits if logits.dtype == torch.float32 else logits.to(torch.float32)
    flat[metadata.target_logits_indices] = target_logits
    return flat


def constrain_draft_rows(logits, cu_num_draft_tokens, sampling_metadata) -> torch.Tensor:  # -> [T, V]
    """vLLM's ``apply_sampling_constraints`` (temperature, top-k, top-p of each draft row's request)
    with the per-request values expanded to rows by ``torch.repeat_interleave``: vLLM's CPU build
    (0.32.0) expands them through a C++ fallback that writes into an int64 copy, so its float and
    int32 expansions come back uninitialised. No host synchronisation (the row count is known)."""
    # logits [T, V] fp32, modified in place like vLLM's; cu_num_draft_tokens [B]
    if sampling_metadata.all_greedy:
        return logits
    rows = logits.shape[0]
    counts = torch.diff(cu_num_draft_tokens.long(), prepend=cu_num_draft_tokens.new_zeros(1).long())  # [B]

    def per_row(values):  # [B] -> [T]
        return None if values is None else values.repeat_interleave(counts, output_size=rows)

    temperature = per_row(sampling_metadata.temperature)  # 0 marks a greedy row: left unscaled
    logits.div_(torch.where(temperature == 0, 1.0, temperature)[:, None])
    return apply_top_k_top_p(logits, per_row(sampling_metadata.top_k), per_row(sampling_metadata.top_p))


def _step_record(metadata, out, ids, contexts) -> dict:
    """One step's drafts and decision as host lists (a debugging and testing aid: it synchronises)."""
    return {"contexts": contexts, "num_draft_tokens": list(metadata.num_draft_tokens),
            "draft_token_ids": metadata.draft_token_ids.tolist(), "output_token_ids": ids.tolist(),
            "num_accepted": out.num_accepted.tolist(),
            "judge_logits": None if out.judge_logits is None else out.judge_logits.tolist()}


def _op_temperature(sampling_metadata) -> float | torch.Tensor:  # float or [B]
    """The op's temperature: 0 for greedy rows, 1 for the others, whose logits vLLM's sampling
    constraints have already divided by their temperature."""
    if sampling_metadata.all_greedy or sampling_metadata.temperature is None:
        return 0.0
    return (sampling_metadata.temperature > 0).to(torch.float32)


def _with_vllm_bonus(output_token_ids, num_accepted, num_draft, bonus_token_ids) -> torch.Tensor:
    """``output_token_ids`` [B, S+1] with the bonus slot of every fully accepted row replaced by
    vLLM's own bonus token [B, 1] (drawn with the request's top-k / top-p and generator)."""
    slot = num_draft.long().clamp(max=output_token_ids.shape[1] - 1)[:, None]  # [B, 1]
    current = output_token_ids.gather(1, slot)
    full = (num_accepted == num_draft)[:, None]
    return output_token_ids.scatter(1, slot, torch.where(full, bonus_token_ids.long(), current))


def batch_contexts(model_runner) -> list[list[int]]:
    """Each request's tokens before the current step, in the batch's order (read from the runner's
    host-side input batch; for recording only)."""
    batch = model_runner.input_batch
    return [batch.token_ids_cpu[i, :batch.num_tokens_no_spec[i]].tolist() for i in range(batch.num_reqs)]


def attach_hidden_capture(model_runner) -> None:
    """Make the runner's ``model.compute_logits`` hand its input hidden states to the runner's
    :class:`SelfJudgeRejectionSampler` when a judge is configured (idempotent)."""
    sampler = getattr(model_runner, "rejection_sampler", None)
    model = getattr(model_runner, "model", None)
    if not isinstance(sampler, SelfJudgeRejectionSampler) or sampler.judge is None or model is None:
        return
    compute_logits = model.compute_logits
    if getattr(compute_logits, "_selfjudge_capture", False):
        return

    def capturing_compute_logits(hidden_states, *args, **kwargs):  # hidden_states [R, H]
        sampler.captured_hidden = hidden_states
        return compute_logits(hidden_states, *args, **kwargs)

    capturing_compute_logits._selfjudge_capture = True
    model.compute_logits = capturing_compute_logits
