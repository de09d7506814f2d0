#!/usr/bin/env bash
# Adaptive plans against a slow rank (pipeline.adapt): the fortunes GPT with
# 8 blocks, 1F1B, STEPS steps, rank 1 slowed FACTOR times (BATON_FAULT
# slow=) from step 21 to step STEPS - 20. For each rank count, three runs:
# healthy, slowed with adapt off, slowed with adapt on (and healthy with
# adapt on: what measuring costs, and that nothing moves). Prints, with the
# stamp, T_h, T_s and T_a (the step's median over the slowed window of
# each run), the recovered share R = (T_s - T_a) / (T_s - T_h), the
# ceiling (the same share for the best placement the simulator finds under
# the measured speeds, from the first re-plan's predictions) and R over
# it, the steps from the onset to the move and from the recovery to the
# move back, the re-planning and moving times, the measured step after the
# move over its prediction, and whether the final weights are the healthy
# run's, byte for byte.
# With WIRE=SECONDS, the link from rank 0 to rank 1 is late by SECONDS
# over the same window instead (BATON_FAULT 0>1:...:delay=), FACTOR unused.
# With REPLICAS=D, each run is D replicas of the pipeline (ranks x D
# processes, data_parallel.size D) and the slowed rank is pipeline rank 1
# of the last replica (world rank 2D - 1; with one rank a pipeline, the
# last replica's rank).
# With ADAPT=full, the adapting runs use pipeline.adapt: full (with
# replicas, the microbatches re-split between them too), and every run
# sums its gradients in double (train.grad_accum_dtype: fp64, what full
# chooses by default), so that the weights compare byte for byte; where
# they differ the largest difference is printed.
# With SVG=FILE, also draws the first rank count's three runs' step times
# over the steps (docs/guide/adaptive-plans.svg).
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
replicas=${REPLICAS:-1}
mode=${ADAPT:-on}
stamp "${WIRE:+WIRE=$WIRE }${REPLICAS:+REPLICAS=$REPLICAS }${ADAPT:+ADAPT=$ADAPT }$0 $steps $factor ${ranks[*]}"
echo
fault_for() {  # RANKS: the fault of a pipeline of RANKS ranks
  local slowed=$(( ($1 > 1 ? 1 : 0) * replicas + replicas - 1 ))
  if [ -n "${WIRE:-}" ]; then echo "0>1:$from:delay=$WIRE:until=$until"; else echo "$slowed:$from:slow=$factor:until=$until"; fi
}
for p in "${ranks[@]}"; do echo "Injected with $p ranks a pipeline: BATON_FAULT=$(fault_for "$p")"; done
echo
echo "| ranks | T_h | T_s | T_a | R | ceiling | R / ceiling | moved after step (onset $from) | back after step (recovered $until) | re-plans | decide | move | measured / predicted after the move | weights = healthy run's | healthy with adapt on: step, re-plans | late links at the first move | the first move's plan |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for p in "${ranks[@]}"; do
  fault=$(fault_for "$p")
  sets=(--set pipeline.ranks="$p" --set model.blocks=8 --set pipeline.checkpointing=none --set train.steps="$steps"
        --set log.every_steps=1 --set log.progress=false --set data_parallel.size="$replicas")
  [ "$mode" = full ] && sets+=(--set train.grad_accum_dtype=fp64)
  run() {  # NAME [ENV...] -- [ARGS...]
    local name=$1; shift
    local env=()
    while [ "$1" != "--" ]; do env+=("$1"); shift; done
    shift
    env "${env[@]}" mpirun -np "$((p * replicas))" "$baton" train configs/gpt_fortunes_1f1b.yaml "${sets[@]}" \
      --set log.metrics="$out/$p-$name.jsonl" --set log.weights="$out/$p-$name.safetensors" "$@" \
      > "$out/$p-$name.log" 2>&1 < /dev/null || { cat "$out/$p-$name.log" >&2; exit 1; }
  }
  run healthy -- --set pipeline.adapt=off
  run healthy-on -- --set pipeline.adapt="$mode"
  run off "BATON_FAULT=$fault" -- --set pipeline.adapt=off
  run on "BATON_FAULT=$fault" -- --set pipeline.adapt="$mode"
  same=no
  if cmp -s "$out/$p-healthy.safetensors" "$out/$p-on.safetensors"; then
    same=yes
  else
    same="no: largest difference $(python3 -c "import sys; sys.path.insert(0, 'bench'); from weights_diff import largest_difference; print(f'{largest_difference(sys.argv[1], sys.argv[2]):.2e}')" "$out/$p-healthy.safetensors" "$out/$p-on.safetensors")"
  fi
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
h_on = steps("healthy-on", start, end)
cells.append(f"{h_on / t_h:.3f} of T_h, {sum(1 for x in rows('healthy-on') if x.get('event') == 'replan')}")
if replans:
    cells.append(", ".join(f"{k} +{v * 1e3:.1f} ms" for k, v in replans[0].get("link_delays_s", {}).items()) or "none")
    shares = replans[0].get("microbatches")
    cells.append(f"{replans[0]['schedule']} {replans[0]['layout_after']}"
                 + (f", microbatches {'/'.join(map(str, shares))}" if shares else ""))
else:
    cells += ["-", "-"]
print("| " + " | ".join(str(c) for c in cells) + " |")
PY
  if [ -n "${SVG:-}" ] && [ "$p" = "${ranks[0]}" ]; then
    what="rank 1 slowed ${factor}x"
    [ -n "${WIRE:-}" ] && what="link 0>1 late by ${WIRE} s"
    python3 - "$out" "$p" "$from" "$until" "$what" > "$SVG.tmp" <<'PY'
import json, sys
out, p, start, end, factor = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
def rows(name):
    return [json.loads(l) for l in open(f"{out}/{p}-{name}.jsonl")]
runs = [("healthy", "#888888", "healthy"), ("off", "#d62728", f"{factor}, adapt: off"),
        ("on", "#1f77b4", f"{factor}, adapt: on")]
series = {n: [(r["step"], r["step_time_s"] * 1e3) for r in rows(n) if "step_time_s" in r and r["step"] > 2]
          for n, _, _ in runs}
last = max(s for pts in series.values() for s, _ in pts)
top = max(t for pts in series.values() for _, t in pts) * 1.1
W, H, L, B, T, R = 720, 360, 60, 40, 20, 20
x = lambda s: L + (s - 1) / (last - 1) * (W - L - R)
y = lambda t: H - B - t / top * (H - B - T)
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       f'<rect width="{W}" height="{H}" fill="white"/>',
       f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="black"/>',
       f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="black"/>']
for ms in range(0, int(top) + 1, 50):
    svg.append(f'<text x="{L - 6}" y="{y(ms) + 4:.1f}" text-anchor="end">{ms}</text>')
    svg.append(f'<line x1="{L}" y1="{y(ms):.1f}" x2="{W - R}" y2="{y(ms):.1f}" stroke="#eeeeee"/>')
for s in range(0, last + 1, 20):
    svg.append(f'<text x="{x(max(s, 1)):.1f}" y="{H - B + 16}" text-anchor="middle">{s}</text>')
for s, what in ((start, "slowdown starts"), (end, "rank recovers")):
    svg.append(f'<line x1="{x(s):.1f}" y1="{T}" x2="{x(s):.1f}" y2="{H - B}" stroke="#999999" stroke-dasharray="4 3"/>')
    svg.append(f'<text x="{x(s) + 4:.1f}" y="{T + 12}">{what}</text>')
for r in rows("on"):
    if r.get("event") == "replan":
        svg.append(f'<text x="{x(r["step"]):.1f}" y="{y(top) + 30}" text-anchor="middle" fill="#1f77b4">re-plan</text>')
for n, colour, _ in runs:
    pts = " ".join(f"{x(s):.1f},{y(t):.1f}" for s, t in series[n])
    svg.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
for i, (n, colour, label) in enumerate(runs):
    svg.append(f'<line x1="{L + 20}" y1="{H - B - 60 + 16 * i}" x2="{L + 44}" y2="{H - B - 60 + 16 * i}" stroke="{colour}" stroke-width="2"/>')
    svg.append(f'<text x="{L + 50}" y="{H - B - 56 + 16 * i}">{label}</text>')
svg.append(f'<text x="{(L + W - R) / 2}" y="{H - 6}" text-anchor="middle">step ({p} ranks, fortunes GPT with 8 blocks, 1F1B)</text>')
svg.append(f'<text x="14" y="{(T + H - B) / 2}" text-anchor="middle" transform="rotate(-90 14 {(T + H - B) / 2})">step time, ms</text>')
svg.append("</svg>")
print("\n".join(svg))
PY
    mv "$SVG.tmp" "$SVG"
  fi
done
