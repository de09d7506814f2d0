#!/usr/bin/env bash
# Recovery inside the job (recovery.on_lost_rank: shrink) against RUNS
# SIGKILLs of a random rank at a random action (seeded: SEED): each run is
# the tiny MLP as 2 replicas of a 2-rank or a 4-rank pipeline, 1F1B or
# ZB-H1, 100 steps with a checkpoint every 10, under mpirun with the
# settings that keep the survivors; the kill falls at a random step in
# 10..90 on a random rank, in one of its schedule's actions (F, B; F, I, W)
# or while a checkpoint is written (after the rank's shard, before the
# manifest). Prints, with the stamp, one row a run: the layout, schedule,
# rank, step and action, the exit code, whether the run went on (one
# recovery line, every step once in the metrics), the time from the notice
# to the next finished step, the final weights' largest difference from
# the uninterrupted run of the same layout and schedule, and the wall time;
# then how many of the runs recovered.
#   bench/recovery_sweep.sh [RUNS] [SEED]     (default 20 1)
#   CONFIG=configs/gpt_fortunes_1f1b.yaml bench/recovery_sweep.sh ...  (another model)
#   MODE=replace bench/recovery_sweep.sh ...  (recovery.on_lost_rank: replace:
#     a new rank in the lost one's place; the weights should be the
#     uninterrupted run's bit for bit, a difference of 0)
#   MODE=replace REPLICAS=1 bench/recovery_sweep.sh ...  (a pure pipeline:
#     the new rank's state from the next rank's snapshot, the steps since
#     replayed; recovery.snapshot_every: auto)
#   MODE=replace ZERO=1 bench/recovery_sweep.sh ...  (replicas under ZeRO 1-3:
#     the new rank's state, its shards, from the next replica's snapshot;
#     with ZERO=2 a kill may fall in a REDUCE_GRAD too, with 3 in an UNSHARD)
#   MODE=replace KILLS=2 bench/recovery_sweep.sh ...  (two losses a run: the
#     first at a step in 10..80, a second of another rank 10 to 80 steps
#     later; each recovered: two recovery lines and rows)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/stamp.sh
runs=${1:-20}
seed=${2:-1}
baton=${BATON:-build/baton}
mode=${MODE:-shrink}
kills=${KILLS:-1}
config=${CONFIG:-tests/mpi/tiny.yaml}
replicas=${REPLICAS:-2}
zero=()
[ -n "${ZERO:-}" ] && zero=(--set data_parallel.zero="$ZERO")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# Open MPI's shared-memory segments in this run's folder: a killed rank
# never removes its own, and stale ones left in /dev/shm can hang a later
# job that draws the same job number.
export OMPI_MCA_btl_vader_backing_directory="$out"
run() {  # NAME P SCHEDULE [ENV...]
  local name=$1 p=$2 schedule=$3
  shift 3
  rm -rf "$out/ck-$name"
  env "$@" timeout 300 mpirun --mca orte_enable_recovery 1 --mca orte_abort_on_non_zero_status 0 \
    -np $(( p * replicas )) "$baton" train "$config" --set pipeline.ranks="$p" --set data_parallel.size="$replicas" \
    --set pipeline.schedule="$schedule" --set train.steps=100 --set log.every_steps=1 "${zero[@]}" \
    --set recovery.on_lost_rank="$mode" --set checkpoint.dir="$out/ck-$name" --set checkpoint.every_steps=10 \
    --set log.metrics="$out/$name.jsonl" --set log.weights="$out/$name.safetensors" > "$out/$name.log" 2>&1
}
stamp "MODE=$mode REPLICAS=$replicas${ZERO:+ ZERO=$ZERO}${KILLS:+ KILLS=$KILLS} CONFIG=$config $0 $runs $seed"
echo
for p in 2 4; do
  for schedule in 1f1b zb_h1; do run "healthy-$p-$schedule" "$p" "$schedule"; done
done
echo "| run | ranks x replicas | schedule | rank killed | step | action | exit | went on | notice to the next finished step (s) | weights: largest difference from the uninterrupted run | wall (s) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
RANDOM=$seed
recovered=0
for i in $(seq 1 "$runs"); do
  p=$(( RANDOM % 2 ? 4 : 2 ))
  schedule=1f1b  # (no subshell: it would reseed RANDOM, and the seed would not repeat the runs)
  [ $(( RANDOM % 2 )) -eq 1 ] && schedule=zb_h1
  rank=$(( RANDOM % (p * replicas) ))
  if [ "$schedule" = 1f1b ]; then actions=(F B checkpoint); else actions=(F I W checkpoint); fi
  # ZeRO 2 and 3's collectives are actions of the schedule too.
  [ "${ZERO:-0}" -ge 2 ] && actions+=(REDUCE_GRAD)
  [ "${ZERO:-0}" -ge 3 ] && actions+=(UNSHARD)
  action=${actions[$(( RANDOM % ${#actions[@]} ))]}
  if [ "$kills" -eq 1 ]; then step=$(( 10 + RANDOM % 81 )); else step=$(( 10 + RANDOM % 71 )); fi
  [ "$action" = checkpoint ] && step=$(( (step / 10) * 10 ))
  fault="$rank:$step:$action:kill"
  if [ "$kills" -eq 2 ]; then
    # Another rank, 10 to 80 steps later (at most step 90).
    rank2=$(( (rank + 1 + RANDOM % (p * replicas - 1)) % (p * replicas) ))
    action2=${actions[$(( RANDOM % ${#actions[@]} ))]}
    step2=$(( step + 10 + RANDOM % (81 - step) ))
    [ "$action2" = checkpoint ] && step2=$(( ((step2 + 9) / 10) * 10 > 90 ? 90 : ((step2 + 9) / 10) * 10 ))
    fault="$fault,$rank2:$step2:$action2:kill"
    rank="$rank, $rank2"
    step="$step, $step2"
    action="$action, $action2"
  fi
  start=$(date +%s.%N)
  set +e
  run "kill$i" "$p" "$schedule" BATON_FAULT="$fault"
  code=$?
  set -e
  wall=$(echo "$(date +%s.%N) - $start" | bc)
  if python3 - "$out" "$i" "$p" "$schedule" "$rank" "$step" "$action" "$code" "$wall" "$replicas" "$kills" <<'EOF'
import json, sys
sys.path.insert(0, "bench")
from weights_diff import largest_difference
out, i, p, schedule, rank, step, action, code, wall, replicas, kills = sys.argv[1:]
kills = int(kills)
ok, seconds, diff = False, "-", "-"
try:
    rows = [json.loads(l) for l in open(f"{out}/kill{i}.jsonl")]
    steps = [r["step"] for r in rows if "loss" in r]  # training rows (not the GPT's validation rows)
    events = [r for r in rows if r.get("event") == "recovered"]
    log = open(f"{out}/kill{i}.log").read()
    ok = code == "0" and steps == list(range(1, 101)) and len(events) == kills and log.count("baton: lost rank") == kills
    if events:
        seconds = ", ".join(f"{e['seconds']:.3f}" for e in events)
    diff = f"{largest_difference(f'{out}/healthy-{p}-{schedule}.safetensors', f'{out}/kill{i}.safetensors'):.2e}"
except Exception as e:
    diff = f"({type(e).__name__})"
print(f"| {i} | {p} x {replicas} | {schedule} | {rank} | {step} | {action} | {code} | {ok} | {seconds} | {diff} | {float(wall):.1f} |")
sys.exit(0 if ok else 1)
EOF
  then
    recovered=$(( recovered + 1 ))
  else  # its log kept, for a look
    mkdir -p out/recovery_sweep && cp "$out/kill$i.log" "out/recovery_sweep/kill$i.log"
    echo "(run $i's log: out/recovery_sweep/kill$i.log)"
  fi
done
echo
echo "Recovered: $recovered of $runs."
