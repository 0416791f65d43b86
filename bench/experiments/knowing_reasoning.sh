#!/usr/bin/env bash
# The reasoning variant of the knowing model and claims 2 and 3 on it, for one world seed (docs/knowing_world.md):
#   bash bench/experiments/knowing_reasoning.sh 0     # after bash bench/experiments/knowing_claims.sh 0
# It continues the knowing model of runs/knowing/seed<SEED> on DRAGIN's few-shot format (trained facts only), labels
# it again, and runs the six dynamic methods and Iter-RetGen T=1/T=2 in the few-shot prompts. Every step resumes.
set -euo pipefail
SEED=${1:-0}
K=runs/knowing/seed$SEED
R=runs/knowing-reasoning/seed$SEED
export ADAPTIVE_RAG_KNOWING_DIR=runs/knowing-reasoning
python -m training.knowing_model --output_dir "$R" --seed "$SEED" --base_model "$K/model" --training_mix reasoning \
    --num_train_epochs 1.5
python -m retrieval_adapt.build_index --corpus "$R/sets/corpus.jsonl" --kind bm25 --output_dir "$R/bm25"
python -m inference.commands.sweep bench/experiments/knowing_six_methods_reasoning.yaml --world_seed "$SEED" \
    --model "$R/model" --index "$R/bm25" --output_dir "$R/claims/dynamic"
python -m inference.commands.sweep bench/experiments/knowing_iter_retgen_reasoning.yaml --world_seed "$SEED" \
    --model "$R/model" --index "$R/bm25" --output_dir "$R/claims/iter_retgen"
python -m inference.commands.knowing_claims "$R/claims" --output_file "$R/claims/claims.md"
python -m inference.commands.report "$R/claims" --output_dir "$R/report"
