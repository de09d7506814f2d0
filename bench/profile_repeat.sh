#!/usr/bin/env bash
# Is a profile the same when taken twice? `baton profile` of CONFIG on RANKS
# processes (as tune_check and the adaptive plans take it), twice, PAUSE
# seconds apart; then, per microbatch size, each top-level layer's forward
# and backward from the two (the median and the largest difference, and
# the layer it is), the sum of every layer's, and what `baton tune` picks
# from each profile with its predicted step, and what `baton validate
# --profile` predicts for the config's own plan from each. The goal: the
# same costs within 5%.
#   bench/profile_repeat.sh [CONFIG] [RANKS] [PAUSE] [MEMORY_BYTES] [--set KEY=VALUE ...]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/stamp.sh
stamp "$0 $*"
config=${1:-configs/gpt_fortunes_1f1b.yaml}
ranks=${2:-2}
pause=${3:-60}
memory=${4:-1e9}
shift $(( $# < 4 ? $# : 4 ))
sets=(--set pipeline.ranks="$ranks")
while [ $# -gt 0 ]; do sets+=("$1" "$2"); shift 2; done
baton=${BATON:-build/baton}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
np=$ranks; [ "$ranks" -lt 2 ] && np=2
for i in 1 2; do
  [ "$i" = 2 ] && sleep "$pause"
  mpirun -np "$np" "$baton" profile "$config" "${sets[@]}" --out "$out/p$i.json" < /dev/null > "$out/p$i.txt"
  "$baton" tune "$config" "${sets[@]}" --memory-bytes "$memory" --top 1 --profile "$out/p$i.json" > "$out/t$i.txt"
  "$baton" validate "$config" "${sets[@]}" --profile "$out/p$i.json" > "$out/v$i.txt"
done
/usr/bin/python3 - "$out" <<'PY'
import json, re, statistics, sys
out = sys.argv[1]
a, b = (json.load(open(f"{out}/p{i}.json")) for i in (1, 2))
print()
print("| rows | layers | median difference | largest difference (layer, cost, first / second) | sum of the layers |")
print("| --- | --- | --- | --- | --- |")
for ra, rb in zip(a["rows"], b["rows"]):
    diffs, worst = [], None
    for i, (la, lb) in enumerate(zip(ra["layers"], rb["layers"])):
        for key in ("forward_s", "backward_s"):
            d = abs(la[key] / lb[key] - 1)
            diffs.append(d)
            if worst is None or d > worst[0]:
                worst = (d, i, key, la[key], lb[key])
    total = [sum(l["forward_s"] + l["backward_s"] for l in r["layers"]) for r in (ra, rb)]
    d, i, key, x, y = worst
    print(f"| {ra['rows']} | {len(ra['layers'])} | {statistics.median(diffs):.1%} | {d:.1%} ({i}, "
          f"{key[:-2]}, {x * 1e6:.1f} / {y * 1e6:.1f} us) | {abs(total[0] / total[1] - 1):.1%} |")
def pick(i):
    for line in open(f"{out}/t{i}.txt"):
        f = line.split()
        if f and f[0] == "1":
            return " ".join(f[1:6]), float(f[7]), f[11]
    return "none", float("nan"), ""
def valid(i):
    m = re.search(r"step ([0-9.]+) ms", open(f"{out}/v{i}.txt").read())
    return float(m.group(1)) if m else float("nan")
print()
for i in (1, 2):
    p = pick(i)
    print(f"- profile {i}: tune picks {p[0]} {p[2]}, predicted {p[1]:.2f} ms; the config's own plan predicted "
          f"{valid(i):.2f} ms")
print(f"- the config's own plan: the two predictions differ by {abs(valid(1) / valid(2) - 1):.1%}")
PY
