#!/usr/bin/env bash
# Whether mpirun tells a job's survivors of a lost process through PMIx's
# event notification (bench/pmix_events.c): 3 ranks under the settings that
# keep the survivors (the same as docs/guide/when-a-rank-is-lost.md's),
# rank 1 exits, and each survivor says whether an event came within 5 s.
# The lost-rank watch could take such an event as a second witness of a
# loss; where none comes, the watch alone sees it.
#   bench/pmix_events.sh [MPIRUN ARGS...]   (default: the settings above)
# Needs mpicc and PMIx's headers (libpmix-dev); says so and exits 77 if not.
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/stamp.sh
command -v mpicc > /dev/null || { echo "skipped: mpicc is not installed"; exit 77; }
flags=$(pkg-config --cflags --libs pmix 2> /dev/null) || { echo "skipped: PMIx's headers (libpmix-dev) are not installed"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# shellcheck disable=SC2086
mpicc -O2 -o "$out/pmix_events" bench/pmix_events.c $flags || exit 1
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(--mca orte_enable_recovery 1 --mca orte_abort_on_non_zero_status 0)
stamp bench/pmix_events.sh "$@"
echo "$(mpirun --version 2> /dev/null | head -1); PMIx $(pkg-config --modversion pmix)"
timeout 60 mpirun "${args[@]}" -np 3 "$out/pmix_events" > "$out/log" 2>&1
echo "mpirun exit $?"
sort "$out/log"
