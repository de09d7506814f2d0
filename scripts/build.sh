#!/usr/bin/env bash
# Installs the dependencies (if missing), configures and builds baton into build/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="${BATON_BUILD_TYPE:-Release}" >/dev/null
cmake --build build -j "$(nproc)"
