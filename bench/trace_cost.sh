#!/usr/bin/env bash
# What log.trace costs a run: the fortunes GPT on RANKS ranks (1F1B, and
# ZB-V), STEPS steps, every step's time in the metrics (log.every_steps:
# 1) and every EVERY-th step traced. A traced step's extra time (its
# recording, the gather at rank 0 and the file rewritten there) over the
# median untraced step's, spread over log.trace_every steps, is the cost
# of tracing 1 step in 100 (the default): extra / (100 x median step).
# Prints the stamp and a row a schedule: the median untraced and traced
# step, the extra, that cost, and the trace file's size.
#   bench/trace_cost.sh [STEPS] [EVERY] [RANKS]   (default 200 10 2)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/stamp.sh
steps=${1:-200}
every=${2:-10}
ranks=${3:-2}
baton=${BATON:-build/baton}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
stamp bench/trace_cost.sh "$@"
echo "| schedule | ranks | median step (ms) | median traced step (ms) | extra (ms) | cost at 1 in 100 | trace file |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for schedule in 1f1b zbv; do
  mpirun -np "$ranks" "$baton" train configs/gpt_fortunes_1f1b.yaml --set pipeline.ranks="$ranks" \
    --set pipeline.schedule=$schedule --set train.steps="$steps" --set log.every_steps=1 --set log.progress=false \
    --set pipeline.adapt=off --set log.trace="$out/$schedule.json" --set log.trace_every="$every" \
    --set log.metrics="$out/$schedule.jsonl" --set 'log.weights=""' >/dev/null
  /usr/bin/python3 - "$out/$schedule.jsonl" "$every" "$schedule" "$ranks" "$out/$schedule.json" <<'PY'
import json, os, statistics, sys
path, every, schedule, ranks, trace = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
rows = [json.loads(l) for l in open(path) if '"loss"' in l]
rows = rows[5:]  # the first steps hold the start-up
plain = [r["step_time_s"] for r in rows if r["step"] % every]
traced = [r["step_time_s"] for r in rows if r["step"] % every == 0]
m, t = statistics.median(plain), statistics.median(traced)
print(f"| {schedule} | {ranks} | {m*1e3:.2f} | {t*1e3:.2f} | {(t-m)*1e3:.2f} | {100*(t-m)/(100*m):.3f}% | "
      f"{os.path.getsize(trace)/1024:.0f} KiB, {len(traced)} steps |")
PY
done
