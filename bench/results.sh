#!/usr/bin/env bash
# The tables of docs/results that come from baton's own commands, each
# printed as Markdown under the stamp of the commit, the machine and the
# command (bench/stamp.sh). The other tables have scripts of their own
# (bench/compare_pytorch.sh, slices_check.sh, seq1f1b_paper.sh,
# tune_check.sh, placement_check.sh, simulator_vs_python.sh), which print
# the same stamp.
#
#   bench/results.sh TABLE...    (no TABLE: all of them, in this order)
#
# startup       process start-up against an empty program (build/bench/startup_bench)
# bench-mlp     baton bench of the synthetic MLP, 1F1B and ZB-H1 on 2 ranks
# sweep         baton bench --sweep of the synthetic MLP on 2 ranks
# data-parallel baton bench of the synthetic MLP, 1 x 2, 2 x 2 and 2 x 2 with ZeRO
# sharding      baton bench of the GPT at ZeRO 0-3, 1 x 2 and 2 x 2; baton validate's model state
# train-mlp     the Fashion-MNIST MLP's three configs on 4 ranks
# train-gpt     the fortunes GPT's two configs on 4 ranks
# bench-gpt     baton bench of the GPT on 2 and 4 ranks, every kind of schedule
# tuner         the tuner core's search rate (build/bench/schedule_bench)
# micro         the store, message and training-step micro-benchmarks
#
# Timings on a shared machine move from run to run: compare figures taken
# in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/stamp.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
baton=${BATON:-build/baton}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# Rows of a Markdown table from bench reports: `bench_rows COLUMNS FILE...`,
# COLUMNS a Python expression over the report `b` (its keys as attributes)
# giving a list of cells.
bench_rows() {
  python3 - "$@" <<'PY'
import json, sys
cells = sys.argv[1]
for path in sys.argv[2:]:
    class Report(dict):
        __getattr__ = dict.__getitem__
    b = json.load(open(path), object_hook=Report)
    ms = lambda s: f"{s * 1e3:.1f} ms"
    pct = lambda x: f"{100 * x:.1f}%"
    print("| " + " | ".join(str(c) for c in eval(cells)) + " |")
PY
}

table_startup() {
  stamp build/bench/startup_bench
  echo
  build/bench/startup_bench
}

table_bench_mlp() {
  local cmd="mpirun -np 2 $baton bench configs/synthetic_bench.yaml --set pipeline.ranks=2 --steps 20"
  stamp "$cmd --set pipeline.schedule={1f1b,zb_h1}"
  echo
  echo "| schedule | step time, median (min – max) | samples/s | bubble measured / simulated | measured / predicted | GFLOP/s both ranks | one-core peak | achieved / goal | recording per event |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
  for s in 1f1b zb_h1; do
    $cmd --set pipeline.schedule=$s --json "$out/$s.json" > /dev/null
    bench_rows '[b.schedule, f"{ms(b.step_time_median_s)} ({ms(b.step_time_min_s)} – {ms(b.step_time_max_s)})", f"{b.samples_per_s:,.0f}", f"{pct(b.bubble_rate)} / {pct(b.simulated_bubble_rate)}", f"**{b.measured_over_predicted:.3f}**", f"{b.gflops_total:.1f}", f"{b.peak_gflops_one_core:.1f}", f"{b.gflops_total / b.goal_gflops:.2f}", f"{b.record_cost_per_event_s * 1e9:.0f} ns"]' "$out/$s.json"
  done
}

table_sweep() {
  local cmd="mpirun -np 2 $baton bench configs/synthetic_bench.yaml --set pipeline.ranks=2 --sweep --schedules gpipe,1f1b,zb_h1,zb_h2,interleaved_1f1b,zbv --microbatches 4,8,16 --chunks 2 --steps 5 --sweep-out $out/sweep"
  stamp "$cmd"
  echo
  $cmd > /dev/null 2>&1
  python3 - "$out/sweep.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
print("| schedule | m | chunks | samples/s | step ms | bubble measured | bubble simulated | measured / predicted |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for r in rows:
    print(f"| {r['schedule']} | {r['microbatches']} | {r['chunks']} | {float(r['samples_per_s']):,.0f} | "
          f"{1e3 * float(r['step_time_median_s']):.1f} | {100 * float(r['bubble_rate']):.1f}% | "
          f"{100 * float(r['simulated_bubble_rate']):.1f}% | {float(r['measured_over_predicted']):.3f} |")
PY
}

table_data_parallel() {
  local base="configs/synthetic_bench.yaml --steps 20 --set pipeline.ranks=2"
  stamp "mpirun -np {2,4} $baton bench $base --set data_parallel.size=2 [--set pipeline.ranks=1] [--set data_parallel.zero=1]"
  echo
  echo "| layout | step time, median (min – max) | sums per rank | hidden | tail after compute | measured / predicted |"
  echo "| --- | --- | --- | --- | --- | --- |"
  local name np sets
  for name in "1 x 2" "2 x 2" "2 x 2, ZeRO"; do
    case "$name" in
      "1 x 2") np=2; sets=(--set pipeline.ranks=1 --set data_parallel.size=2) ;;
      "2 x 2") np=4; sets=(--set data_parallel.size=2) ;;
      *) np=4; sets=(--set data_parallel.size=2 --set data_parallel.zero=1) ;;
    esac
    mpirun -np $np $baton bench $base "${sets[@]}" --json "$out/dp.json" > /dev/null
    bench_rows '["'"$name"'", f"{ms(b.step_time_median_s)} ({ms(b.step_time_min_s)} – {ms(b.step_time_max_s)})", ms(b.reduction_s), pct(b.reduction_hidden_fraction), ms(b.reduction_exposed_s), f"**{b.measured_over_predicted:.3f}**"]' "$out/dp.json"
  done
}

table_sharding() {
  local base="configs/gpt_fortunes_1f1b.yaml --steps 20"
  stamp "mpirun -np {2,4} $baton bench $base --set pipeline.ranks={1,2} --set data_parallel.size=2 [--set pipeline.schedule=interleaved_1f1b --set pipeline.chunks=4] --set data_parallel.zero={0,1,2,3}"
  echo
  echo "| layout | ZeRO | step time, median (min – max) | / ZeRO 1 | measured / predicted | per stage and step: reduce-scatters, gathers | gather waits / α–β time | gathers hidden |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
  local p z layout extra
  for layout in "1 x 2" "1 x 2, interleaved 4 chunks" "2 x 2"; do
    case "$layout" in
      "1 x 2") p=1; extra=() ;;
      "2 x 2") p=2; extra=() ;;
      *) p=1; extra=(--set pipeline.schedule=interleaved_1f1b --set pipeline.chunks=4) ;;
    esac
    for z in 0 1 2 3; do
      mpirun -np $((2 * p)) $baton bench $base --set pipeline.ranks=$p --set data_parallel.size=2 "${extra[@]}" \
        --set data_parallel.zero=$z --json "$out/zero$z.json" > /dev/null
    done
    python3 - "$layout" "$out" <<'PY'
import json, sys
p, out = sys.argv[1], sys.argv[2]
ms = lambda s: f"{s * 1e3:.1f} ms"
runs = [json.load(open(f"{out}/zero{z}.json")) for z in range(4)]
for b in runs:
    sharded = b["zero"] >= 3
    print(f"| {p} | {b['zero']} | {ms(b['step_time_median_s'])} ({ms(b['step_time_min_s'])} – {ms(b['step_time_max_s'])}) "
          f"| **{b['step_time_median_s'] / runs[1]['step_time_median_s']:.3f}** | {b['measured_over_predicted']:.3f} "
          f"| {b.get('reduce_scatters_per_stage', '–')}, {b.get('gathers_per_stage', '–') if sharded else '–'} "
          f"| {ms(b['gather_wait_s']) + ' / ' + ms(b['predicted_gather_s']) if sharded else '–'} "
          f"| {format(100 * b['gather_hidden_fraction'], '.0f') + '%' if sharded else '–'} |")
PY
  done
  echo
  stamp "$baton validate configs/gpt_fortunes_1f1b.yaml --set pipeline.ranks={2,1} [--set pipeline.schedule={interleaved_1f1b,looped_bfs} --set pipeline.chunks=4] --set data_parallel.size={2,4} --set data_parallel.zero={0,1,2,3}"
  echo
  echo "| layout | ZeRO | rank 0: parameters | gradients | optimizer state | model state | allocated |"
  echo "| --- | --- | --- | --- | --- | --- | --- |"
  local name sets
  for name in "2 x 2, 1F1B" "1 x 4, interleaved 4 chunks" "1 x 4, looped BFS 4 chunks"; do
    case "$name" in
      "2 x 2"*) sets=(--set pipeline.ranks=2 --set data_parallel.size=2) ;;
      *interleaved*) sets=(--set pipeline.ranks=1 --set pipeline.schedule=interleaved_1f1b --set pipeline.chunks=4 --set data_parallel.size=4) ;;
      *) sets=(--set pipeline.ranks=1 --set pipeline.schedule=looped_bfs --set pipeline.chunks=4 --set data_parallel.size=4) ;;
    esac
    for z in 0 1 2 3; do
      $baton validate configs/gpt_fortunes_1f1b.yaml "${sets[@]}" --set data_parallel.zero=$z > "$out/validate.txt"
      python3 - "$name" "$z" "$out/validate.txt" <<'PY'
import re, sys
name, zero, path = sys.argv[1:]
line = next(l for l in open(path) if l.startswith("#   rank 0 memory"))
v = {k: float(x) for k, x in re.findall(r"(parameters|gradients|optimizer state|allocated) ([0-9.]+)", line)}
state = v["parameters"] + v["gradients"] + v["optimizer state"]
print(f"| {name} | {zero} | {v['parameters']:.2f} MiB | {v['gradients']:.2f} MiB | {v['optimizer state']:.2f} MiB "
      f"| **{state:.2f} MiB** | {v['allocated']:.2f} MiB |")
PY
    done
  done
}

# The epoch-end rows of a metrics file: accuracy (or validation loss) per epoch.
epoch_rows() {
  python3 - "$1" "$2" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
key = sys.argv[2]
print(" / ".join(f"{r[key]:.4f}" if key != "test_accuracy" else f"{100 * r[key]:.2f}%"
                 for r in rows if key in r))
PY
}

# A training table: `training_table KEY WHAT CONFIG...`, each config trained
# on 4 ranks, its metrics' KEY after each epoch and its wall time.
training_table() {
  local key=$1 what=$2 c start end
  shift 2
  stamp "mpirun -np 4 $baton train CONFIG --set log.progress=false --set log.metrics=... --set log.weights=..."
  echo
  echo "| config | $what after each epoch | wall time |"
  echo "| --- | --- | --- |"
  for c in "$@"; do
    start=$(date +%s.%N)
    mpirun -np 4 $baton train $c --set log.progress=false --set log.metrics="$out/m.jsonl" \
      --set log.weights="$out/w.safetensors" > /dev/null
    end=$(date +%s.%N)
    echo "| \`$c\` | $(epoch_rows "$out/m.jsonl" "$key") | $(echo "$end - $start" | bc | xargs printf '%.1f') s |"
    rm -f "$out/m.jsonl" "$out/w.safetensors"
  done
}

table_train_mlp() {
  training_table test_accuracy "test accuracy" configs/fmnist_mlp_1f1b.yaml configs/fmnist_mlp_zb_h1.yaml \
    configs/fmnist_mlp_interleaved.yaml
}

table_train_gpt() {
  training_table validation_loss "validation loss (nats per token)" configs/gpt_fortunes_1f1b.yaml \
    configs/gpt_fortunes_zbv.yaml
}

table_bench_gpt() {
  stamp "mpirun -np P $baton bench configs/gpt_fortunes_1f1b.yaml --set pipeline.ranks=P --set pipeline.schedule=S --steps 8"
  echo
  echo "| ranks | schedule | chunks | step time, median (min – max) | tokens/s | bubble measured / simulated | measured / predicted |"
  echo "| --- | --- | --- | --- | --- | --- | --- |"
  local p s
  for p_s in 2:1f1b 2:zb_h1 4:1f1b 4:zb_h1 4:interleaved_1f1b 4:zbv 4:dualpipev; do
    p=${p_s%%:*}
    s=${p_s#*:}
    mpirun -np "$p" $baton bench configs/gpt_fortunes_1f1b.yaml --set pipeline.ranks="$p" --set pipeline.schedule="$s" \
      --steps 8 --json "$out/g.json" > /dev/null
    bench_rows '[b.ranks, b.schedule, b.chunks, f"{ms(b.step_time_median_s)} ({ms(b.step_time_min_s)} – {ms(b.step_time_max_s)})", f"{b.tokens_per_s:,.0f}", f"{pct(b.bubble_rate)} / {pct(b.simulated_bubble_rate)}", f"**{b.measured_over_predicted:.3f}**"]' "$out/g.json"
  done
}

table_tuner() {
  stamp build/bench/schedule_bench --benchmark_filter=BM_Tune
  echo
  echo '```'
  build/bench/schedule_bench --benchmark_filter=BM_Tune 2>&1 | grep -E "^(BM_|-|Benchmark)"
  echo '```'
}

table_micro() {
  local b
  for b in store_bench p2p_bench train_bench; do
    if [ "$b" = p2p_bench ]; then stamp "mpirun -np 2 build/bench/$b"; else stamp "build/bench/$b"; fi
    echo
    echo '```'
    if [ "$b" = p2p_bench ]; then
      mpirun -np 2 build/bench/$b 2>&1
    else
      build/bench/$b 2>&1 | grep -E "^(BM_|-|Benchmark)"
    fi
    echo '```'
    echo
  done
}

tables=("$@")
[ ${#tables[@]} -gt 0 ] || tables=(startup bench-mlp sweep data-parallel sharding train-mlp train-gpt bench-gpt tuner micro)
for t in "${tables[@]}"; do
  fn="table_${t//-/_}"
  if ! declare -F "$fn" > /dev/null; then
    echo "bench/results.sh: no table \"$t\" (see the list at the top of $0)" >&2
    exit 2
  fi
  echo "### $t"
  echo
  "$fn"
  echo
done
