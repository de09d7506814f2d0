#!/usr/bin/env bash
# On a machine with a CUDA GPU: build with the CUDA backend, run its tests
# (which skip without a GPU) and its benchmarks, and keep what they print in
# ${OUT:-out/gpu} (gpu.txt, tests.txt, cuda_store_bench.json, cuda_p2p_bench.json,
# bench_cuda.json, bench_cuda_dp.json, summary.txt).
#
#   ./scripts/gpu_check.sh
#
# Every step runs even when an earlier one fails (a failed build stops only
# the steps that need it); the end prints one screen: each step, ok or its
# exit code, its seconds, and the failing CUDA tests. Exit code: 0 when every
# step passed, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
out="${OUT:-out/gpu}"
mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
failed=0

# step NAME COMMAND...: runs it, records "ok" or its exit code and its time.
step() {
  local name="$1"
  shift
  local start=$SECONDS
  echo "== gpu_check: $name"
  "$@"
  local rc=$?
  local result="ok"
  if [ "$rc" -ne 0 ]; then
    result="FAILED (exit $rc)"
    failed=1
  fi
  printf '%-28s %-18s %4d s\n' "$name" "$result" $((SECONDS - start)) >>"$summary"
  return "$rc"
}
skip() { printf '%-28s %-18s\n' "$1" "skipped ($2)" >>"$summary"; failed=1; }

finish() {
  echo
  echo "==== gpu_check summary ($(cat "$out/gpu.txt" 2>/dev/null | head -1))"
  cat "$summary"
  if [ -f "$out/tests.txt" ]; then
    grep -E '^[0-9]+% tests passed' "$out/tests.txt" || true
    grep -E '^\s+[0-9]+ - .*\((Failed|Timeout|SEGFAULT|Subprocess aborted|Exception)' "$out/tests.txt" || true
  fi
  exit "$failed"
}

gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >"$out/gpu.txt" 2>&1 && cat "$out/gpu.txt"; }
if ! step "GPU visible (nvidia-smi)" gpu; then
  echo "gpu_check: no GPU visible (nvidia-smi -L failed); the CUDA tests would only skip" >&2
  finish
fi

configure() {
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null || return
  if ! grep -q '^BATON_HAVE_CUDA:INTERNAL=ON' build-gpu/CMakeCache.txt; then
    echo "gpu_check: CMake found no CUDA compiler (nvcc on PATH or /usr/local/cuda)" >&2
    return 1
  fi
}
if ! step "configure with CUDA" configure || ! step "build" cmake --build build-gpu -j "$(nproc)"; then
  finish
fi

cuda_tests() { ctest --test-dir build-gpu --output-on-failure -R '^cuda\.' 2>&1 | tee "$out/tests.txt"; }
step "CUDA tests" cuda_tests
step "slot writes (store bench)" build-gpu/bench/cuda_store_bench --benchmark_format=json \
  --benchmark_out="$out/cuda_store_bench.json" --benchmark_out_format=json
step "transport (p2p bench)" mpirun -np 2 build-gpu/bench/cuda_p2p_bench --json "$out/cuda_p2p_bench.json"
# Whole training steps on the GPU: 2 ranks sharing it, 1F1B: step time,
# samples/s, and the actions' GPU times (CUDA events).
step "bench, 2 ranks" mpirun -np 2 build-gpu/baton bench configs/synthetic_bench.yaml --set pipeline.ranks=2 \
  --set device=cuda --steps 20 --json "$out/bench_cuda.json"
# Two replicas of a one-rank pipeline on the GPU: the gradient sums staged
# through pinned host memory, their time and hidden share.
step "bench, 2 replicas" mpirun -np 2 build-gpu/baton bench configs/synthetic_bench.yaml --set pipeline.ranks=1 \
  --set data_parallel.size=2 --set device=cuda --steps 20 --json "$out/bench_cuda_dp.json"
finish
