#!/usr/bin/env bash
# baton against PyTorch on one rank, same model, batch, microbatches,
# optimizer, BLAS and thread count, alternated ROUNDS times in one run:
#   bench/compare_pytorch.sh [CONFIG] [ROUNDS]
#   BATON=PATH bench/compare_pytorch.sh ...   (another baton binary; default build/baton)
# Prints each round's step times and the median ratio PyTorch / baton
# (goal >= 1.0: baton at least as fast). Needs python3-torch (Debian's
# /usr/bin/python3) and a built baton (scripts/build.sh).
# MLP configs and GPT configs (model: {type: gpt}; tokens/s printed too).
# `baton bench` runs on synthetic data of the config's shapes (a token
# dataset such as fortunes becomes synthetic_tokens, no files read), as
# bench/pytorch_step.py does. baton's step clock leaves the optimizer out
# (src/bench), so each round also gives PyTorch's forward and
# backward alone against it ("like for like").
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/stamp.sh
stamp "$0 $*"
config=${1:-configs/synthetic_bench.yaml}
rounds=${2:-3}
baton=${BATON:-build/baton}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# One BLAS thread on both sides (baton's default; torch.set_num_threads does
# not reach OpenBLAS's own pool, which would otherwise use every core).
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
ratios=()
fwd_bwd_ratios=()
for r in $(seq "$rounds"); do
  "$baton" bench "$config" --set pipeline.ranks=1 --steps 10 --json "$out/baton.json" > /dev/null
  # PyTorch's OpenBLAS gets the kernels baton runs (baton picks them when
  # OpenBLAS does not know the CPU: see src/cli/main.cc).
  core=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['blas_core'])" "$out/baton.json")
  OPENBLAS_CORETYPE=$core /usr/bin/python3 bench/pytorch_step.py "$config" --steps 10 > "$out/torch.json"
  OPENBLAS_CORETYPE=$core /usr/bin/python3 bench/pytorch_step.py "$config" --steps 10 --full-batch > "$out/torch_full.json"
  line=$(/usr/bin/python3 - "$out" <<'PY'
import json, sys
d = sys.argv[1]
b = json.load(open(d + "/baton.json")); t = json.load(open(d + "/torch.json")); f = json.load(open(d + "/torch_full.json"))
bt, tt, ft, tf = b["step_time_median_s"], t["step_time_median_s"], f["step_time_median_s"], t["fwd_bwd_time_median_s"]
tok = ""
if "seq_len" in t:  # GPT: tokens per step = batch x seq_len
    n = t["batch_size"] * t["seq_len"]
    tok = f"; tokens/s baton {n / bt:,.0f}, PyTorch {n / tt:,.0f} ({n / ft:,.0f} whole batch)"
print(f"{tt / bt:.4f} {tf / bt:.4f} baton {bt * 1e3:.1f} ms ({b['blas_core']}, {b['microbatches']} microbatches), "
      f"PyTorch {t['torch']} {tt * 1e3:.1f} ms (same microbatches; {tf * 1e3:.1f} ms without the optimizer), "
      f"{ft * 1e3:.1f} ms (whole batch at once); "
      f"PyTorch / baton = {tt / bt:.3f} ({ft / bt:.3f} against the whole-batch pass, "
      f"{tf / bt:.3f} like for like without the optimizer){tok}; fastest steps: baton {b['step_time_min_s'] * 1e3:.1f} ms, "
      f"PyTorch {t['step_time_min_s'] * 1e3:.1f} ms, ratio {t['step_time_min_s'] / b['step_time_min_s']:.3f}")
PY
)
  rest=${line#* }
  echo "round $r: ${rest#* }"
  ratios+=("${line%% *}")
  fwd_bwd_ratios+=("${rest%% *}")
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR]=$1} END {printf "median PyTorch / baton over %d rounds: %.3f (goal >= 1.0)\n", NR, a[int((NR+1)/2)]}'
printf '%s\n' "${fwd_bwd_ratios[@]}" | sort -n | awk '{a[NR]=$1} END {printf "median PyTorch / baton over %d rounds, like for like (PyTorch without its optimizer, as baton bench clocks): %.3f\n", NR, a[int((NR+1)/2)]}'
