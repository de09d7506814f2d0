#!/usr/bin/env bash
# A packed step against its prediction as `baton bench` sets them (the
# prediction goal of docs/results/packing.md): the fortunes GPT
# (configs/gpt_fortunes_1f1b.yaml's model, 1F1B, no checkpointing) on the
# log-normal JSON Lines set of bench/packing.sh (DOCS documents, median an
# eighth of the budget BUDGET, a tail to it), 16 documents' rows a step in
# 8 microbatches, on 2 ranks. ROUNDS rounds of: a profile under
# `mpirun -np 2 baton profile` (attention's cost per document included),
# then `baton bench --real-data --profile` of greedy and of balanced
# (arranged by that profile) for STEPS steps after 2 of warm-up. bench
# times each step from a barrier to the last rank's last action (the
# optimizer's step outside it) and prices the same step, its own
# documents, from the profile less its optimizer's step. Prints, with the
# stamp, per run the median over the steps of measured / predicted, and
# the median step measured and predicted.
#   bench/packed_bench.sh [ROUNDS] [STEPS] [BUDGET] [DOCS]   (default 3 30 512 4000)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/stamp.sh
rounds=${1:-3}
steps=${2:-30}
budget=${3:-512}
docs=${4:-4000}
baton=${BATON:-build/baton}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
python3 bench/lognormal_docs.py "$out/lognormal.jsonl" "$budget" "$docs"
config=configs/gpt_fortunes_1f1b.yaml
sets() {  # PACKING: the run's settings, into the array `set`
  set=(--set "data={dataset: jsonl, path: $out/lognormal.jsonl, packing: $1, max_tokens: $budget}"
    --set model.seq_len="$budget" --set train.batch_size=16 --set pipeline.microbatches=8 --set pipeline.ranks=2
    --set pipeline.checkpointing=none --set pipeline.adapt=off)
}
stamp "$0 $rounds $steps $budget $docs"
echo
echo "| round | packing | measured / predicted, step by step (median) | median step measured (ms) | median step predicted (ms) |"
echo "|---|---|---|---|---|"
for round in $(seq 1 "$rounds"); do
  sets greedy
  timeout 900 mpirun -np 2 "$baton" profile "$config" "${set[@]}" --rows 2 --out "$out/profile.json" \
    > "$out/profile.log" 2>&1 || { cat "$out/profile.log" >&2; exit 1; }
  for packing in greedy balanced; do
    arranged=()
    [ "$packing" = balanced ] && arranged=(--set pipeline.profile="$out/profile.json")
    sets "$packing"
    timeout 900 mpirun -np 2 "$baton" bench "$config" "${set[@]}" "${arranged[@]}" --real-data \
      --profile "$out/profile.json" --steps "$steps" --warmup 2 > "$out/bench.log" 2>&1 \
      || { cat "$out/bench.log" >&2; exit 1; }
    # "packed steps ... step by step: median 1.040 (503.9/467.9, 430.6/414.2, ...)"
    python3 - "$round" "$packing" "$out/bench.log" <<'PY'
import re, statistics, sys
round_, packing, log = sys.argv[1], sys.argv[2], open(sys.argv[3]).read()
line = next(l for l in log.splitlines() if l.startswith("packed steps"))
median = re.search(r"median ([0-9.]+)", line).group(1)
pairs = [tuple(map(float, p.split("/"))) for p in re.findall(r"([0-9.]+/[0-9.]+)", line.split("(", 1)[1])]
print(f"| {round_} | {packing} | {median} | {statistics.median(m for m, _ in pairs):.1f} | "
      f"{statistics.median(p for _, p in pairs):.1f} |")
PY
  done
done
