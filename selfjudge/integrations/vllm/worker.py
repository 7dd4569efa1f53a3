"""A vLLM worker extension (``LLM(worker_extension_cls=...)``) that reads the plugin's counters."""

from __future__ import annotations


class SelfJudgeWorkerExtension:
    """Methods ``llm.collective_rpc`` can call by name on every worker."""

    def _selfjudge_sampler(self):
        sampler = getattr(self.model_runner, "rejection_sampler", None)
        return sampler if getattr(sampler, "counters", None) is not None else None

    def selfjudge_stats(self) -> dict | None:
        """Per-position drafted / accepted / judge-only accepted tokens since the last reset, the
        verifier in use and its threshold; None when the plugin is not configured."""
        sampler = self._selfjudge_sampler()
        if sampler is None:
            return None
        out = sampler.counters.summary()
        out["verifier"] = None if sampler.judge is None else sampler.judge.source
        out["threshold"] = None if sampler.judge is None else sampler.judge.threshold
        return out

    def selfjudge_reset_stats(self) -> bool:
        sampler = self._selfjudge_sampler()
        if sampler is not None:
            sampler.counters.reset()
        return sampler is not None

    def selfjudge_record_steps(self, on: bool = True) -> bool:
        """Start (``on``) or stop recording every step's drafts, decisions and judge logits on the
        host; a debugging and testing aid (each step then synchronises)."""
        sampler = self._selfjudge_sampler()
        if sampler is not None:
            sampler.recorded_steps = [] if on else None
        return sampler is not None

    def selfjudge_recorded_steps(self) -> list[dict] | None:
        sampler = self._selfjudge_sampler()
        return None if sampler is None else sampler.recorded_steps

