#!/usr/bin/env bash
# Issue 12, deliverable 2: the standalone draft distilled on the same self-generated data as the
# EAGLE head, for a fair comparison of the two drafters. One run of `selfjudge distill-draft` with
# the recipe and step count of the shipped draft (176 steps, 2 layers from target layers 0 and 29)
# and the EAGLE head's sub-vocabulary, on the target's own greedy responses to the 160 training
# prompts the shipped head saw (bench/results/eagle-smollm2/train-text.jsonl); then first-position
# agreement of each drafter on the same held-out target text (the target's responses to 32
# validation prompts). About 25 minutes on one thread; the distillation resumes when rerun.
#   bash bench/drafters/compare_draft_data.sh [STEPS]
set -euo pipefail
cd "$(dirname "$0")/../.."
steps=${1:-176}
out=${OUT:-runs/distill-self}
text=bench/results/eagle-smollm2
selfjudge distill-draft --out "$out" --text "$text/train-text.jsonl" --heldout-text "$text/heldout-text.jsonl" \
    --head-vocab shipped --max-steps "$steps" --max-minutes 1000 --threads 1 --export "$out/export"
for draft in shipped self; do
    args=()
    [ "$draft" = self ] && args=(--draft "$out/export")
    python bench/drafters/measure_drafters.py --text "$text/heldout-text.jsonl" --agreement-only --drafters model eagle \
        --eagle selfjudge/assets/drafters/smollm2-135m-eagle "${args[@]}" --threads 1 --out "runs/draft-agreement-$draft.json"
done
python - "$steps" "$out" <<'PY'
import json, sys
steps, out = sys.argv[1], sys.argv[2]
state = json.load(open(f"{out}/state.json"))
shipped = json.load(open("selfjudge/assets/drafts/smollm2-135m-draft/draft.json"))
agree = {d: json.load(open(f"runs/draft-agreement-{d}.json"))["agreement"] for d in ("shipped", "self")}
result = {
    "command": f"bash bench/drafters/compare_draft_data.sh {steps}",
    "measure": "first-position greedy agreement with the target on its own held-out responses (teacher-forced)",
    "draft_on_self_generated": {"steps": state["step"], "train_sequences": state["n_train_sequences"],
                                "data": state["data"], **agree["self"]["model"],
                                "curve": [(h["step"], round(h["agreement"], 4)) for h in state["history"]]},
    "draft_shipped_on_reference": {"steps": shipped["steps"], "train_sequences": shipped["n_records"],
                                   "data": shipped["data"], **agree["shipped"]["model"]},
    "eagle_head_shipped": {"steps": json.load(open("selfjudge/assets/drafters/smollm2-135m-eagle/eagle.json"))["step"],
                           **agree["shipped"]["eagle"]},
}
json.dump(result, open("bench/results/draft-data-comparison.json", "w"), indent=1)
print(json.dumps({k: v.get("agreement") for k, v in result.items() if isinstance(v, dict)}))
PY
