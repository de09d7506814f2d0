#!/usr/bin/env bash
# What a rank holds of a token dataset: an llm.c shard of TOKENS tokens
# (Mi; uint16, documents of log-normal lengths, median 64, at most 2048,
# ids below 255, 255 the end-of-text token that starts each) trained for
# STEPS steps on 2 ranks by the fortunes GPT (configs/gpt_fortunes_1f1b.yaml's
# model) as windows of 512, packed greedy and packed balanced at a budget
# of 512, and the same model on the fortunes corpus (windows of 512) for
# the memory the run takes without a large dataset. Prints each rank's
# largest anonymous resident memory (RssAnon, sampled every 0.2 s: the
# mapped shard's pages are the file's, not the rank's) and, beside it,
# what holding the samples in memory would add: windows 4 bytes a token
# (inputs on the first stage's rank, labels on the last's), packed 8
# bytes a position (the starts, and inputs or labels).
#   bench/packed_memory.sh [TOKENS] [STEPS]   (default 64 20)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/stamp.sh
mtokens=${1:-64}
steps=${2:-20}
baton=${BATON:-build/baton}
out=$(mktemp -d)
watcher=
trap '[ -n "$watcher" ] && kill "$watcher" 2>/dev/null; rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
/usr/bin/python3 - "$out/shard.bin" "$mtokens" <<'PY'
import sys
import numpy as np
path, n = sys.argv[1], int(sys.argv[2]) * 1024 * 1024
rng = np.random.default_rng(1)
tokens = rng.integers(1, 255, size=n, dtype=np.uint16)
lengths = np.clip(rng.lognormal(np.log(64), 1.0, size=n // 32).astype(np.int64), 2, 2048)
starts = np.cumsum(lengths)
starts = starts[starts < n]
tokens[0] = 255
tokens[starts] = 255
header = np.zeros(256, dtype=np.int32)
header[:3] = (20240520, 1, n)
with open(path, "wb") as f:
    f.write(header.tobytes())
    f.write(tokens.tobytes())
print(len(starts) + 1, file=open(path + ".documents", "w"))
PY
# The largest RssAnon of each `baton train` process while they run, into FILE.
watch() {
  while true; do
    for p in $(pgrep -f "$baton train" || true); do
      a=$(sed -n 's/^RssAnon:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$p/status" 2>/dev/null || true)
      [ -n "$a" ] && echo "$p $a"
    done
    sleep 0.2
  done > "$1"
}
run() {  # NAME DATA-SETTINGS
  watch "$out/$1.rss" &
  watcher=$!
  timeout 900 mpirun -np 2 "$baton" train configs/gpt_fortunes_1f1b.yaml --set "data=$2" \
    --set model.seq_len=512 --set pipeline.ranks=2 --set train.batch_size=16 --set train.steps="$steps" \
    --set pipeline.checkpointing=none --set log.progress=false --set log.metrics="$out/$1.jsonl" \
    --set log.weights="$out/$1.safetensors" > "$out/$1.log" 2>&1 < /dev/null || { cat "$out/$1.log" >&2; exit 1; }
  kill "$watcher"
  wait "$watcher" 2>/dev/null || true
  watcher=
}
shard="dataset: llmc, path: $out/shard.bin, eot: 255, vocab: 256, shuffle: false"
run fortunes "{dataset: fortunes, seq_len: 512, shuffle: false}"
run windows "{$shard, seq_len: 512}"
run greedy "{$shard, packing: greedy, max_tokens: 512}"
run balanced "{$shard, packing: balanced, max_tokens: 512}"
stamp "$0 $mtokens $steps"
echo
echo "| data | documents | ranks' largest RssAnon (MiB) | samples held in memory would add a rank (MiB) |"
echo "|---|---|---|---|"
/usr/bin/python3 - "$out" "$mtokens" <<'PY'
import sys
out, mtokens = sys.argv[1], int(sys.argv[2])
tokens = mtokens * 1024 * 1024
documents = int(open(f"{out}/shard.bin.documents").read())
def largest(name):
    peak = {}
    for line in open(f"{out}/{name}.rss"):
        pid, kb = line.split()
        peak[pid] = max(peak.get(pid, 0), int(kb))
    # The two ranks (mpirun's own process is small): the two largest.
    return sorted(peak.values())[-2:]
for name, docs, extra in [("fortunes", "the fortunes corpus", None),
                          ("windows", f"{documents} (windows of 512)", 4 * tokens),
                          ("greedy", f"{documents} (packed, greedy)", 8 * tokens),
                          ("balanced", f"{documents} (packed, balanced)", 8 * tokens)]:
    mib = " and ".join(f"{kb / 1024:.0f}" for kb in largest(name))
    print(f"| {name} | {docs} | {mib} | {'-' if extra is None else f'{extra / 2**20:.0f} or more'} |")
PY
