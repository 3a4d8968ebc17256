#!/usr/bin/env bash
# The GPU suite against the fake CUDA driver (tests/gpu/fake_cuda.c; part of make test): builds the
# fake as libcuda.so.1 and checks what mxrt reports with no driver, with a driver without devices,
# with one that fails to start, and with 1 and 2 fake devices, from C and from MXNet's Python
# package.
#
# Environment: MXRT_LIB_DIR (default target/release), BUILD (default build), PYTHON (the venv with
# MXNet's wheel; the Python check is skipped when unset).
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
$cc -std=c11 -Wall -Wextra -Werror -O2 -Iinclude tests/gpu/gpu_probe.c -o "$build/gpu_probe" \
  -L"$lib_dir" -Wl,-rpath,"$lib_dir" -lmxrt || { echo "gpu: building gpu_probe failed"; exit 1; }

failures=0
check() { # NAME ENV... -- ARGS...
  local name=$1; shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  if out=$(env "${envs[@]}" timeout 60 "$build/gpu_probe" "$@" 2>&1); then
    printf '  ok    %s\n' "$name"
  else
    printf '  FAIL  %s\n' "$name"; sed 's/^/        | /' <<<"$out"
    failures=$((failures + 1))
  fi
}

echo "GPU suite (fake CUDA driver $fake/libcuda.so.1):"
check "no driver: 0 GPUs"                    LD_LIBRARY_PATH= -- 0 0 "no CUDA driver"
check "a driver without devices: 0 GPUs"     LD_LIBRARY_PATH="$fake" FAKECUDA_DEVICES=0 -- 0 0 "no device"
check "a driver that fails to start"         LD_LIBRARY_PATH="$fake" FAKECUDA_INIT_FAIL=1 -- 0 0 "failed to start"
check "1 device, 64 MiB"                     LD_LIBRARY_PATH="$fake" FAKECUDA_DEVICES=1 FAKECUDA_MEM_MB=64 -- 1 64
check "2 devices, 256 MiB"                   LD_LIBRARY_PATH="$fake" FAKECUDA_DEVICES=2 -- 2 256
if [ -n "${PYTHON:-}" ]; then
  if out=$(LD_LIBRARY_PATH="$fake" FAKECUDA_DEVICES=2 MXNET_LIBRARY_PATH="$lib_dir/libmxrt.so" \
      timeout 120 "$PYTHON" -c "import mxnet as mx; n = mx.context.num_gpus(); assert n == 2, n; f, t = mx.context.gpu_memory_info(1); assert t == 256 << 20, t; print('ok', n)" 2>&1); then
    printf '  ok    %s\n' "MXNet's Python package: mx.context.num_gpus(), gpu_memory_info"
  else
    printf '  FAIL  %s\n' "MXNet's Python package"; sed 's/^/        | /' <<<"$out"
    failures=$((failures + 1))
  fi
fi
if [ "$failures" != 0 ]; then echo "gpu: $failures check(s) failed"; exit 1; fi
echo "gpu: all checks passed"
