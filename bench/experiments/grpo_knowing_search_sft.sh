#!/usr/bin/env bash
# The search warm start, then multi-turn GRPO from it, on the knowing model (docs/knowing_world.md, "The search warm
# start"), for one world seed, after UNTIL=claim1 bash bench/experiments/knowing_claims.sh <seed>:
#   OMP_NUM_THREADS=1 bash bench/experiments/grpo_knowing_search_sft.sh 0      # then: ... 1
# STAGES="sft" runs the warm start and its evaluation only, STAGES="rl" GRPO from a finished warm start and its
# evaluation only (default: both). Every step resumes (GRPO from its checkpoints).
# INFORMATION="retrieved": the warm start's <information> blocks are the index's top 3 for the question, the gold passage
# among them (docs/knowing_world.md, "The search warm start on retrieved passages"), in claims/search_sft_retrieved.
# RL_NAME (default grpo) names the GRPO folder under the warm start's; GRPO_FLAGS are added to its command line, e.g.
# RL_NAME=grpo_q4s30 GRPO_FLAGS="--questions_per_step 4 --max_steps 30 --save_steps 5" (the session-sized run).
set -euo pipefail
SEED=${1:-0}
K=runs/knowing/seed$SEED
S=$K/claims/search_sft
SFT_EXTRA=()
if [ "${INFORMATION:-gold}" = retrieved ]; then
    S=$K/claims/search_sft_retrieved
    SFT_EXTRA=(--information retrieved --index "$K/bm25" --information_top_k 3 --max_length 512)
fi
# Search-R1's protocol as the GRPO search recipe runs it: BM25 top 3, at most 2 searches, 32 tokens a turn, 40 words
EVAL=(--method search-r1 --dataset knowing-adapt --world_seed "$SEED" --index "$K/bm25" --top_k 3 --max_rounds 2
      --max_new_tokens 32 --search_max_passage_words 40 --show_progress false)
STAGES=" ${STAGES:-sft rl} "
if [[ $STAGES == *" sft "* ]]; then
    python training/search_sft.py bench/experiments/knowing_search_sft.yaml --world_seed "$SEED" \
        --base_model "$K/model" --data_dir "$S/data" --output_dir "$S/model" "${SFT_EXTRA[@]}"
    python -m inference.commands.evaluate --model "$S/model" "${EVAL[@]}" --output_dir "$S/eval"
fi
arms=(--arm nr="$K/claims/adapt/nr" --arm ar="$K/claims/adapt/ar" --arm supervised="$K/claims/adapt/adapt-llm"
      --arm search_sft="$S/eval")
OUT=$S/arms.md
if [[ $STAGES == *" rl "* ]]; then
    RL=$S/${RL_NAME:-grpo}
    read -r -a grpo_flags <<< "${GRPO_FLAGS:-}"
    python training/grpo.py bench/experiments/grpo_knowing_search.yaml --world_seed "$SEED" --base_model "$K/model" \
        --index "$K/bm25" --init_adapter "$S/model" --output_dir "$RL" "${grpo_flags[@]}"
    python -m inference.commands.evaluate --model "$RL" "${EVAL[@]}" --output_dir "$RL/eval"
    arms+=(--arm search_sft_rl="$RL/eval" --ref search_sft)
    OUT=$RL/arms.md
fi
python bench/experiments/grpo_arms.py "${arms[@]}" --queries --out "$OUT"
