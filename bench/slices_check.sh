#!/usr/bin/env bash
# Sequence slices (Seq1F1B) against whole sequences on the GPT of
# configs/gpt_fortunes_1f1b.yaml with 1024-token sequences:
#   1. activation memory per rank (ring slots, and the sequences' key and
#      value slots), as the plan allocates it (tests/executor/memory_test
#      asserts the heap equals it), for 1F1B and seq1f1b with k = 2, 4, 8
#      slices; the simulator's peak of the same slots (given their bytes);
#      and the unit-level simulator's peak in whole microbatches (M_B),
#      with each stage's key/value share (--kv-memory-share) and with the
#      slices only, next to the closed form (p + k - 1) / k (1F1B: p);
#   2. `baton bench` of 1F1B, of 1F1B at less memory (smaller microbatches;
#      full recomputation) and of the sliced schedules: step, bubble
#      (measured and simulated from the measured costs), measured /
#      predicted, and activation memory.
#   bench/slices_check.sh [RANKS (memory table)] [RANKS (bench)] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/stamp.sh
stamp "$0 $*"
mem_ranks=${1:-4}
ranks=${2:-2}
steps=${3:-5}
baton=${BATON:-build/baton}
config=configs/gpt_fortunes_1f1b.yaml
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
common=(--set data.dataset=synthetic_tokens --set data.seq_len=1024 --set train.batch_size=8
        --set pipeline.checkpointing=none --set pipeline.keep=[])
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# Activation MiB of each rank, from validate: "ALLOCATED|SIMULATED", each a
# list over the ranks. Allocated: rings plus key/value and gradient slots.
# Simulated: the plan's simulated peak of the same (the simulator given
# each stage's slot and key/value slot bytes), its peak less the static bytes.
activation() {
  "$baton" validate "$config" "${common[@]}" "$@" | /usr/bin/python3 -c '
import re, sys
allocated, simulated = [], []
for line in sys.stdin:
    m = re.search(r"rank \d+ memory \(MiB\):.* rings ([0-9.]+),.*?(?:sequence slots ([0-9.]+))?; allocated ([0-9.]+), simulated peak ([0-9.]+)", line)
    if m:
        slots = float(m.group(1)) + float(m.group(2) or 0)
        allocated.append("%.2f" % slots)
        simulated.append("%.2f" % (float(m.group(4)) - (float(m.group(3)) - slots)))
print(" ".join(allocated) + "|" + " ".join(simulated))'
}
# Per stage (one a rank): its slot bytes, and its key/value slot bytes (0
# unsliced), from validate's stage lines.
slots() {
  "$baton" validate "$config" "${common[@]}" "$@" | /usr/bin/python3 -c '
import re, sys
for line in sys.stdin:
    m = re.search(r"stage \d+ on rank \d+: .*ring capacity \d+ \w+ of (\d+) bytes(?:, \d+ key/value slots and \d+ gradient slots of (\d+) bytes)?", line)
    if m:
        print(m.group(1), m.group(2) or 0)'
}
# The simulator's peak (M_B) of rank $4, unit costs, with the key/value share $3.
simulated() {
  "$baton" simulate -s "$1" -p "$mem_ranks" -m 8 --seq-slices "$2" --kv-memory-share "$3" --json - |
    /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); print("%.3f" % d["ranks_detail"][int(sys.argv[1])]["peak_memory"])' "$4"
}

echo "activation memory per rank, $mem_ranks ranks, 8 microbatches of 1 sequence of 1024 tokens"
echo "(MiB: ring slots + key/value slots; M_B: the rank's 1F1B slot, a whole microbatch's activations;"
echo " x: the key/value slot over that slot, the share --kv-memory-share takes)"
printf '%-8s %-3s %-26s %-26s %-26s %-26s %-26s %s\n' schedule k "allocated MiB" "simulated MiB (plan)" \
  "allocated M_B" "simulated M_B (with x)" "simulated M_B (slices)" "(p+k-1)/k"
base=(--set pipeline.ranks="$mem_ranks" --set pipeline.microbatches=8)
mapfile -t whole < <(slots "${base[@]}" --set pipeline.schedule=1f1b)
for k in 1 2 4 8; do
  s=seq1f1b; [ "$k" = 1 ] && s=1f1b
  sets=("${base[@]}" --set pipeline.schedule=$s --set pipeline.seq_slices=$k)
  both=$(activation "${sets[@]}")
  mib=${both%%|*}
  simmib=${both#*|}
  mapfile -t sliced < <(slots "${sets[@]}")
  read -r -a mibs <<< "$mib"
  alloc_mb="" with_kv="" slices_only=""
  for ((r = 0; r < mem_ranks; r++)); do
    read -r whole_slot _ <<< "${whole[$r]}"
    read -r _ kv_slot <<< "${sliced[$r]}"
    x=$(/usr/bin/python3 -c "print($kv_slot / $whole_slot)")
    alloc_mb+="$(/usr/bin/python3 -c "print('%.3f' % (${mibs[$r]} * 1048576 / $whole_slot))") "
    with_kv+="$(simulated $s "$k" "$x" $r) "
    slices_only+="$(simulated $s "$k" 0 $r) "
  done
  printf '%-8s %-3s %-26s %-26s %-26s %-26s %-26s %.3f\n' $s "$k" "$mib" "$simmib" "$alloc_mb" "$with_kv" "$slices_only" \
    "$(echo "($mem_ranks + $k - 1) / $k" | bc -l)"
done

echo
echo "baton bench, $ranks ranks, batch 8 of 1024 tokens, $steps steps"
cases=(
  "1f1b m4|--set pipeline.schedule=1f1b --set pipeline.microbatches=4"
  "1f1b m8 (smaller microbatches)|--set pipeline.schedule=1f1b --set pipeline.microbatches=8"
  "1f1b m4 full recomputation|--set pipeline.schedule=1f1b --set pipeline.microbatches=4 --set pipeline.checkpointing=full"
  "seq1f1b m4 k2|--set pipeline.schedule=seq1f1b --set pipeline.microbatches=4 --set pipeline.seq_slices=2"
  "seq1f1b m4 k4|--set pipeline.schedule=seq1f1b --set pipeline.microbatches=4 --set pipeline.seq_slices=4"
  "seq1f1b m4 k4 compute split|--set pipeline.schedule=seq1f1b --set pipeline.microbatches=4 --set pipeline.seq_slices=4 --set pipeline.seq_split=compute"
  "seq1f1b m4 k8|--set pipeline.schedule=seq1f1b --set pipeline.microbatches=4 --set pipeline.seq_slices=8"
  "zb_h1 m4 k4|--set pipeline.schedule=zb_h1 --set pipeline.microbatches=4 --set pipeline.seq_slices=4"
  "interleaved_1f1b m4 (v 2)|--set pipeline.schedule=interleaved_1f1b --set pipeline.microbatches=4"
  "interleaved_1f1b m4 k4|--set pipeline.schedule=interleaved_1f1b --set pipeline.microbatches=4 --set pipeline.seq_slices=4"
  "zbv m4|--set pipeline.schedule=zbv --set pipeline.microbatches=4"
  "zbv m4 k4|--set pipeline.schedule=zbv --set pipeline.microbatches=4 --set pipeline.seq_slices=4"
)
printf '%-30s %10s %9s %10s %10s  %s\n' case "step ms" bubble simulated "meas/pred" "activation MiB per rank"
for c in "${cases[@]}"; do
  label=${c%%|*}
  read -r -a args <<< "${c#*|}"
  mib=$(activation --set pipeline.ranks="$ranks" "${args[@]}")
  mib=${mib%%|*}
  mpirun -np "$ranks" "$baton" bench "$config" "${common[@]}" --set pipeline.ranks="$ranks" "${args[@]}" \
    --steps "$steps" --json "$out/b.json" < /dev/null > /dev/null 2>&1 || { echo "$label: bench failed" >&2; continue; }
  /usr/bin/python3 - "$out/b.json" "$label" "$mib" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("%-30s %10.1f %8.1f%% %9.1f%% %10.3f  %s" % (sys.argv[2], d["step_time_median_s"] * 1e3, 100 * d["bubble_rate"],
      100 * d["simulated_bubble_rate"], d["measured_over_predicted"], sys.argv[3]))
PY
done
