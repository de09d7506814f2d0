#!/usr/bin/env bash
# The tuner against measurement: runs `baton tune` on a config, then
# `baton bench` on each of its top K feasible candidates, and reports the
# measured step of its pick against the best measured among them (goal:
# the pick within 5% of the best). Timings on a shared machine are noisy:
# ROUNDS rounds bench the candidates alternately and the medians count.
#   bench/tune_check.sh [CONFIG] [RANKS] [MEMORY_BYTES] [K] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
config=${1:-configs/synthetic_bench.yaml}
ranks=${2:-2}
memory=${3:-28e6}
top=${4:-5}
rounds=${5:-3}
baton=${BATON:-build/baton}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

# The ranking: rows "rank schedule m v policy step-ms bubble peak MiB fits".
"$baton" tune "$config" --set pipeline.ranks="$ranks" --memory-bytes "$memory" --top 50 > "$out/tune.txt"
awk '$NF == "yes" && $1 ~ /^[0-9]+$/ {print $2, $3, $4, $5, $6}' "$out/tune.txt" | head -n "$top" > "$out/top.txt"
[ -s "$out/top.txt" ] || { cat "$out/tune.txt"; echo "tune_check: no feasible candidate" >&2; exit 1; }
echo "tune: $(tail -n +1 "$out/tune.txt" | grep -m1 '^searched')"

for r in $(seq "$rounds"); do
  i=0
  while read -r schedule m v policy predicted; do
    i=$((i + 1))
    mpirun -np "$ranks" "$baton" bench "$config" --set pipeline.ranks="$ranks" --set pipeline.schedule="$schedule" \
      --set pipeline.microbatches="$m" --set pipeline.chunks="$v" --set pipeline.checkpointing="$policy" \
      --steps 10 --json "$out/c$i.r$r.json" < /dev/null > /dev/null 2>&1 || echo "tune_check: bench of $schedule m$m v$v $policy failed" >&2
  done < "$out/top.txt"
done

/usr/bin/python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
rows = [l.split() for l in open(out + "/top.txt")]
measured = []
for i, (schedule, m, v, policy, predicted) in enumerate(rows, 1):
    times = []
    for r in range(1, rounds + 1):
        try:
            times.append(json.load(open(f"{out}/c{i}.r{r}.json"))["step_time_median_s"])
        except (OSError, ValueError):
            pass
    med = statistics.median(times) if times else float("nan")
    measured.append(med)
    print(f"  {i}. {schedule:<16} m{m:<3} v{v:<2} {policy:<9} predicted {float(predicted):7.2f} ms  "
          f"measured {med * 1e3:7.2f} ms (rounds: {', '.join(f'{t * 1e3:.1f}' for t in times)})")
best = min(measured)
pick = measured[0]
print(f"the tuner's pick measures {pick * 1e3:.2f} ms, the best of its top {len(rows)} {best * 1e3:.2f} ms: "
      f"pick / best = {pick / best:.3f} (goal <= 1.05)")
PY
