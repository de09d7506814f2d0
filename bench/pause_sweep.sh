#!/usr/bin/env bash
# A rank paused, not killed, against RUNS drawn at random (seeded: SEED):
# each run is the tiny MLP as 2 replicas of a 2-rank or a 4-rank pipeline,
# 1F1B or ZB-H1, 100 steps with a checkpoint every 10, under mpirun with
# the settings that keep the survivors, recovery.on_lost_rank drawn from
# stop, shrink and replace (or MODE); one rank (0 included) is stopped
# whole (SIGSTOP, BATON_FAULT pause=SECONDS) for 2 to 10 s at a random step
# in 10..90, in one of its schedule's actions (F, B; F, I, W), in a
# checkpoint's write, or in the survivors' agreement itself (another rank
# of its replica killed at that step, the paused one stopped as it joins
# the agreement). Each run must: leave the right exit record (0 for shrink
# and replace, 75 for stop), end within 5 s of it (however long the pause),
# print the paused rank's one "excluded from the job" line, leave no
# flight record and no process; under shrink and replace hold every step
# once with one "recovered" row and end with the uninterrupted run's bytes;
# under stop leave the checkpoint it names, which resumed ends with them.
# Prints, with the stamp, one row a run, then how many held.
#   bench/pause_sweep.sh [RUNS] [SEED]     (default 20 1)
#   MODE=shrink bench/pause_sweep.sh ...   (one mode only)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/stamp.sh
runs=${1:-20}
seed=${2:-1}
baton=${BATON:-build/baton}
config=${CONFIG:-tests/mpi/tiny.yaml}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_backing_directory="$out"
run() {  # NAME MODE P SCHEDULE [ARGS...] (BATON_FAULT and BATON_EXIT_FILE from the environment)
  local name=$1 mode=$2 p=$3 schedule=$4
  shift 4
  timeout 300 mpirun --mca orte_enable_recovery 1 --mca orte_abort_on_non_zero_status 0 \
    -np $(( p * 2 )) "$baton" train "$config" --set pipeline.ranks="$p" --set data_parallel.size=2 \
    --set pipeline.schedule="$schedule" --set train.steps=100 --set log.every_steps=1 \
    --set recovery.on_lost_rank="$mode" --set checkpoint.dir="$out/ck-$name" --set checkpoint.every_steps=10 \
    --set log.metrics="$out/$name.jsonl" --set log.weights="$out/$name.safetensors" "$@" >> "$out/$name.log" 2>&1
}
stamp "MODE=${MODE:-any} CONFIG=$config $0 $runs $seed"
echo
echo "| run | mode | ranks x replicas | schedule | rank paused | step | where | pause (s) | exit record | record to the job's end (s) | held | weights: largest difference from the uninterrupted run |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
RANDOM=$seed
held=0
modes=(stop shrink replace)
for i in $(seq 1 "$runs"); do
  mode=${MODE:-${modes[$(( RANDOM % 3 ))]}}
  p=$(( RANDOM % 2 ? 4 : 2 ))
  schedule=1f1b  # (no subshell: it would reseed RANDOM)
  [ $(( RANDOM % 2 )) -eq 1 ] && schedule=zb_h1
  rank=$(( RANDOM % (p * 2) ))
  if [ "$schedule" = 1f1b ]; then places=(F B checkpoint agreement); else places=(F I W checkpoint agreement); fi
  where=${places[$(( RANDOM % ${#places[@]} ))]}
  step=$(( 10 + RANDOM % 81 ))
  [ "$where" = checkpoint ] && step=$(( (step / 10) * 10 ))
  pause=$(( 2 + RANDOM % 9 ))
  if [ "$where" = agreement ]; then
    # Another rank of its replica (world rank w is replica w % 2) killed in
    # an F at that step; the paused one stops as it joins the agreement.
    other=$(( (rank + 2 * (1 + RANDOM % (p - 1))) % (p * 2) ))
    fault="$other:$step:F:kill,$rank:$step:recovery:pause=$pause"
  else
    fault="$rank:$step:$where:pause=$pause"
  fi
  healthy="healthy-$mode-$p-$schedule"
  [ -f "$out/$healthy.safetensors" ] || run "$healthy" "$mode" "$p" "$schedule"
  rm -rf "$out/ck-run$i"
  set +e
  BATON_EXIT_FILE="$out/run$i.exit" BATON_FAULT="$fault" run "run$i" "$mode" "$p" "$schedule"
  end=$(date +%s.%N)
  left=$(pgrep -f "^$baton train .*run$i.jsonl" | wc -l)
  resumed=""
  if [ "$mode" = stop ]; then
    BATON_EXIT_FILE="$out/run$i.resumed.exit" run "run$i" "$mode" "$p" "$schedule" --resume auto
    resumed=$?
  fi
  set -e
  if python3 - "$out" "$i" "$mode" "$p" "$schedule" "$rank" "$step" "$where" "$pause" "$end" "$left" "$resumed" \
      "$healthy" <<'EOF'
import glob, json, os, sys
sys.path.insert(0, "bench")
from weights_diff import largest_difference
out, i, mode, p, schedule, rank, step, where, pause, end, left, resumed, healthy = sys.argv[1:]
ok, code, after, diff, why = False, "-", "-", "-", []
try:
    record = open(f"{out}/run{i}.exit").read().split("\n")
    code = record[0]
    after = float(end) - os.path.getmtime(f"{out}/run{i}.exit")
    log = open(f"{out}/run{i}.log").read()
    want = "75" if mode == "stop" else "0"
    if code != want: why.append(f"exit record {code}")
    if after > 5: why.append("the job ended late")
    if log.count(f"baton: rank {rank} (pid ") != 1 or log.count("excluded from the job in epoch 1") != 1:
        why.append("no one excluded line")
    if glob.glob(f"{out}/flight-rank-*"): why.append("a flight record")
    if left != "0": why.append("a process left")
    rows = [json.loads(l) for l in open(f"{out}/run{i}.jsonl")]
    steps = [r["step"] for r in rows if "loss" in r]
    if mode == "stop":
        if resumed != "0": why.append(f"the resume exited {resumed}")
    else:
        events = [r for r in rows if r.get("event") == "recovered"]
        if steps != list(range(1, 101)): why.append("steps not once each")
        if len(events) != 1: why.append(f"{len(events)} recovered rows")
    d = largest_difference(f"{out}/{healthy}.safetensors", f"{out}/run{i}.safetensors")
    diff = f"{d:.2e}"
    if d != 0: why.append("weights differ")
    ok = not why
except Exception as e:
    why.append(f"{type(e).__name__}: {e}")
after_text = f"{after:.2f}" if isinstance(after, float) else after
print(f"| {i} | {mode} | {p} x 2 | {schedule} | {rank} | {step} | {where} | {pause} | {code} | {after_text} | "
      f"{'yes' if ok else 'NO: ' + ', '.join(why)} | {diff} |")
sys.exit(0 if ok else 1)
EOF
  then
    held=$(( held + 1 ))
  else
    mkdir -p out/pause_sweep && cp "$out/run$i.log" "out/pause_sweep/run$i.log"
    echo "(run $i's log: out/pause_sweep/run$i.log)"
  fi
done
echo
echo "Held: $held of $runs."
