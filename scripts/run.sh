#!/usr/bin/env bash
# baton's main job: builds baton, then simulates the built-in schedules side by
# side (4 ranks, 8 microbatches), prints the comparison table and writes one
# pipeline picture and one Chrome trace per schedule under out/.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
bash scripts/build.sh >/dev/null
./build/baton simulate configs/compare.yaml "$@"
echo
echo "pictures: out/<schedule>.svg   traces: out/<schedule>.trace.json   numbers: out/compare.json"
