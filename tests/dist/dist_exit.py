"""One process of a distributed-kvstore job whose workers leave through the interpreter's exit,
with MXNet's unmodified Python package on libmxrt (run by tests/dist/run.sh under mxrt-launch
with MXNET_LIBRARY_PATH set; servers serve inside `import mxnet`).

    dist_exit.py MODE

    sys_exit   the last worker calls sys.exit(1) at round 3 while the others push on
    raise      the last worker raises an uncaught exception at round 3
    end        every worker ends its rounds with sys.exit(0), the store still alive

The first two must end the whole job at once with a message naming the worker; the last must
end it cleanly with status 0.
"""
import sys

import mxnet as mx
import numpy as np

mode = sys.argv[1]
kv = mx.kv.create("dist_sync")
rank, n = kv.rank, kv.num_workers
w = mx.nd.ones((4,))
kv.init(2, w)
for step in range(6 if mode != "end" else 3):
    if step == 2 and rank == n - 1 and mode != "end":
        print("worker rank %d: leaving by %s at round %d" % (rank, mode, step + 1), flush=True)
        if mode == "sys_exit":
            sys.exit(1)
        if mode == "raise":
            raise RuntimeError("a worker fails on purpose")
    kv.push(2, w)
    kv.pull(2, out=w)
# without an updater the round's sum replaces the value: n, n^2, n^3
np.testing.assert_allclose(w.asnumpy(), np.full((4,), float(n) ** 3))
print("ok exit %s rank %d" % (mode, rank), flush=True)
sys.exit(0)
