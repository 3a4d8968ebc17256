"""Matrix products through MXNet's Python package on the library MXNET_LIBRARY_PATH names (the
wheel's libmxnet.so when unset): `nd.dot` on float32 shapes of an MLP layer, square products
and the im2col products of ResNet-like convolutions (m x k times k x n).

Each figure is GFLOP/s over the median of MXBENCH_REPEATS timed runs of enough products to take
a fraction of a second; the result is checked against numpy. MXBENCH_CLOCK=process times the
process's CPU time (run with OMP_NUM_THREADS=1 for one-thread figures).

Prints mxbench's result lines: name, value, unit, check, note (tab-separated).
"""
import os
import statistics
import sys
import time

import numpy as np
import mxnet as mx
from mxnet import nd

repeats = int(os.environ.get("MXBENCH_REPEATS", "5"))
clock = time.process_time if os.environ.get("MXBENCH_CLOCK") == "process" else time.perf_counter
status = 0

shapes = [
    (512, 512, 512),
    (128, 512, 784),    # MLP layer 784 -> 512, batch 128
    (1024, 1024, 1024),
    (64, 3136, 576),    # 3x3 conv, 64 -> 64 channels, 56x56 (weights x columns)
    (128, 784, 1152),   # 3x3 conv, 128 -> 128 channels, 28x28
    (256, 196, 2304),   # 3x3 conv, 256 -> 256 channels, 14x14
    (100, 100, 100),
]
rng = np.random.RandomState(0)
for m, n, k in shapes:
    a_np = rng.uniform(-1, 1, size=(m, k)).astype(np.float32)
    b_np = rng.uniform(-1, 1, size=(k, n)).astype(np.float32)
    a, b = nd.array(a_np), nd.array(b_np)
    out = nd.zeros((m, n))
    nd.dot(a, b, out=out)
    ok = np.allclose(out.asnumpy(), a_np @ b_np, rtol=1e-3, atol=1e-3)
    flops = 2.0 * m * n * k
    reps = max(3, int(2e9 / flops))
    times = []
    for _ in range(repeats):
        nd.waitall()
        t0 = clock()
        for _ in range(reps):
            nd.dot(a, b, out=out)
        nd.waitall()
        times.append((clock() - t0) / reps)
    gflops = flops / statistics.median(times) * 1e-9
    if not ok:
        status = 1
    print(f"dot_{m}x{n}x{k}\t{gflops:.1f}\tGFLOP/s\t{'ok' if ok else 'MISMATCH'}\t"
          f"median of {repeats}")
sys.exit(status)
