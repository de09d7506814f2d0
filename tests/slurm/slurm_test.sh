#!/usr/bin/env bash
# A real Slurm on this machine, from Debian's packages: munge, slurmctld and
# two slurmd nodes (n1, n2 on 127.0.0.1, each its own port, spool and
# TmpFS) configured in a temporary folder. On it, a 4-rank training over
# both nodes ends with the bytes `mpirun -np 4` gives, launched by
# `srun --mpi=pmix`, by `sbatch` with srun inside, and by `mpirun` inside an
# sbatch allocation; a job one of whose ranks dies ends, with baton's
# message and Slurm's exit code; and scripts/baton.sbatch, sent SIGUSR1 by
# `scancel --signal=USR1` mid-run, stops at a step boundary, requeues
# itself, resumes (checkpoint.resume: auto) and ends with the
# uninterrupted run's bytes; the template again with BATON_LAUNCH=mpirun
# (mpirun inside the allocation, keeping the survivors): a stop, its exit
# record read (mpirun exits 0), a requeue, a resume and a rank replaced
# (recovery.on_lost_rank: replace), to the uninterrupted run's bytes; and a
# node lost (n2's orted and ranks killed): the replica left goes on
# (shrink) to the uninterrupted run's bytes. Work is sized in steps, never in seconds: the
# template's run waits at a step the test chose (BATON_FAULT's wait) until
# the test's signal reaches it, and every wait is bounded by a multiple of
# what the test measured itself (the reference runs' times). Every process
# the test starts carries BATON_SLURM_TEST in its environment (the
# daemons, the jobs' ranks) or works in the test's folder (the step
# daemons, slurmstepd, which slurmd starts with an environment of its own
# and whose folder is the job's): whatever happens they are stopped by
# their process ids, SIGTERM then SIGKILL after a grace period, the test
# fails if any is left, and the folder is removed.
#
#   tests/slurm/slurm_test.sh BATON MPIEXEC SOURCE_DIR
#
# Exit 77 (ctest: skipped), saying why, where Slurm cannot run here.
set -uo pipefail
baton=$1 mpiexec=$2 src=$3
skip() { echo "skipped: $*"; exit 77; }
for b in munged slurmctld slurmd srun sbatch sinfo scontrol scancel; do
  command -v "$b" > /dev/null || skip "$b is not installed (scripts/setup.sh installs slurmctld, slurmd, slurm-client and munge)"
done
[ "$(id -u)" -eq 0 ] || skip "slurmd runs jobs as their users only as root"
plugin_dir=$(dirname "$(dpkg -L slurm-wlm-basic-plugins 2>/dev/null | grep '/mpi_pmix.so$' | head -1)")
[ -e "$plugin_dir/mpi_pmix.so" ] || skip "Slurm's PMIx plugin (mpi_pmix.so, slurm-wlm-basic-plugins) is missing"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
dir=$(mktemp -d /tmp/baton-slurm.XXXXXX)
# The mark of everything this test starts (inherited by the daemons, their
# step daemons and the jobs' tasks, whose environment srun and sbatch copy).
export BATON_SLURM_TEST=$dir
pids=()
# The process ids carrying the mark or working in the test's folder, but
# this shell and its subshells.
ours() {
  local e p cwd comm
  for e in /proc/[0-9]*/environ; do
    p=${e#/proc/}
    p=${p%/environ}
    [ "$p" = "$$" ] || [ "$p" = "$BASHPID" ] && continue
    if grep -qzx "BATON_SLURM_TEST=$dir" "$e" 2> /dev/null; then
      echo "$p"
      continue
    fi
    # (By name too: this shell's subshells work in the folder as well.)
    comm=""
    read -r comm 2> /dev/null < "/proc/$p/comm"
    [ "$comm" = slurmstepd ] || continue
    cwd=$(readlink "/proc/$p/cwd" 2> /dev/null)
    [ "$cwd" = "$dir" ] || [ "${cwd#"$dir"/}" != "$cwd" ] && echo "$p"
  done
}
# Sends `signal` to every marked process, then waits up to `seconds` for
# all to be gone; prints those left.
end_ours() {
  local signal=$1 seconds=$2 left
  left=$(ours)
  [ -n "$left" ] && kill "-$signal" $left 2> /dev/null
  for _ in $(seq $((seconds * 10))); do
    left=$(ours)
    [ -z "$left" ] && return 0
    sleep 0.1
  done
  echo "$left"
}
cleanup() {
  local code=$? left
  trap - EXIT
  [ -n "${SLURM_CONF:-}" ] && timeout 10 scancel --quiet --user=root 2> /dev/null
  left=$(end_ours TERM 10)
  [ -n "$left" ] && left=$(end_ours KILL 5)
  for p in "${pids[@]}"; do wait "$p" 2> /dev/null; done
  if [ -n "$left" ]; then
    echo "FAILED: processes this test started are left after SIGKILL: $(ps -o pid=,args= -p "$(echo $left | tr ' ' ,)")"
    [ "$code" -eq 0 ] || [ "$code" -eq 77 ] && code=1
  fi
  if [ "$code" -ne 0 ] && [ "$code" -ne 77 ]; then
    for f in "$dir"/log/*; do echo "== $f"; tail -20 "$f"; done
  fi
  rm -rf "$dir"
  exit "$code"
}
trap cleanup EXIT
# ctest's timeout, or a person's Ctrl-C: clean up all the same.
trap 'exit 1' TERM INT HUP
# With `whole_log` set, a failure prints that job's whole output too (the
# node scenario's rare failures need more than its last lines to explain).
whole_log=""
fail() {
  echo "FAILED: $*"
  if [ -n "$whole_log" ] && [ -f "$whole_log" ]; then echo "--- $whole_log:"; cat "$whole_log"; fi
  exit 1
}

cd "$dir" || exit 1
mkdir -p state spool/n1 spool/n2 tmp/n1 tmp/n2 log out
# munge: its own key and socket.
head -c 1024 /dev/urandom > munge.key && chmod 400 munge.key
munged --force --key-file="$dir/munge.key" --socket="$dir/munge.sock" --pid-file="$dir/munged.pid" \
  --log-file="$dir/log/munged.log" --seed-file="$dir/munged.seed" || skip "munged does not start here"
# Free ports for slurmctld and the two slurmd.
read -r p0 p1 p2 < <(python3 -c '
import socket
s = [socket.socket() for _ in range(3)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
host=$(hostname)
cat > slurm.conf <<CONF
ClusterName=baton
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$p0
AuthType=auth/munge
AuthInfo=socket=$dir/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
PluginDir=$plugin_dir
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
TmpFS=$dir/tmp/%n
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=n1 NodeHostname=$host NodeAddr=127.0.0.1 Port=$p1 CPUs=2 State=UNKNOWN
NodeName=n2 NodeHostname=$host NodeAddr=127.0.0.1 Port=$p2 CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
export SLURM_CONF=$dir/slurm.conf
slurmctld -D -f "$SLURM_CONF" > log/slurmctld.out 2>&1 &
pids+=($!)
slurmd -D -N n1 -f "$SLURM_CONF" > log/n1.out 2>&1 &
pids+=($!)
slurmd -D -N n2 -f "$SLURM_CONF" > log/n2.out 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  [ "$(sinfo -h -o %t 2> /dev/null | sort -u)" = "idle" ] && break
  sleep 0.2
done
[ "$(sinfo -h -o %t 2> /dev/null | sort -u)" = "idle" ] || fail "the two nodes did not come up: $(sinfo 2>&1)"
echo "slurm: slurmctld and nodes n1, n2 up"

config=$src/tests/mpi/tiny.yaml
common=(--set pipeline.ranks=4 --set train.steps=20 --set log.progress=false)
# The reference: mpirun on this host. Its time bounds the waits below (the
# 300 s here only guards against a hang; a run of 20 tiny steps takes about
# a second).
start=$SECONDS
timeout 300 "$mpiexec" -np 4 "$baton" train "$config" "${common[@]}" --set log.metrics="$dir/out/ref.jsonl" \
  --set log.weights="$dir/out/ref.safetensors" > log/ref.out 2>&1 || fail "mpirun: $(tail -5 log/ref.out)"
# A launch through Slurm, over TCP, may take many times mpirun's: bound it
# by the reference's time times a margin, plus Slurm's own start-up.
limit=$((60 + 20 * (SECONDS - start + 1)))
echo "slurm: the reference took $((SECONDS - start)) s; each launch's limit is $limit s"

# Two Slurm nodes on one host share its /dev/shm, where Open MPI's
# shared-memory transport names its segments by host and local rank: on
# this test's pretend nodes the ranks talk over TCP instead (real nodes
# need nothing set).
export OMPI_MCA_btl=self,tcp

# 1. srun --mpi=pmix over both nodes.
timeout "$limit" srun --mpi=pmix -N 2 -n 4 "$baton" train "$config" "${common[@]}" --set log.metrics="$dir/out/srun.jsonl" \
  --set log.weights="$dir/out/srun.safetensors" > log/srun.out 2>&1 || fail "srun: $(tail -5 log/srun.out)"
cmp out/ref.safetensors out/srun.safetensors || fail "srun's weights differ from mpirun's"
echo "slurm: srun --mpi=pmix -N 2 -n 4: the weights of mpirun -np 4"

# 2. sbatch, srun inside; 3. mpirun inside an sbatch allocation.
for launch in "srun --mpi=pmix" "$mpiexec -np 4"; do
  name=$([ "${launch%% *}" = srun ] && echo sbatch_srun || echo sbatch_mpirun)
  cat > "$name.sh" <<JOB
#!/bin/bash
#SBATCH -N 2 -n 4 -o $dir/log/$name.out
$launch "$baton" train "$config" ${common[*]} --set log.metrics=$dir/out/$name.jsonl --set log.weights=$dir/out/$name.safetensors
JOB
  timeout "$limit" sbatch --wait "$name.sh" > /dev/null || fail "$name: $(tail -5 log/$name.out)"
  cmp out/ref.safetensors "out/$name.safetensors" || fail "$name's weights differ from mpirun's"
  echo "slurm: sbatch with $launch: the weights of mpirun -np 4"
done

# 4. A rank that dies mid-run ends the job: baton's message, Slurm's code.
BATON_FAULT=2:5:F:kill timeout "$limit" srun --mpi=pmix -N 2 -n 4 "$baton" train "$config" "${common[@]}" \
  --set log.metrics="$dir/out/kill.jsonl" > log/kill.out 2>&1
code=$?
[ "$code" -ne 0 ] && [ "$code" -ne 124 ] || fail "a killed rank's job ended with $code: $(tail -5 log/kill.out)"
grep -q "baton: rank 2: injected fault (BATON_FAULT): killed at step 5" log/kill.out || fail "no message: $(tail -5 log/kill.out)"
grep -q "task 2: Killed" log/kill.out || fail "Slurm did not report the killed task: $(tail -5 log/kill.out)"
echo "slurm: a rank killed at step 5 ended the job (srun exit $code)"

# Waits up to `limit` seconds for job `id` to end; prints its state. Slurm
# holds a requeued job two minutes before it may start: it is let go as
# soon as the nodes have finished with its first run (its PMIx sockets
# gone: the requeued job's step has the same id; no slurmstepd of the job
# left and no node still completing it: a slurmd that has not finished
# killing the first run refuses the second's batch script, "already
# killed", and the job fails); and not within the second its first run's
# credential was revoked: slurmd compares a credential's time with the
# revocation's in whole seconds, so a second run started in the same second
# is refused too ("Job credential revoked").
finish() {
  local id=$1 limit=$2 state="" deadline=$((SECONDS + $2)) pending_since=""
  while [ $SECONDS -lt $deadline ]; do
    state=$(scontrol show job "$id" | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
    [ "$state" = PENDING ] && [ -z "$pending_since" ] && pending_since=$(date +%s)
    if [ "$state" = PENDING ] && [ "$(date +%s)" -gt $((pending_since + 1)) ] &&
      scontrol show job "$id" | grep -q 'Reason=BeginTime' &&
      ! compgen -G "$dir/spool/n*/stepd.slurm.pmix.$id.*" > /dev/null && [ -z "$(squeue -h -s -j "$id" 2> /dev/null)" ] &&
      ! pgrep -f "slurmstepd: \[$id\." > /dev/null && ! sinfo -h -o %T | grep -q completing; then
      scontrol update jobid="$id" StartTime=now > /dev/null 2>&1
    fi
    case "$state" in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL) break ;; esac
    sleep 0.2
  done
  echo "$state"
}

# 5. The sbatch template, stopped by SIGUSR1 mid-run, requeued and resumed.
# Rank 0 waits at step 60's forward until the signal reaches it (BATON_FAULT
# wait), so the stop lands at the boundary after step 60 on any machine;
# the requeued run resumes after it and does not inject the fault again.
long=(--set pipeline.ranks=4 --set train.steps=200 --set checkpoint.every_steps=100000 --set log.every_steps=50
      --set log.progress=false)
start=$SECONDS
timeout 300 "$mpiexec" -np 4 "$baton" train "$config" "${long[@]}" --set checkpoint.dir="$dir/ck_whole" \
  --set log.metrics="$dir/out/whole.jsonl" --set log.weights="$dir/out/whole.safetensors" > log/whole.out 2>&1 ||
  fail "the uninterrupted run: $(tail -5 log/whole.out)"
# Two runs through Slurm, each bounded as a launch, and Slurm's requeue
# (this test lets the held job go at once; Slurm holds a requeued job up
# to two minutes otherwise).
limit=$((limit + 20 * (SECONDS - start + 1)))
echo "slurm: the uninterrupted 200 steps took $((SECONDS - start)) s; the template's limit is 2 x $limit s"
id=$(BATON_FAULT=0:60:F:wait BATON="$baton" BATON_CHECKPOINTS="$dir/ck" sbatch --parsable -o "$dir/log/template.out" \
  "$src/scripts/baton.sbatch" "$config" "${long[@]}" --set log.metrics="$dir/out/template.jsonl" \
  --set log.weights="$dir/out/template.safetensors")
deadline=$((SECONDS + limit))
until grep -q "waiting for a stop signal" log/template.out 2> /dev/null; do
  [ $SECONDS -lt $deadline ] || fail "the template's run did not reach step 60 in $limit s: $(tail -10 log/template.out)"
  sleep 0.1
done
scancel --signal=USR1 "$id" || fail "scancel --signal=USR1 $id"
state=$(finish "$id" $((2 * limit)))
[ "$state" = COMPLETED ] || fail "the template's job is $state after $((2 * limit)) s: $(tail -10 log/template.out)"
grep -q "baton: stopped by SIGUSR1" log/template.out || fail "the job was not stopped: $(tail -10 log/template.out)"
grep -q "requeueing job $id" log/template.out || fail "the job was not requeued: $(tail -10 log/template.out)"
grep -q "resumed after step 60" log/template.out || fail "the requeued job did not resume after step 60: $(tail -10 log/template.out)"
cmp out/whole.safetensors out/template.safetensors || fail "the requeued run's weights differ from the uninterrupted run's"
echo "slurm: scripts/baton.sbatch stopped by SIGUSR1 at step 60, requeued, resumed: the uninterrupted run's weights"

# 6. The template with BATON_LAUNCH=mpirun (mpirun inside the allocation,
# keeping the survivors) and recovery.on_lost_rank: replace in the 4-rank
# pipeline: rank 0 waits at step 60 for the stop, which the test sends to
# the batch shell (scancel --batch), the template to mpirun, mpirun to
# every rank. mpirun exits 0, but the job's exit record says 75: the
# template requeues, and the job resumes after step 60; there rank 2,
# killed at step 90, is replaced by a new process (its state from rank 3's
# snapshot, the steps since replayed), and the job ends with exit record 0
# and the uninterrupted run's bytes.
id=$(BATON_LAUNCH=mpirun BATON_EXIT_GRACE=5 BATON_FAULT=0:60:F:wait,2:90:F:kill BATON="$baton" BATON_CHECKPOINTS="$dir/ck_mpirun" \
  sbatch --parsable --no-kill -o "$dir/log/template_mpirun.out" "$src/scripts/baton.sbatch" "$config" "${long[@]}" \
  --set recovery.on_lost_rank=replace --set recovery.snapshot_every=5 \
  --set log.metrics="$dir/out/template_mpirun.jsonl" --set log.weights="$dir/out/template_mpirun.safetensors")
deadline=$((SECONDS + limit))
until grep -q "waiting for a stop signal" log/template_mpirun.out 2> /dev/null; do
  [ $SECONDS -lt $deadline ] || fail "the mpirun template's run did not reach step 60 in $limit s: $(tail -10 log/template_mpirun.out)"
  scontrol show job "$id" | grep -qE 'JobState=(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL)' &&
    fail "the mpirun template's job ended before step 60: $(tail -10 log/template_mpirun.out)"
  sleep 0.1
done
scancel --batch --signal=USR1 "$id" || fail "scancel --batch --signal=USR1 $id"
state=$(finish "$id" $((2 * limit)))
out=log/template_mpirun.out
[ "$state" = COMPLETED ] || fail "the mpirun template's job is $state after $((2 * limit)) s: $(tail -10 $out)"
grep -q "baton.sbatch: the job ended with 75: stopped on SIGUSR1 after step 60" $out ||
  fail "no exit record of the stop: $(tail -10 $out)"
grep -q "requeueing job $id" $out || fail "the mpirun template's job was not requeued: $(tail -10 $out)"
grep -q "resumed after step 60" $out || fail "the requeued job did not resume after step 60: $(tail -10 $out)"
grep -q "started 1 new rank in its place (recovery.on_lost_rank: replace)" $out || fail "rank 2 was not replaced: $(tail -10 $out)"
grep -q "baton.sbatch: the job ended with 0: finished: 200 steps, going on after 1 loss of ranks" $out || fail "no exit record of the end: $(tail -10 $out)"
cmp out/whole.safetensors out/template_mpirun.safetensors ||
  fail "the mpirun template's weights differ from the uninterrupted run's"
echo "slurm: scripts/baton.sbatch with BATON_LAUNCH=mpirun: stopped at 60 (exit record 75), requeued, resumed, rank 2 replaced at step 90: the uninterrupted run's weights"

# 7. A node lost: n2's orted and its ranks SIGKILLed mid-run. The template
# with BATON_LAUNCH=mpirun and --map-by node puts world ranks 0 and 2 on
# n1 and 1 and 3 on n2: with 2 replicas of a 2-rank pipeline, n2 holds
# replica 1 whole, and recovery.on_lost_rank: shrink goes on with replica
# 0. Rank 1 waits at step 100 (BATON_FAULT wait) until the test has killed
# its node, so the loss lands at step 100 on any machine. The job ends
# with exit record 0 and the bytes of a run that shrank at the same step
# (the sums in double: the uninterrupted run's); mpirun, which waits on
# for its lost daemon, is ended by the template after the record.
node=(--set pipeline.ranks=2 --set data_parallel.size=2 --set train.steps=200 --set log.every_steps=50
      --set log.progress=false --set recovery.on_lost_rank=shrink --set checkpoint.every_steps=100000)
timeout 300 "$mpiexec" --mca orte_enable_recovery 1 --mca orte_abort_on_non_zero_status 0 -np 4 "$baton" train \
  "$config" "${node[@]}" --set checkpoint.dir="$dir/ck_node_whole" --set log.metrics="$dir/out/node_whole.jsonl" \
  --set log.weights="$dir/out/node_whole.safetensors" > log/node_whole.out 2>&1 ||
  fail "the uninterrupted 2 x 2 run: $(tail -5 log/node_whole.out)"
id=$(BATON_LAUNCH=mpirun BATON_MPIRUN_ARGS="--map-by node" BATON_EXIT_GRACE=5 BATON_FAULT=1:100:F:wait BATON="$baton" \
  BATON_CHECKPOINTS="$dir/ck_node" sbatch --parsable --no-kill -o "$dir/log/node.out" "$src/scripts/baton.sbatch" \
  "$config" "${node[@]}" --set log.metrics="$dir/out/node.jsonl" --set log.weights="$dir/out/node.safetensors")
out=log/node.out
whole_log=$out
deadline=$((SECONDS + limit))
until grep -q "rank 1: injected fault (BATON_FAULT): waiting for a stop signal" $out 2> /dev/null; do
  [ $SECONDS -lt $deadline ] || fail "the node test's run did not reach step 100 in $limit s: $(tail -10 $out)"
  scontrol show job "$id" | grep -qE 'JobState=(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL)' &&
    fail "the node test's job ended before step 100: $(tail -10 $out)"
  sleep 0.1
done
killed=""
for p in $(pgrep -x orted); do
  if tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -qx SLURMD_NODENAME=n2; then
    killed="$p $(pgrep -P "$p" | tr '\n' ' ')"
    kill -KILL $killed
  fi
done
[ -n "$killed" ] || fail "no orted of n2 to kill"
state=$(finish "$id" $((2 * limit)))
[ "$state" = COMPLETED ] || fail "the node test's job is $state after $((2 * limit)) s: $(tail -10 $out)"
grep -q "went on with 1 of 2 replicas (recovery.on_lost_rank: shrink) from step 100" $out ||
  fail "the job did not go on without n2: $(tail -10 $out)"
grep -q "baton.sbatch: the job ended with 0: finished: 200 steps, going on after 1 loss of ranks" $out ||
  fail "no exit record of the end: $(tail -10 $out)"
cmp out/node_whole.safetensors out/node.safetensors || fail "the run without n2's ranks differs from the uninterrupted one"
echo "slurm: n2's orted and ranks killed at step 100: the job went on with replica 0 (shrink), the uninterrupted run's weights"
echo "slurm: all passed"
