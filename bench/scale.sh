#!/usr/bin/env bash
# The tables of docs/results/scale.md: the lost-rank watch at 8 to 1,024
# thread ranks (build/bench/watch_scale), then a training job at 8 to
# 1,024 thread ranks, plain and with a rank lost, and the messages and
# bytes its collectives moved (build/bench/thread_job_scale, --count).
# Each table under the stamp.
#   bench/scale.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/stamp.sh
ulimit -n 20000 2>/dev/null || true  # 1,024 ranks' sockets in one process
stamp bench/scale.sh "$@"
echo
build/bench/watch_scale 8 64 256 1024
echo
build/bench/thread_job_scale 8 64 256 1024 2>/dev/null
echo
build/bench/thread_job_scale --count 8 64 256 1024 2>/dev/null
