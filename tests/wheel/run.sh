#!/usr/bin/env bash
# make test-wheel: builds the wheel, installs it into a fresh virtual environment (pip brings
# mxnet==1.9.1 and numpy from its dependencies) and checks it from there, with no Rust toolchain
# or source tree involved: a script through `python -m mxrt` and `mxrt-run` (argv, __main__,
# exit status, tracebacks), the same through mxrt.activate(), the refusal of activate() after
# mxnet was imported on libmxnet.so, a C program built against mxrt.include_dir() and
# mxrt.library_path(), the build without MPI (everything local runs, dist_* refused naming MPI),
# and, where Open MPI is installed, a dist_sync job started by the wheel's mxrt-launch.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
here=tests/wheel
fail() { printf 'test-wheel: FAIL: %s\n' "$*" >&2; exit 1; }
pass() { printf 'test-wheel: ok: %s\n' "$*"; }

wheel="$(bash scripts/build-wheel.sh | tail -n1)"
venv="$(pwd)/build/wheel/venv"
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --disable-pip-version-check -q "$wheel" \
  || fail "pip install $wheel"
py="$(cd "$venv/bin" && pwd)/python"
pkg="$("$py" -c 'import mxrt, os; print(os.path.dirname(mxrt.__file__))')"
case "$pkg" in "$venv"/*) ;; *) fail "mxrt imported from $pkg, not the venv" ;; esac
pass "installed $(basename "$wheel") into a fresh venv ($("$py" -m pip list 2>/dev/null | grep -E '^(mxnet|numpy) ' | tr -s ' ' | tr '\n' ' '))"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"  # nothing of the source tree on the way
src="$OLDPWD"

# 1. python -m mxrt: argv, __main__, the library, exit status, tracebacks
"$py" -m mxrt --no-mpi "$src/$here/train_script.py" a "b c" --exit 3 > out.txt 2> err.txt && rc=0 || rc=$?
[ "$rc" = 3 ] || { cat err.txt; fail "python -m mxrt: exit status $rc, want 3"; }
grep -q "^argv \['a', 'b c', '--exit', '3'\]$" out.txt || fail "argv: $(cat out.txt)"
grep -q "^name __main__$" out.txt || fail "__name__: $(cat out.txt)"
grep -q "^library $pkg/lib/libmxrt.so.0$" out.txt || fail "library: $(grep library out.txt)"
loss_m="$(sed -n 's/^loss //p' out.txt)"
"$py" -m mxrt "$src/$here/train_script.py" --raise > out.txt 2> err.txt && rc=0 || rc=$?
[ "$rc" = 1 ] || fail "uncaught exception: exit status $rc, want 1"
tail -n1 err.txt | grep -q "^ValueError: raised by the script$" || fail "traceback: $(cat err.txt)"
sed -n 2p err.txt | grep -q "train_script.py" || fail "traceback does not start in the script: $(cat err.txt)"
if grep -q "runpy\|mxrt/_run.py" err.txt; then fail "traceback shows mxrt's frames: $(cat err.txt)"; fi
"$venv/bin/mxrt-run" "$src/$here/train_script.py" > out.txt
[ "$(sed -n 's/^loss //p' out.txt)" = "$loss_m" ] || fail "mxrt-run: loss differs"
"$py" -m mxrt -c 'import sys, mxnet, mxrt; assert mxrt.active(); print(sys.argv)' x > out.txt
grep -q "^\['-c', 'x'\]$" out.txt || fail "-c: $(cat out.txt)"
pass "python -m mxrt / mxrt-run: argv, __main__, exit status 3, traceback from the script, loss $loss_m"

# the same script on MXNet's own library gives the same loss (within float rounding)
"$py" "$src/$here/train_script.py" > out.txt
loss_ref="$(sed -n 's/^loss //p' out.txt)"
grep -q "^library .*mxnet/libmxnet.so$" out.txt || fail "plain python did not run libmxnet.so"
"$py" -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > 1e-4 * max(1.0, abs(b)))" "$loss_m" "$loss_ref" \
  || fail "loss on libmxrt $loss_m, on libmxnet.so $loss_ref"
pass "same script on libmxnet.so: loss $loss_ref"

# 2. mxrt.activate() in a program; activate() after import mxnet refused
"$py" "$src/$here/activate_program.py" > out.txt || fail "activate_program.py"
grep -q "^argv \['from-activate'\]$" out.txt && grep -q "^activate ok" out.txt || fail "$(cat out.txt)"
"$py" "$src/$here/late_activate.py" > out.txt || fail "late_activate.py"
pass "mxrt.activate(); $(cut -c1-100 out.txt)"

# 3. a C program against include_dir() and library_path()
inc="$("$py" -m mxrt --include-dir)"
lib="$("$py" -m mxrt --no-mpi --library)"
cc -std=c11 -Wall -Wextra -Werror "$src/$here/hello.c" -I"$inc" "$lib" -Wl,-rpath,"$(dirname "$lib")" -o hello
./hello > out.txt || fail "C program"
pass "C: $(cat out.txt)"

# 4. the build without MPI: no libmpi needed, local stores run, dist_* refused naming MPI
if readelf -d "$lib" | grep -q 'NEEDED.*libmpi'; then fail "$lib needs libmpi"; fi
MXRT_MPI=0 "$py" -m mxrt "$src/$here/no_mpi.py" > out.txt || fail "no_mpi.py"
pass "$(cat out.txt)"

# 5. a dist_sync job started by the wheel's mxrt-launch (Python workers and a server)
if "$py" -c 'import mxrt, sys; sys.exit(not mxrt.has_mpi())' && command -v mpirun >/dev/null; then
  timeout 120 "$venv/bin/mxrt-launch" -n 2 -s 1 "$src/tests/dist/dist_job.py" > out.txt 2>&1 \
    || { cat out.txt; fail "mxrt-launch"; }
  grep -q "ok python rank 0" out.txt && grep -q "ok python rank 1" out.txt || fail "$(cat out.txt)"
  pass "mxrt-launch -n 2 -s 1: dist_sync job on the MPI build"
else
  pass "mxrt-launch: skipped (Open MPI is not installed here)"
fi
echo "test-wheel: all passed"
