#!/usr/bin/env bash
# The picture in docs/guide/seeing-a-running-job.md: the fortunes GPT on 2
# ranks for STEPS steps with the recipe's parts (a cosine learning rate
# with warm-up, the gradient clipped at norm 1), rank 1 slowed 2x
# (BATON_FAULT slow=2) from step 41 to step 100, once with adaptive plans
# (pipeline.adapt: on: two re-plans, onto the slow rank and back) and once
# without; then `baton plot` draws the first run with the second over it.
# Prints the stamp (commit, machine, date) and the plot command.
#   bench/plot_example.sh [STEPS] [SVG]   (default 160 docs/guide/seeing-a-running-job.svg)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/stamp.sh
steps=${1:-160}
svg=${2:-docs/guide/seeing-a-running-job.svg}
baton=${BATON:-build/baton}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
for adapt in on off; do
  mkdir -p "$out/adapt-$adapt"
  BATON_FAULT=1:41:slow=2:until=100 mpirun -np 2 "$baton" train configs/gpt_fortunes_1f1b.yaml \
    --set pipeline.ranks=2 --set pipeline.adapt=$adapt --set train.steps="$steps" --set log.every_steps=2 \
    --set log.progress=false --set train.clip_grad_norm=1.0 \
    --set 'train.lr_schedule={type: cosine, warmup_steps: 20, min_lr: 3.0e-4}' \
    --set log.metrics="$out/adapt-$adapt/metrics.jsonl" --set 'log.weights=""' >/dev/null
done
(cd "$out" && "$OLDPWD/$baton" plot adapt-on/metrics.jsonl --compare adapt-off/metrics.jsonl --svg "$OLDPWD/$svg")
stamp bench/plot_example.sh "$@"
echo "baton plot adapt-on/metrics.jsonl --compare adapt-off/metrics.jsonl --svg $svg"
