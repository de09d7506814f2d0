#!/usr/bin/env bash
# Recovery inside the job (recovery.on_lost_rank: shrink): D replicas of a
# P-rank pipeline of CONFIG (default the synthetic MLP) under mpirun with
# the settings that keep the survivors, STEPS steps. For each rank VICTIM
# listed, a run where it is SIGKILLed in a forward at step AT, against the
# uninterrupted run. Prints, with the stamp, per victim: the exit code, the
# time from the survivors' notice to the next finished step (the metrics'
# "recovered" row), the median step before the loss (steps AT-10..AT-1) and
# after it (steps AT+5..STEPS), the throughput after over before against
# the goal 0.95 x (D-1)/D, whether every step is in the metrics file once,
# and the final weights' largest difference from the uninterrupted run's.
#   bench/recovery_check.sh [P] [D] [STEPS] [AT] [CONFIG] [VICTIMS...]
#   (default 2 2 200 100 configs/synthetic_bench.yaml, victims 0 1 and the last)
#   MODE=replace bench/recovery_check.sh ...   (recovery.on_lost_rank: replace:
#     new ranks in the lost ones' places, so the goal is the throughput
#     before, 0.95, and the weights the uninterrupted run's, a difference of 0)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/stamp.sh
p=${1:-2}
d=${2:-2}
steps=${3:-200}
at=${4:-100}
config=${5:-configs/synthetic_bench.yaml}
shift $(( $# < 5 ? $# : 5 ))
victims=("$@")
[ ${#victims[@]} -eq 0 ] && victims=(0 1 $(( p * d - 1 )))
baton=${BATON:-build/baton}
mode=${MODE:-shrink}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# Open MPI's shared-memory segments in this run's folder: a killed rank
# never removes its own, and stale ones left in /dev/shm can hang a later
# job that draws the same job number.
export OMPI_MCA_btl_vader_backing_directory="$out"
run() {  # NAME [ENV...]
  local name=$1
  shift
  env "$@" timeout 600 mpirun --mca orte_enable_recovery 1 --mca orte_abort_on_non_zero_status 0 \
    -np $(( p * d )) "$baton" train "$config" --set pipeline.ranks="$p" --set data_parallel.size="$d" \
    --set train.steps="$steps" --set log.every_steps=1 --set recovery.on_lost_rank="$mode" \
    --set log.metrics="$out/$name.jsonl" --set log.weights="$out/$name.safetensors" > "$out/$name.log" 2>&1
}
stamp "MODE=$mode $0 $p $d $steps $at $config ${victims[*]}"
echo
run healthy
echo "| rank killed (step $at, F) | exit | notice to the next finished step (s) | step before (ms) | step after (ms) | throughput after / before | goal (shrink 0.95 x (D-1)/D, replace 0.95) | every step once | weights: largest difference from the uninterrupted run |"
echo "|---|---|---|---|---|---|---|---|---|"
for v in "${victims[@]}"; do
  set +e
  run "lost$v" BATON_FAULT="$v:$at:F:kill"
  code=$?
  set -e
  python3 - "$out" "$v" "$at" "$steps" "$d" "$code" "$mode" <<'EOF'
import json, statistics, sys
sys.path.insert(0, "bench")
from weights_diff import largest_difference
out, v, at, steps, d, code, mode = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]),
                                    sys.argv[6], sys.argv[7])
goal = 0.95 if mode == "replace" else 0.95 * (d - 1) / d
def rows(name):
    return [json.loads(l) for l in open(f"{out}/{name}.jsonl")]
r = rows(f"lost{v}")
train = [x for x in r if "event" not in x and "validation_loss" not in x]  # the steps' rows
steps_seen = [x["step"] for x in train]
event = [x for x in r if x.get("event") == "recovered"]
t = {x["step"]: x["step_time_s"] for x in train}
before = statistics.median(t[s] for s in range(at - 10, at))
after = statistics.median(t[s] for s in range(at + 5, steps + 1))
diff = largest_difference(f"{out}/healthy.safetensors", f"{out}/lost{v}.safetensors")
print(f"| {v} | {code} | {event[0]['seconds']:.3f} | {before * 1e3:.2f} | {after * 1e3:.2f} | "
      f"{before / after:.3f} | {goal:.3f} | {steps_seen == list(range(1, steps + 1))} | {diff:.2e} |")
EOF
done
