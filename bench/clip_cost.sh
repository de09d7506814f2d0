#!/usr/bin/env bash
# What train.clip_grad_norm costs a step: the fortunes GPT on 2 ranks,
# STEPS steps, each schedule run without a clip and with one (the norm's
# reduction, its broadcast, the scale), in PAIRS alternating pairs; a
# metrics row every 50 steps gives each window's mean step (the first
# window, with the start-up, left out; without a clip the norm is taken
# on logged steps only, 1 in 50). Prints the stamp and a row a schedule:
# the median window step without and with the clip and their ratio (the
# median of the pairs' ratios); and beside them the simulator's price of
# the same step without and with the clip, from a profile of the same 2
# ranks taken first (`baton simulate --profile`: the optimizer's step and
# the clip's pass as the profile measured them, the norm's exchange at its
# message latency); and the clip's own time in the clipped runs, as their
# metrics rows give it (`clip_s`, rank 0's pass, exchange and scaling,
# over `step_time_s`: the median over the windows), beside the share the
# simulator gives it.
#   bench/clip_cost.sh [STEPS] [PAIRS] [SCHEDULES]   (default 200 3 "1f1b zb_h1 zbv dualpipev")
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/stamp.sh
steps=${1:-200}
pairs=${2:-3}
schedules=${3:-1f1b zb_h1 zbv dualpipev}
baton=${BATON:-build/baton}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
stamp bench/clip_cost.sh "$@"
config=configs/gpt_fortunes_1f1b.yaml
mpirun -np 2 "$baton" profile "$config" --set pipeline.ranks=2 --out "$out/profile.json" >/dev/null
predict() {  # schedule clip: the simulator's step in ms
  "$baton" simulate "$config" --set pipeline.ranks=2 --set pipeline.schedule="$1" --set train.clip_grad_norm="$2" \
    --profile "$out/profile.json" | sed -n 's/^step \([0-9.]*\) ms.*/\1/p'
}
echo "| schedule | step, no clip (ms) | step, clip (ms) | clip / no clip | predicted no clip (ms) | predicted clip (ms) | predicted clip / no clip | the clip in the run (ms) | its share of the step |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for schedule in $schedules; do
  for k in $(seq "$pairs"); do
    for clip in 0 1.0; do
      mpirun -np 2 "$baton" train "$config" --set pipeline.ranks=2 \
        --set pipeline.schedule="$schedule" --set train.steps="$steps" --set log.every_steps=50 \
        --set log.progress=false --set pipeline.adapt=off --set train.clip_grad_norm=$clip \
        --set log.metrics="$out/$schedule-$clip-$k.jsonl" --set 'log.weights=""' >/dev/null
    done
  done
  /usr/bin/python3 - "$out" "$schedule" "$pairs" "$(predict "$schedule" 0)" "$(predict "$schedule" 1.0)" <<'PY'
import json, statistics, sys
out, schedule, pairs = sys.argv[1], sys.argv[2], int(sys.argv[3])
predicted_plain, predicted_clip = float(sys.argv[4]), float(sys.argv[5])
def window(clip, k):
    rows = [json.loads(l) for l in open(f"{out}/{schedule}-{clip}-{k}.jsonl") if '"loss"' in l]
    return statistics.median(r["step_time_s"] for r in rows[1:])
plain = [window("0", k) for k in range(1, pairs + 1)]
clip = [window("1.0", k) for k in range(1, pairs + 1)]
ratio = statistics.median(c / p for c, p in zip(clip, plain))
windows = [r for k in range(1, pairs + 1)  # each run's windows but its first
           for r in [json.loads(l) for l in open(f"{out}/{schedule}-1.0-{k}.jsonl") if '"loss"' in l][1:]]
own = statistics.median(r["clip_s"] for r in windows)
share = statistics.median(r["clip_s"] / r["step_time_s"] for r in windows)
print(f"| {schedule} | {statistics.median(plain)*1e3:.2f} | {statistics.median(clip)*1e3:.2f} | {ratio:.3f} "
      f"| {predicted_plain:.2f} | {predicted_clip:.2f} | {predicted_clip / predicted_plain:.3f} "
      f"| {own*1e3:.3f} | {share*100:.2f}% |")
PY
done
