#!/usr/bin/env bash
# The GPU figures of docs/results/gpu.md, baton beside PyTorch in one run on
# one GPU: the heavy MLP (configs/gpu_heavy_mlp.yaml) in FP32, TF32 and BF16,
# and GPT-2 small's shape (configs/gpu_gpt2_small.yaml) in BF16.
#   bench/gpu_figures.sh [ROUNDS]        (default 1)
#   BATON=PATH PYTHON=PATH OUT=DIR CASES="mlp_bf16 gpt2_bf16" bench/gpu_figures.sh ...
# Each case runs `baton bench` (1 rank, synthetic data) and then
# bench/pytorch_step.py --device cuda (the same model, batch, microbatches and
# optimizer; BF16 as torch.autocast) twice: with the config's microbatches
# (gradients accumulated, as baton's one rank runs them) and with the whole
# batch at once. Prints one line a case and round, and writes each JSON under
# OUT (default out/gpu_figures). baton's step clock leaves the optimizer out,
# so the like-for-like ratio is PyTorch's forward and backward alone over
# baton's step; the whole-step ratio is printed beside it.
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/stamp.sh
stamp "$0 $*"
rounds=${1:-1}
baton=${BATON:-build-gpu/baton}
[ -x "$baton" ] || baton=build/baton
python=${PYTHON:-python3}
out=${OUT:-out/gpu_figures}
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
all=("mlp_fp32 configs/gpu_heavy_mlp.yaml fp32" "mlp_tf32 configs/gpu_heavy_mlp.yaml tf32"
     "mlp_bf16 configs/gpu_heavy_mlp.yaml bf16" "gpt2_bf16 configs/gpu_gpt2_small.yaml bf16")
# CASES="mlp_bf16 gpt2_bf16": these cases only, in this order.
cases=()
for want in ${CASES:-mlp_fp32 mlp_tf32 mlp_bf16 gpt2_bf16}; do
  for c in "${all[@]}"; do [ "${c%% *}" = "$want" ] && cases+=("$c"); done
done
[ ${#cases[@]} -gt 0 ] || { echo "gpu_figures.sh: no case in CASES='${CASES:-}'" >&2; exit 2; }
failed=0
for r in $(seq "$rounds"); do
  for c in "${cases[@]}"; do
    read -r name config precision <<<"$c"
    b="$out/${name}_baton_$r.json" t="$out/${name}_torch_$r.json" f="$out/${name}_torch_full_$r.json"
    timeout 300 "$baton" bench "$config" --set precision="$precision" --steps 10 --json "$b" >"$out/${name}_baton_$r.log" 2>&1 ||
      { echo "$name: baton bench failed (exit $?): $(tail -3 "$out/${name}_baton_$r.log")"; failed=1; continue; }
    timeout 300 "$python" bench/pytorch_step.py "$config" --device cuda --precision "$precision" --steps 10 >"$t" ||
      { echo "$name: pytorch_step.py failed"; failed=1; continue; }
    timeout 300 "$python" bench/pytorch_step.py "$config" --device cuda --precision "$precision" --steps 10 \
      --full-batch >"$f" || { echo "$name: pytorch_step.py --full-batch failed"; failed=1; continue; }
    "$python" - "$name" "$b" "$t" "$f" <<'PY'
import json, sys
name, b, t, f = sys.argv[1], *(json.load(open(p)) for p in sys.argv[2:])
bt, tt, tf, ft = b["step_time_median_s"], t["step_time_median_s"], t["fwd_bwd_time_median_s"], f["step_time_median_s"]
flop = b["gflops_total"] * 1e9 * bt  # the matrix products of a step, forward and backward
line = (f"{name}: baton {bt * 1e3:.1f} ms ({flop / bt / 1e12:.1f} TFLOP/s, measured/predicted "
        f"{b['measured_over_predicted']:.3f}); PyTorch {t['torch']} on {t['device']}: {tt * 1e3:.1f} ms a step, "
        f"{tf * 1e3:.1f} ms without the optimizer ({flop / tf / 1e12:.1f} TFLOP/s), {ft * 1e3:.1f} ms a step with the "
        f"whole batch at once; PyTorch / baton like for like {tf / bt:.3f}, whole step {tt / bt:.3f}, "
        f"whole batch {ft / bt:.3f}")
if "seq_len" in t:
    n = t["batch_size"] * t["seq_len"]
    line += f"; tokens/s baton {n / bt:,.0f}, PyTorch {n / tt:,.0f} a step ({n / tf:,.0f} without the optimizer)"
print(line)
PY
  done
done
exit "$failed"
