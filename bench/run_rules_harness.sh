#!/usr/bin/env bash
# Issue 13's harness: every lossy acceptance rule against SelfJudge and AutoJudge on GSM8K, ShareGPT
# and summarisation (8 evaluation prompts each, batch 8, greedy), with the threshold sweeps, in two
# lanes of one torch thread (about 40 min on 2 cores), then one report over the three blocks.
#   bash bench/run_rules_harness.sh                       # the default drafter at its swept K
#   DRAFTER=model K=4 bash bench/run_rules_harness.sh bench/results/rules
#   LOOKUP_STORE=none bash bench/run_rules_harness.sh     # prompt lookup without its n-gram store: the
#                                                         # committed bench/results/rules-default
# Blocks resume when rerun; a block measured with other settings is refused (--force redoes it).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/results/rules-default}
logs=${LOGDIR:-runs/logs}
lanes=runs/$(basename "$out")  # each lane's own folder, merged into $out at the end
mkdir -p "$out/blocks" "$logs"
export OMP_NUM_THREADS=1
DRAFTER=${DRAFTER:-$(python -c "from selfjudge.models.pair import default_drafter; print(default_drafter())")}
K=${K:-$(python -c "from selfjudge.models.pair import default_num_draft_tokens as k; print(k(drafter='$DRAFTER'))")}
STORE=()
[ -n "${LOOKUP_STORE:-}" ] && STORE=(--lookup-store "$LOOKUP_STORE")
run() {  # one lane: its tasks into a folder of its own (a folder takes one writer at a time)
    local lane=$1; shift
    selfjudge bench --tasks "$@" --limit 8 --max-new-tokens 96 --ks "$K" --batch-sizes 8 --top-ks 2 \
        --thresholds F R --rules typical relaxed fly selfjudge+fly --drafter "$DRAFTER" "${STORE[@]}" --out "$lanes-$lane" \
        --threads 1 --device cpu > "$logs/rules-$lane.log" 2>&1
}
run a sharegpt gsm8k &
a=$!
run b summarize &
b=$!
wait $a; wait $b
cp "$lanes-a"/blocks/*.json "$lanes-b"/blocks/*.json "$out/blocks/"
selfjudge report "$out"
