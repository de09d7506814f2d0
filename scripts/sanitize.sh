#!/usr/bin/env bash
# Builds the unit tests with AddressSanitizer, LeakSanitizer and
# UndefinedBehaviorSanitizer (g++) into build-asan/ and runs them: any
# report fails the test that caused it. Arguments go to ctest.
#
# Left out:
# - the multi-rank tests (label mpi): under LeakSanitizer every rank reports
#   Open MPI's own allocations (libmpi, libopen-pal, its plugins) as leaks;
# - executor_no_alloc_test and executor_memory_test: they replace malloc to
#   count allocations (tests/executor/alloc_hooks.h), and the
#   sanitizers replace malloc too (memory from its malloc would reach ASan's
#   free); it is not even built, since the build runs each test program to
#   list its tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null

# -O0 builds in 60% of -O1's time (3.5 min on 2 cores) and the tests still
# run in seconds; assertions stay on (these flags replace RelWithDebInfo's,
# NDEBUG included).
flags="-O0 -g1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all"
CC=gcc CXX=g++ cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="$flags" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$flags" \
  -DBATON_BUILD_TESTS=ON -DBATON_BUILD_BENCH=OFF -DBATON_CUDA=OFF >/dev/null

# The test programs (tests/<module>/<file>.cc -> target <module>_<file>),
# without the mpi and cuda modules and the allocation counter (the CUDA
# backend is left out of this build: the sanitizers cover host code).
targets=()
while read -r module file; do
  if [ "$module" = mpi ] || [ "$module" = cuda ] || [ "${module}_${file}" = executor_no_alloc_test ] ||
    [ "${module}_${file}" = executor_memory_test ]; then continue; fi
  targets+=("${module}_${file}")
done < <(sed -n 's/^baton_add_test(\([a-z_]*\) \([a-z_]*\).*/\1 \2/p' tests/CMakeLists.txt)
# The equivalence suites with ranks as threads of one process (every case;
# the sanitizers see the executor, the transports and the optimizers at
# work on several ranks at once).
for file in $(sed -n 's/^foreach(file \(.*\))$/\1/p' tests/CMakeLists.txt); do targets+=("threads_${file}"); done
cmake --build build-asan -j "$(nproc)" --target "${targets[@]}"

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# Unbuilt test programs are listed as <target>_NOT_BUILT; those are the ones
# left out above.
ctest --test-dir build-asan --output-on-failure -j "$(nproc)" -LE mpi \
  -E '^(mpi_[a-z_]+|executor_no_alloc_test|executor_memory_test)_NOT_BUILT$' "$@"
