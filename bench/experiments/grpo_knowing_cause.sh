#!/usr/bin/env bash
# Where the fourth design loses (docs/knowing_world.md, "The fourth design rerun, and where it loses"), for one world
# seed, after `ARMS=sft_rl_v4 bash bench/experiments/grpo_knowing_v2.sh <seed>`: each gate's own NR and AR answers (the
# fourth design's adapter and claim 1's supervised adapter) on the evaluation and the tuning half, then the decision
# split, the operating curves and the threshold chosen on the tuning half (claims/grpo/cause/operating.md, .png).
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
# the evaluation half: the fourth design's own answers (its gate run, claim 1's and the ban references exist)
evaluate nr "$RL" knowing-adapt "$C/eval/rl/nr"
evaluate ar "$RL" knowing-adapt "$C/eval/rl/ar" "${BAN[@]}"
# the tuning half: both gates and their own answers
for gate in rl supervised; do
    model=$([ $gate = rl ] && echo "$RL" || echo "$SUP")
    evaluate adapt-llm "$model" knowing-adapt-tune "$C/tune/$gate/gate" "${BAN[@]}"
    evaluate nr "$model" knowing-adapt-tune "$C/tune/$gate/nr"
    evaluate ar "$model" knowing-adapt-tune "$C/tune/$gate/ar" "${BAN[@]}"
done
python bench/experiments/gate_operating.py \
    --gate rl="$RL/eval,$C/eval/rl/nr,$C/eval/rl/ar" \
    --gate supervised="$G/supervised_ban,$K/claims/adapt/nr,$G/ar_ban" \
    --tune rl="$C/tune/rl/gate,$C/tune/rl/nr,$C/tune/rl/ar" \
    --tune supervised="$C/tune/supervised/gate,$C/tune/supervised/nr,$C/tune/supervised/ar" \
    --ar "$K/claims/adapt/ar" --nr "$K/claims/adapt/nr" --out "$C/operating.md" --plot "$C/operating.png"
