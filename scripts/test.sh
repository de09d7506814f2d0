#!/usr/bin/env bash
# Builds baton and runs every test (ctest), the multi-rank ones under mpirun.
set -euo pipefail
cd "$(dirname "$0")/.."
# Open MPI refuses root without these, and the 2-core machines need
# oversubscription for 4-rank tests.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
bash scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"
