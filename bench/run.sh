#!/usr/bin/env bash
# Build bench/mxbench.c and run it against libmxrt.so (if built) and the reference libmxnet.so
# (from scripts/setup-mxnet.sh), with MXNET_CPU_WORKER_NTHREADS=1 and 2; print a markdown table.
#
#   bench/run.sh [engine|ndarray|kvstore|all]        (default: all)
#
#   MXRT_LIB          default target/release/libmxrt.so (skipped if absent)
#   MXNET_LIB         use this libmxnet.so instead of running scripts/setup-mxnet.sh
#   MXBENCH_NTHREADS  worker thread counts to try (default "1 2")
#   MXBENCH_REPEATS   repeats per workload, the median is reported (default 3)
#   MXBENCH_TIMEOUT   seconds per mxbench run (default 600)
#   MXBENCH_OUT       directory for the raw outputs (default target/mxbench)
#   MXBENCH_ONLY      run only the workloads whose name contains this text
# Exit status: non-zero if a run failed a check, crashed or timed out (missing symbols are
# reported in the table but do not fail the script).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
group="${1:-all}"
case "$group" in engine|ndarray|kvstore|all) ;; *) echo "usage: $0 [engine|ndarray|kvstore|all]" >&2; exit 64 ;; esac
out="${MXBENCH_OUT:-$repo/target/mxbench}"
mkdir -p "$out"
cc="${CC:-cc}"
"$cc" -std=c11 -O2 -Wall -Wextra -Werror -pthread -o "$out/mxbench" bench/mxbench.c -ldl

libs=()
names=()
mxrt="${MXRT_LIB:-target/release/libmxrt.so}"
if [ -f "$mxrt" ]; then
  libs+=("$(cd "$(dirname "$mxrt")" && pwd)/$(basename "$mxrt")")
  names+=(mxrt)
else
  echo "run.sh: $mxrt not found (cargo build --release), measuring libmxnet.so only" >&2
fi
if [ -n "${MXNET_LIB:-}" ]; then
  mxnet="$MXNET_LIB"
else
  mxnet="$(scripts/setup-mxnet.sh | tail -n 1)"
fi
libs+=("$mxnet")
names+=(mxnet)

status=0
results="$out/results.tsv"
: > "$results"
for nt in ${MXBENCH_NTHREADS:-1 2}; do
  for i in "${!libs[@]}"; do
    raw="$out/${names[$i]}-nt$nt-$group.txt"
    echo "run.sh: ${names[$i]} MXNET_CPU_WORKER_NTHREADS=$nt $group" >&2
    rc=0
    MXNET_CPU_WORKER_NTHREADS="$nt" timeout "${MXBENCH_TIMEOUT:-600}" \
      "$out/mxbench" "${libs[$i]}" "$group" > "$raw" 2> "$raw.stderr" || rc=$?
    case "$rc" in
      0|2) ;;
      1) echo "run.sh: ${names[$i]} nt=$nt: a check failed (see $raw)" >&2; status=1 ;;
      124) echo "run.sh: ${names[$i]} nt=$nt: timed out (see $raw)" >&2; status=1 ;;
      *) echo "run.sh: ${names[$i]} nt=$nt: exit $rc (see $raw, $raw.stderr)" >&2; status=1 ;;
    esac
    [ "$rc" -le 2 ] || echo -e "(run ended with exit status $rc)\tnan\t-\tFAIL: exit $rc\t" >> "$raw"
    grep -v '^#' "$raw" | awk -F'\t' -v lib="${names[$i]}" -v nt="$nt" 'NF >= 4 {
      print lib "\t" nt "\t" $1 "\t" $2 "\t" $3 "\t" $4 }' >> "$results"
  done
done

# Markdown table: one row per (workload, threads); "speedup" > 1 means mxrt is better
# (higher is better for rates, lower for s, us/call and MiB).
awk -F'\t' '
  { key = $3 "\t" $2
    if (!(key in seen)) { seen[key] = 1; order[++n] = key }
    val[$1, key] = $4; unit[key] = ($5 == "-" ? unit[key] : $5)
    chk[$1, key] = $6 }
  function fmt(v) { return (v == "" || v == "nan") ? "n/a" : sprintf("%.4g", v) }
  END {
    print "| workload | threads | unit | libmxnet.so | libmxrt.so | speedup (mxrt) | checks |"
    print "|---|---|---|---|---|---|---|"
    for (i = 1; i <= n; i++) {
      k = order[i]; split(k, parts, "\t")
      a = val["mxnet", k]; b = val["mxrt", k]; u = unit[k]
      r = "n/a"
      if (a != "" && b != "" && a != "nan" && b != "nan" && a + 0 > 0 && b + 0 > 0)
        r = sprintf("%.2fx", (u == "s" || u == "us/call" || u == "MiB") ? a / b : b / a)
      c = "mxnet: " chk["mxnet", k]
      if (("mxrt", k) in chk) c = c "; mxrt: " chk["mxrt", k]
      gsub(/\|/, "/", c)
      printf "| %s | %s | %s | %s | %s | %s | %s |\n", parts[1], parts[2], u, fmt(a), fmt(b), r, c
    }
  }' "$results"
exit "$status"
