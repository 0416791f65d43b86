#!/usr/bin/env bash
# The knowing model and its four claims for one world seed (docs/knowing_world.md):
#   bash bench/experiments/knowing_claims.sh 0      # then: bash bench/experiments/knowing_claims.sh 1
# Extra arguments go to the knowing-model build (e.g. --n_trained 9 --train_wordings 1 on a loaded machine).
# Every step resumes: rerun the same line after an interruption. UNTIL=claim1 stops after claim 1's NR / AR / ADAPT-LLM
# evaluations (what the GRPO designs, bench/experiments/grpo_knowing_v2.sh, start from).
set -euo pipefail
SEED=${1:-0}
shift || true
K=runs/knowing/seed$SEED
python -m training.knowing_model --output_dir "$K" --seed "$SEED" "$@"
python -m retrieval_adapt.build_index --corpus "$K/sets/corpus.jsonl" --kind bm25 --output_dir "$K/bm25"
# Claim 1: ADAPT-LLM (Algorithm 1 with the knowing model, LoRA gate), then NR / AR / ADAPT-LLM on the eval half
python training/adapt_llm.py bench/experiments/knowing_adapt.yaml --world_seed "$SEED" --base_model "$K/model" \
    --data_dir "$K/claims/adapt/data" --output_dir "$K/claims/adapt/model"
for m in nr ar adapt-llm; do
    python -m inference.commands.evaluate --method "$m" --model "$K/claims/adapt/model" --dataset knowing-adapt \
        --world_seed "$SEED" --index "$K/bm25" --gate_max_passage_words 40 --show_progress false \
        --output_dir "$K/claims/adapt/$m"
done
[ "${UNTIL:-}" = claim1 ] && exit 0
# Claim 2: DRAGIN and the five baselines on the bridges; claim 3: Iter-RetGen T=1 vs T=2 (second hop unknown)
python -m inference.commands.sweep bench/experiments/knowing_six_methods.yaml --world_seed "$SEED" --model "$K/model" \
    --index "$K/bm25" --output_dir "$K/claims/dynamic"
python -m inference.commands.sweep bench/experiments/knowing_iter_retgen.yaml --world_seed "$SEED" --model "$K/model" \
    --index "$K/bm25" --output_dir "$K/claims/iter_retgen"
# Claim 4: retrieval adaptation (knowing model as generator and teacher), recall@5 adapted vs base
python -m retrieval_adapt.build_index --corpus "$K/sets/corpus.jsonl" --kind dense --encoder minilm --output_dir "$K/minilm"
python -m training.distill_set bench/experiments/knowing_distill_data.yaml --world_seed "$SEED" \
    --index "$K/minilm" --model "$K/model" --reranker_model "$K/model" --output_dir "$K/claims/distill/data"
python training/distill_retriever.py retrieval_adapt/configs/distill_world_cpu.yaml --data_dir "$K/claims/distill/data" \
    --index "$K/minilm" --output_dir "$K/claims/distill/model"
python -m training.evaluate_adapted bench/experiments/knowing_distill_eval.yaml --world_seed "$SEED" \
    --index "$K/minilm" --model "$K/model" --output_dir "$K/claims/distill/eval" \
    --query_encoder "$K/claims/distill/model/query_encoder"
python -m inference.commands.knowing_claims "$K/claims" --output_file "$K/claims/claims.md"
python -m inference.commands.report "$K/claims" --output_dir "$K/report"
