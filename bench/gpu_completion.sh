#!/usr/bin/env bash
# How GPU ops complete (part of make bench): independent copies and fills on one fake GPU
# (tests/gpu/fake_cuda.c, FAKECUDA_DELAY_US of device time per operation), one GPU worker and
# one copy worker, through MXNet's Python package (bench/gpu_completion.py), in one run:
#   - events: the worker queues an op and moves on; the device's completion thread completes it
#     (mxrt's default);
#   - sync: the worker waits for its stream after every op (MXRT_GPU_COMPLETION=sync, MXNet's
#     way).
# Prints microseconds per op (median of MXBENCH_REPEATS runs) and the ratio.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
delay="${FAKECUDA_DELAY_US:-50}"
venv="${MXNET_VENV:-$repo/.venv-mxnet}"
py="$venv/bin/python"
[ -x "$py" ] || MXNET_VENV="$venv" bash scripts/setup-mxnet.sh >/dev/null
lib="$(cd target/release && pwd)/libmxrt.so"
[ -f "$lib" ] || { echo "gpu_completion.sh: $lib not found (make lib)" >&2; exit 1; }
fake="$repo/build/fakecuda"
mkdir -p "$fake"
${CC:-gcc} -std=c11 -O2 -fPIC -shared -Wl,-soname,libcuda.so.1 tests/gpu/fake_cuda.c \
  -o "$fake/libcuda.so.1" -lpthread
run() { # MODE
  env LD_LIBRARY_PATH="$fake" FAKECUDA_DEVICES=1 FAKECUDA_DELAY_US="$delay" \
    MXNET_GPU_WORKER_NTHREADS=1 MXNET_GPU_COPY_NTHREADS=1 MXRT_GPU_COMPLETION="$1" \
    MXNET_LIBRARY_PATH="$lib" "$py" bench/gpu_completion.py
}
events=$(run events)
sync=$(run sync)
printf '\nGPU op completion (fake driver, %s us of device time per op, 1 worker + 1 copy worker)\n' "$delay"
printf '| completion | us per op |\n|---|---|\n| events (mxrt) | %s |\n| stream wait on the worker (MXNet) | %s |\n' "$events" "$sync"
awk -v e="$events" -v s="$sync" 'BEGIN { printf "events are %.2fx faster\n", s / e }'
