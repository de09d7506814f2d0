#!/usr/bin/env bash
# Automatic placement against every hand placement: on a GPT with a
# 4096-token vocabulary (6 blocks; the LM head and the loss weigh like
# blocks), measures `pipeline.layout: auto` beside `balance_by: params` and
# `balance_by: flops` and, on 2 ranks, beside every contiguous two-stage
# cut of the model at its parts (E, t, L). ROUNDS rounds alternate the
# runs; medians count. Prints a table and the ratios the goals name: auto
# against the better of params and flops (goal <= 1.00 within noise) and,
# on 2 ranks, against the fastest cut (goal <= 1.03).
#   bench/placement_check.sh [RANKS] [ROUNDS] [--set KEY=VALUE ...]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/stamp.sh
stamp "$0 $*"
ranks=${1:-2}
rounds=${2:-3}
shift $(( $# < 2 ? $# : 2 ))
baton=${BATON:-build/baton}
config=configs/gpt_fortunes_1f1b.yaml
sets=(--set pipeline.ranks="$ranks" --set data.dataset=synthetic_tokens --set data.vocab=4096
      --set model.vocab=4096 --set model.blocks=6)
while [ $# -gt 0 ]; do sets+=("$1" "$2"); shift 2; done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# The profile: as many processes as the run has ranks (with more than the
# CPUs, it is fitted to runs of the config's pipeline sharing them).
np=$ranks; [ "$ranks" -lt 2 ] && np=2

mpirun -np "$np" "$baton" profile "$config" "${sets[@]}" --out "$out/profile.json" < /dev/null > /dev/null
# What auto picks, as validate prints it.
auto=$("$baton" validate "$config" "${sets[@]}" --set pipeline.layout=auto --profile "$out/profile.json" |
       sed -n 's/^placement (auto): \([^ ]*\) .*/\1/p')
# One line a case: its label, then the --set values, tab-separated.
T=$'\t'
cases=("auto ($auto)${T}pipeline.layout=auto${T}pipeline.profile=$out/profile.json"
       "balance_by: params${T}pipeline.balance_by=params"
       "balance_by: flops${T}pipeline.balance_by=flops")
if [ "$ranks" -eq 2 ]; then
  for k in 0 1 2 3 4 5 6; do
    first="E"; [ "$k" -eq 1 ] && first="E,t"; [ "$k" -gt 1 ] && first="E,t*$k"
    rest=$((6 - k)); second="L"; [ "$rest" -eq 1 ] && second="t,L"; [ "$rest" -gt 1 ] && second="t*$rest,L"
    cases+=("cut $first|$second${T}pipeline.layout=$first|$second")
  done
fi
printf '%s\n' "${cases[@]}" > "$out/cases.txt"
for r in $(seq "$rounds"); do
  i=0
  while IFS=$'\t' read -r -a fields; do
    i=$((i + 1))
    args=()
    for kv in "${fields[@]:1}"; do args+=(--set "$kv"); done
    mpirun -np "$ranks" "$baton" bench "$config" "${sets[@]}" "${args[@]}" --steps 8 --warmup 2 \
      --json "$out/c$i.r$r.json" < /dev/null > /dev/null 2>&1 || echo "placement_check: ${fields[0]} failed" >&2
  done < "$out/cases.txt"
done

/usr/bin/python3 - "$out" "$rounds" "$ranks" <<'PY'
import json, statistics, sys
out, rounds, ranks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
labels = [l.rstrip("\n").split("\t")[0] for l in open(out + "/cases.txt")]
med = {}
print(f"GPT, vocabulary 4096, 6 blocks, {ranks} ranks, 1f1b m8 selective (median of {rounds} rounds):")
for i, label in enumerate(labels, 1):
    t = []
    for r in range(1, rounds + 1):
        try:
            t.append(json.load(open(f"{out}/c{i}.r{r}.json"))["step_time_median_s"] * 1e3)
        except (OSError, ValueError):
            pass
    med[label] = statistics.median(t) if t else float("nan")
    print(f"  {label:<26} {med[label]:8.1f} ms  (rounds: {', '.join(f'{x:.1f}' for x in t)})")
auto = med[labels[0]]
hand = min(med["balance_by: params"], med["balance_by: flops"])
print(f"auto / better of params and flops = {auto / hand:.3f} (goal <= 1.00 within noise)")
cuts = [v for k, v in med.items() if k.startswith("cut ")]
if cuts:
    print(f"auto / fastest two-stage cut = {auto / min(cuts):.3f} (goal <= 1.03)")
PY
