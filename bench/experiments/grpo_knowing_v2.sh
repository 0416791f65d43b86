#!/usr/bin/env bash
# SFT then RL, second design (docs/knowing_world.md, "SFT then RL, second design"), for one world seed, after claim
# 1's ADAPT-LLM runs (bench/experiments/knowing_claims.sh <seed>, or its first steps up to the NR / AR / ADAPT-LLM
# evaluations): the registered gate recipe from claim 1's adapter with unscaled advantages and the <RET> row at the
# LoRA rate, its random-retriever control, and the arms table.
#   OMP_NUM_THREADS=1 bash bench/experiments/grpo_knowing_v2.sh 0      # then: ... grpo_knowing_v2.sh 1
# ARMS="sft_rl_v2" runs one arm only (the table then lists the arms that have run). Every step resumes.
# ARMS="sft_rl_v3": the third design (the same recipe with <RET> banned from the context prompt's answer, in the
# rollout and at evaluation; docs/knowing_world.md, "SFT then RL, third design"), added to the same table.
# ARMS="sft_rl_v4": the fourth design (the third at λ 0.2; docs/knowing_world.md, "SFT then RL, fourth design").
# Before this script: UNTIL=claim1 bash bench/experiments/knowing_claims.sh <seed>.
set -euo pipefail
SEED=${1:-0}
K=runs/knowing/seed$SEED
G=$K/claims/grpo
V2=(--init_adapter "$K/claims/adapt/model" --explore_ret 0 --scale_rewards none --ret_token_learning_rate 1e-4)
EVAL=(--dataset knowing-adapt --world_seed "$SEED" --index "$K/bm25" --gate_max_passage_words 40 --show_progress false)
for arm in ${ARMS:-sft_rl_v2 sft_rl_v2_random}; do
    extra=() eval_extra=()
    [ "$arm" = sft_rl_v2_random ] && extra=(--retriever random)
    [ "$arm" = sft_rl_v3 ] && extra=(--context_ban_ret true) && eval_extra=(--gate_context_ban_ret true)
    [ "$arm" = sft_rl_v4 ] && extra=(--context_ban_ret true --retrieval_penalty 0.2) \
        && eval_extra=(--gate_context_ban_ret true)
    python training/grpo.py bench/experiments/grpo_knowing_gate.yaml --world_seed "$SEED" --base_model "$K/model" \
        --index "$K/bm25" "${V2[@]}" "${extra[@]}" --output_dir "$G/$arm"
    python -m inference.commands.evaluate --method adapt-llm --model "$G/$arm" "${EVAL[@]}" "${eval_extra[@]}" \
        --output_dir "$G/$arm/eval"
done
if [[ " ${ARMS:-} " == *" sft_rl_v3 "* || " ${ARMS:-} " == *" sft_rl_v4 "* ]]; then
    # the third and fourth designs' references: AR and the supervised gate with the same ban
    for m in ar adapt-llm; do
        out=$G/$([ $m = ar ] && echo ar_ban || echo supervised_ban)
        python -m inference.commands.evaluate --method $m --model "$K/claims/adapt/model" "${EVAL[@]}" \
            --gate_context_ban_ret true --output_dir "$out"
    done
fi
arms=(--arm nr="$K/claims/adapt/nr" --arm ar="$K/claims/adapt/ar" --arm supervised="$K/claims/adapt/adapt-llm")
for ref in ar_ban supervised_ban; do
    [ -f "$G/$ref/metrics.json" ] && arms+=(--arm "$ref=$G/$ref")
done
for arm in sft_rl_v2 sft_rl_v2_random sft_rl_v3 sft_rl_v4; do
    [ -f "$G/$arm/eval/metrics.json" ] && arms+=(--arm "$arm=$G/$arm/eval")
done
python bench/experiments/grpo_arms.py "${arms[@]}" --out "$G/arms_v2.md"
