"""GPU op completion, measured on the fake CUDA driver (bench/gpu_completion.sh): N independent
host->GPU copies and fills of small arrays on gpu(0), pushed by MXNet's Python package, then one
wait. Prints the microseconds per op of the median of several runs.

The fake runs each stream operation FAKECUDA_DELAY_US late, which stands in for device time:
the question is whether an engine worker waits for it (MXRT_GPU_COMPLETION=sync, MXNet's way)
or takes its next op while the device works (completion through events, the default)."""
import os
import statistics
import time

import mxnet as mx
import numpy as np

n = int(os.environ.get("GPU_BENCH_OPS", "400"))
elems = int(os.environ.get("GPU_BENCH_ELEMS", "64"))
runs = int(os.environ.get("MXBENCH_REPEATS", "5"))
src = mx.nd.array(np.ones((elems,), "float32"))
dsts = [mx.nd.zeros((elems,), ctx=mx.gpu(0)) for _ in range(n)]
mx.nd.waitall()

per_op = []
for _ in range(runs):
    t = time.perf_counter()
    for i, d in enumerate(dsts):
        if i % 2:
            src.copyto(d)
        else:
            mx.nd.full((elems,), 2.0, ctx=mx.gpu(0), out=d)
    mx.nd.waitall()
    per_op.append((time.perf_counter() - t) / n * 1e6)
for d in dsts[:4]:
    assert d.asnumpy()[0] in (1.0, 2.0)
print(f"{statistics.median(per_op):.1f}")
