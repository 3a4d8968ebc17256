#!/usr/bin/env bash
# Build the benchmark drivers and run them: bench/mxbench.c against libmxrt.so (if built) and the
# reference libmxnet.so (from scripts/setup-mxnet.sh), and for the engine workloads the peers a C
# programmer would use for the same read/write-dependency task model: OpenMP tasks with depend
# clauses under GCC's libgomp and LLVM's libomp (bench/omp_tasks.c) and StarPU
# (bench/starpu_tasks.c, once per scheduler). Every runtime runs at 1 and 2 workers; prints
# markdown tables (bench/summarize.py).
#
#   bench/run.sh [engine|ndarray|kvstore|operator|all]        (default: all)
#
#   MXRT_LIB          default target/release/libmxrt.so (skipped if absent)
#   MXNET_LIB         use this libmxnet.so instead of running scripts/setup-mxnet.sh
#   MXBENCH_NTHREADS  worker counts to try (default "1 2")
#   MXBENCH_REPEATS   repeats per workload, the median is reported (default 3)
#   MXBENCH_ROUNDS    rounds over all runtimes, alternating them; the table shows the median of
#                     the rounds' medians (default 1)
#   MXBENCH_PEERS     peers to run with the engine workloads (default "libgomp libomp starpu";
#                     empty: none). Missing Debian packages (clang, libomp-dev, libstarpu-dev,
#                     pkg-config) are installed with apt-get when root (or passwordless sudo); a
#                     peer that cannot be built is reported and left out.
#   MXBENCH_STARPU_SCHEDS  StarPU schedulers to try (default "eager lws prio dmda"); the table
#                     shows the best per workload
#   MXBENCH_TIMEOUT   seconds per mxbench run (default 600)
#   MXBENCH_PEER_TIMEOUT  seconds per peer workload run (default 60)
#   MXBENCH_OUT       directory for the raw outputs (default target/mxbench)
#   MXBENCH_ONLY      run only the workloads whose name contains this text
# Exit status: non-zero if an mxrt or libmxnet.so run failed a check, crashed or timed out
# (missing symbols and the peers' failures are reported in the tables but do not fail the script).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
group="${1:-all}"
case "$group" in engine|ndarray|kvstore|operator|all) ;; *) echo "usage: $0 [engine|ndarray|kvstore|operator|all]" >&2; exit 64 ;; esac
out="${MXBENCH_OUT:-$repo/target/mxbench}"
mkdir -p "$out"
cc="${CC:-cc}"
cflags=(-std=c11 -O2 -Wall -Wextra -Werror)
"$cc" "${cflags[@]}" -pthread -o "$out/mxbench" bench/mxbench.c -ldl -lm

log() { echo "run.sh: $*" >&2; }

# ---- the libraries with MXNet's C API ----------------------------------------------------------
libs=()
names=()
mxrt="${MXRT_LIB:-target/release/libmxrt.so}"
if [ -f "$mxrt" ]; then
  libs+=("$(cd "$(dirname "$mxrt")" && pwd)/$(basename "$mxrt")")
  names+=(mxrt)
else
  log "$mxrt not found (cargo build --release), measuring libmxnet.so only"
fi
if [ -n "${MXNET_LIB:-}" ]; then
  mxnet="$MXNET_LIB"
else
  mxnet="$(scripts/setup-mxnet.sh | tail -n 1)"
fi
libs+=("$mxnet")
names+=(mxnet)
venv_python="${MXNET_VENV:-$repo/.venv-mxnet}/bin/python"

# ---- the peers (engine workloads only) ---------------------------------------------------------
# ensure_packages WHAT PKG...: installs the missing Debian packages; fails if they stay missing
ensure_packages() {
  local what="$1" p missing=() sudo=""
  shift
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
  done
  [ "${#missing[@]}" -eq 0 ] && return 0
  if ! command -v apt-get >/dev/null 2>&1; then
    log "$what needs ${missing[*]} and apt-get is not available"
    return 1
  fi
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
      sudo="sudo -n"
    else
      log "$what needs ${missing[*]}: not root and no passwordless sudo"
      return 1
    fi
  fi
  log "installing ${missing[*]} (for $what) with apt-get"
  local install=($sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q
                 --no-install-recommends "${missing[@]}")
  if ! "${install[@]}" > "$out/apt.log" 2>&1; then
    log "apt-get install failed; running apt-get update and trying again"
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q >> "$out/apt.log" 2>&1 || true
    "${install[@]}" >> "$out/apt.log" 2>&1 || { log "could not install ${missing[*]} (see $out/apt.log)"; return 1; }
  fi
}

# build_peer NAME COMMAND...: runs the build; on failure says so and leaves the peer out
peers=()
build_peer() {
  local name="$1"
  shift
  if "$@" > "$out/build-$name.log" 2>&1; then
    peers+=("$name")
  else
    log "$name: cannot be built (see $out/build-$name.log); going on without it"
  fi
}

starpu_scheds=(${MXBENCH_STARPU_SCHEDS:-eager lws prio dmda})
if [ "$group" = engine ] || [ "$group" = all ]; then
  for peer in ${MXBENCH_PEERS-libgomp libomp starpu}; do
    case "$peer" in
      libgomp)
        build_peer libgomp gcc "${cflags[@]}" -fopenmp -o "$out/omp_tasks-libgomp" bench/omp_tasks.c -lm ;;
      libomp)
        if ensure_packages "LLVM's libomp" clang libomp-dev; then
          build_peer libomp clang "${cflags[@]}" -fopenmp=libomp -o "$out/omp_tasks-libomp" bench/omp_tasks.c -lm
        else
          log "libomp: left out"
        fi ;;
      starpu)
        if ensure_packages StarPU libstarpu-dev pkg-config; then
          starpu_pc="$(pkg-config --list-all | awk '$1 ~ /^starpu-1\.[0-9]+$/ { print $1 }' | sort -V | tail -n 1)"
          build_peer starpu bash -c "[ -n '$starpu_pc' ] && $cc ${cflags[*]} \$(pkg-config --cflags $starpu_pc) \
            -o '$out/starpu_tasks' bench/starpu_tasks.c \$(pkg-config --libs $starpu_pc) -lm"
        else
          log "starpu: left out"
        fi ;;
      *) log "unknown peer '$peer' (libgomp, libomp, starpu)"; exit 64 ;;
    esac
  done
fi
engine_workloads=(engine.sync_64vars_200k engine.sync_1var_ordered_200k
                  engine.async_thread_complete_100k engine.fanout_fanin_18ops engine.randsumexpr_10k)

# ---- runs -------------------------------------------------------------------------------------
status=0
results="$out/results.tsv"
: > "$results"

# collect RUNTIME NT ROUND RAW: appends RAW's result lines to results.tsv
collect() {
  grep -v '^#' "$4" | awk -F'\t' -v rt="$1" -v nt="$2" -v round="$3" 'NF >= 4 {
    print rt "\t" nt "\t" round "\t" $1 "\t" $2 "\t" $3 "\t" $4 "\t" $5 }' >> "$results"
}

# run_peer RUNTIME NT ROUND ENV... -- BINARY: one process per workload, so that a crash or a hang
# costs one workload only
run_peer() {
  local rt="$1" nt="$2" round="$3" envs=() w rc raw
  shift 3
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  for w in "${engine_workloads[@]}"; do
    if [ -n "${MXBENCH_ONLY:-}" ] && [[ "$w" != *"$MXBENCH_ONLY"* ]]; then continue; fi
    raw="$out/${rt//:/-}-nt$nt-r$round-$w.txt"
    rc=0
    env "${envs[@]}" MXBENCH_ONLY="$w" timeout "${MXBENCH_PEER_TIMEOUT:-60}" "$@" engine \
      > "$raw" 2> "$raw.stderr" || rc=$?
    if [ "$rc" -ne 0 ]; then
      local why="exit $rc"
      [ "$rc" -eq 124 ] && why="timed out after ${MXBENCH_PEER_TIMEOUT:-60} s"
      if [ "$rc" -eq 134 ]; then
        local at
        at="$(grep -m1 -oE '[A-Za-z_]+\.(c|cpp)[:(][0-9]+' "$raw.stderr" | tr '(' ':' || true)"
        why="aborted${at:+: assertion at $at}"
      fi
      log "$rt nt=$nt $w: $why (see $raw.stderr)"
      if grep -q "^$w"$'\t' "$raw"; then # measured, then failed: keep the figure, flag the run
        awk -F'\t' -v OFS='\t' -v why="$why" -v w="$w" '$1 == w { $4 = "FAIL: " why " after the workload" } { print }' \
          "$raw" > "$raw.tmp" && mv "$raw.tmp" "$raw"
      else
        printf '%s\tnan\t-\tFAIL: %s\t\n' "$w" "$why" >> "$raw"
      fi
    fi
    collect "$rt" "$nt" "$round" "$raw"
  done
}

rounds="${MXBENCH_ROUNDS:-1}"
for round in $(seq 1 "$rounds"); do
  for nt in ${MXBENCH_NTHREADS:-1 2}; do
    for i in "${!libs[@]}"; do
      raw="$out/${names[$i]}-nt$nt-r$round-$group.txt"
      log "round $round/$rounds: ${names[$i]} MXNET_CPU_WORKER_NTHREADS=$nt $group"
      rc=0
      MXNET_CPU_WORKER_NTHREADS="$nt" timeout "${MXBENCH_TIMEOUT:-600}" \
        "$out/mxbench" "${libs[$i]}" "$group" > "$raw" 2> "$raw.stderr" || rc=$?
      case "$rc" in
        0|2) ;;
        1) log "${names[$i]} nt=$nt: a check failed (see $raw)"; status=1 ;;
        124) log "${names[$i]} nt=$nt: timed out (see $raw)"; status=1 ;;
        *) log "${names[$i]} nt=$nt: exit $rc (see $raw, $raw.stderr)"; status=1 ;;
      esac
      [ "$rc" -le 2 ] || echo -e "(run ended with exit status $rc)\tnan\t-\tFAIL: exit $rc\t" >> "$raw"
      if [ "$group" = operator ] || [ "$group" = all ]; then
        # the same loop through MXNet's Python package (bench/python_kvstore.py)
        prc=0
        MXNET_LIBRARY_PATH="${libs[$i]}" MXNET_CPU_WORKER_NTHREADS="$nt" timeout "${MXBENCH_TIMEOUT:-600}" \
          "$venv_python" bench/python_kvstore.py >> "$raw" 2>> "$raw.stderr" || prc=$?
        [ "$prc" -eq 0 ] || { log "${names[$i]} nt=$nt: bench/python_kvstore.py exit $prc"; status=1; }
        # imperative Gluon training: steps/s, the share inside the library, memory over 10k steps
        prc=0
        MXNET_LIBRARY_PATH="${libs[$i]}" MXNET_CPU_WORKER_NTHREADS="$nt" timeout "${MXBENCH_TIMEOUT:-600}" \
          "$venv_python" bench/python_gluon.py >> "$raw" 2>> "$raw.stderr" || prc=$?
        [ "$prc" -eq 0 ] || { log "${names[$i]} nt=$nt: bench/python_gluon.py exit $prc"; status=1; }
        # convolution and pooling forward + backward on nt intra-op threads (bench/python_conv.py)
        prc=0
        MXNET_LIBRARY_PATH="${libs[$i]}" MXNET_CPU_WORKER_NTHREADS="$nt" OMP_NUM_THREADS="$nt" \
          timeout "${MXBENCH_TIMEOUT:-600}" "$venv_python" bench/python_conv.py >> "$raw" 2>> "$raw.stderr" || prc=$?
        [ "$prc" -eq 0 ] || { log "${names[$i]} nt=$nt: bench/python_conv.py exit $prc"; status=1; }
        # a Gluon ResNet-18 training step, imperative and hybridized, on nt intra-op threads
        # (bench/python_resnet_step.py)
        prc=0
        MXNET_LIBRARY_PATH="${libs[$i]}" MXNET_CPU_WORKER_NTHREADS="$nt" OMP_NUM_THREADS="$nt" \
          timeout "${MXBENCH_TIMEOUT:-600}" "$venv_python" bench/python_resnet_step.py >> "$raw" 2>> "$raw.stderr" || prc=$?
        [ "$prc" -eq 0 ] || { log "${names[$i]} nt=$nt: bench/python_resnet_step.py exit $prc"; status=1; }
        # the fused RNN operator forward + backward on nt intra-op threads (bench/python_rnn.py)
        prc=0
        MXNET_LIBRARY_PATH="${libs[$i]}" MXNET_CPU_WORKER_NTHREADS="$nt" OMP_NUM_THREADS="$nt" \
          timeout "${MXBENCH_TIMEOUT:-600}" "$venv_python" bench/python_rnn.py >> "$raw" 2>> "$raw.stderr" || prc=$?
        [ "$prc" -eq 0 ] || { log "${names[$i]} nt=$nt: bench/python_rnn.py exit $prc"; status=1; }
        # symbolic execution: a hybridized MLP step, CachedOp calls, a fused elementwise block
        # (bench/python_cachedop.py)
        prc=0
        MXNET_LIBRARY_PATH="${libs[$i]}" MXNET_CPU_WORKER_NTHREADS="$nt" timeout "${MXBENCH_TIMEOUT:-600}" \
          "$venv_python" bench/python_cachedop.py >> "$raw" 2>> "$raw.stderr" || prc=$?
        [ "$prc" -eq 0 ] || { log "${names[$i]} nt=$nt: bench/python_cachedop.py exit $prc"; status=1; }
        # data loading: RecordIO records, MNISTIter and CSVIter epochs (bench/python_io.py)
        prc=0
        MXNET_LIBRARY_PATH="${libs[$i]}" MXNET_CPU_WORKER_NTHREADS="$nt" MXBENCH_IO_DIR="$out/io" \
          timeout "${MXBENCH_TIMEOUT:-600}" "$venv_python" bench/python_io.py >> "$raw" 2>> "$raw.stderr" || prc=$?
        [ "$prc" -eq 0 ] || { log "${names[$i]} nt=$nt: bench/python_io.py exit $prc"; status=1; }
        # Embedding and LayerNorm forward + backward (bench/python_nnops.py)
        prc=0
        MXNET_LIBRARY_PATH="${libs[$i]}" MXNET_CPU_WORKER_NTHREADS="$nt" timeout "${MXBENCH_TIMEOUT:-600}" \
          "$venv_python" bench/python_nnops.py >> "$raw" 2>> "$raw.stderr" || prc=$?
        [ "$prc" -eq 0 ] || { log "${names[$i]} nt=$nt: bench/python_nnops.py exit $prc"; status=1; }
      fi
      collect "${names[$i]}" "$nt" "$round" "$raw"
    done
    for peer in ${peers[@]+"${peers[@]}"}; do
      case "$peer" in
        libgomp|libomp)
          log "round $round/$rounds: $peer OMP_NUM_THREADS=$nt"
          run_peer "$peer" "$nt" "$round" OMP_NUM_THREADS="$nt" -- "$out/omp_tasks-$peer" ;;
        starpu)
          for sched in "${starpu_scheds[@]}"; do
            log "round $round/$rounds: starpu STARPU_NCPU=$nt STARPU_SCHED=$sched"
            run_peer "starpu:$sched" "$nt" "$round" STARPU_NCPU="$nt" STARPU_SCHED="$sched" \
              STARPU_SILENT=1 STARPU_HOME="$out/starpu-home" -- "$out/starpu_tasks"
          done ;;
      esac
    done
  done
done

python3 bench/summarize.py "$results"
exit "$status"
