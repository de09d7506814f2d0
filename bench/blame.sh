#!/usr/bin/env bash
# log.blame's goals: the GPT of tests/mpi/tiny_gpt.yaml (eight blocks, 1F1B,
# the plan held: pipeline.adapt off) on 2 and 4 ranks, STEPS steps, with
# BATON_FAULT slowing one rank 1.5x and 2x, or delaying one link by DELAY
# seconds a message, for steps 20-39. Per case: the affected steps where
# the culprit was named (goal >= 95%), where something else was, and the
# healthy steps (from step 8, after the judge's calibration) where anything
# was named (goal <= 1%). Then the cost on the fortunes GPT
# (configs/gpt_fortunes_1f1b.yaml, 100 steps): the median step with
# log.blame against without it, PAIRS alternating pairs of healthy runs
# (goal <= 1%).
#   bench/blame.sh [STEPS] [DELAY] [PAIRS]   (default 60 0.002 3)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/stamp.sh
steps=${1:-60}
delay=${2:-0.002}
pairs=${3:-3}
baton=${BATON:-build/baton}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
stamp bench/blame.sh "$@"
common=(--set model.blocks=8 --set model.hidden=64 --set model.seq_len=32 --set data.seq_len=32
        --set train.batch_size=32 --set train.steps="$steps" --set log.progress=false --set pipeline.adapt=off
        --set 'log.weights=""')
run() {  # ranks fault metrics [more --set ...]
  local ranks=$1 fault=$2 metrics=$3
  shift 3
  BATON_FAULT="$fault" mpirun -np "$ranks" "$baton" train tests/mpi/tiny_gpt.yaml --set pipeline.ranks="$ranks" \
    "${common[@]}" --set log.metrics="$metrics" "$@" >/dev/null 2>&1
}
echo "| ranks | fault (steps 20-39) | culprit | named | named otherwise | healthy steps named | healthy step (ms) |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for ranks in 2 4; do
  last=$((ranks - 1))
  for fault in "1:20:slow=1.5:until=40" "1:20:slow=2:until=40" "$((last - 1))>$last:20:delay=$delay:until=40"; do
    run "$ranks" "$fault" "$out/run.jsonl" --set log.blame=true --set log.every_steps=1
    /usr/bin/python3 - "$out/run.jsonl" "$ranks" "$fault" "$steps" <<'PY'
import json, statistics, sys
path, ranks, fault, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
rows = [json.loads(l) for l in open(path)]
late = {r["step"]: r["late"] for r in rows if r.get("event") == "late"}
times = [r["step_time_s"] for r in rows if "loss" in r and 8 <= r["step"] and not 20 <= r["step"] < 40]
if "slow" in fault:
    want = "rank " + fault.split(":")[0]
else:
    a, b = fault.split(":")[0].split(">")
    want = f"link {a}>{b}"
def who(l):
    if l["what"] == "rank": return f"rank {l['rank']}"
    if l["what"] == "link": return f"link {l['from']}>{l['to']}"
    return l["what"]
affected = range(20, 40)
named = sum(1 for s in affected if s in late and who(late[s]) == want)
other = sum(1 for s in affected if s in late and who(late[s]) != want)
healthy = [s for s in range(8, steps + 1) if not 20 <= s < 40]
wrong = sum(1 for s in healthy if s in late)
print(f"| {ranks} | {fault} | {want} | {named}/20 ({100*named/20:.0f}%) | {other} | "
      f"{wrong}/{len(healthy)} ({100*wrong/len(healthy):.1f}%) | {1e3*statistics.median(times):.1f} |")
PY
  done
done
echo
echo "| ranks | pair | median step, blame off (ms) | median step, blame on (ms) | on / off |"
echo "| --- | --- | --- | --- | --- |"
for ranks in 2 4; do
  for pair in $(seq 1 "$pairs"); do
    for blame in false true; do
      mpirun -np "$ranks" "$baton" train configs/gpt_fortunes_1f1b.yaml --set pipeline.ranks="$ranks" \
        --set train.steps=100 --set log.every_steps=1 --set log.progress=false --set pipeline.adapt=off \
        --set 'log.weights=""' --set log.blame=$blame --set log.metrics="$out/$blame.jsonl" >/dev/null 2>&1
    done
    /usr/bin/python3 - "$out/false.jsonl" "$out/true.jsonl" "$ranks" "$pair" <<'PY'
import json, statistics, sys
def med(p):
    return statistics.median(r["step_time_s"] for r in map(json.loads, open(p)) if "loss" in r and r["step"] >= 8)
off, on = med(sys.argv[1]), med(sys.argv[2])
print(f"| {sys.argv[3]} | {sys.argv[4]} | {off*1e3:.2f} | {on*1e3:.2f} | {on/off:.3f} |")
PY
  done
done
