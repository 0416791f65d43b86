#!/usr/bin/env bash
# The trigger against the truth, for one world seed (docs/knowing_world.md, "The trigger against the truth"), after
# knowing_claims.sh SEED (it needs the knowing model and its BM25 index):
#   bash bench/experiments/knowing_trigger.sh 0
# 1. DRAGIN's signals without retrieval (θ out of reach), both profiles, both halves of the single-hop set: AUROC of
#    each answer's highest RIND score, word entropy and FLARE's signal against the recorded known/unknown label.
# 2. θ tuned on the tuning half (the θ that fire on 20-80% of its questions; the most accurate, ties: fewer
#    retrievals), then DRAGIN as a gate on the evaluation half against not retrieving and always retrieving.
# 3. (Diagnostic, added after the first run) the reference profile's trigger with the project's answer extraction:
#    no forced " So the answer is" continuation, answers scored as the other runs'.
# Every step resumes.
set -euo pipefail
SEED=${1:-0}
K=runs/knowing/seed$SEED
T=$K/claims/trigger
run() {  # run OUTPUT_DIR ARGS...: one evaluation, skipped when it has finished
    local out=$1
    shift
    [ -f "$out/metrics.json" ] && return 0
    python -m inference.commands.evaluate "$@" --model "$K/model" --index "$K/bm25" --world_seed "$SEED" \
        --max_new_tokens 32 --batch_size 16 --show_progress false --output_dir "$out"
}
tune_and_eval() {  # tune_and_eval NAME SIGNALS_RUN ARGS...: θ tuned on the tuning half, then one run on the evaluation half
    local name=$1 signals=$2
    shift 2
    local thetas best tuned=()
    thetas=$(python -m inference.commands.trigger_thresholds quantiles "$signals" --signal rind \
        --shares 0.2,0.35,0.5,0.65,0.8)
    for theta in $thetas; do
        run "$T/tune/$name/theta=$theta" --method dragin "$@" --theta "$theta" --dataset knowing-adapt-tune
        tuned+=("$T/tune/$name/theta=$theta")
    done
    best=$(python -m inference.commands.trigger_thresholds best "${tuned[@]}")
    echo "$name: θ $best (from $thetas)" | tee "$T/tune/$name/best.txt"
    local out=$T/eval/dragin-$name  # resuming must not keep an evaluation made with an earlier tuning's θ
    if [ -f "$out/config.yaml" ] && ! python -c 'import sys, yaml
sys.exit(float(yaml.safe_load(open(sys.argv[1]))["theta"]) != float(sys.argv[2]))' "$out/config.yaml" "$best"; then
        echo "$out was run with another θ than the tuning's $best: remove it and rerun" >&2
        exit 1
    fi
    run "$out" --method dragin "$@" --theta "$best" --dataset knowing-adapt
}
for profile in paper reference; do
    for half in adapt-tune adapt; do
        run "$T/signals/$half/$profile" --method dragin --dragin_profile "$profile" --theta 1e9 --keep_signals true \
            --dataset "knowing-$half"
    done
    tune_and_eval "$profile" "$T/signals/adapt-tune/$profile" --dragin_profile "$profile"
done
for method in wo-rag sr-rag; do
    run "$T/eval/$method" --method "$method" --dataset knowing-adapt
done
# the forced continuation does not change the signals of the answer before it: the reference run's signals serve
tune_and_eval reference-project "$T/signals/adapt-tune/reference" --dragin_profile reference \
    --answer_extraction project
python -m inference.commands.knowing_claims "$T/signals/adapt" "$T/eval" --output_file "$T/claims.md"
