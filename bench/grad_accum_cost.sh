#!/usr/bin/env bash
# The price of summing gradients in double (train.grad_accum_dtype: fp64,
# what pipeline.adapt: full and recovery.on_lost_rank: shrink choose by
# default): each backward's float gradients folded into doubles, and the
# replicas' sums and the tied sum moving doubles. PAIRS pairs of runs of
# CONFIG on P pipeline ranks x D replicas, STEPS steps, pipeline.adapt off,
# one with fp32 and one with fp64, taken in turn. Prints, with the stamp,
# per pair the median step of each over steps 11..STEPS, their ratio, and
# whether the two runs' final weights differ (they should: fp64 rounds
# once where fp32 rounds at every sum).
#   bench/grad_accum_cost.sh [P] [D] [STEPS] [PAIRS] [CONFIG]
#   (default 1 2 100 3 configs/gpt_fortunes_1f1b.yaml)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/stamp.sh
p=${1:-1}
d=${2:-2}
steps=${3:-100}
pairs=${4:-3}
config=${5:-configs/gpt_fortunes_1f1b.yaml}
baton=${BATON:-build/baton}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
run() {  # NAME DTYPE
  timeout 900 mpirun -np "$((p * d))" "$baton" train "$config" --set pipeline.ranks="$p" --set data_parallel.size="$d" \
    --set pipeline.adapt=off --set train.steps="$steps" --set log.every_steps=1 --set log.progress=false \
    --set train.grad_accum_dtype="$2" --set log.metrics="$out/$1.jsonl" --set log.weights="$out/$1.safetensors" \
    > "$out/$1.log" 2>&1 < /dev/null || { cat "$out/$1.log" >&2; exit 1; }
}
stamp "$0 $p $d $steps $pairs $config"
echo
echo "| pair | median step, fp32 (ms) | median step, fp64 (ms) | ratio | weights differ |"
echo "|---|---|---|---|---|"
for i in $(seq 1 "$pairs"); do
  run "fp32-$i" fp32
  run "fp64-$i" fp64
  differ=yes
  cmp -s "$out/fp32-$i.safetensors" "$out/fp64-$i.safetensors" && differ=no
  python3 - "$out" "$i" "$differ" <<'PY'
import json, statistics, sys
out, i, differ = sys.argv[1:]
def median_step(name):
    rows = [json.loads(l) for l in open(f"{out}/{name}.jsonl")]
    return statistics.median(r["step_time_s"] for r in rows if "loss" in r and r["step"] > 10)
a, b = median_step(f"fp32-{i}"), median_step(f"fp64-{i}")
print(f"| {i} | {a * 1e3:.2f} | {b * 1e3:.2f} | {b / a:.3f} | {differ} |")
PY
done
