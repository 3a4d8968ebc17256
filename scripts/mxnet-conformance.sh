#!/usr/bin/env bash
# Runs MXNet 1.9.1's own Python unit tests (from a checkout of apache/mxnet at tag 1.9.1) on
# libmxrt and on the wheel's libmxnet.so, and prints the outcome of every test on both.
#
#   scripts/mxnet-conformance.sh MXNET_SRC [test_file ...]
#
# MXNET_SRC is the checkout (it needs tests/python/unittest and tests/python/common); the test
# files default to the ones the operator layer answers for: test_ndarray, test_optimizer,
# test_random and test_kvstore. The tests need nose (for their helpers) and scipy, which are
# installed into the reference venv when missing. Not part of make test: it needs the checkout.
# A file may carry a pytest -k expression after a colon (test_gluon:"hybrid or export").
# tests/python/train is on PYTHONPATH for the runs (as in MXNet's CI: test_module imports
# test_bucketing from there).
# MXRT_CONFORMANCE_OUT=DIR keeps each run's pytest output there.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="${1:?usage: $0 MXNET_SRC [test_file ...]}"
shift
files=("$@")
[ ${#files[@]} -gt 0 ] || files=(test_ndarray test_optimizer test_random test_kvstore)
unit="$src/tests/python/unittest"
[ -d "$unit" ] && [ -d "$src/tests/python/common" ] || { echo "no MXNet tests under $src" >&2; exit 2; }

venv="${MXNET_VENV:-$repo/.venv-mxnet}"
MXNET_VENV="$venv" bash "$repo/scripts/setup-mxnet.sh" >/dev/null
py="$venv/bin/python"
# scipy 1.10 is the last that accepts the wheel's numpy<1.24
"$py" -c 'import nose, scipy, pytest_timeout' 2>/dev/null ||
  "$py" -m pip install --disable-pip-version-check -q nose "scipy<1.11" "numpy<1.24" pytest-timeout >&2
lib="${MXRT_LIB:-$repo/target/release/libmxrt.so}"
[ -f "$lib" ] || { echo "$lib is not built: run make lib" >&2; exit 2; }

if [ -n "${MXRT_CONFORMANCE_OUT:-}" ]; then
  out="$MXRT_CONFORMANCE_OUT"; mkdir -p "$out"
else
  out="$(mktemp -d)"
  trap 'rm -rf "$out"' EXIT
fi
run() { # library label file [-k expression]
  local env=(env -u MXNET_LIBRARY_PATH) sel=()
  [ "$1" = mxnet ] || env=(env MXNET_LIBRARY_PATH="$1")
  [ -z "${4:-}" ] || sel=(-k "$4")
  (cd "$src" && "${env[@]}" PYTHONPATH="$src/tests/python/train${PYTHONPATH:+:$PYTHONPATH}" "$py" -m pytest -q -p no:cacheprovider --timeout 300 -W ignore \
     -rA "${sel[@]}" "tests/python/unittest/$3.py" > "$out/$2-$3.txt" 2>&1) || true
  sed -n 's/^\(PASSED\|FAILED\|ERROR\) [^:]*::\([^ ]*\).*/\2 \1/p' "$out/$2-$3.txt" | sort
}
for spec in "${files[@]}"; do
  f="${spec%%:*}" k=""
  [ "$f" = "$spec" ] || k="${spec#*:}"
  echo "== $f${k:+ (-k $k)}"
  join -a1 -a2 -e missing -o 0,1.2,2.2 <(run mxnet mxnet "$f" "$k") <(run "$lib" mxrt "$f" "$k") |
    awk '{ printf "  %-45s libmxnet %-7s libmxrt %-7s", $1, $2, $3;
           if ($2 == "PASSED" && $3 != "PASSED") printf "  <-"; printf "\n";
           if ($2 == "PASSED") { p++; if ($3 == "PASSED") both++ } }
         END { printf "  %d of the %d tests that pass on libmxnet pass on libmxrt\n", both, p }'
  # (no error lines is no failure: grep's status 1 must not end the script)
  { grep -h '^E  ' "$out/mxrt-$f.txt" || true; } | sed 's/^E *//' | sort | uniq -c | sort -rn |
    head -8 | sed 's/^/    mxrt error: /'
done
