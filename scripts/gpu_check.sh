#!/usr/bin/env bash
# On a machine with a CUDA GPU: build with the CUDA backend, run its tests
# (which skip without a GPU) and its benchmarks, and keep what they print in
# ${OUT:-out/gpu} (gpu.txt, tests.txt, cuda_store_bench.json, cuda_p2p_bench.json,
# bench_cuda.json, bench_cuda_dp.json).
#
#   ./scripts/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
out="${OUT:-out/gpu}"
mkdir -p "$out"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >"$out/gpu.txt" 2>&1; then
  echo "gpu_check: no GPU visible (nvidia-smi -L failed); the CUDA tests would only skip" >&2
  exit 1
fi
cat "$out/gpu.txt"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
if ! grep -q '^BATON_HAVE_CUDA:INTERNAL=ON' build-gpu/CMakeCache.txt; then
  echo "gpu_check: CMake found no CUDA compiler (nvcc on PATH or /usr/local/cuda)" >&2
  exit 1
fi
cmake --build build-gpu -j "$(nproc)"
ctest --test-dir build-gpu --output-on-failure -R '^cuda\.' 2>&1 | tee "$out/tests.txt"
build-gpu/bench/cuda_store_bench --benchmark_format=json --benchmark_out="$out/cuda_store_bench.json" \
  --benchmark_out_format=json
mpirun -np 2 build-gpu/bench/cuda_p2p_bench --json "$out/cuda_p2p_bench.json"
# Whole training steps on the GPU: 2 ranks sharing it, 1F1B, step time and
# samples/s (per-action times there are host-side enqueue times).
mpirun -np 2 build-gpu/baton bench configs/synthetic_bench.yaml --set pipeline.ranks=2 --set device=cuda \
  --steps 20 --json "$out/bench_cuda.json"
# Two replicas of a one-rank pipeline on the GPU: the gradient sums staged
# through pinned host memory, their time and hidden share.
mpirun -np 2 build-gpu/baton bench configs/synthetic_bench.yaml --set pipeline.ranks=1 --set data_parallel.size=2 \
  --set device=cuda --steps 20 --json "$out/bench_cuda_dp.json"
