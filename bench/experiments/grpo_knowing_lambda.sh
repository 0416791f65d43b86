#!/usr/bin/env bash
# The λ sweep on the knowing world (docs/knowing_world.md, "The λ sweep on the second design"), for one world seed,
# after bench/experiments/grpo_knowing_v2.sh <seed>: the second design's recipe at λ 0 and 0.2, beside its λ 0.05
# run (sft_rl_v2, linked as lambda_0.05), each evaluated on the evaluation half, then accuracy against retrieval share
# ($G/lambda/accuracy_vs_retrieval.png, sweep.json) and the arms table ($G/lambda/arms.md).
#   OMP_NUM_THREADS=1 bash bench/experiments/grpo_knowing_lambda.sh 0
# LAMBDAS="0" runs some λ only (two shells can run λ 0 and 0.2 side by side); every step resumes.
set -euo pipefail
SEED=${1:-0}
K=runs/knowing/seed$SEED
G=$K/claims/grpo
L=$G/lambda
V2="--init_adapter $K/claims/adapt/model --explore_ret 0 --scale_rewards none --ret_token_learning_rate 1e-4"
mkdir -p "$L"
[ -e "$L/lambda_0.05" ] || ln -s ../sft_rl_v2 "$L/lambda_0.05"
python bench/experiments/grpo_lambda_sweep.py bench/experiments/grpo_knowing_gate.yaml --lambdas ${LAMBDAS:-0 0.05 0.2} \
    --output_dir "$L" --eval_dataset knowing-adapt \
    --train_args "--world_seed $SEED --base_model $K/model --index $K/bm25 $V2" \
    --eval_args "--world_seed $SEED --index $K/bm25 --gate_max_passage_words 40"
arms=(--arm nr="$K/claims/adapt/nr" --arm ar="$K/claims/adapt/ar" --arm supervised="$K/claims/adapt/adapt-llm")
for lam in 0 0.05 0.2; do
    [ -f "$L/lambda_$lam/eval/metrics.json" ] && arms+=(--arm "lambda_$lam=$L/lambda_$lam/eval")
done
python bench/experiments/grpo_arms.py "${arms[@]}" --out "$L/arms.md"
