#!/usr/bin/env bash
# Rebuilds the shipped SelfJudge verifiers of the default drafter (prompt lookup, n-grams 3..2 with its
# n-gram store, K = 3): selfjudge/assets/verifiers/smollm2-135m-{gsm8k,sharegpt,summarize,general}-selfjudge-prompt-lookup.safetensors.
# Every step resumes or is skipped when its output exists, so a rerun carries on where it stopped.
#   bash bench/studies/make_default_verifiers.sh
# 1. labels: the committed label folders (bench/labels/; their text is in git, the tensors are rebuilt by
#    rerunning each folder's own command, which then resumes labelling);
# 2. per task in CHOOSE_TASKS, one verifier per tau quantile in TAUS (h+phi, likelihood labels, no
#    augmentation: the teacher-forced ablation's winner on every task, bench/results/judge-labels-20k),
#    each measured in the engine on validation prompts, and the one with the best semantic-fidelity
#    Pareto against relaxed top-N and FLy kept (bench/studies/choose_verifier.py); the other tasks take TAU_Q;
# 3. the kept verifier's validation curves, with the rules' on the same prompts, stored in it (selfjudge
#    calibrate: threshold "quality:B" and the demo's rule within the budget);
# 4. one general verifier from all tasks' labels, its tau chosen the same way on ShareGPT and summarisation
#    (the candidate whose worst task is best), calibrated on both tasks' validation prompts pooled.
# Duration on 2 CPU cores: labels ~2 h per task if made from scratch (14 min each to rebuild tensors);
# each validation bench 10-30 min.
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
L=bench/labels
R=${RUNS:-runs/default-verifiers}
V=${OUT:-selfjudge/assets/verifiers}
CHOOSE_TASKS=${CHOOSE_TASKS:-gsm8k sharegpt summarize}
TAUS=${TAUS:-0.8 0.9 0.95}
TAU_Q=${TAU_Q:-0.9}                         # tasks not in CHOOSE_TASKS
VAL_LIMIT_sharegpt=16 VAL_LIMIT_summarize=8 VAL_LIMIT_gsm8k=16   # validation prompts per task
RULES_sharegpt=bench/results/val-sharegpt/blocks/sharegpt_b8.json  # the rules' sweeps on those prompts
RULES_summarize=bench/results/judge-features/validation-summarize/blocks/summarize_b8.json
RULES_gsm8k=bench/results/val-gsm8k/blocks/gsm8k_b8.json
mkdir -p "$R" "$V"

selfjudge label --task gsm8k --split train --skip 80 --limit 400 --batch-size 8 --max-new-tokens 320 --tau 0 --out $L/gsm8k
selfjudge label --task sharegpt --split train --skip 80 --limit 800 --batch-size 8 --tau 0 --out $L/sharegpt
selfjudge label --task summarize --split train --limit 1300 --batch-size 8 --tau 0 --out $L/summarize

train() {  # labels..., out, tau quantile
    local q=${*: -1} out=${*: -2:1}
    [ -f "$out" ] || selfjudge train --labels "${@:1:$#-2}" --tau-quantile "$q" --score likelihood --features h+phi \
        --val-fraction 0.2 --test-fraction 0.2 --out "$out" --report "${out%.safetensors}.json"
}

val_bench() {  # verifier, task, out: SelfJudge's named thresholds and quantile sweep on the task's validation prompts
    local limit_var=VAL_LIMIT_$2
    [ -f "$3/blocks/${2}_b8.json" ] || selfjudge bench --split val --tasks "$2" --limit "${!limit_var}" --max-new-tokens 96 \
        --ks 3 --batch-sizes 8 --top-ks --judges SelfJudge --thresholds F R J R80 --rules --drafter prompt-lookup \
        --selfjudge-verifier "$1" --out "$3" --threads 1 --device cpu
}

winner() { python -c "import json,sys; print(json.load(open(sys.argv[1]))['winner'][1:])" "$1"; }

for task in gsm8k sharegpt summarize; do
    ship=$V/smollm2-135m-$task-selfjudge-prompt-lookup.safetensors
    if [[ " $CHOOSE_TASKS " != *" $task "* ]]; then
        train $L/$task "$R/$task-q$TAU_Q.safetensors" "$TAU_Q"
        cp "$R/$task-q$TAU_Q.safetensors" "$ship"
        continue
    fi
    rules_var=RULES_$task
    cands=()
    for q in $TAUS; do
        train $L/$task "$R/$task-q$q.safetensors" "$q"
        val_bench "$R/$task-q$q.safetensors" "$task" "$R/val-$task-q$q"
        cands+=("q$q=$R/val-$task-q$q/blocks/${task}_b8.json")
    done
    python bench/studies/choose_verifier.py --rules "${!rules_var}" --candidates "${cands[@]}" --out "$R/choose-$task.json" \
        --merged "$R/merged-$task"
    q=$(winner "$R/choose-$task.json")
    selfjudge calibrate --bench "$R/merged-$task/q$q" --verifier "$R/$task-q$q.safetensors" --out "$ship"
done

# the general verifier (every task's labels), for tasks without their own: tau chosen on the open-ended tasks'
# validation prompts by its worst task, and calibrated on those prompts pooled
GENERAL_TASKS=${GENERAL_TASKS:-sharegpt summarize}
cands=() rules=()
for task in $GENERAL_TASKS; do rules_var=RULES_$task; rules+=("${!rules_var}"); done
for q in $TAUS; do
    train $L/gsm8k $L/sharegpt $L/summarize "$R/general-q$q.safetensors" "$q"
    for task in $GENERAL_TASKS; do
        val_bench "$R/general-q$q.safetensors" "$task" "$R/val-general-$task-q$q"
        cands+=("q$q=$R/val-general-$task-q$q/blocks/${task}_b8.json")
    done
done
python bench/studies/choose_verifier.py --rules "${rules[@]}" --candidates "${cands[@]}" --out "$R/choose-general.json" \
    --merged "$R/merged-general"
q=$(winner "$R/choose-general.json")
selfjudge calibrate --bench "$R/merged-general/q$q" --verifier "$R/general-q$q.safetensors" \
    --out "$V/smollm2-135m-general-selfjudge-prompt-lookup.safetensors"
