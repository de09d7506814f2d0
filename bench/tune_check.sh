#!/usr/bin/env bash
# The tuner against measurement: profiles the config, runs `baton tune` on
# it, then `baton bench` on each of its top K feasible candidates (each at
# the placement the tuner found), on the config's own settings, and on the
# config with `balance_by: params` and `flops`. Reports each one's
# predicted and measured step (measured / predicted, goal within 1.10 both
# ways) and the pick's measured step against the best measured (goal: the
# pick within 5% of the best). Timings on a shared machine are noisy:
# ROUNDS rounds bench the candidates alternately and the medians count.
# The tuner prices a training step, the optimizer's step included; bench
# times a step to its gradients: measured / predicted reads that much
# (the profile's update, about 1-2% of a step here) below a training
# run's.
#   bench/tune_check.sh [CONFIG] [RANKS] [MEMORY_BYTES] [K] [ROUNDS] [--set KEY=VALUE ...]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/stamp.sh
stamp "$0 $*"
config=${1:-configs/synthetic_bench.yaml}
ranks=${2:-2}
memory=${3:-28e6}
top=${4:-5}
rounds=${5:-3}
shift $(( $# < 5 ? $# : 5 ))
sets=(--set pipeline.ranks="$ranks")
while [ $# -gt 0 ]; do sets+=("$1" "$2"); shift 2; done
baton=${BATON:-build/baton}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
np=$ranks; [ "$ranks" -lt 2 ] && np=2
# The profile: as many processes as the run has ranks, so that they share
# the machine as the run's ranks do (more ranks than cores: the profile then
# times each call by its CPU time, and the simulator shares the cores).
mpirun -np "$np" "$baton" profile "$config" "${sets[@]}" --out "$out/profile.json" < /dev/null > "$out/profile.txt"
# The ranking: rows "rank schedule m v policy slices zero step-ms bubble peak MiB layout fits".
"$baton" tune "$config" "${sets[@]}" --memory-bytes "$memory" --top 200 --profile "$out/profile.json" > "$out/tune.txt"
awk -v top="$top" '$NF == "yes" && $1 ~ /^[0-9]+$/ && n < top {print $2, $3, $4, $5, $6, $8, $12; n++}' "$out/tune.txt" > "$out/top.txt"
[ -s "$out/top.txt" ] || { cat "$out/tune.txt"; echo "tune_check: no feasible candidate" >&2; exit 1; }
echo "tune: $(grep -m1 '^searched' "$out/tune.txt")"

# The config's own settings, and balanced by params and by flops: what
# validate --profile predicts for each.
predict() {
  "$baton" validate "$config" "${sets[@]}" "$@" --profile "$out/profile.json" | sed -n 's/.*: step \([0-9.]*\) ms.*/\1/p'
}
# One line a case: kind, label, predicted ms, then its --set values; tab-separated.
T=$'\t'
lines=()
while read -r schedule m v policy slices predicted layout; do
  key=partition; case "$layout" in E*) key=layout;; esac
  sliced=""; [ "$slices" != 1 ] && sliced=" k$slices"
  lines+=("tuner${T}$schedule m$m v$v $policy$sliced $layout${T}$predicted${T}pipeline.schedule=$schedule${T}pipeline.microbatches=$m${T}pipeline.chunks=$v${T}pipeline.checkpointing=$policy${T}pipeline.seq_slices=$slices${T}pipeline.$key=$layout")
done < "$out/top.txt"
lines+=("config${T}the config's own settings${T}$(predict)")
for by in params flops; do
  lines+=("balance${T}balance_by: $by${T}$(predict --set pipeline.balance_by=$by)${T}pipeline.balance_by=$by")
done
printf '%s\n' "${lines[@]}" > "$out/cases.txt"

for r in $(seq "$rounds"); do
  i=0
  while IFS=$'\t' read -r -a fields; do
    i=$((i + 1))
    args=()
    for kv in "${fields[@]:3}"; do args+=(--set "$kv"); done
    mpirun -np "$ranks" "$baton" bench "$config" "${sets[@]}" "${args[@]}" --steps 10 --json "$out/c$i.r$r.json" \
      < /dev/null > /dev/null 2>&1 || echo "tune_check: bench of ${fields[1]} failed" >&2
  done < "$out/cases.txt"
done

/usr/bin/python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
rows = [l.rstrip("\n").split("\t") for l in open(out + "/cases.txt")]
measured = []
for i, (kind, label, predicted, *args) in enumerate(rows, 1):
    times = []
    for r in range(1, rounds + 1):
        try:
            times.append(json.load(open(f"{out}/c{i}.r{r}.json"))["step_time_median_s"])
        except (OSError, ValueError):
            pass
    med = statistics.median(times) if times else float("nan")
    measured.append(med)
    p = float(predicted) if predicted else float("nan")
    print(f"  {i:2}. {kind:<7} {label:<44} predicted {p:7.2f} ms  measured {med * 1e3:7.2f} ms  "
          f"measured/predicted {med * 1e3 / p:5.3f}  (rounds: {', '.join(f'{t * 1e3:.1f}' for t in times)})")
best = min(measured)
pick = measured[0]
print(f"the tuner's pick measures {pick * 1e3:.2f} ms, the best of all {len(rows)} measured {best * 1e3:.2f} ms: "
      f"pick / best = {pick / best:.3f} (goal <= 1.05)")
PY
