#!/usr/bin/env bash
# Every lossy acceptance rule against SelfJudge (and AutoJudge on GSM8K) on GSM8K, ShareGPT and
# summarisation, batch 8, greedy, with every method's threshold sweep (>= 8 points each), in two lanes
# of one torch thread, then one report over the blocks.
#   bash bench/studies/run_rules_harness.sh                       # 24 evaluation prompts per task: bench/results/eval24
#   DRAFTER=model K=4 bash bench/studies/run_rules_harness.sh runs/rules-model   # the standalone draft model
#   LOOKUP_STORE=none ...                                 # prompt lookup without its n-gram store
#   LANE_A="sharegpt" LANE_B="summarize" JUDGES=SelfJudge ...   # which tasks each lane runs, which judges
# Blocks resume when rerun; a block measured with other settings is refused (--force redoes it).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-bench/results/eval24}
logs=${LOGDIR:-runs/logs}
lanes=runs/$(basename "$out")  # each lane's own folder, merged into $out at the end
mkdir -p "$out/blocks" "$logs"
export OMP_NUM_THREADS=1
DRAFTER=${DRAFTER:-$(python -c "from selfjudge.models.pair import default_drafter; print(default_drafter())")}
K=${K:-$(python -c "from selfjudge.models.pair import default_num_draft_tokens as k; print(k(drafter='$DRAFTER'))")}
LIMIT=${LIMIT:-24}
BATCH=${BATCH:-8}
read -r -a TOP_KS <<< "${TOP_KS:-2 3 4 5 6 7 8}"
read -r -a THRESHOLDS <<< "${THRESHOLDS:-F R J R80 quality:0.97}"
read -r -a RULES <<< "${RULES:-typical relaxed fly selfjudge+fly}"
read -r -a JUDGES <<< "${JUDGES:-SelfJudge AutoJudge}"
STORE=()
[ -n "${LOOKUP_STORE:-}" ] && STORE=(--lookup-store "$LOOKUP_STORE")
run() {  # one lane: its tasks into a folder of its own (a folder takes one writer at a time)
    local lane=$1; shift
    # shellcheck disable=SC2086
    selfjudge bench --tasks "$@" --limit "$LIMIT" --max-new-tokens 96 --ks "$K" --batch-sizes "$BATCH" \
        --adaptive-ks --top-ks "${TOP_KS[@]}" --judges "${JUDGES[@]}" --thresholds "${THRESHOLDS[@]}" --rules "${RULES[@]}" \
        --drafter "$DRAFTER" "${STORE[@]}" --out "$lanes-$lane" --threads 1 --device cpu > "$logs/rules-$lane.log" 2>&1
}
# shellcheck disable=SC2086
run a ${LANE_A:-sharegpt gsm8k} &
a=$!
# shellcheck disable=SC2086
run b ${LANE_B:-summarize} &
b=$!
wait $a; wait $b
cp "$lanes-a"/blocks/*.json "$lanes-b"/blocks/*.json "$out/blocks/"
selfjudge report "$out"
