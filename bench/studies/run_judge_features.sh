#!/usr/bin/env bash
# SelfJudge verifiers that read the target's probability features (h+phi) against the training-free
# rules, in the engine: the rules harness's settings (default drafter at its K, batch 8, greedy,
# 96 new tokens, typical / relaxed top-N / FLy / SelfJudge+FLy sweeps) on ShareGPT and summarisation,
# each task with its own verifier, in two lanes of one torch thread, then one report.
#   SHAREGPT_VERIFIER=V1 SUMMARIZE_VERIFIER=V2 bash bench/studies/run_judge_features.sh OUT [LIMIT]
# Blocks resume when rerun (--force redoes them).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: SHAREGPT_VERIFIER=V SUMMARIZE_VERIFIER=V bash bench/studies/run_judge_features.sh OUT [LIMIT]}
limit=${2:-8}
logs=${LOGDIR:-runs/logs}
lanes=runs/$(basename "$out")
mkdir -p "$out/blocks" "$logs"
export OMP_NUM_THREADS=1
DRAFTER=$(python -c "from selfjudge.models.pair import default_drafter; print(default_drafter())")
K=$(python -c "from selfjudge.models.pair import default_num_draft_tokens as k; print(k(drafter='$DRAFTER'))")
run() {  # one lane: one task with its verifier, into a folder of its own
    local task=$1 verifier=$2
    selfjudge bench --tasks "$task" --limit "$limit" --max-new-tokens 96 --ks "$K" --batch-sizes 8 --top-ks 2 \
        --judges SelfJudge --thresholds F R J R80 --rules typical relaxed fly selfjudge+fly --drafter "$DRAFTER" \
        --selfjudge-verifier "$verifier" --out "$lanes-$task" --threads 1 --device cpu > "$logs/judge-$task.log" 2>&1
}
run sharegpt "${SHAREGPT_VERIFIER:?}" &
a=$!
run summarize "${SUMMARIZE_VERIFIER:?}" &
b=$!
wait $a; wait $b
cp "$lanes-sharegpt"/blocks/*.json "$lanes-summarize"/blocks/*.json "$out/blocks/"
selfjudge report "$out"
