#!/usr/bin/env bash
# baton tune over the token budget and the packing, then its choice
# trained: the fortunes GPT (configs/gpt_fortunes_1f1b.yaml's model) on P
# ranks on the log-normal JSON Lines set of bench/packing.sh (DOCS
# documents, median an eighth of 512, a tail to it), the global batch
# 16 x 512 positions. One `baton profile` on P ranks at each budget of
# BUDGETS; `baton tune --budgets BUDGETS --packings greedy,balanced,pad`
# from them (schedules 1f1b, zb_h1, zbv, interleaved_1f1b; no
# checkpointing); then the tuner's choice and the config's own point
# (512, greedy, 1F1B, 8 microbatches) each trained for STEPS steps.
# Prints, with the stamp, the tuner's ranking and, per trained run, the
# median over steps 6..STEPS of the real tokens a second measured and
# predicted, and the choice against the config's own.
#   bench/packed_tune.sh [P] [BUDGETS] [STEPS] [DOCS]   (default 2 256,512,1024 25 4000)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/stamp.sh
p=${1:-2}
budgets=${2:-256,512,1024}
steps=${3:-25}
docs=${4:-4000}
baton=${BATON:-build/baton}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
python3 bench/lognormal_docs.py "$out/lognormal.jsonl" 512 "$docs"
config=configs/gpt_fortunes_1f1b.yaml
base=(--set "data={dataset: jsonl, path: $out/lognormal.jsonl, packing: greedy, max_tokens: 512}" --set model.seq_len=512
      --set train.batch_size=16 --set pipeline.microbatches=8 --set pipeline.ranks="$p" --set pipeline.checkpointing=none
      --set pipeline.adapt=off)
for b in ${budgets//,/ }; do
  table=$(( b > 512 ? b : 512 ))
  timeout 900 mpirun -np "$p" "$baton" profile "$config" "${base[@]}" \
    --set "data={dataset: jsonl, path: $out/lognormal.jsonl, packing: greedy, max_tokens: $b}" \
    --set model.seq_len="$table" --set train.batch_size=$(( 8192 / b )) --out "$out/p$b.json" > "$out/profile$b.log" 2>&1 \
    || { cat "$out/profile$b.log" >&2; exit 1; }
done
"$baton" tune "$config" "${base[@]}" --memory-bytes 4e9 --budgets "$budgets" --packings greedy,balanced,pad \
  --schedules 1f1b,zb_h1,zbv,interleaved_1f1b --policies none --profile "$out/p{max_tokens}.json" --top 12 \
  --overlay "$out/choice.yaml" > "$out/tune.txt"
run() {  # NAME SETTINGS...
  local name=$1
  shift
  timeout 900 mpirun -np "$p" "$baton" train "$config" "${base[@]}" "$@" --set train.steps="$steps" \
    --set log.every_steps=1 --set log.progress=false --set log.metrics="$out/$name.jsonl" \
    --set log.weights="$out/$name.safetensors" > "$out/$name.log" 2>&1 < /dev/null || { cat "$out/$name.log" >&2; exit 1; }
}
# The choice's overlay as --set overrides (its data: over the base's).
mapfile -t choice < <(python3 - "$out/choice.yaml" "$out/lognormal.jsonl" <<'PY'
import sys, yaml
o = yaml.safe_load(open(sys.argv[1]))
d = o.pop("data")
print("--set"); print(f"data={{dataset: jsonl, path: {sys.argv[2]}, packing: {d['packing']}, max_tokens: {d['max_tokens']}}}")
for section, keys in o.items():
    for k, v in keys.items():
        print("--set"); print(f"{section}.{k}={v}")
PY
)
run own
run choice "${choice[@]}"
stamp "$0 $p $budgets $steps $docs"
echo
echo '```'
cat "$out/tune.txt"
echo '```'
echo
echo "| run | settings | measured real tokens/s | vs the config's own |"
echo "|---|---|---|---|"
python3 - "$out" "${choice[*]}" <<'PY'
import json, statistics, sys
out, choice = sys.argv[1], sys.argv[2]
def rate(name):
    rows = [json.loads(l) for l in open(f"{out}/{name}.jsonl")]
    return statistics.median(r["tokens_per_s"] for r in rows if "loss" in r and r["step"] > 5)
own = rate("own")
print(f"| own | 512, greedy, 1f1b, 8 microbatches | {own:.0f} | 1.000 |")
settings = " ".join(w for w in choice.split() if w != "--set").replace("|", "\\|")
print(f"| choice | {settings} | {rate('choice'):.0f} | {rate('choice') / own:.3f} |")
PY
