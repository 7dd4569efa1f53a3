#!/usr/bin/env bash
# Rebuilds the shipped verifiers of the default pair and the SelfJudge-vs-AutoJudge comparison
# (bench/results/compare_judges.json). Every step resumes where it stopped when rerun.
# Duration on 2 CPU cores: about 1 h 45 min (the three labelling runs dominate; run them in parallel).
#   bash bench/studies/make_verifiers.sh            # labels -> verifiers -> comparison
#   DRAFTER=prompt-lookup SJ_SCORE_SHAREGPT=confidence OUT=runs/verifiers-pl bash bench/studies/make_verifiers.sh
# DRAFTER: whose teacher-forced proposals define the mismatches (model | eagle | prompt-lookup; the
# shipped verifiers: model and prompt-lookup). SJ_SCORE_*: the SelfJudge label score each verifier
# trains from (likelihood = SPEC's suffix log-likelihood; confidence = the released code's top-1
# confidence drop, bench/results/label-scores); label rows store both, so the labels are the same. Label folders get the drafter in their name so
# runs with different drafters never share a folder; OUT (default: the shipped folder) takes the
# verifiers. The verifiers of another drafter than the draft model are named
# <pair>-<task>-<method>-<drafter>.safetensors (selfjudge.judge.verifier.shipped_verifier_path).
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=1
N_GSM8K=${N_GSM8K:-80}        # GSM8K train prompts (rows 500..) for both methods
N_SHAREGPT=${N_SHAREGPT:-48}  # ShareGPT train prompts (index >= 2000), SelfJudge only: no answer to check
N_SUMMARIZE=${N_SUMMARIZE:-48}  # summarisation train prompts, SelfJudge only (0: no summarisation verifier)
SJ_TAU_Q=${SJ_TAU_Q:-0.9}     # SelfJudge tau = this quantile of the swap scores
DRAFTER=${DRAFTER:-model}
SJ_SCORE_GSM8K=${SJ_SCORE_GSM8K:-likelihood}
SJ_SCORE_SHAREGPT=${SJ_SCORE_SHAREGPT:-likelihood}
SJ_SCORE_SUMMARIZE=${SJ_SCORE_SUMMARIZE:-likelihood}
# what the SelfJudge verifiers read (h | phi | h+phi: the hidden state and/or the target's probability
# features of the draft token), the released code's augmentation (AUGMENT=1), prompts held out for
# test ROC-/PR-AUC, and train prompts skipped first (SKIP=80: those the default n-gram store was built from)
FEATURES=${FEATURES:-h}
AUGMENT=${AUGMENT:-0}
TEST_FRACTION=${TEST_FRACTION:-0}
SKIP=${SKIP:-0}
T=(--features "$FEATURES" --test-fraction "$TEST_FRACTION")
[ "$AUGMENT" = 1 ] && T+=(--augment)
V=${OUT:-selfjudge/assets/verifiers}
mkdir -p "$V"
R=runs   # label folders: runs/sj-gsm8k etc. for the model drafter, runs/sj-gsm8k-<drafter> otherwise
S=$([ "$DRAFTER" = model ] && echo "" || echo "-$DRAFTER")
# prompt lookup's n-gram lengths: the shipped prompt-lookup verifiers were labelled with n-grams 3..1
# (the default before the sweep chose 3..2); other lengths label into folders named after them
# and without an n-gram store (LOOKUP_STORE=FILE labels with one, into folders named -store)
MAX_NGRAM=${MAX_NGRAM:-3}
MIN_NGRAM=${MIN_NGRAM:-1}
LOOKUP_STORE=${LOOKUP_STORE:-none}
L=()
LS=$S
if [ "$DRAFTER" = prompt-lookup ]; then
    L=(--max-ngram "$MAX_NGRAM" --min-ngram "$MIN_NGRAM" --lookup-store "$LOOKUP_STORE")
    [ "$MAX_NGRAM-$MIN_NGRAM" = 3-1 ] || LS="$S-ngrams$MAX_NGRAM-$MIN_NGRAM"
    [ "$LOOKUP_STORE" = none ] || LS="$LS-store"
fi

# 1. labels (the same GSM8K prompts for both methods; y written at batch 1 for SelfJudge so that it is
#    token for token the response AutoJudge starts from)
selfjudge label --task sharegpt --split train --skip "$SKIP" --limit "$N_SHAREGPT" --batch-size 8 --tau 0 --drafter "$DRAFTER" "${L[@]}" \
    --out "$R/sj-sharegpt$LS"
if [ "$N_SUMMARIZE" -gt 0 ]; then
    selfjudge label --task summarize --split train --skip "$SKIP" --limit "$N_SUMMARIZE" --batch-size 8 --tau 0 --drafter "$DRAFTER" "${L[@]}" \
        --out "$R/sj-summarize$LS"
fi
selfjudge label --task gsm8k --split train --skip "$SKIP" --limit "$N_GSM8K" --batch-size 1 --max-new-tokens 320 \
    --tau 0 --drafter "$DRAFTER" "${L[@]}" --out "$R/sj-gsm8k$LS"
selfjudge autojudge-label --task gsm8k --split train --limit "$N_GSM8K" --label-fraction 0.05 \
    --max-labels-per-prompt 6 --max-new-tokens 320 --threads 1 --batch-size 8 --drafter "$DRAFTER" "${L[@]}" \
    --out "$R/aj-gsm8k$LS"

# 2. verifiers (grouped-by-prompt validation split, C by validation ROC-AUC, thresholds F / R / quantiles)
selfjudge train --labels "$R/sj-gsm8k$LS" --tau-quantile "$SJ_TAU_Q" --score "$SJ_SCORE_GSM8K" --val-fraction 0.3 "${T[@]}" \
    --out "$V/smollm2-135m-gsm8k-selfjudge$S.safetensors" --report "$R/train-sj-gsm8k$S.json"
selfjudge train --labels "$R/aj-gsm8k$LS" --val-fraction 0.3 \
    --out "$V/smollm2-135m-gsm8k-autojudge$S.safetensors" --report "$R/train-aj-gsm8k$S.json"
selfjudge train --labels "$R/sj-sharegpt$LS" --tau-quantile "$SJ_TAU_Q" --score "$SJ_SCORE_SHAREGPT" --val-fraction 0.3 "${T[@]}" \
    --out "$V/smollm2-135m-sharegpt-selfjudge$S.safetensors" --report "$R/train-sj-sharegpt$S.json"
if [ "$N_SUMMARIZE" -gt 0 ]; then
    selfjudge train --labels "$R/sj-summarize$LS" --tau-quantile "$SJ_TAU_Q" --score "$SJ_SCORE_SUMMARIZE" \
        --val-fraction 0.3 "${T[@]}" --out "$V/smollm2-135m-summarize-selfjudge$S.safetensors" --report "$R/train-sj-summarize$S.json"
fi

# 3. comparison: cost per label, label agreement on shared mismatches, cross ROC-AUC
python bench/studies/compare_judges.py --selfjudge "$R/sj-gsm8k$LS" --autojudge "$R/aj-gsm8k$LS" \
    --tau-quantile "$SJ_TAU_Q" --plan-tokens-with "${SELFJUDGE_CACHE:-$HOME/.cache/selfjudge}/smollm2-135m-instruct" \
    --out bench/results/compare_judges.json
