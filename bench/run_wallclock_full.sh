#!/usr/bin/env bash
# The full wall-clock matrix of README's results table, sized for a 2-core CPU (about 1 h 45 min):
# two processes, one torch thread each, filling one results folder (blocks resume when rerun),
# then the two 24-prompt Pareto runs (GSM8K and ShareGPT, batch 8, K=4) in folders of their own.
#   lane A, batch 8: GSM8K and ShareGPT, K in {4, 8}, standard / top-2 / top-5 / AutoJudge / SelfJudge
#           at F and R, and the threshold sweep of both judges at K=4 (the Pareto curves);
#   lane B, batch 1: GSM8K and ShareGPT, K=4, named thresholds (ShareGPT also the sweep), then
#           HumanEval and GPQA-diamond at batch 8, K=4, named thresholds plus a short sweep.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/results/wallclock}
logs=${LOGDIR:-runs/logs}
mkdir -p "$out" "$logs"
export OMP_NUM_THREADS=1
# the drafter of the speculative configurations; the committed tables were made with the draft model
DRAFTER=${DRAFTER:-model}
python bench/run_wallclock.py --drafter "$DRAFTER" --out "$out" --tasks gsm8k sharegpt --batch-sizes 8 --ks 4 8 --limit 8 \
    > "$logs/wallclock-laneA.log" 2>&1 &
a=$!
{
python bench/run_wallclock.py --drafter "$DRAFTER" --out "$out" --tasks gsm8k --batch-sizes 1 --ks 4 --limit 3 --hf-baselines \
    --top-ks 2 --sweep
python bench/run_wallclock.py --drafter "$DRAFTER" --out "$out" --tasks sharegpt --batch-sizes 1 --ks 4 --limit 3 --hf-baselines \
    --top-ks 2   # with the default sweep: the open-ended Pareto curve at batch 1
python bench/run_wallclock.py --drafter "$DRAFTER" --out "$out" --tasks humaneval gpqa --batch-sizes 8 --ks 4 --limit 8 \
    --sweep q0.90 q0.99
} > "$logs/wallclock-laneB.log" 2>&1 &
b=$!
wait $a; wait $b
selfjudge report "$out"

# stage 2: larger samples for the Pareto comparison (about 35 minutes, one lane each)
python bench/run_wallclock.py --drafter "$DRAFTER" --out "$out-gsm8k24" --tasks gsm8k --batch-sizes 8 --ks 4 --limit 24 --top-ks 2 \
    --sweep q0.95 q0.98 q0.99 > "$logs/wallclock-gsm8k24.log" 2>&1 &
a=$!
python bench/run_wallclock.py --drafter "$DRAFTER" --out "$out-sharegpt24" --tasks sharegpt --batch-sizes 8 --ks 4 --limit 24 --top-ks 2 5 \
    --sweep q0.80 q0.90 q0.95 q0.98 q0.99 > "$logs/wallclock-sharegpt24.log" 2>&1 &
b=$!
wait $a; wait $b
selfjudge report "$out-gsm8k24"
selfjudge report "$out-sharegpt24"

# stage 3: the GSM8K Pareto run again with digit tokens protected from each judge (about 20 minutes)
for judge in SelfJudge AutoJudge; do
    python bench/run_wallclock.py --drafter "$DRAFTER" --out "$out-gsm8k24-digits-$judge" --tasks gsm8k --batch-sizes 8 --ks 4 --limit 24 \
        --top-ks 2 --judges "$judge" --sweep q0.95 q0.98 q0.99 --protect-digits > "$logs/wallclock-digits-$judge.log" 2>&1 &
done
wait
for judge in SelfJudge AutoJudge; do selfjudge report "$out-gsm8k24-digits-$judge"; done
