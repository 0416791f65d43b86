#!/usr/bin/env bash
# DRAGIN and the five baselines with the embedded SmolLM2 (chat prompt style): tune thresholds on a tuning slice,
# then run all six methods on a held-out slice and print both tables (bench/experiments/table.py).
#   bash bench/experiments/dragin_hotpotqa.sh hotpotqa [SHARED_DATA_DIR]   # tune on 0..TUNE_N-1 (<400), test 400-499
#   bash bench/experiments/dragin_hotpotqa.sh world                          # world two-hop: tune 0-49, test 50-149
set -euo pipefail
WHICH=${1:-hotpotqa}
D=${2:-../shared/data}
TUNE_N=${TUNE_N:-64}
if [ "$WHICH" = hotpotqa ]; then
  R=runs/hotpotqa; DATA=$D/hotpotqa/dev_subsampled.jsonl; TEST_START=400; TEST_N=100
  mkdir -p $R
  [ -f $R/corpus.jsonl ] || python -m data_builders.corpus ircot:$DATA flashrag_jsonl:$D/wiki_corpus/sample_data.jsonl \
      title_text_json:$D/wiki_corpus/2wikimultihopqa_corpus.json -o $R/corpus.jsonl
  [ -f $R/bm25/meta.json ] || python -m retrieval_adapt.build_index --corpus $R/corpus.jsonl --kind bm25 --out $R/bm25
  INDEX="--index $R/bm25"
else
  R=runs/world; DATA=world-two-hop; TEST_START=50; TEST_N=100; TUNE_N=${TUNE_N_WORLD:-50}; INDEX=""
fi
common="--dataset $DATA $INDEX --max_new_tokens ${MAX_NEW:-48} --batch_size 16 --show_progress false"
tune() { python -m inference.evaluate $common --start 0 --limit $TUNE_N --output_dir $R/tune/$1 "${@:2}" > /dev/null; }
THETAS=${THETAS:-0.3 0.8 1.5}; FLARE_THRESHOLDS=${FLARE_THRESHOLDS:-0.2 0.5}; FL_LENGTHS=${FL_LENGTHS:-16 32}
# A grid of one value is used as given: no tuning run is spent on it.
many() { [ $# -gt 1 ]; }
if many $THETAS; then for t in $THETAS; do tune dragin-theta$t --method dragin --theta $t; done; fi
if many $FLARE_THRESHOLDS; then for t in $FLARE_THRESHOLDS; do tune flare-$t --method flare --flare_threshold $t; done; fi
if many $FL_LENGTHS; then for n in $FL_LENGTHS; do tune fl-rag-$n --method fl-rag --fixed_length $n; done; fi
python bench/experiments/table.py $(for t in $THETAS; do echo $R/tune/dragin-theta$t; done) \
    $(for t in $FLARE_THRESHOLDS; do echo $R/tune/flare-$t; done) $(for n in $FL_LENGTHS; do echo $R/tune/fl-rag-$n; done) \
    | tee $R/tune_table.md
best() { python bench/experiments/table.py --best f1 "${@/#/$R/tune/}"; }
pick() { local prefix=$1; shift; if many "$@"; then best "${@/#/$prefix}" | sed "s/^$prefix//"; else echo "$1"; fi; }
THETA=$(pick dragin-theta $THETAS); FT=$(pick flare- $FLARE_THRESHOLDS); FL=$(pick fl-rag- $FL_LENGTHS)
echo "chosen on the tuning slice by F1: theta=$THETA flare_threshold=$FT fixed_length=$FL"
test_run() { python -m inference.evaluate $common --start $TEST_START --limit $TEST_N --output_dir $R/test/$1 "${@:2}" > /dev/null; }
test_run wo-rag --method wo-rag
test_run sr-rag --method sr-rag
test_run fl-rag --method fl-rag --fixed_length $FL
test_run fs-rag --method fs-rag
test_run flare --method flare --flare_threshold $FT
test_run dragin --method dragin --theta $THETA
python bench/experiments/table.py $R/test/wo-rag $R/test/sr-rag $R/test/fl-rag $R/test/fs-rag $R/test/flare \
    $R/test/dragin | tee $R/test_table.md
