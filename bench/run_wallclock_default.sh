#!/usr/bin/env bash
# README's wall-clock tables for the default drafter (prompt lookup with the pair's recorded n-gram
# lengths, n-gram store and K = 3, selfjudge/assets/drafters/default.json), sized for a 2-core CPU
# (42 min in its last run): the batch-1 table (3 prompts per task, Hugging Face baselines) and the
# two 24-prompt batch-8 Pareto runs, one torch thread per lane. Blocks resume when rerun; a block
# measured with other settings (drafter, n-gram lengths or store, a retrained verifier) is refused,
# not mixed in. README's tables: `bash bench/run_wallclock_default.sh bench/results/wallclock-store`;
# the default folder, bench/results/wallclock-prompt-lookup, holds the run before the store.
# bench/run_wallclock_full.sh is the draft model's full matrix (DRAFTER=prompt-lookup reruns it all).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/results/wallclock-prompt-lookup}
logs=${LOGDIR:-runs/logs}
mkdir -p "$logs"
export OMP_NUM_THREADS=1
run() { python bench/run_wallclock.py --drafter prompt-lookup --ks 3 --threads 1 "$@"; }
{
run --out "$out" --tasks gsm8k sharegpt --batch-sizes 1 --limit 3 --hf-baselines --top-ks 2 --sweep
run --out "$out-gsm8k24" --tasks gsm8k --batch-sizes 8 --limit 24 --top-ks 2 --sweep q0.95 q0.98 q0.99
} > "$logs/wallclock-default-a.log" 2>&1 &
a=$!
run --out "$out-sharegpt24" --tasks sharegpt --batch-sizes 8 --limit 24 --top-ks 2 5 \
    --sweep q0.80 q0.90 q0.95 q0.98 q0.99 > "$logs/wallclock-default-b.log" 2>&1 &
b=$!
wait $a; wait $b
for d in "$out" "$out-gsm8k24" "$out-sharegpt24"; do selfjudge report "$d"; done
