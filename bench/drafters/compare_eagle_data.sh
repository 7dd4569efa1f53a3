#!/usr/bin/env bash
# Issue 12: which data trains the better EAGLE head for the default pair, at equal steps from
# scratch: the target's own greedy responses (--data self) or the tasks' reference answers
# (--data reference)? Both are scored on the same held-out text, the target's greedy responses
# to 32 validation prompts. Two lanes of one thread (about 30 min on 2 cores); the runs resume
# when rerun. The self run reuses the cached responses of bench/results/eagle-smollm2.
#   bash bench/drafters/compare_eagle_data.sh [STEPS]
set -euo pipefail
cd "$(dirname "$0")/../.."
steps=${1:-400}
logs=${LOGDIR:-runs/logs}
mkdir -p "$logs" runs/eagle-data-self runs/eagle-data-reference
cp -n bench/results/eagle-smollm2/train-text.jsonl bench/results/eagle-smollm2/heldout-text.jsonl runs/eagle-data-self/
cp -n bench/results/eagle-smollm2/heldout-text.jsonl runs/eagle-data-reference/
for data in self reference; do
    selfjudge train-eagle --out "runs/eagle-data-$data" --data "$data" --gsm8k 80 --sharegpt 80 --token-weight 1.0 \
        --steps "$steps" --eval-every 100 --max-minutes 60 --threads 1 > "$logs/eagle-data-$data.log" 2>&1 &
done
wait
python - "$steps" <<'PY'
import json, sys
out = {"command": f"bash bench/drafters/compare_eagle_data.sh {sys.argv[1]}",
       "measure": "first-position greedy agreement with the target on its own held-out responses"}
for data in ("self", "reference"):
    state = json.load(open(f"runs/eagle-data-{data}/state.json"))
    out[data] = {"steps": state["step"], "train_sequences": state["n_train"], "heldout_tokens": state["history"][-1]["tokens"],
                 "agreement_curve": [(h["step"], round(h["agreement"], 4)) for h in state["history"]]}
json.dump(out, open("bench/results/eagle-data-comparison.json", "w"), indent=1)
print(json.dumps({d: out[d]["agreement_curve"][-1] for d in ("self", "reference")}))
PY
