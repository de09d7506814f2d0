#!/usr/bin/env bash
# baton against PyTorch on one rank, same model, batch, microbatches,
# optimizer, BLAS and thread count, alternated ROUNDS times in one run:
#   bench/compare_pytorch.sh [CONFIG] [ROUNDS]
# Prints each round's step times and the median ratio PyTorch / baton
# (goal >= 1.0: baton at least as fast). Needs python3-torch (Debian's
# /usr/bin/python3) and a built baton (scripts/build.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
config=${1:-configs/synthetic_bench.yaml}
rounds=${2:-3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# One BLAS thread on both sides (baton's default; torch.set_num_threads does
# not reach OpenBLAS's own pool, which would otherwise use every core).
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
ratios=()
for r in $(seq "$rounds"); do
  build/baton bench "$config" --set pipeline.ranks=1 --steps 10 --json "$out/baton.json" > /dev/null
  # PyTorch's OpenBLAS gets the kernels baton runs (baton picks them when
  # OpenBLAS does not know the CPU: see src/cli/main.cc).
  core=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['blas_core'])" "$out/baton.json")
  OPENBLAS_CORETYPE=$core /usr/bin/python3 bench/pytorch_step.py "$config" --steps 10 > "$out/torch.json"
  OPENBLAS_CORETYPE=$core /usr/bin/python3 bench/pytorch_step.py "$config" --steps 10 --full-batch > "$out/torch_full.json"
  line=$(/usr/bin/python3 - "$out" <<'PY'
import json, sys
d = sys.argv[1]
b = json.load(open(d + "/baton.json")); t = json.load(open(d + "/torch.json")); f = json.load(open(d + "/torch_full.json"))
bt, tt, ft = b["step_time_median_s"], t["step_time_median_s"], f["step_time_median_s"]
print(f"{tt / bt:.4f} baton {bt * 1e3:.1f} ms ({b['blas_core']}, {b['microbatches']} microbatches), "
      f"PyTorch {t['torch']} {tt * 1e3:.1f} ms (same microbatches), {ft * 1e3:.1f} ms (whole batch at once); "
      f"PyTorch / baton = {tt / bt:.3f} ({ft / bt:.3f} against the whole-batch pass)")
PY
)
  echo "round $r: ${line#* }"
  ratios+=("${line%% *}")
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR]=$1} END {printf "median PyTorch / baton over %d rounds: %.3f (goal >= 1.0)\n", NR, a[int((NR+1)/2)]}'
