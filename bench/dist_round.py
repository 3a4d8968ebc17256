"""One process of the distributed kvstore benchmark: workers time push+pull rounds of one
float32 array through MXNet's Python package (on libmxnet.so's ps-lite store, or on libmxrt
with MXNET_LIBRARY_PATH); servers and a scheduler just serve (the package does that at import).

    DIST_BENCH_ELEMS   elements of the array (default 1 M: 4 MiB)
    DIST_BENCH_ROUNDS  timed rounds (default 200), after 20 untimed ones
    DIST_BENCH_NAME    the result line's name

Worker 0 prints mxbench's result line: name, median ms per round, unit, check, note.
"""
import os
import statistics
import time

import numpy as np
import mxnet as mx

n = int(os.environ.get("DIST_BENCH_ELEMS", str(1 << 20)))
rounds = int(os.environ.get("DIST_BENCH_ROUNDS", "200"))
name = os.environ.get("DIST_BENCH_NAME", "dist_round")
kv = mx.kv.create(os.environ.get("DIST_BENCH_TYPE", "dist_sync"))
rank, workers = kv.rank, kv.num_workers
grad = mx.nd.ones((n,)) * (rank + 1)
out = mx.nd.zeros((n,))
kv.init(0, mx.nd.zeros((n,)))
times = []
for i in range(rounds + 20):
    t0 = time.perf_counter()
    kv.push(0, grad)
    kv.pull(0, out=out)
    out.wait_to_read()
    if i >= 20:
        times.append(time.perf_counter() - t0)
# the check: one more round from fresh arrays (libmxnet.so writes pulled values back into a
# single pushed CPU array, so the timed rounds' gradients drift there)
kv.push(0, mx.nd.ones((n,)) * (rank + 1))
kv.pull(0, out=out)
want = workers * (workers + 1) / 2.0
got = out.asnumpy()
ok = bool(np.all(got == want))
if rank == 0:
    med = statistics.median(times) * 1e3
    print("%s\t%.3f\tms/round\t%s\t%d workers, %d MiB float32, median of %d" % (
        name, med, "ok" if ok else "WRONG(%g)" % got[0], workers, n * 4 >> 20, rounds), flush=True)
