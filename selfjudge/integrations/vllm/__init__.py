"""SelfJudge inside vLLM: this package's verify op (and judge) in place of vLLM's rejection sampler.

Installed with the package, :func:`register` is vLLM's general plugin (entry point group
``vllm.general_plugins``, name ``selfjudge``), which vLLM calls in every process it starts. It
changes nothing until an engine is created with ``additional_config={"selfjudge": {...}}``
(:mod:`.config`): then that engine's speculative decoding accepts with
:func:`selfjudge.kernels.verify.verify_flat`, lossless without a verifier, OR-ed with the judge
with one. Nothing in vLLM's files is edited: the model runner's ``RejectionSampler`` name is bound
to a subclass that behaves as vLLM's own until configured, and the runners' ``load_model`` is
wrapped to configure it (and capture the hidden states the judge reads) once the model is loaded.

Acceptance counters: pass ``worker_extension_cls=WORKER_EXTENSION`` to ``LLM`` and call
``llm.collective_rpc("selfjudge_stats")`` (``"selfjudge_reset_stats"`` to zero them).
"""

from __future__ import annotations

import functools

from .config import CONFIG_KEY, PluginOptions, options_from  # noqa: F401

WORKER_EXTENSION = "selfjudge.integrations.vllm.worker.SelfJudgeWorkerExtension"
_RUNNERS = (("vllm.v1.worker.gpu_model_runner", "GPUModelRunner"),
            ("vllm.v1.worker.cpu_model_runner", "CPUModelRunner"))


def register() -> None:
    """vLLM's general-plugin hook: bind the model runner's rejection sampler to
    :class:`~.sampler.SelfJudgeRejectionSampler` and wrap the runners' ``load_model`` (idempotent:
    vLLM may call it more than once per process)."""
    import importlib

    from .sampler import SelfJudgeRejectionSampler

    gpu_runner = importlib.import_module("vllm.v1.worker.gpu_model_runner")
    gpu_runner.RejectionSampler = SelfJudgeRejectionSampler
    for module_name, class_name in _RUNNERS:
        try:
            runner_class = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError):
            continue
        load_model = runner_class.__dict__.get("load_model")
        if load_model is not None and not getattr(load_model, "_selfjudge_wrapped", False):
            runner_class.load_model = _configuring(load_model)


def _configuring(load_model):
    @functools.wraps(load_model)
    def load_model_then_configure(self, *args, **kwargs):
        result = load_model(self, *args, **kwargs)
        configure_runner(self)
        return result

    load_model_then_configure._selfjudge_wrapped = True
    return load_model_then_configure


def configure_runner(model_runner) -> None:
    """Configure the runner's sampler from its ``vllm_config`` and hook the hidden-state capture
    (a runner without speculative decoding is left alone)."""
    from .sampler import SelfJudgeRejectionSampler, attach_hidden_capture, batch_contexts

    sampler = getattr(model_runner, "rejection_sampler", None)
    if not isinstance(sampler, SelfJudgeRejectionSampler) or sampler.options is not None:
        return
    sampler.configure(model_runner.vllm_config, model_runner.device)
    sampler.batch_contexts = functools.partial(batch_contexts, model_runner)
    attach_hidden_capture(model_runner)
