"""A training-style loop through MXNet's Python package on the library MXNET_LIBRARY_PATH names
(the wheel's own libmxnet.so when unset): a local KVStore with mx.optimizer's SGD with momentum,
10 arrays of 1 M float32, each step pushing a gradient and pulling the updated weight.

Prints mxbench's result line: name, value, unit, check, note (tab-separated).
"""
import os
import statistics
import sys
import time

import numpy as np
import mxnet as mx

K, N, STEPS = 10, 1 << 20, 20
repeats = int(os.environ.get("MXBENCH_REPEATS", "3"))
kv = mx.kv.create("local")
kv.set_optimizer(mx.optimizer.SGD(learning_rate=0.01, momentum=0.9, wd=1e-4))
keys = list(range(K))
weights = [mx.nd.ones((N,)) for _ in keys]
grads = [mx.nd.ones((N,)) * 0.5 for _ in keys]
kv.init(keys, weights)
kv.pull(keys, out=weights)
mx.nd.waitall()
rates = []
for _ in range(repeats):
    t0 = time.perf_counter()
    for _ in range(STEPS):
        kv.push(keys, grads)
        kv.pull(keys, out=weights)
    mx.nd.waitall()
    rates.append(STEPS / (time.perf_counter() - t0))
# every weight followed the same momentum recurrence: check one value against numpy
w, mom = np.float32(1.0), np.float32(0.0)
for _ in range(STEPS * repeats):
    mom = np.float32(0.9) * mom - np.float32(0.01) * np.float32(1e-4) * w - np.float32(0.01) * np.float32(0.5)
    w = w + mom
got = weights[K - 1][N - 1].asscalar()
check = "ok" if abs(got - w) <= 1e-4 * max(1.0, abs(w)) else f"FAIL: weight {got}, expected {w}"
print(f"python.kvstore_sgd_mom_10x1M\t{statistics.median(rates):.4g}\tsteps/s\t{check}\tmx.kv local + mx.optimizer.SGD")
sys.exit(0 if check == "ok" else 1)
