#!/usr/bin/env bash
# baton's main job: builds baton, then trains the Fashion-MNIST MLP
# pipeline-parallel on 4 ranks of this machine (1F1B), printing progress and
# test accuracy; metrics and final weights go to out/fmnist_1f1b/.
# Extra arguments are passed on, e.g. --set train.epochs=1.
set -euo pipefail
cd "$(dirname "$0")/.."
# Open MPI refuses root without these; 4 ranks on fewer cores need oversubscription.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
bash scripts/build.sh >/dev/null
mpirun -np 4 ./build/baton train configs/fmnist_mlp_1f1b.yaml "$@"
