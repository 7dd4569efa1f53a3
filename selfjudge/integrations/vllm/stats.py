"""Acceptance counters of the vLLM plugin, kept on the device (no host synchronisation per step)."""

from __future__ import annotations

import torch


class AcceptanceCounters:
    """Drafted, accepted and judge-only accepted tokens, per draft position, summed over steps."""

    def __init__(self, num_positions: int, device: torch.device):
        self.num_positions = int(num_positions)
        self.device = device
        self.reset()

    def reset(self) -> None:
        self.steps = 0
        self.drafted = [0] * self.num_positions  # host ints: vLLM gives the draft counts on the host
        self.accepted = torch.zeros(self.num_positions, dtype=torch.int64, device=self.device)  # [K]
        self.judge_only = torch.zeros(self.num_positions, dtype=torch.int64, device=self.device)  # [K]

    def add(self, out, num_draft: torch.Tensor, num_draft_host: list[int]) -> None:
        """One step's verify output (``[B, S]`` masks, ``num_accepted`` [B]); ``num_draft`` [B]."""
        width = out.align_accepted.shape[1]
        if width > self.num_positions:  # a longer draft than configured: grow the counters
            grow = width - self.num_positions
            self.drafted += [0] * grow
            pad = torch.zeros(grow, dtype=torch.int64, device=self.device)
            self.accepted, self.judge_only = torch.cat([self.accepted, pad]), torch.cat([self.judge_only, pad])
            self.num_positions = width
        kept = torch.arange(width, device=out.num_accepted.device)[None, :] < out.num_accepted[:, None]  # [B, S]
        self.accepted[:width] += kept.sum(0)
        self.judge_only[:width] += (kept & out.judge_accepted & ~out.align_accepted).sum(0)
        for n in num_draft_host:
            for i in range(min(n, width)):
                self.drafted[i] += 1
        self.steps += 1

    def summary(self) -> dict:
        """Host-side totals (one synchronisation): per-position drafted / accepted / judge-only."""
        accepted = self.accepted.tolist()
        judge_only = self.judge_only.tolist()
        return {"steps": self.steps, "drafted": list(self.drafted), "accepted": accepted,
                "judge_only": judge_only, "drafted_total": sum(self.drafted),
                "accepted_total": sum(accepted), "judge_only_total": sum(judge_only)}
