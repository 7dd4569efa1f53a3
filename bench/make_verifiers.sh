#!/usr/bin/env bash
# Rebuilds the shipped verifiers of the default pair and the SelfJudge-vs-AutoJudge comparison
# (bench/results/compare_judges.json). Every step resumes where it stopped when rerun.
# Duration on 2 CPU cores: about 1 h 30 min (the three labelling runs dominate; run them in parallel).
#   bash bench/make_verifiers.sh            # labels -> verifiers -> comparison
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1
N_GSM8K=${N_GSM8K:-80}        # GSM8K train prompts (rows 500..) for both methods
N_SHAREGPT=${N_SHAREGPT:-48}  # ShareGPT train prompts (index >= 2000), SelfJudge only: no answer to check
SJ_TAU_Q=${SJ_TAU_Q:-0.9}     # SelfJudge tau = this quantile of the swap scores
V=selfjudge/assets/verifiers

# 1. labels (the same GSM8K prompts for both methods; y written at batch 1 for SelfJudge so that it is
#    token for token the response AutoJudge starts from)
selfjudge label --task gsm8k --split train --limit "$N_GSM8K" --batch-size 1 --max-new-tokens 320 \
    --tau 0 --out runs/sj-gsm8k
selfjudge autojudge-label --task gsm8k --split train --limit "$N_GSM8K" --label-fraction 0.05 \
    --max-labels-per-prompt 6 --max-new-tokens 320 --threads 1 --batch-size 8 --out runs/aj-gsm8k
selfjudge label --task sharegpt --split train --limit "$N_SHAREGPT" --batch-size 8 --tau 0 --out runs/sj-sharegpt

# 2. verifiers (grouped-by-prompt validation split, C by validation ROC-AUC, thresholds F / R / quantiles)
selfjudge train --labels runs/sj-gsm8k --tau-quantile "$SJ_TAU_Q" --val-fraction 0.3 \
    --out "$V/smollm2-135m-gsm8k-selfjudge.safetensors" --report runs/train-sj-gsm8k.json
selfjudge train --labels runs/aj-gsm8k --val-fraction 0.3 \
    --out "$V/smollm2-135m-gsm8k-autojudge.safetensors" --report runs/train-aj-gsm8k.json
selfjudge train --labels runs/sj-sharegpt --tau-quantile "$SJ_TAU_Q" --val-fraction 0.3 \
    --out "$V/smollm2-135m-sharegpt-selfjudge.safetensors" --report runs/train-sj-sharegpt.json

# 3. comparison: cost per label, label agreement on shared mismatches, cross ROC-AUC
python bench/compare_judges.py --selfjudge runs/sj-gsm8k --autojudge runs/aj-gsm8k \
    --tau-quantile "$SJ_TAU_Q" --plan-tokens-with "${SELFJUDGE_CACHE:-$HOME/.cache/selfjudge}/smollm2-135m-instruct" \
    --out bench/results/compare_judges.json
