#!/usr/bin/env bash
# Packed documents against fixed windows: the fortunes GPT
# (configs/gpt_fortunes_1f1b.yaml's model) on P ranks (1F1B, one rank a
# core), on a synthetic JSON Lines set of DOCS documents whose lengths are
# log-normal with a median of an eighth of the budget BUDGET and a tail to
# the budget (as fine-tuning sets have), and on the fortunes corpus itself.
# Per set, ROUNDS rounds of: fixed windows of BUDGET tokens
# (data.packing: none), every document padded to the budget (pad: one a
# sample, the fixed-shape baseline), greedy and balanced packing, taken in
# turn. Prints, with the stamp, each run's median over steps 6..STEPS of
# the step time, the real tokens a step and real tokens a second
# (windows: every position is a token), and each run's ratio to greedy
# and to padded of the same round.
#   bench/packing.sh [P] [BUDGET] [STEPS] [ROUNDS] [DOCS]   (default 2 512 25 2 4000)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/stamp.sh
p=${1:-2}
budget=${2:-512}
steps=${3:-25}
rounds=${4:-2}
docs=${5:-4000}
baton=${BATON:-build/baton}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
python3 bench/lognormal_docs.py "$out/lognormal.jsonl" "$budget" "$docs"
run() {  # NAME DATA
  timeout 900 mpirun -np "$p" "$baton" train configs/gpt_fortunes_1f1b.yaml --set pipeline.ranks="$p" \
    --set pipeline.adapt=off --set pipeline.checkpointing=none --set "data=$2" --set model.seq_len="$budget" \
    --set train.steps="$steps" --set train.batch_size=16 --set pipeline.microbatches=8 --set log.every_steps=1 \
    --set log.progress=false --set log.metrics="$out/$1.jsonl" --set log.weights="$out/$1.safetensors" \
    > "$out/$1.log" 2>&1 < /dev/null || { cat "$out/$1.log" >&2; exit 1; }
}
stamp "$0 $p $budget $steps $rounds $docs"
echo
echo "| set | round | data | median step (ms) | real tokens a step | real tokens/s | vs greedy | vs padded |"
echo "|---|---|---|---|---|---|---|---|"
for set in lognormal fortunes; do
  if [ "$set" = lognormal ]; then base="dataset: jsonl, path: $out/lognormal.jsonl"; else base="dataset: fortunes, validation: false"; fi
  for i in $(seq 1 "$rounds"); do
    run "$set-windows-$i" "{$base, seq_len: $budget}"
    run "$set-padded-$i" "{$base, packing: pad, max_tokens: $budget}"
    run "$set-greedy-$i" "{$base, packing: greedy, max_tokens: $budget}"
    run "$set-balanced-$i" "{$base, packing: balanced, max_tokens: $budget}"
    python3 - "$out" "$set" "$i" "$budget" <<'PY'
import json, statistics, sys
out, name, i, budget = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
def measure(kind):
    rows = [json.loads(l) for l in open(f"{out}/{name}-{kind}-{i}.jsonl")]
    rows = [r for r in rows if "loss" in r and r["step"] > 5]
    step = statistics.median(r["step_time_s"] for r in rows)
    tokens = statistics.median(r.get("tokens", 16 * budget) for r in rows)
    return step, tokens, statistics.median(r.get("tokens", 16 * budget) / r["step_time_s"] for r in rows)
greedy, padded = measure("greedy")[2], measure("padded")[2]
for kind in ("windows", "padded", "greedy", "balanced"):
    step, tokens, rate = measure(kind)
    print(f"| {name} | {i} | {kind} | {step * 1e3:.1f} | {tokens:.0f} | {rate:.0f} | {rate / greedy:.3f} "
          f"| {rate / padded:.3f} |")
PY
  done
done
