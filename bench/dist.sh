#!/usr/bin/env bash
# The distributed kvstore benchmark (part of make bench): 4 MiB float32 push+pull rounds through
# MXNet's Python package (bench/dist_round.py), 2 workers, in one run:
#   - libmxnet.so 1.9.1's ps-lite store: a scheduler, 1 server and 2 workers on loopback;
#   - libmxrt with 1 server (tools/mxrt-launch -n 2 -s 1);
#   - libmxrt without servers (dist_sync as an allreduce, -n 2 -s 0);
#   - a bare MPI_Allreduce of the same array (bench/mpi_allreduce.c), the floor for the latter.
# Each configuration runs MXBENCH_REPEATS times (default 3); the table shows the median of the
# runs' medians and the ratios.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
repeats="${MXBENCH_REPEATS:-3}"
rounds="${DIST_BENCH_ROUNDS:-200}"
out="${MXBENCH_OUT:-$repo/target/mxbench}"
mkdir -p "$out"
venv="${MXNET_VENV:-$repo/.venv-mxnet}"
py="$venv/bin/python"
[ -x "$py" ] || MXNET_VENV="$venv" bash scripts/setup-mxnet.sh >/dev/null
lib="$(cd target/release && pwd)/libmxrt.so"
[ -f "$lib" ] || { echo "dist.sh: $lib not found (make lib)" >&2; exit 1; }
bash scripts/setup-mpi.sh
mpicc -O2 -o "$out/mpi_allreduce" bench/mpi_allreduce.c
root=""; [ "$(id -u)" = 0 ] && root=--allow-run-as-root
export DIST_BENCH_ROUNDS="$rounds"

# prints the median ms/round of one job (the value column of worker 0's result line)
value() { awk -F'\t' '$4 == "ok" { print $2; found = 1 } END { if (!found) exit 1 }'; }

mxnet_ps() {
  local port=$((9100 + RANDOM % 800)) pids=() rc=0
  export DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=$port DMLC_NUM_WORKER=2 DMLC_NUM_SERVER=1 \
    DMLC_NODE_HOST=127.0.0.1
  DMLC_ROLE=scheduler timeout 120 "$py" bench/dist_round.py >/dev/null 2>&1 & pids+=($!)
  DMLC_ROLE=server timeout 120 "$py" bench/dist_round.py >/dev/null 2>&1 & pids+=($!)
  # ps-lite numbers the workers as they register: either may be worker 0, which prints
  DMLC_ROLE=worker timeout 120 "$py" bench/dist_round.py > "$out/dist-mxnet-a.txt" 2>&1 & pids+=($!)
  DMLC_ROLE=worker timeout 120 "$py" bench/dist_round.py > "$out/dist-mxnet-b.txt" 2>&1 & pids+=($!)
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  unset DMLC_PS_ROOT_URI DMLC_PS_ROOT_PORT DMLC_NUM_WORKER DMLC_NUM_SERVER DMLC_NODE_HOST
  [ "$rc" = 0 ] && cat "$out/dist-mxnet-a.txt" "$out/dist-mxnet-b.txt" | value
}
mxrt_job() { # servers
  MXNET_LIBRARY_PATH="$lib" timeout 120 tools/mxrt-launch -n 2 -s "$1" "$py" bench/dist_round.py \
    2>/dev/null | value
}
bare_mpi() {
  timeout 120 mpirun --oversubscribe $root -np 2 "$out/mpi_allreduce" 2>/dev/null |
    awk -F'\t' '{ print $2 }'
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else print v[int((NR + 1) / 2)] }'; }
declare -A runs
for r in $(seq "$repeats"); do
  echo "dist.sh: round $r/$repeats" >&2
  runs[mxnet]+="$(mxnet_ps || echo nan) "
  runs[mxrt1]+="$(mxrt_job 1 || echo nan) "
  runs[mxrt0]+="$(mxrt_job 0 || echo nan) "
  runs[mpi]+="$(bare_mpi || echo nan) "
done
m() { tr ' ' '\n' <<<"${runs[$1]}" | grep -v '^$' | median; }
mx=$(m mxnet); s1=$(m mxrt1); s0=$(m mxrt0); mp=$(m mpi)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2fx", a / b; else print "n/a" }'; }
echo
echo "| 4 MiB float32, 2 workers (ms per round, median of $repeats repeats of $rounds rounds) | ms | vs libmxnet.so ps-lite | vs bare MPI_Allreduce |"
echo "|---|---:|---:|---:|"
echo "| libmxnet.so 1.9.1, ps-lite, 1 server: push+pull | $mx | 1.00x | |"
echo "| mxrt dist_sync, 1 server: push+pull | $s1 | $(ratio "$mx" "$s1") faster | |"
echo "| mxrt dist_sync, no server (allreduce): push+pull | $s0 | $(ratio "$mx" "$s0") faster | $(ratio "$mp" "$s0") of its speed |"
echo "| bare MPI_Allreduce (OpenMPI) | $mp | | 1.00x |"
echo "repeats: mxnet [${runs[mxnet]}] mxrt-1-server [${runs[mxrt1]}] mxrt-no-server [${runs[mxrt0]}] mpi [${runs[mpi]}]" >&2
