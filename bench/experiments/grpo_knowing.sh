#!/usr/bin/env bash
# Retrieval decisions learned by reinforcement on the knowing model (docs/knowing_world.md, the GRPO addendum), for
# one world seed, after bench/experiments/knowing_claims.sh <seed> (the knowing model, its BM25 index and claim 1's
# NR / AR / ADAPT-LLM runs):
#   OMP_NUM_THREADS=1 bash bench/experiments/grpo_knowing.sh 0      # then: ... grpo_knowing.sh 1
# Every step resumes: rerun the same line after an interruption.
set -euo pipefail
SEED=${1:-0}
K=runs/knowing/seed$SEED
G=$K/claims/grpo
EVAL=(--dataset knowing-adapt --world_seed "$SEED" --index "$K/bm25" --gate_max_passage_words 40 --show_progress false)
# RL gate (from the knowing model; one decision in four set to <RET>), SFT then RL (from claim 1's adapter), control
python training/grpo.py bench/experiments/grpo_knowing_gate.yaml --world_seed "$SEED" --base_model "$K/model" \
    --index "$K/bm25" --output_dir "$G/gate"
python training/grpo.py bench/experiments/grpo_knowing_gate.yaml --world_seed "$SEED" --base_model "$K/model" \
    --index "$K/bm25" --init_adapter "$K/claims/adapt/model" --explore_ret 0 --output_dir "$G/sft_rl"
python training/grpo.py bench/experiments/grpo_knowing_gate.yaml --world_seed "$SEED" --base_model "$K/model" \
    --index "$K/bm25" --retriever random --output_dir "$G/gate_random"
for arm in gate sft_rl gate_random; do
    python -m inference.commands.evaluate --method adapt-llm --model "$G/$arm" "${EVAL[@]}" --output_dir "$G/$arm/eval"
done
# NR and AR answered by the knowing model itself: the answerer the RL gate's rollout uses after <RET> (claim 1's AR
# answers with the ADAPT-LLM adapter, trained on context answers; docs/knowing_world.md)
for m in nr ar; do
    python -m inference.commands.evaluate --method "$m" --model "$K/model" "${EVAL[@]}" --output_dir "$G/${m}_base"
done
# Multi-turn search (exploratory: no claim), evaluated as the method search-r1 (the query it writes is searched)
python training/grpo.py bench/experiments/grpo_knowing_search.yaml --world_seed "$SEED" --base_model "$K/model" \
    --index "$K/bm25" --output_dir "$G/search"
python -m inference.commands.evaluate --method search-r1 --model "$G/search" "${EVAL[@]}" --output_dir "$G/search/eval"
python bench/experiments/grpo_arms.py --arm nr="$K/claims/adapt/nr" --arm ar="$K/claims/adapt/ar" \
    --arm nr_base="$G/nr_base" --arm ar_base="$G/ar_base" --arm supervised="$K/claims/adapt/adapt-llm" --arm rl="$G/gate/eval" --arm sft_rl="$G/sft_rl/eval" \
    --arm rl_random_retriever="$G/gate_random/eval" --arm search="$G/search/eval" --out "$G/arms.md"
