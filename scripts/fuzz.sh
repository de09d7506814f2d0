#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang with AddressSanitizer and
# UndefinedBehaviorSanitizer) into build-fuzz/ and runs each for a short time,
# starting from a copy of its seed corpus in tests/fuzz_corpus/ (which stays
# as it is). Any crash, sanitizer report, leak, hang (-timeout) or
# allocation over -rss_limit_mb fails the script; the inputs that did so are
# kept in build-fuzz/crashes/ and printed in hex.
#
#   scripts/fuzz.sh                        # every target, 20 s each
#   BATON_FUZZ_SECONDS=300 scripts/fuzz.sh schedule_csv
#   build-fuzz/fuzz/schedule_csv_fuzz CRASH_FILE   # replay one input
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null

seconds="${BATON_FUZZ_SECONDS:-20}"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then targets=(config schedule_csv safetensors token_files); fi

# The sanitizers apply to the whole tree (the libraries are where the bugs
# are); fuzzer-no-link adds the coverage instrumentation libFuzzer steers by,
# and the fuzz executables alone link libFuzzer (fuzz/CMakeLists.txt). -O1
# keeps the build quick; assertions stay on (these flags replace
# RelWithDebInfo's, NDEBUG included; Debug would turn on TBB's debug mode).
flags="-O1 -gline-tables-only -fno-omit-frame-pointer -fsanitize=address,undefined,fuzzer-no-link -fno-sanitize-recover=all"
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="$flags" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$flags" -DBATON_NATIVE=OFF \
  -DBATON_FUZZ=ON -DBATON_BUILD_TESTS=OFF -DBATON_BUILD_BENCH=OFF -DBATON_CUDA=OFF >/dev/null
cmake --build build-fuzz -j "$(nproc)" --target "${targets[@]/%/_fuzz}"

# UBSan's reports carry a stack; ASan finds llvm-symbolizer on PATH.
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
crashes="$PWD/build-fuzz/crashes"  # this run's findings only
rm -rf "$crashes"
mkdir -p "$crashes"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

failed=()
for t in "${targets[@]}"; do
  cp -r "tests/fuzz_corpus/$t" "$work/$t"
  echo "fuzz: $t for ${seconds}s (corpus: $(ls "$work/$t" | wc -l) seeds)"
  dict=()
  if [ -f "fuzz/$t.dict" ]; then dict=(-dict="fuzz/$t.dict"); fi
  # A crash is a finding: go on to the next target and fail at the end.
  if ! "build-fuzz/fuzz/${t}_fuzz" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
      -artifact_prefix="$crashes/$t-" -print_final_stats=1 "${dict[@]}" "$work/$t" >"$work/$t.log" 2>&1; then
    failed+=("$t")
    # The report without the progress lines; -seed=N replays the same mutations.
    grep -E '^INFO: Seed' "$work/$t.log" || true
    grep -vE '^(#[0-9]+|INFO:|\s+NEW_FUNC|"|###)' "$work/$t.log" | tail -n 80
  else
    grep -E '^#[0-9]+[[:space:]]+DONE' "$work/$t.log" || true
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: FAILED: ${failed[*]}; inputs in $crashes:"
  for f in "$crashes"/*; do
    [ -f "$f" ] || continue
    echo "$f ($(stat -c %s "$f") bytes):"
    od -A d -t x1 "$f" | head -n 16
  done
  exit 1
fi
echo "fuzz: ${targets[*]}: no crash in ${seconds}s each"
