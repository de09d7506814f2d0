#!/usr/bin/env bash
# The price of a pure pipeline's snapshots (recovery.on_lost_rank: replace
# with data_parallel.size 1: every N steps each rank's state is copied to
# the next rank). PAIRS pairs of runs of CONFIG on P ranks (one replica),
# STEPS steps, under mpirun with the settings that keep the survivors: one
# with replace (recovery.snapshot_every EVERY, default auto) and one with
# stop (no copy), pipeline.adapt off in both, taken in turn. Prints, with
# the stamp, per pair the mean step of each over steps 11..STEPS (a mean,
# not a median: the copy falls on one step in N), their ratio (the goal is
# at most 1.05), and the interval and copy the run said.
#   bench/snapshot_cost.sh [P] [STEPS] [PAIRS] [CONFIG] [EVERY]
#   (default 2 200 3 configs/gpt_fortunes_1f1b.yaml auto)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/stamp.sh
p=${1:-2}
steps=${2:-200}
pairs=${3:-3}
config=${4:-configs/gpt_fortunes_1f1b.yaml}
every=${5:-auto}
baton=${BATON:-build/baton}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
run() {  # NAME MODE [--set ...]
  local name=$1 mode=$2
  shift 2
  timeout 900 mpirun --mca orte_enable_recovery 1 --mca orte_abort_on_non_zero_status 0 -np "$p" \
    "$baton" train "$config" --set pipeline.ranks="$p" --set data_parallel.size=1 --set pipeline.adapt=off \
    --set train.steps="$steps" --set log.every_steps=1 --set log.progress=false --set recovery.on_lost_rank="$mode" \
    --set log.metrics="$out/$name.jsonl" --set 'log.weights=""' "$@" > "$out/$name.log" 2>&1
}
stamp "$0 $p $steps $pairs $config $every"
echo
echo "| pair | mean step, stop (ms) | mean step, replace with snapshots (ms) | ratio (goal <= 1.05) | snapshots |"
echo "|---|---|---|---|---|"
for i in $(seq 1 "$pairs"); do
  run "stop$i" stop
  run "snap$i" replace --set recovery.snapshot_every="$every"
  python3 - "$out" "$i" <<'PY'
import json, re, statistics, sys
out, i = sys.argv[1:]
def mean_step(name):
    rows = [json.loads(l) for l in open(f"{out}/{name}.jsonl")]
    return statistics.mean(r["step_time_s"] for r in rows if "loss" in r and r["step"] > 10)
stop, snap = mean_step(f"stop{i}"), mean_step(f"snap{i}")
said = re.search(r"snapshots of each rank's state on the next rank (every \d+ steps?) \(([^)]*)\)",
                 open(f"{out}/snap{i}.log").read())
print(f"| {i} | {stop * 1e3:.2f} | {snap * 1e3:.2f} | {snap / stop:.3f} | "
      f"{said.group(1) + ': ' + said.group(2) if said else '(not said)'} |")
PY
done
