#!/usr/bin/env bash
# The answerer's own uncertainty as the gate's score (docs/knowing_world.md, "The answerer's own uncertainty as the
# gate's score"), for one world seed, after bench/experiments/grpo_knowing_cause.sh <seed>: claim 1's supervised
# adapter and the fourth design's adapter answer both halves again (<RET> banned), and gate_operating's curve and
# tuning-half threshold are read with 1 − min p and max entropy in place of p(<RET>) (claims/grpo/cause/uncertainty.md).
#   bash bench/experiments/grpo_knowing_uncertainty.sh 0      # then: ... 1
# The re-answers are kept beside the table (claims/grpo/cause/uncertainty/), so a rerun reads them.
set -euo pipefail
SEED=${1:-0}
K=runs/knowing/seed$SEED
G=$K/claims/grpo
C=$G/cause
python bench/experiments/gate_uncertainty.py \
    --gate supervised="$K/claims/adapt/model,$G/supervised_ban,$C/eval/supervised/memory,$G/ar_ban" \
    --gate rl="$G/sft_rl_v4,$G/sft_rl_v4/eval,$C/eval/rl/memory,$C/eval/rl/ar" \
    --tune supervised="$C/tune/supervised/gate,$C/tune/supervised/memory,$C/tune/supervised/ar" \
    --tune rl="$C/tune/rl/gate,$C/tune/rl/memory,$C/tune/rl/ar" \
    --ar "$K/claims/adapt/ar" --out "$C/uncertainty.md"
