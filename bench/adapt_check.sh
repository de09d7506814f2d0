#!/usr/bin/env bash
# Adaptive plans against a slow rank (pipeline.adapt): the fortunes GPT with
# 8 blocks, 1F1B, STEPS steps, rank 1 slowed FACTOR times (BATON_FAULT
# slow=) from step 21 to step STEPS - 20. For each rank count, three runs:
# healthy, slowed with adapt off, slowed with adapt on. Prints, with the
# stamp, T_h, T_s and T_a (the step's median over the slowed window of
# each run), the recovered share R = (T_s - T_a) / (T_s - T_h), the
# ceiling (the same share for the best placement the simulator finds under
# the measured speeds, from the first re-plan's predictions) and R over
# it, the steps from the onset to the move and from the recovery to the
# move back, the re-planning and moving times, the measured step after the
# move over its prediction, and whether the final weights are the healthy
# run's, byte for byte.
#   bench/adapt_check.sh [STEPS] [FACTOR] [RANKS...]     (default 120 2 2 4)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/stamp.sh
steps=${1:-120}
factor=${2:-2}
shift $(( $# < 2 ? $# : 2 ))
ranks=("$@")
[ ${#ranks[@]} -eq 0 ] && ranks=(2 4)
baton=${BATON:-build/baton}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
from=21
until=$(( steps - 20 ))
stamp "$0 $steps $factor ${ranks[*]}"
echo
echo "| ranks | T_h | T_s | T_a | R | ceiling | R / ceiling | moved after step (onset $from) | back after step (recovered $until) | re-plans | decide | move | measured / predicted after the move | weights = healthy run's |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for p in "${ranks[@]}"; do
  sets=(--set pipeline.ranks="$p" --set model.blocks=8 --set pipeline.checkpointing=none --set train.steps="$steps"
        --set log.every_steps=1 --set log.progress=false)
  run() {  # NAME [ENV...] -- [ARGS...]
    local name=$1; shift
    local env=()
    while [ "$1" != "--" ]; do env+=("$1"); shift; done
    shift
    env "${env[@]}" mpirun -np "$p" "$baton" train configs/gpt_fortunes_1f1b.yaml "${sets[@]}" \
      --set log.metrics="$out/$p-$name.jsonl" --set log.weights="$out/$p-$name.safetensors" "$@" \
      > "$out/$p-$name.log" 2>&1 < /dev/null || { cat "$out/$p-$name.log" >&2; exit 1; }
  }
  run healthy --
  run off "BATON_FAULT=1:$from:slow=$factor:until=$until" --
  run on "BATON_FAULT=1:$from:slow=$factor:until=$until" -- --set pipeline.adapt=on
  same=no
  cmp -s "$out/$p-healthy.safetensors" "$out/$p-on.safetensors" && same=yes
  python3 - "$out" "$p" "$from" "$until" "$same" <<'PY'
import json, statistics, sys
out, p, start, end, same = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
def rows(name):
    return [json.loads(l) for l in open(f"{out}/{p}-{name}.jsonl")]
def steps(name, a, b):
    return statistics.median(r["step_time_s"] for r in rows(name) if "step_time_s" in r and a <= r["step"] < b)
t_h, t_s, t_a = (steps(n, start, end) for n in ("healthy", "off", "on"))
r = (t_s - t_a) / (t_s - t_h)
replans = [r_ for r_ in rows("on") if r_.get("event") == "replan"]
ms = lambda s: f"{s * 1e3:.1f} ms"
cells = [p, ms(t_h), ms(t_s), ms(t_a), f"{r:.3f}"]
if replans:
    first = replans[0]
    ceiling = (first["predicted_step_before_s"] - first["predicted_step_after_s"]) / (
        first["predicted_step_before_s"] - first["predicted_step_healthy_s"])
    back = next((x for x in replans if x["step"] >= end), None)
    later = [x for x in replans if x["step"] > first["step"]]
    until = later[0]["step"] if later else end
    measured = steps("on", first["step"] + 3, min(until, end))
    cells += [f"{ceiling:.3f}", f"{r / ceiling:.3f}", f"{first['step']}", str(back["step"]) if back else "none",
              str(len(replans)), ms(max(x["decide_seconds"] for x in replans)),
              ms(max(x["move_seconds"] for x in replans)), f"{measured / first['predicted_step_after_s']:.3f}"]
else:
    cells += ["-", "-", "none", "none", "0", "-", "-", "-"]
cells.append(same)
print("| " + " | ".join(str(c) for c in cells) + " |")
PY
done
