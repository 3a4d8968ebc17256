#!/usr/bin/env bash
# The distributed kvstore's jobs (part of make test): each runs tests/dist/dist_job.c (and a
# Python job with MXNet's unmodified package) under tools/mxrt-launch on this machine, with 0-2
# servers and 2-3 workers, and checks how it ends: the values every worker checked, the errors
# the failure cases must give, and that a job with a dead, stopped, panicking or exiting process
# ends within seconds instead of hanging (and one whose processes end normally ends with 0).
#
# Environment: MXRT_LIB_DIR (the directory of libmxrt.so built with --features dist),
# BUILD (default build), PYTHON (the venv with MXNet's wheel; the Python job is skipped when
# unset), FAULT_BIN (the dist_fault example binary; the panic job is skipped when unset).
set -u
cd "$(dirname "$0")/../.."
lib_dir="${MXRT_LIB_DIR:-target/release}"
build="${BUILD:-build}"
launch="tools/mxrt-launch"
mkdir -p "$build"
job="$build/dist_job"
${CC:-gcc} -std=c11 -Wall -Wextra -Werror -D_POSIX_C_SOURCE=200809L -O2 -pthread -Iinclude \
  tests/dist/dist_job.c -o "$job" -L"$lib_dir" -Wl,-rpath,"$(cd "$lib_dir" && pwd)" -lmxrt -lm ||
  { echo "dist: building dist_job failed"; exit 1; }

failures=0
log="$build/dist_job.log"

# run NAME WORKERS SERVERS EXPECT_RC MAX_SECONDS PATTERN -- command...
#   runs `mxrt-launch -n WORKERS -s SERVERS command...` (or the command itself when WORKERS is
#   "raw"), killed after MAX_SECONDS + 30 s; EXPECT_RC: an exit status (0 for success), or
#   "fail" for any non-zero exit; PATTERN must appear in the output
run() {
  local name=$1 w=$2 s=$3 want=$4 max=$5 pattern=$6
  shift 7
  local t0 t1 rc secs limit=$(( max + 30 ))
  t0=$(date +%s%N)
  if [ "$w" = raw ]; then
    timeout "$limit" "$@" >"$log" 2>&1
  else
    timeout "$limit" "$launch" -n "$w" -s "$s" "$@" >"$log" 2>&1
  fi
  rc=$?
  t1=$(date +%s%N)
  secs=$(( (t1 - t0) / 1000000 ))
  local ok=1 why=""
  if [ "$want" = fail ]; then
    if [ "$rc" = 0 ]; then ok=0; why="exit 0, expected a failure"; fi
  elif [ "$rc" != "$want" ]; then
    ok=0; why="exit $rc, expected $want"
  fi
  if [ "$rc" = 124 ]; then ok=0; why="hung (killed by timeout after $limit s)"; fi
  if [ "$secs" -gt $(( max * 1000 )) ]; then ok=0; why="took ${secs} ms, more than ${max} s"; fi
  if ! grep -q -- "$pattern" "$log"; then ok=0; why="${why:+$why; }output lacks '$pattern'"; fi
  if [ "$ok" = 1 ]; then
    printf '  ok    %-46s %3s workers %s servers  exit %-3s %6d ms\n' "$name" "$w" "$s" "$rc" "$secs"
  else
    printf '  FAIL  %-44s %s\n' "$name" "$why"
    sed 's/^/        | /' "$log" | tail -30
    failures=$((failures + 1))
  fi
}

export MXRT_DIST_TIMEOUT_S=4
echo "distributed kvstore jobs (tools/mxrt-launch; MXRT_DIST_TIMEOUT_S=$MXRT_DIST_TIMEOUT_S):"
run "dist_sync, server updater (7 13 19 25 31)" 2 1 0 30 "ok sync rank 1" -- "$job" sync
run "dist_sync, 3 workers, 2 servers"          3 2 0 30 "ok sync rank 2" -- "$job" sync
run "dist_sync_device"                          2 2 0 30 "ok sync rank 1" -- "$job" sync dist_sync_device
MXNET_KVSTORE_BIGARRAY_BOUND=10 \
run "no updater: sum replaces, sharded keys"    2 2 0 30 "ok replace rank 1" -- "$job" replace
MXNET_KVSTORE_BIGARRAY_BOUND=10 \
run "no updater, 3 workers, 1 server"           3 1 0 30 "ok replace rank 2" -- "$job" replace
MXNET_KVSTORE_BIGARRAY_BOUND=10 \
run "string keys, sharded"                      2 2 0 30 "ok strings rank 1" -- "$job" strings
run "no exit barrier: servers still stop"       2 2 0 30 "ok no_exit_barrier rank 0" -- "$job" no_exit_barrier
profile_dir=$(mktemp -d)
DIST_PROFILE_DIR="$profile_dir" \
run "profiler on the servers (profile_process)"  2 2 0 30 "server trace ok" -- "$job" server_profile
rm -rf "$profile_dir"
pid_dir=$(mktemp -d)
DIST_PID_DIR="$pid_dir" \
run "dead nodes: a stopped server counts"       2 2 0 30 "ok dead_nodes rank 1" -- "$job" dead_nodes
rm -rf "$pid_dir"
run "dist_async with updater"                   2 1 0 30 "ok async rank 1" -- "$job" async dist_async
run "dist_async without updater: push is -1"    2 1 0 30 "needs an updater on the servers" -- "$job" async_no_updater dist_async
MXNET_KVSTORE_BIGARRAY_BOUND=16 \
run "2-bit compression vs serial model"         2 2 0 30 "ok compress rank 1" -- "$job" compress
run "no servers: allreduce, commands -1"        2 0 0 30 "ok serverless rank 1" -- "$job" serverless
run "no servers, string keys"                   3 0 0 30 "ok strings rank 2" -- "$job" strings
run "no servers: dist_async is -1"              2 0 fail 30 "asynchronous, which needs server processes" -- "$job" sync dist_async
run "a scheduler has nothing to do"             raw - 0 10 "served as scheduler" -- \
  env DMLC_ROLE=scheduler "$job" sync
root=""; [ "$(id -u)" = 0 ] && root=--allow-run-as-root
run "DMLC_NUM_WORKER disagrees with the job"    raw - fail 30 "the MPI job has 2 worker process(es)" -- \
  mpirun --oversubscribe $root -np 2 -x DMLC_NUM_WORKER=5 -x MXRT_DIST_TIMEOUT_S "$job" sync
run "uneven iterations: error, not a hang"      2 1 fail 15 "worker(s) \[1\] did not push" -- "$job" uneven
run "a worker killed: the job ends"             3 1 fail 15 "exited on signal 9" -- "$job" kill
run "a server killed: the job ends"             2 2 fail 15 "exited on signal 9" -- "$job" server_kill
# Processes that leave through exit() with their store alive. MXRT_DIST_TIMEOUT_S is long here,
# so a job that waited for the deadline instead of ending at once would fail the 15 s bound. An
# exit with a non-zero status (or in the middle of a call) aborts the job with that status and a
# message naming the process; exit(0) before the others are done makes their waits fail at once,
# naming it; exit(0) after the last round ends the job cleanly.
MXRT_DIST_TIMEOUT_S=60 \
run "exit(3) on a worker: the job ends, status 3"  2 1 3 15 "worker 1 (process 2 of 3) exits with status 3" -- "$job" leave dist_sync 3
MXRT_DIST_TIMEOUT_S=60 \
run "exit(3) on a worker, no servers"            2 0 3 15 "worker 1 (process 1 of 2) exits with status 3" -- "$job" leave dist_sync 3
MXRT_DIST_TIMEOUT_S=60 \
run "exit(0) a round early: the others fail"     2 1 1 15 "worker 1 (process 2 of 3) has left the job" -- "$job" leave dist_sync 0
MXRT_DIST_TIMEOUT_S=60 \
run "exit(0) a round early, no servers"          2 0 1 15 "worker 1 (process 1 of 2) has left the job" -- "$job" leave dist_sync 0
MXRT_DIST_TIMEOUT_S=60 \
run "exit(0) while a thread is in a round"       2 1 1 15 "worker 1 (process 2 of 3) exits while a call" -- "$job" exit_in_round
MXRT_DIST_TIMEOUT_S=60 \
run "exit(4) on a server: the job ends, status 4" 2 1 4 15 "server 0 (process 0 of 3) exits with status 4" -- "$job" server_exit dist_sync 4
MXRT_DIST_TIMEOUT_S=60 \
run "exit(0) after the rounds, no free: status 0" 3 2 0 15 "ok end_exit0 rank 2" -- "$job" end_exit0
MXRT_DIST_TIMEOUT_S=60 \
run "exit(0) after the rounds, no servers"       2 0 0 15 "ok end_exit0 rank 1" -- "$job" end_exit0
if [ -n "${FAULT_BIN:-}" ]; then
  run "a panic on a worker aborts the job"      2 1 fail 15 "a panic in a distributed job: aborting the job" -- "$FAULT_BIN" panic
fi
if [ -n "${PYTHON:-}" ]; then
  MXNET_LIBRARY_PATH="$(cd "$lib_dir" && pwd)/libmxrt.so" \
  run "Python: MXNet's package, optimizer on servers" 2 1 0 90 "ok python rank 1" -- "$PYTHON" tests/dist/dist_job.py
  MXNET_LIBRARY_PATH="$(cd "$lib_dir" && pwd)/libmxrt.so" \
  run "Python: row_sparse key, no servers"        2 0 0 90 "ok sparse serverless rank 1" -- "$PYTHON" tests/dist/dist_sparse_serverless.py
  # leaving through the interpreter's exit (tests/dist/dist_exit.py), as the C jobs above (20 s:
  # `import mxnet` alone takes a few seconds on a loaded machine; a stall would take 60 s)
  for s in 1 0; do
    if [ "$s" = 1 ]; then p="process 2 of 3"; else p="process 1 of 2"; fi
    MXRT_DIST_TIMEOUT_S=60 MXNET_LIBRARY_PATH="$(cd "$lib_dir" && pwd)/libmxrt.so" \
    run "Python: sys.exit(1) on a worker, $s server(s)"  2 "$s" 1 20 "worker 1 ($p) exits with status 1" -- "$PYTHON" tests/dist/dist_exit.py sys_exit
    MXRT_DIST_TIMEOUT_S=60 MXNET_LIBRARY_PATH="$(cd "$lib_dir" && pwd)/libmxrt.so" \
    run "Python: uncaught exception, $s server(s)"      2 "$s" 1 20 "worker 1 ($p) exits with status 1" -- "$PYTHON" tests/dist/dist_exit.py raise
    MXRT_DIST_TIMEOUT_S=60 MXNET_LIBRARY_PATH="$(cd "$lib_dir" && pwd)/libmxrt.so" \
    run "Python: sys.exit(0) at the end, $s server(s)"  2 "$s" 0 20 "ok exit end rank 1" -- "$PYTHON" tests/dist/dist_exit.py end
  done
fi

if [ "$failures" != 0 ]; then
  echo "dist: $failures job(s) failed"
  exit 1
fi
echo "dist: all jobs passed"
