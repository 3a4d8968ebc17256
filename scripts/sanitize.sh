#!/usr/bin/env bash
# Runs the C examples under sanitizers against libmxrt.
#
#   scripts/sanitize.sh            AddressSanitizer + UBSan, then valgrind memcheck (make sanitize)
#   scripts/sanitize.sh asan       only AddressSanitizer + UBSan
#   scripts/sanitize.sh valgrind   only valgrind memcheck
#   scripts/sanitize.sh tsan       ThreadSanitizer, fully instrumented (nightly Rust; optional,
#                                  make sanitize-tsan): the library and std built with
#                                  -Zsanitizer=thread, the examples with gcc -fsanitize=thread,
#                                  linked against rustc's TSan runtime.
#
# The library is built with `--no-default-features` (no mimalloc) into target/sanitize: with the
# system allocator, ASan's and valgrind's malloc interposition see Rust's allocations too, so
# leaks and bad frees inside the library are reported, not only the C side's. (gcc's TSan alone,
# against an uninstrumented library, reports false races across Rust's futex-based locks, hence
# the fully instrumented nightly build for TSan.)
#
# Needs gcc with libasan/libubsan and valgrind; installs them with apt-get when missing and root.
# Environment: CC (default gcc), CARGO (default cargo), SANITIZE_TARGET_DIR (default
# target/sanitize), VALGRIND_FLAGS (extra flags), MXNET_VENV (default .venv-mxnet).
set -euo pipefail

mode="${1:-all}"
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
CC="${CC:-gcc}"
CARGO="${CARGO:-cargo}"
tdir="${SANITIZE_TARGET_DIR:-$root/target/sanitize}"
out="$root/build/sanitize"
mkdir -p "$out"
# c_examples/predict.c reads a model and MXNet's outputs for it from predict_model/, written by
# examples/predict_model.py in MXNet's reference venv (MXNET_VENV, default .venv-mxnet)
if [ ! -f "$out/predict_model/expected.nd" ]; then
  env -u MXNET_LIBRARY_PATH "${MXNET_VENV:-$root/.venv-mxnet}/bin/python" \
    examples/predict_model.py "$out/predict_model" >/dev/null
fi

need_pkg() { # need_pkg <check command> <debian package>
  if ! eval "$1" >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "sanitize: installing $2"
      apt-get install -y -q "$2" >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q "$2" >/dev/null; }
    else
      echo "sanitize: $2 is missing (install it, e.g. apt-get install $2)" >&2
      exit 1
    fi
  fi
}

# every example but kvstore_dist, which is an MPI job (make run-examples runs it under the
# launcher; the sanitizer builds have no dist feature)
examples=()
for src in c_examples/*.c; do
  [ "$src" = c_examples/kvstore_dist.c ] || examples+=("$src")
done
lib_dir="$tdir/test-fast"

build_lib() {
  echo "==> building libmxrt without mimalloc into $tdir"
  CARGO_TARGET_DIR="$tdir" "$CARGO" build --profile test-fast --no-default-features --quiet \
    || { echo "sanitize: building the library failed" >&2; exit 1; }
  soname_link "$lib_dir"
}

soname_link() { # the library's SONAME is libmxrt.so.<major>
  local major
  major="$(sed -n 's/^version = "\([0-9]*\)\..*/\1/p' Cargo.toml | head -n1)"
  ln -sf libmxrt.so "$1/libmxrt.so.$major"
}

# examples that write files (profile traces) write them into build/sanitize
run_in_out() { (cd "$out" && "$@"); }

cflags=(-std=c11 -Wall -Wextra -Werror -g -O1 -pthread -Iinclude)

run_asan() {
  need_pkg "echo 'int main(void){return 0;}' | $CC -x c -fsanitize=address,undefined -o /dev/null -" "libasan8"
  local failed=0
  for src in "${examples[@]}"; do
    local name exe log
    name="$(basename "$src" .c)"
    exe="$out/$name.asan"
    log="$out/$name.asan.log"
    "$CC" "${cflags[@]}" -fsanitize=address,undefined -fno-omit-frame-pointer \
      -fno-sanitize-recover=undefined "$src" -o "$exe" \
      -L"$lib_dir" -Wl,-rpath,"$lib_dir" -lmxrt -lm
    # leak checking on; any ASan/UBSan report fails the run (exit code 23)
    if ASAN_OPTIONS="detect_leaks=1:exitcode=23:halt_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1" \
       UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:exitcode=23" \
       run_in_out "$exe" >"$log" 2>&1; then
      echo "asan+ubsan  $name: clean"
    else
      echo "asan+ubsan  $name: FAILED (log: $log)"
      tail -n 40 "$log"
      failed=1
    fi
  done
  return $failed
}

# A process forked from a threaded program has only the forking thread: the bookkeeping of the
# parent's other threads (their spawn closures, their thread-local destructor lists) is
# unreachable in the child, and memcheck reports it as lost at the child's exit. Only those two
# allocation sites are suppressed (ndarray_basics forks a child to test shared memory).
write_suppressions() {
  cat >"$out/fork-child.supp" <<'SUPP'
{
   thread-spawned-by-the-parent-of-a-fork-child
   Memcheck:Leak
   match-leak-kinds: definite
   fun:malloc
   ...
   fun:*spawn_unchecked*
}
{
   thread-local-destructor-list-of-a-parent-thread
   Memcheck:Leak
   match-leak-kinds: definite
   fun:calloc
   fun:__cxa_thread_atexit_impl
}
SUPP
}

run_valgrind() {
  need_pkg "command -v valgrind" "valgrind"
  write_suppressions
  local failed=0
  for src in "${examples[@]}"; do
    local name exe log
    name="$(basename "$src" .c)"
    exe="$out/$name.vg"
    log="$out/$name.valgrind.log"
    "$CC" "${cflags[@]}" "$src" -o "$exe" -L"$lib_dir" -Wl,-rpath,"$lib_dir" -lmxrt -lm
    # errors, and definitely lost blocks, fail the run (exit code 9)
    # shellcheck disable=SC2086
    if run_in_out valgrind --quiet --error-exitcode=9 --leak-check=full --errors-for-leak-kinds=definite \
         --show-leak-kinds=definite --track-origins=yes --suppressions="$out/fork-child.supp" --log-file="$log" ${VALGRIND_FLAGS:-} \
         "$exe" >"$log.stdout" 2>&1; then
      echo "valgrind    $name: clean"
    else
      echo "valgrind    $name: FAILED (log: $log)"
      tail -n 40 "$log"
      failed=1
    fi
  done
  return $failed
}

run_tsan() {
  if ! rustup toolchain list 2>/dev/null | grep -q nightly; then
    echo "sanitize tsan: needs a nightly toolchain (rustup toolchain install nightly --component rust-src)" >&2
    exit 1
  fi
  # -Zbuild-std needs the standard library's sources
  if ! rustup component list --toolchain nightly --installed 2>/dev/null | grep -q '^rust-src'; then
    echo "sanitize tsan: installing rust-src for nightly"
    rustup component add rust-src --toolchain nightly
  fi
  local triple=x86_64-unknown-linux-gnu
  local ttdir="$root/target/tsan"
  echo "==> building libmxrt and std with -Zsanitizer=thread (nightly) into $ttdir"
  RUSTFLAGS="-Zsanitizer=thread" CARGO_TARGET_DIR="$ttdir" \
    cargo +nightly build --release --no-default-features -Zbuild-std --target "$triple" --quiet \
    || { echo "sanitize tsan: the instrumented build failed" >&2; return 1; }
  local sysroot rt
  sysroot="$(rustc +nightly --print sysroot)"
  rt="$sysroot/lib/rustlib/$triple/lib/librustc-nightly_rt.tsan.a"
  local tlib="$ttdir/$triple/release"
  soname_link "$tlib"
  local failed=0
  for src in "${examples[@]}"; do
    local name log
    name="$(basename "$src" .c)"
    log="$out/$name.tsan.log"
    # gcc's libtsan lacks symbols rustc's instrumentation uses: compile with gcc, link rustc's runtime
    "$CC" "${cflags[@]}" -fsanitize=thread -c "$src" -o "$out/$name.tsan.o"
    "$CC" -pthread "$out/$name.tsan.o" -o "$out/$name.tsan" -Wl,--whole-archive "$rt" -Wl,--no-whole-archive \
      -rdynamic -L"$tlib" -Wl,-rpath,"$tlib" -lmxrt -lpthread -ldl -lm -lstdc++
    if TSAN_OPTIONS="halt_on_error=1:exitcode=66" run_in_out "$out/$name.tsan" >"$log" 2>&1; then
      echo "tsan        $name: clean"
    else
      echo "tsan        $name: FAILED (log: $log)"
      tail -n 60 "$log"
      failed=1
    fi
  done
  return $failed
}

status=0
case "$mode" in
  all) build_lib; run_asan || status=1; run_valgrind || status=1 ;;
  asan) build_lib; run_asan || status=1 ;;
  valgrind) build_lib; run_valgrind || status=1 ;;
  tsan) run_tsan || status=1 ;;
  *) echo "usage: $0 [all|asan|valgrind|tsan]" >&2; exit 2 ;;
esac
if [ $status = 0 ]; then echo "sanitize ($mode): all clean"; fi
exit $status
