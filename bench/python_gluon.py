"""An imperative Gluon training step through MXNet's Python package on the library
MXNET_LIBRARY_PATH names (the wheel's libmxnet.so when unset): Dense(32, relu) -> Dense(10) on
batches of 16 of 20 features, SoftmaxCrossEntropyLoss, autograd.record/backward, Trainer(sgd).
This loop is bound by per-call overhead; the package's own Python code costs the same on both
libraries, so a second, instrumented run times every call into the library to give the share
of a step spent inside it. A long run reports resident memory after 1,000 and after 10,000
steps (flat memory: the two within a few percent).

Prints mxbench's result lines: name, value, unit, check, note (tab-separated).
"""
import os
import statistics
import sys
import time

import numpy as np
import mxnet as mx
from mxnet import autograd as ag, gluon, nd

repeats = int(os.environ.get("MXBENCH_REPEATS", "3"))
long_steps = int(os.environ.get("MXBENCH_GLUON_LONG_STEPS", "10000"))


def rss_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def setup():
    net = gluon.nn.Sequential()
    net.add(gluon.nn.Dense(32, in_units=20, activation="relu"), gluon.nn.Dense(10, in_units=32))
    net.initialize(mx.init.Uniform(0.1))
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.05})
    rng = np.random.RandomState(0)
    x = nd.array(rng.normal(size=(16, 20)))
    y = nd.array(rng.randint(0, 10, size=16))
    return net, trainer, x, y


LOSS = gluon.loss.SoftmaxCrossEntropyLoss()


def step(net, trainer, x, y):
    with ag.record():
        loss = LOSS(net(x), y)
    loss.backward()
    trainer.step(16)
    return loss


class Timed:
    """Wraps the ctypes library: every call is timed."""

    def __init__(self, lib):
        self._lib = lib
        self.spent = 0.0
        self.calls = 0

    def __getattr__(self, name):
        fn = getattr(self._lib, name)
        outer = self

        def call(*args):
            t0 = time.perf_counter()
            try:
                return fn(*args)
            finally:
                outer.spent += time.perf_counter() - t0
                outer.calls += 1
        return call


net, trainer, x, y = setup()
for _ in range(50):
    step(net, trainer, x, y)
nd.waitall()
n = 300
rates = []
for _ in range(repeats):
    t0 = time.perf_counter()
    for _ in range(n):
        step(net, trainer, x, y)
    nd.waitall()
    rates.append(n / (time.perf_counter() - t0))
first = float(step(net, trainer, x, y).mean().asscalar())
check = "ok" if np.isfinite(first) and first < 2.31 else f"FAIL: loss {first} after training"
print(f"python.gluon_mlp_step\t{statistics.median(rates):.4g}\tsteps/s\t{check}\tDense 20-32-10, batch 16, sgd")

# the share of a step inside the library: every module's _LIB replaced by a timing wrapper
timed = Timed(mx.base._LIB)
patched = [m for m in list(sys.modules.values())
           if getattr(m, "__name__", "").startswith("mxnet") and getattr(m, "_LIB", None) is mx.base._LIB]
for m in patched:
    m._LIB = timed
t0 = time.perf_counter()
for _ in range(n):
    step(net, trainer, x, y)
mx.base._LIB.MXNDArrayWaitAll()
total = time.perf_counter() - t0
for m in patched:
    m._LIB = timed._lib
share = 100.0 * timed.spent / total
print(f"python.gluon_mlp_step_in_library\t{share:.3g}\t% of a step\tok\t{timed.calls / n:.0f} library calls per step")

# memory over a long loop
before = after = 0
for s in range(1, long_steps + 1):
    step(net, trainer, x, y)
    if s % 100 == 0:
        nd.waitall()
    if s == min(1000, long_steps):
        before = rss_kib()
after = rss_kib()
growth = 100.0 * (after - before) / max(before, 1)
mcheck = "ok" if growth < 5.0 else f"FAIL: grew {growth:.1f}%"
print(f"python.gluon_rss_growth_1k_to_{long_steps // 1000}k\t{growth:.3g}\t%\t{mcheck}\tRSS {before} -> {after} KiB")
sys.exit(0 if check == "ok" else 1)
