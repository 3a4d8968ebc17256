#!/usr/bin/env bash
# The GPU suite against the fake CUDA driver (tests/gpu/fake_cuda.c; part of make test): builds the
# fake as libcuda.so.1 and checks what mxrt reports with no driver, with a driver without devices,
# with one that fails to start, and with 1 and 2 fake devices, from C and from MXNet's Python
# package; then GPU arrays on 2 fake devices (tests/gpu/gpu_arrays.c, gpu_python.py), with and
# without a delay on every stream operation, and that a library which does not wait for its GPU
# work fails them.
#
# GPU ops complete from per-device completion threads by default; the suite also runs with
# MXRT_GPU_COMPLETION=sync (the worker waits, as MXNet does) and on the other engines.
#
# Environment: MXRT_LIB_DIR (default target/release), BUILD (default build), PYTHON (the venv with
# MXNet's wheel; the Python checks are skipped when unset), DROP_SYNC_LIB_DIR (a build with the
# test-drop-stream-sync feature; that check is skipped when unset).
#
# MXRT_GPU_REAL=1 runs the same C checks against the machine's real CUDA driver instead (not part
# of make test: CI has no GPU): the devices nvidia-smi lists, GPU arrays on them (with one GPU the
# chains copy within it), every engine and completion mode, the bounded-memory, fork and
# sticky-error checks, and then bench/gpu_ops.c's copy, kernel and latency figures.
set -u
cd "$(dirname "$0")/../.."
lib_dir="$(cd "${MXRT_LIB_DIR:-target/release}" && pwd)"
build="${BUILD:-build}"
fake="$build/fakecuda"
mkdir -p "$fake"
cc=${CC:-gcc}
$cc -std=c11 -Wall -Wextra -Werror -O2 -fPIC -shared -Wl,-soname,libcuda.so.1 \
  tests/gpu/fake_cuda.c -o "$fake/libcuda.so.1" -lpthread || { echo "gpu: building the fake driver failed"; exit 1; }
ln -sf libcuda.so.1 "$fake/libcuda.so"
fake="$(cd "$fake" && pwd)"
for prog in gpu_probe gpu_arrays; do
  $cc -std=c11 -Wall -Wextra -Werror -O2 -pthread -Iinclude "tests/gpu/$prog.c" -o "$build/$prog" \
    -L"$lib_dir" -Wl,-rpath,"$lib_dir" -lmxrt -ldl || { echo "gpu: building $prog failed"; exit 1; }
done

failures=0
check() { # NAME ENV... -- PROGRAM ARGS...
  local name=$1; shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  local prog=$1; shift
  if out=$(env "${envs[@]}" timeout 120 "$build/$prog" "$@" 2>&1); then
    printf '  ok    %s\n' "$name"
    [ -z "${MXRT_GPU_REAL:-}" ] || sed 's/^/        | /' <<<"$out"
  else
    printf '  FAIL  %s\n' "$name"; sed 's/^/        | /' <<<"$out"
    failures=$((failures + 1))
  fi
}

if [ -n "${MXRT_GPU_REAL:-}" ]; then
  $cc -std=c11 -Wall -Wextra -Werror -O2 -pthread -Iinclude bench/gpu_ops.c -o "$build/gpu_ops" \
    -L"$lib_dir" -Wl,-rpath,"$lib_dir" -lmxrt -ldl || { echo "gpu: building gpu_ops failed"; exit 1; }
  n=$(nvidia-smi -L | grep -c '^GPU')
  echo "GPU suite (real CUDA driver, $n GPU(s)):"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sed 's/^/  /'
  check "the driver's GPUs"                       -- gpu_probe "$n"
  check "GPU arrays, 4 threads"                   -- gpu_arrays 0
  check "... waiting on the worker (MXRT_GPU_COMPLETION=sync)" MXRT_GPU_COMPLETION=sync -- gpu_arrays 0
  check "... on the ThreadedEngine"               MXNET_ENGINE_TYPE=ThreadedEngine -- gpu_arrays 0
  check "... on the NaiveEngine"                  MXNET_ENGINE_TYPE=NaiveEngine -- gpu_arrays 0
  check "GPU work in a forked child is -1"        -- gpu_arrays fork
  check "a sticky device error is -1"             -- gpu_arrays sticky 256
  echo "GPU ops (bench/gpu_ops.c; medians of 5):"
  "$build/gpu_ops" 256 || failures=$((failures + 1))
  MXRT_GPU_COMPLETION=sync "$build/gpu_ops" 16 | grep -e '(sync)' -e '^ok' || failures=$((failures + 1))
  if [ "$failures" != 0 ]; then echo "gpu: $failures check(s) failed"; exit 1; fi
  echo "gpu: all checks passed"
  exit 0
fi

echo "GPU suite (fake CUDA driver $fake/libcuda.so.1):"
check "no driver: 0 GPUs"                    LD_LIBRARY_PATH= -- gpu_probe 0 0 "no CUDA driver"
check "a driver without devices: 0 GPUs"     LD_LIBRARY_PATH="$fake" FAKECUDA_DEVICES=0 -- gpu_probe 0 0 "no device"
check "a driver that fails to start"         LD_LIBRARY_PATH="$fake" FAKECUDA_INIT_FAIL=1 -- gpu_probe 0 0 "failed to start"
check "1 device, 64 MiB"                     LD_LIBRARY_PATH="$fake" FAKECUDA_DEVICES=1 FAKECUDA_MEM_MB=64 -- gpu_probe 1 64
check "2 devices, 256 MiB"                   LD_LIBRARY_PATH="$fake" FAKECUDA_DEVICES=2 -- gpu_probe 2 256
fake2=(LD_LIBRARY_PATH="$fake" FAKECUDA_DEVICES=2 FAKECUDA_MEM_MB=64)
check "1 device: GPU arrays, 4 threads"      LD_LIBRARY_PATH="$fake" FAKECUDA_DEVICES=1 FAKECUDA_MEM_MB=64 -- gpu_arrays 64
check "2 devices: GPU arrays, 4 threads"     "${fake2[@]}" -- gpu_arrays 64
check "... with a 200 us delay per stream op" "${fake2[@]}" FAKECUDA_DELAY_US=200 -- gpu_arrays 64
check "... waiting on the worker (MXRT_GPU_COMPLETION=sync)" "${fake2[@]}" FAKECUDA_DELAY_US=200 MXRT_GPU_COMPLETION=sync -- gpu_arrays 64
check "... on the ThreadedEngine"             "${fake2[@]}" FAKECUDA_DELAY_US=100 MXNET_ENGINE_TYPE=ThreadedEngine -- gpu_arrays 64
check "... on the NaiveEngine"                "${fake2[@]}" FAKECUDA_DELAY_US=100 MXNET_ENGINE_TYPE=NaiveEngine -- gpu_arrays 64
check "... devices without peer access"       "${fake2[@]}" FAKECUDA_NO_PEER=1 -- gpu_arrays 64
check "... devices with memory pools"         "${fake2[@]}" FAKECUDA_MEMPOOLS=1 MXNET_ENABLE_GPU_P2P=0 -- gpu_arrays 64
check "a sticky device error is -1, gpu(1) still works" "${fake2[@]}" -- gpu_arrays sticky
check "GPU work in a forked child is -1"      "${fake2[@]}" -- gpu_arrays fork
if [ -n "${PYTHON:-}" ]; then
  pycheck() { # NAME ENV... -- PYTHON ARGS...
    local name=$1; shift
    local envs=()
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    if out=$(env "${envs[@]}" MXNET_LIBRARY_PATH="$lib_dir/libmxrt.so" timeout 120 "$PYTHON" "$@" 2>&1); then
      printf '  ok    %s\n' "$name"
    else
      printf '  FAIL  %s\n' "$name"; sed 's/^/        | /' <<<"$out"
      failures=$((failures + 1))
    fi
  }
  pycheck "MXNet's Python package: mx.context.num_gpus(), gpu_memory_info" "${fake2[@]}" FAKECUDA_MEM_MB=256 -- \
    -c "import mxnet as mx; n = mx.context.num_gpus(); assert n == 2, n; f, t = mx.context.gpu_memory_info(1); assert t == 256 << 20, t; print('ok', n)"
  pycheck "MXNet's Python package: GPU arrays (delay 100 us)" "${fake2[@]}" FAKECUDA_DELAY_US=100 -- tests/gpu/gpu_python.py
fi
if [ -n "${DROP_SYNC_LIB_DIR:-}" ]; then
  # the same suite against a library that completes GPU ops without waiting for their streams
  if env "${fake2[@]}" LD_LIBRARY_PATH="$fake:$DROP_SYNC_LIB_DIR" timeout 120 "$build/gpu_arrays" 64 >/dev/null 2>&1; then
    printf '  FAIL  %s\n' "a build that does not wait for GPU work passed the suite"
    failures=$((failures + 1))
  else
    printf '  ok    %s\n' "a build that does not wait for GPU work fails the suite"
  fi
fi
if [ "$failures" != 0 ]; then echo "gpu: $failures check(s) failed"; exit 1; fi
echo "gpu: all checks passed"
