#!/usr/bin/env bash
# Claim 2 on the reasoning variant with tuned thresholds, for one world seed (after knowing_reasoning.sh SEED):
#   bash bench/experiments/knowing_tuned_reasoning.sh 0
# Tunes DRAGIN's θ, FLARE's threshold and FL-RAG's interval on the tuning half (best F1; ties: fewer retrievals per
# question), runs each tuned method on the evaluation half, and reports claim 2 with the untuned wo-RAG, SR-RAG and
# FS-RAG runs of knowing_reasoning.sh. Every step resumes.
set -euo pipefail
SEED=${1:-0}
R=runs/knowing-reasoning/seed$SEED
export ADAPTIVE_RAG_KNOWING_DIR=runs/knowing-reasoning
python -m inference.commands.sweep bench/experiments/knowing_tune_reasoning.yaml --world_seed "$SEED" \
    --model "$R/model" --index "$R/bm25" --output_dir "$R/tune"
python - "$R/tune/summary.csv" > "$R/tune/best.txt" <<'PY'
import csv
import sys

best = {}
for row in csv.DictReader(open(sys.argv[1], encoding="utf-8")):
    key = (float(row["f1"]), -float(row["retrievals_per_question"]))
    if row["method"] not in best or key > best[row["method"]][0]:
        best[row["method"]] = (key, row["knobs"])
for method, (_, knobs) in sorted(best.items()):
    pairs = [kv.strip().split("=") for kv in knobs.replace(";", ",").split(",") if "=" in kv]
    print(method, " ".join(f"--{k} {v}" for k, v in pairs))
PY
cat "$R/tune/best.txt"
while read -r method flags; do
    # shellcheck disable=SC2086  # the flags are words
    python -m inference.commands.evaluate --method "$method" $flags --dataset knowing-bridge --world_seed "$SEED" \
        --model "$R/model" --index "$R/bm25" --prompt_style paper --demos world --num_demos 1 --max_new_tokens 64 \
        --batch_size 16 --show_progress false --output_dir "$R/tuned/method=$method"
done < "$R/tune/best.txt"
python -m inference.commands.knowing_claims "$R/claims/dynamic/method=wo-rag" "$R/claims/dynamic/method=sr-rag" \
    "$R/claims/dynamic/method=fs-rag" "$R/tuned" --output_file "$R/claims_tuned.md"
