#!/usr/bin/env bash
# Where the fourth design loses (docs/knowing_world.md, "The fourth design rerun, and where it loses"), for one world
# seed, after `ARMS=sft_rl_v4 bash bench/experiments/grpo_knowing_v2.sh <seed>`: each gate's own answers from memory
# and after a retrieval (the fourth design's adapter and claim 1's supervised adapter) on the evaluation and the
# tuning half, then the decision split, the operating curves and the threshold chosen on the tuning half
# (claims/grpo/cause/operating.md, .png).
#   bash bench/experiments/grpo_knowing_cause.sh 0      # then: ... grpo_knowing_cause.sh 1
# Every evaluation resumes: rerun the same line after an interruption.
set -euo pipefail
SEED=${1:-0}
K=runs/knowing/seed$SEED
G=$K/claims/grpo
C=$G/cause
RL=$G/sft_rl_v4
SUP=$K/claims/adapt/model
COMMON=(--world_seed "$SEED" --index "$K/bm25" --gate_max_passage_words 40 --show_progress false)
BAN=(--gate_context_ban_ret true)
evaluate() {  # METHOD MODEL DATASET OUT [extra...]
    local method=$1 model=$2 dataset=$3 out=$4
    shift 4
    python -m inference.commands.evaluate --method "$method" --model "$model" --dataset "$dataset" "${COMMON[@]}" "$@" \
        --output_dir "$out"
}
MEMORY=(--gate_rule threshold --ret_threshold 1.0)  # never retrieves: each gate's own answer from memory
# the evaluation half: each gate's own answers (the gate runs and the supervised adapter's AR with the ban exist)
evaluate adapt-llm "$RL" knowing-adapt "$C/eval/rl/memory" "${MEMORY[@]}"
evaluate ar "$RL" knowing-adapt "$C/eval/rl/ar" "${BAN[@]}"
evaluate adapt-llm "$SUP" knowing-adapt "$C/eval/supervised/memory" "${MEMORY[@]}"
# the tuning half: both gates and their own answers
for gate in rl supervised; do
    model=$([ $gate = rl ] && echo "$RL" || echo "$SUP")
    evaluate adapt-llm "$model" knowing-adapt-tune "$C/tune/$gate/gate" "${BAN[@]}"
    evaluate adapt-llm "$model" knowing-adapt-tune "$C/tune/$gate/memory" "${MEMORY[@]}"
    evaluate ar "$model" knowing-adapt-tune "$C/tune/$gate/ar" "${BAN[@]}"
done
python bench/experiments/gate_operating.py \
    --gate rl="$RL/eval,$C/eval/rl/memory,$C/eval/rl/ar" \
    --gate supervised="$G/supervised_ban,$C/eval/supervised/memory,$G/ar_ban" \
    --tune rl="$C/tune/rl/gate,$C/tune/rl/memory,$C/tune/rl/ar" \
    --tune supervised="$C/tune/supervised/gate,$C/tune/supervised/memory,$C/tune/supervised/ar" \
    --ar "$K/claims/adapt/ar" --nr "$K/claims/adapt/nr" --out "$C/operating.md" --plot "$C/operating.png"
