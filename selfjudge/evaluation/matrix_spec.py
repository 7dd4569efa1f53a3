"""What one ``selfjudge bench`` run measures, as five small parameter objects.

:class:`MatrixSpec` groups the run's settings by what they decide: the decoded prompts
(:class:`Workload`), the decoding methods compared (:class:`Methods`), the Pareto sweeps and the
training-free rules (:class:`Sweeps`), what drafts (:class:`Drafting`) and how the run is carried
out (:class:`Execution`). The defaults are the full matrix. ``MatrixSpec.from_options(**flat)``
builds one from flat option names (the command line's), each going to the group that owns it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path

from selfjudge.builtin import DEFAULT_PAIR

__all__ = ["DEFAULT_MAX_NEW", "Drafting", "Execution", "JUDGE_FAMILIES", "MatrixSpec", "Methods", "SWEEP", "Sweeps",
           "Workload"]

DEFAULT_MAX_NEW = {"gsm8k": 256, "humaneval": 256, "gpqa": 256, "sharegpt": 128, "summarize": 96}
SWEEP = ["q0.50", "q0.80", "q0.90", "q0.95", "q0.98", "q0.99"]
JUDGE_FAMILIES = ("SelfJudge", "AutoJudge")


@dataclass
class Workload:
    """The prompts decoded: which pair, tasks, split, how many, how long, in batches of what size."""

    pair: str = DEFAULT_PAIR
    tasks: list[str] = field(default_factory=lambda: ["gsm8k", "humaneval", "gpqa", "sharegpt"])
    limit: int = 8  # prompts per task
    split: str = "eval"  # "eval" (reported figures) or "val" (choosing thresholds and settings)
    max_new_tokens: int | None = None  # None: DEFAULT_MAX_NEW per task
    batch_sizes: list[int] = field(default_factory=lambda: [1, 8])

    def __post_init__(self) -> None:
        if self.limit < 1:
            raise ValueError(f"limit must be >= 1, got {self.limit}")
        if not self.batch_sizes or any(b < 1 for b in self.batch_sizes):
            raise ValueError(f"batch_sizes must be >= 1, got {self.batch_sizes}")

    def new_tokens(self, task: str) -> int:
        """The new-token cap of ``task``'s prompts."""
        return self.max_new_tokens or DEFAULT_MAX_NEW.get(task, 128)


@dataclass
class Methods:
    """The decoding methods compared beside target-only and standard SD."""

    ks: list[int] = field(default_factory=lambda: [4, 8])  # fixed drafts per cycle
    adaptive_ks: list[int] = field(default_factory=lambda: [4])  # adaptive speculation, at most K drafts per row
    top_ks: list[int] = field(default_factory=lambda: [2, 5])
    judges: list[str] = field(default_factory=lambda: list(JUDGE_FAMILIES))
    thresholds: list[str] = field(default_factory=lambda: ["F", "R"])  # named judge thresholds
    selfjudge_verifier: str | None = None  # None: the shipped one, per task
    autojudge_verifier: str | None = None  # None: the shipped GSM8K one
    protect_digits: bool = False  # judges may not accept or replace digit tokens
    hf_baselines: bool = False  # batch-1 blocks also run Hugging Face generate and assisted generation

    def __post_init__(self) -> None:
        if not self.ks or any(k < 1 for k in self.ks):
            raise ValueError(f"ks must be >= 1, got {self.ks}")
        unknown = [j for j in self.judges if j not in JUDGE_FAMILIES]
        if unknown:
            raise ValueError(f"judges must be among {JUDGE_FAMILIES}, got {unknown}")


@dataclass
class Sweeps:
    """The Pareto curves: extra judge thresholds and training-free rules, at which K and batch sizes."""

    sweep: list[str] = field(default_factory=lambda: list(SWEEP))  # extra thresholds for the Pareto curves
    sweep_ks: list[int] | None = None  # K values with the sweep (None: the first K)
    sweep_batches: list[int] | None = None  # batch sizes with the sweep (None: the largest)
    rules: list[str] = field(default_factory=list)  # training-free lossy rules swept at sweep_ks (matrix.RULE_SWEEPS)
    rules_budget: float | None = None  # each rule only at its validation setting within this budget


@dataclass
class Drafting:
    """What drafts for the speculative configurations."""

    drafter: str = "model"  # "model" (the pair's draft), "eagle" (eagle_dir) or "prompt-lookup"
    eagle_dir: str | None = None
    lookup_store: str | None = None  # prompt lookup's n-gram store: None the pair's, "none" no store, or a file


@dataclass
class Execution:
    """How the run is carried out: threads, timing rounds, device, where it writes."""

    threads: int = 1
    timing_rounds: int = 1  # times every prompt group is timed (configurations in alternating order)
    device: str = "auto"  # where the models run (selfjudge.devices.resolve_device)
    dtype: str = "auto"  # bfloat16 on CUDA, float32 on the CPU
    out: Path = Path("selfjudge-bench")
    force: bool = False  # redo blocks that are already written
    estimate_only: bool = False  # log the expected duration and stop

    def __post_init__(self) -> None:
        self.out = Path(self.out)
        if self.timing_rounds < 1:
            raise ValueError(f"timing_rounds must be >= 1, got {self.timing_rounds}")


_GROUPS = {"workload": Workload, "methods": Methods, "sweeps": Sweeps, "drafting": Drafting, "execution": Execution}


@dataclass
class MatrixSpec:
    """What one ``selfjudge bench`` run measures (the defaults are the full matrix)."""

    workload: Workload = field(default_factory=Workload)
    methods: Methods = field(default_factory=Methods)
    sweeps: Sweeps = field(default_factory=Sweeps)
    drafting: Drafting = field(default_factory=Drafting)
    execution: Execution = field(default_factory=Execution)

    def __post_init__(self) -> None:
        if self.sweeps.sweep_ks is None:
            self.sweeps.sweep_ks = self.methods.ks[:1]
        if self.sweeps.sweep_batches is None:
            self.sweeps.sweep_batches = [max(self.workload.batch_sizes)]

    @classmethod
    def from_options(cls, **options) -> MatrixSpec:
        """A spec from flat option names (``limit=2, ks=[4], out=...``), each to its group;
        ``TypeError`` names an option no group has."""
        owner = {f.name: group for group, kind in _GROUPS.items() for f in fields(kind)}
        unknown = sorted(set(options) - set(owner))
        if unknown:
            raise TypeError(f"unknown bench options: {', '.join(unknown)}")
        grouped = {group: {} for group in _GROUPS}
        for name, value in options.items():
            grouped[owner[name]][name] = value
        return cls(**{group: _GROUPS[group](**values) for group, values in grouped.items()})
