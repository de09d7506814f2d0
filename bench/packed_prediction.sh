#!/usr/bin/env bash
# A packed step against its prediction, and balanced against greedy: the
# fortunes GPT (configs/gpt_fortunes_1f1b.yaml's model, 1F1B, no
# checkpointing) on the log-normal JSON Lines set of bench/packing.sh
# (DOCS documents, median an eighth of the budget BUDGET, a tail to it).
# ROUNDS rounds of: a `baton profile` of the config on P ranks
# (attention's cost per document included), then greedy and balanced
# (arranged by the profile before it, pipeline.profile) trained on P
# ranks (one core each) for STEPS steps, each followed by a profile
# again, each step's measured time (metrics rows) against `baton
# simulate`'s prediction of the same step from the profile taken before
# the run, and from the one after it (the two bracket the run: where
# they disagree, the machine's speed moved while it ran); then, from the
# last round's profile, the prediction alone
# on 4 and 8 ranks, each rank a core of its own (`--cores 0`: the machine
# the profile's costs stand for, not this one's two cores shared). Prints,
# with the stamp: per run the median over steps 6..STEPS of measured /
# predicted (before; after; the after profile's prediction over the
# before's: the drift), measured and predicted real tokens/s (the steps' tokens over
# their time), balanced over greedy of the same round; per rank count the
# predicted tokens/s of both, their ratio, each against the even steps
# (`baton simulate`'s reference: every microbatch an equal share of the
# step's tokens and squares), and balanced's planning cost a step.
# TOKENS > 0: each step's documents by tokens (train.batch_tokens), its
# microbatch count what they fill of the 16 slots (greedy) or what the
# price chooses (balanced); MICROBATCHES of the 16 samples a step.
#   bench/packed_prediction.sh [P] [BUDGET] [STEPS] [ROUNDS] [DOCS] [TOKENS] [MICROBATCHES]
#   (default 2 512 25 2 4000 0 8)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/stamp.sh
p=${1:-2}
budget=${2:-512}
steps=${3:-25}
rounds=${4:-2}
docs=${5:-4000}
tokens=${6:-0}
mbs=${7:-8}
by_tokens=()
[ "$tokens" -gt 0 ] && by_tokens=(--set train.batch_tokens="$tokens")
baton=${BATON:-build/baton}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
python3 bench/lognormal_docs.py "$out/lognormal.jsonl" "$budget" "$docs"
config=configs/gpt_fortunes_1f1b.yaml
# The profile under mpirun -np P: every rank profiling at once, as the
# run's ranks compute at once (rank 0's times count). Taken again at each
# round's start: a shared machine's speed drifts over minutes, and a
# round's runs are set against a profile of the machine as they meet it.
# Each profile in a folder of its own ($out/pN, its machine model beside
# it); $before the one before the latest, $now the latest.
profiles=0
before=
now=
profile() {
  profiles=$((profiles + 1))
  before=$now
  now=$out/p$profiles/profile.json
  mkdir -p "$out/p$profiles"
  timeout 900 mpirun -np "$p" "$baton" profile "$config" --set "data={dataset: jsonl, path: $out/lognormal.jsonl, packing: greedy, max_tokens: $budget}" \
    --set model.seq_len="$budget" --set train.batch_size=16 --set pipeline.microbatches="$mbs" --set pipeline.ranks="$p" \
    --set pipeline.checkpointing=none --rows $((16 / mbs)) --out "$now" > "$out/profile.log" 2>&1 \
    || { cat "$out/profile.log" >&2; exit 1; }
}
run() {  # NAME PACKING: trained after the profile $now, a profile after it
  timeout 900 mpirun -np "$p" "$baton" train "$config" \
    --set "data={dataset: jsonl, path: $out/lognormal.jsonl, packing: $2, max_tokens: $budget}" \
    --set model.seq_len="$budget" --set train.batch_size=16 --set pipeline.microbatches="$mbs" --set pipeline.ranks="$p" \
    "${by_tokens[@]}" --set pipeline.checkpointing=none --set pipeline.adapt=off $([ "$2" = balanced ] && echo --set pipeline.profile="$now") \
    --set train.steps="$steps" --set log.every_steps=1 --set log.progress=false --set log.metrics="$out/$1.jsonl" \
    --set log.weights="$out/$1.safetensors" > "$out/$1.log" 2>&1 < /dev/null || { cat "$out/$1.log" >&2; exit 1; }
  simulate "$2" "$p" "$out/$1.sim.json"
  profile
  # The same steps (arranged by the profile before the run, as it ran) priced by the profile after it.
  simulate "$2" "$p" "$out/$1.after.json" --price "$now" --arranged "$before"
}
simulate() {  # PACKING RANKS JSON [--cores N] [--price PROFILE --arranged PROFILE]
  local price=$now arranged=$now more=()
  local args=("${@:4}")
  while [ ${#args[@]} -gt 0 ]; do
    case "${args[0]}" in
      --price) price=${args[1]}; args=("${args[@]:2}") ;;
      --arranged) arranged=${args[1]}; args=("${args[@]:2}") ;;
      *) more+=("${args[0]}"); args=("${args[@]:1}") ;;
    esac
  done
  "$baton" simulate "$config" --profile "$price" "${more[@]}" \
    --set "data={dataset: jsonl, path: $out/lognormal.jsonl, packing: $1, max_tokens: $budget}" \
    --set model.seq_len="$budget" --set train.batch_size=16 --set pipeline.microbatches="$mbs" --set pipeline.ranks="$2" \
    "${by_tokens[@]}" --set pipeline.checkpointing=none --set pipeline.adapt=off $([ "$1" = balanced ] && echo --set pipeline.profile="$arranged") \
    --steps "$steps" --json "$3" > /dev/null
}
stamp "$0 $p $budget $steps $rounds $docs $tokens $mbs"
echo
echo "| round | packing | measured / predicted (median) | by the profile after | drift (after / before) | measured real tokens/s | predicted real tokens/s | measured vs greedy | predicted vs greedy |"
echo "|---|---|---|---|---|---|---|---|---|"
profile
for i in $(seq 1 "$rounds"); do
  run "greedy-$i" greedy
  run "balanced-$i" balanced
  python3 - "$out" "$i" <<'PY'
import json, statistics, sys
out, i = sys.argv[1], sys.argv[2]
def measure(kind):
    rows = [json.loads(l) for l in open(f"{out}/{kind}-{i}.jsonl")]
    rows = {r["step"]: r for r in rows if "step_time_s" in r}
    sim = json.load(open(f"{out}/{kind}-{i}.sim.json"))["steps"]
    after = {s["step"]: s for s in json.load(open(f"{out}/{kind}-{i}.after.json"))["steps"]}
    pairs = [(rows[s["step"]], s) for s in sim if s["step"] > 5 and s["step"] in rows]
    for r, s in pairs:
        assert r["tokens"] == s["tokens"], f"step {s['step']}: the run's tokens {r['tokens']} against the simulation's {s['tokens']}"
        assert after[s["step"]]["tokens"] == s["tokens"], f"step {s['step']}: the profile after priced other documents"
    ratio = statistics.median(r["step_time_s"] / s["predicted_s"] for r, s in pairs)
    ratio_after = statistics.median(r["step_time_s"] / after[s["step"]]["predicted_s"] for r, s in pairs)
    drift = sum(after[s["step"]]["predicted_s"] for _, s in pairs) / sum(s["predicted_s"] for _, s in pairs)
    tokens = sum(s["tokens"] for _, s in pairs)
    measured = tokens / sum(r["step_time_s"] for r, _ in pairs)
    predicted = tokens / sum(s["predicted_s"] for _, s in pairs)
    return ratio, ratio_after, drift, measured, predicted
g = measure("greedy")
for kind in ("greedy", "balanced"):
    ratio, ratio_after, drift, measured, predicted = measure(kind)
    print(f"| {i} | {kind} | {ratio:.3f} | {ratio_after:.3f} | {drift:.3f} | {measured:.0f} | {predicted:.0f} | "
          f"{measured / g[3]:.3f} | {predicted / g[4]:.3f} |")
PY
done
echo
echo "| ranks (a core each) | greedy predicted tokens/s | balanced predicted tokens/s | balanced vs greedy | greedy's time / even | balanced's time / even | balanced's planning a step (% of its step) |"
echo "|---|---|---|---|---|---|---|"
for ranks in 2 4 8; do
  simulate greedy "$ranks" "$out/g$ranks.json" --cores 0
  simulate balanced "$ranks" "$out/b$ranks.json" --cores 0
  python3 - "$out" "$ranks" <<'PY'
import json, sys
out, ranks = sys.argv[1], sys.argv[2]
g = json.load(open(f"{out}/g{ranks}.json"))
b = json.load(open(f"{out}/b{ranks}.json"))
print(f"| {ranks} | {g['tokens_per_s']:.0f} | {b['tokens_per_s']:.0f} | "
      f"{b['tokens_per_s'] / g['tokens_per_s']:.3f} | "
      f"{g['even_tokens_per_s'] / g['tokens_per_s']:.3f} | {b['even_tokens_per_s'] / b['tokens_per_s']:.3f} | "
      f"{b['arrange_s_per_step'] * 1e3:.2f} ms ({100 * b['arrange_s_per_step'] / b['median_step_s']:.2f}%) |")
PY
done
