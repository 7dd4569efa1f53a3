"""How close adaptive speculation comes, at batch 1, to the best any controller could do with the
default drafter on this machine's step costs, and what the same controller does on a GPU-shaped table.

Each evaluation prompt's greedy target output is written once (target-only decoding). Decoding it
again with speculation emits the same tokens whatever is verified, so the time a policy needs is
the sum of its steps' costs, read from the cost table (:mod:`selfjudge.engine.cost_profile`):

* fixed K: each cycle verifies all of the drafter's proposal, up to K (none: a plain step);
* adaptive: the engine's :class:`~selfjudge.engine.adaptive.AdaptiveController`, fed the real
  drafter's proposals and sources and told what each verify kept, exactly as the engine does;
* bound: the fewest seconds over every choice of drafts per cycle, knowing what each proposal
  keeps (dynamic programming over positions). The drafter's proposal after a prefix depends only
  on that prefix, and its n-gram store is always asked here (the engine's gate only withholds store
  proposals), so no controller with this drafter is faster under this table.

Replayed with the table this machine measured, fixed K should match the wall-clock study
(``bench/results/adaptive/``): that checks the cost model. Replayed with a memory-bound table
(every width costs about one plain step, as on a GPU at batch 1) it projects the controller there.

    python bench/studies/adaptive_bound.py --tasks gsm8k sharegpt summarize --limit 16 \\
        --out bench/results/adaptive/bound
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import torch

from selfjudge.engine.adaptive import AdaptiveController, Observation
from selfjudge.engine.cost_profile import CostProfile
from selfjudge.models.lookup import first_proposal
from selfjudge.writes import write_json, write_text


def target_outputs(pair, task_name: str, limit: int, max_new: int) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, the target's greedy output ids) of ``limit`` evaluation prompts of a task."""
    from selfjudge.engine import SpeculativeEngine
    from selfjudge.tasks import load_task

    task = load_task(task_name)
    engine = SpeculativeEngine(pair.target, None, pair.tokenizer, policy="autoregressive")
    pairs = []
    for example in task.examples("eval", limit=limit):
        prompt = task.build_prompt(pair.tokenizer, example)
        ids = pair.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        out = engine.generate([prompt], max_new_tokens=max_new)[0].token_ids
        pairs.append((list(ids), list(out)))
    return pairs


def kept(proposal: list[int], out: list[int], i: int) -> int:
    """How many leading tokens of ``proposal`` (made after ``out[:i]``) greedy verification keeps."""
    n = 0
    while n < len(proposal) and i + n < len(out) and proposal[n] == out[i + n]:
        n += 1
    return n


def width_costs(profile: CostProfile, K: int, cheapest: bool) -> list[float]:
    """Seconds of a batch-1 step verifying k = 0..K drafts (``cheapest``: the cheapest measured width
    >= k, as the adaptive engine runs a single row; else width k, as fixed K does)."""
    step = [profile.step_seconds(1, k) for k in range(K + 1)]
    if not cheapest:
        return step
    return [step[0]] + [min(step[k:]) for k in range(1, K + 1)]


def bound_seconds(lookup, prompt: list[int], out: list[int], K: int, cost: list[float]) -> float:
    """The fewest seconds to emit ``out`` with this drafter, knowing what every proposal keeps."""
    N = len(out)
    best = [0.0] * (N + 1)
    for i in range(N - 1, -1, -1):
        proposal, _ = first_proposal(lookup, prompt + out[:i], K, True)
        a = kept(proposal, out, i)
        best[i] = min(cost[k] + best[min(N, i + min(a, k) + 1)] for k in range(len(proposal) + 1))
    return best[0]


def replay_seconds(drafter, prompt: list[int], out: list[int], K: int, cost: list[float],
                   controller: AdaptiveController | None) -> float:
    """Seconds to emit ``out`` deciding each cycle's drafts as fixed K (``controller`` None) or the
    controller does; the drafter sees every emitted token, as in the engine."""
    ids = torch.tensor([prompt])
    drafter.prefill(ids, torch.ones_like(ids, dtype=torch.bool))
    if controller is not None:
        controller.start(None, 1)
    i, seconds = 0, 0.0
    while i < len(out):
        proposal = drafter.propose(K, 0.0, None)
        count, source = min(proposal.row_counts()[0], K), proposal.row_sources(drafter.name)[0]
        decision = controller.choose([count], [source]) if controller is not None else None
        k = decision.num_draft[0] if decision is not None else count
        a = kept(proposal.ids[0, :k].tolist(), out, i)
        emitted = out[i: i + a + 1]
        seconds += cost[k]
        if decision is not None:
            controller.observe(Observation(decision, kept=[a] if k else None, seconds=cost[k]))
        drafter.rollback(torch.tensor([a]), a + 1, torch.tensor([emitted[-1:]]), [emitted])
        i += len(emitted)
    return seconds


def memory_bound_table(profile: CostProfile, per_position: float) -> CostProfile:
    """A batch-1 table where each verified position adds ``per_position`` of a plain step (a GPU's
    small-batch verify is memory-bound: reading the weights dominates)."""
    plain = profile.step_seconds(1, 0)
    seconds = tuple(plain * (1 + per_position * (p - 1)) for p in profile.positions)
    return CostProfile(rows=(1,), positions=profile.positions, seconds=(seconds,))


def prompt_lookup(lookup):
    """A fresh engine drafter with ``lookup``'s settings (an :class:`~selfjudge.models.lookup.NgramLookup`)."""
    from selfjudge.engine.prompt_lookup import PromptLookupDrafter

    return PromptLookupDrafter(lookup.vocab_size, lookup.max_ngram, lookup.min_ngram, store=lookup.store,
                               store_min_accepted=lookup.store_min_accepted)


def run_task(lookup, outputs, profile: CostProfile, K: int) -> dict:
    """Speed-ups over target-only (the same table) of fixed K = 1..K, adaptive and the bound."""
    fixed_cost, wide_cost = width_costs(profile, K, False), width_costs(profile, K, True)
    total = {"target-only": 0.0, "adaptive": 0.0, "bound": 0.0, **{f"K={k}": 0.0 for k in range(1, K + 1)}}
    for prompt, out in outputs:
        total["target-only"] += len(out) * fixed_cost[0]
        for k in range(1, K + 1):
            total[f"K={k}"] += replay_seconds(prompt_lookup(lookup), prompt, out, k, fixed_cost, None)
        controller = AdaptiveController(K, cost_profile=profile, packed=False)
        total["adaptive"] += replay_seconds(prompt_lookup(lookup), prompt, out, K, wide_cost, controller)
        total["bound"] += bound_seconds(lookup, prompt, out, K, wide_cost)
    return {name: total["target-only"] / seconds for name, seconds in total.items()}


def table(results: dict, K: int) -> str:
    names = [f"K={k}" for k in range(1, K + 1)] + ["adaptive", "bound"]
    lines = ["| cost table | task | " + " | ".join(names) + " |", "|---" * (len(names) + 2) + "|"]
    for cost_name, per_task in results.items():
        for task, speed in per_task.items():
            lines.append(f"| {cost_name} | {task} | " + " | ".join(f"{speed[n]:.2f}" for n in names) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="+", default=["gsm8k", "sharegpt", "summarize"])
    ap.add_argument("--limit", type=int, default=16, help="evaluation prompts per task")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--max-draft-tokens", type=int, default=4, help="K_max of the controller, the largest fixed K")
    ap.add_argument("--gpu-per-position", type=float, default=0.02,
                    help="the memory-bound table's extra cost per verified position, in plain steps")
    ap.add_argument("--out", type=Path, required=True, help="folder for bound.json and bound.md")
    args = ap.parse_args(argv)
    from selfjudge.engine.cost_profile import load_or_measure_profile
    from selfjudge.models.pair import default_lookup, load_pair

    torch.set_num_threads(1)
    pair = load_pair("smollm2-135m", drafter="prompt-lookup")
    K = args.max_draft_tokens
    profile = load_or_measure_profile(pair.target, 1, K + 1)
    tables = {"this CPU (measured)": profile, f"memory-bound (+{args.gpu_per_position:g} per position)":
              memory_bound_table(profile, args.gpu_per_position)}
    lookup = default_lookup(int(pair.target.config.vocab_size))
    results = {name: {} for name in tables}
    for task in args.tasks:
        outputs = target_outputs(pair, task, args.limit, args.max_new_tokens)
        for name, costs in tables.items():
            results[name][task] = run_task(lookup, outputs, costs, K)
        print(task, {n: {k: round(v, 3) for k, v in r[task].items()} for n, r in results.items()}, flush=True)
    command = "python bench/studies/adaptive_bound.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    args.out.mkdir(parents=True, exist_ok=True)
    cost_tables = {n: {"positions": list(t.positions), "seconds": list(t.seconds[0])} for n, t in tables.items()}
    write_json(args.out / "bound.json", {"command": command, "cost_tables": cost_tables,
                                         "speedup_vs_target_only": results})
    write_text(args.out / "bound.md", f"Command: `{command}`\n\nTokens/s × target-only, batch 1, replayed on "
               f"each cost table:\n\n{table(results, K)}\n")


if __name__ == "__main__":
    main()
