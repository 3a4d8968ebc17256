"""Symbolic execution through MXNet's Python package on the library MXNET_LIBRARY_PATH names
(the wheel's libmxnet.so when unset):

- a hybridized MLP training step (784-512-512-10, relu, batch 128, SoftmaxCrossEntropyLoss,
  autograd.record/backward, Trainer(sgd)) with static_alloc and static_shape;
- calls of a CachedOp of a 20-op graph of small ops (a chain of elementwise ops on 16 floats);
- calls of a hybridized Gluon block of 10 elementwise ops on 4 M float32 (mxrt fuses them into
  one pass over memory);
- calls of a CachedOp of 10 cheap elementwise ops (`+0.5` and `*1.0001` alternating) on 4 M
  float32 (no static_alloc: each call allocates its output).

MXBENCH_CLOCK=process times the process's CPU time (all its threads) instead of the wall clock:
at one thread (OMP_NUM_THREADS=1) on a loaded machine it still measures the work itself.
MXBENCH_PARTS (comma-separated: mlp, small, elementwise, cheap; all when unset) picks the parts.

Each figure is the median of MXBENCH_REPEATS timed runs; the step checks that the loss falls,
the CachedOp that its result equals the same ops run one by one, the elementwise block its
result against numpy.

Prints mxbench's result lines: name, value, unit, check, note (tab-separated).
"""
import os
import statistics
import sys
import time

import numpy as np
import mxnet as mx
from mxnet import autograd as ag, gluon, nd, sym

repeats = int(os.environ.get("MXBENCH_REPEATS", "3"))
clock = time.process_time if os.environ.get("MXBENCH_CLOCK") == "process" else time.perf_counter
parts = set(os.environ.get("MXBENCH_PARTS", "mlp,small,elementwise,cheap").split(","))
status = 0

# a hybridized block of 10 elementwise ops on 4 M floats


class Elementwise(gluon.HybridBlock):
    def hybrid_forward(self, F, x):
        h = F.relu(x * 2 + 1)
        h = F.sigmoid(h - 0.5) * 3
        h = F.tanh(h)
        h = F.clip(F.exp(h), 0.5, 2.5)
        return h / 4


rng = np.random.RandomState(0)

# hybridized MLP training step
if "mlp" in parts:
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(512, in_units=784, activation="relu"),
            gluon.nn.Dense(512, in_units=512, activation="relu"),
            gluon.nn.Dense(10, in_units=512))
    net.initialize(mx.init.Xavier())
    net.hybridize(static_alloc=True, static_shape=True)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.05})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    x = nd.array(rng.normal(size=(128, 784)))
    y = nd.array(rng.randint(0, 10, size=128))


    def step():
        with ag.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        trainer.step(128)
        return loss


    first = float(step().mean().asscalar())
    for _ in range(5):
        step()
    nd.waitall()
    n = 30
    rates = []
    for _ in range(repeats):
        t0 = clock()
        for _ in range(n):
            step()
        nd.waitall()
        rates.append(n / (clock() - t0))
    last = float(step().mean().asscalar())
    check = "ok" if np.isfinite(last) and last < first else f"FAIL: loss {first} -> {last}"
    if check != "ok":
        status = 1
    print(f"python.hybrid_mlp_step\t{statistics.median(rates):.4g}\tsteps/s\t{check}\t"
          "784-512-512-10, batch 128, static_alloc")


# a CachedOp of 20 small ops
if "small" in parts:
    a = sym.var("a")
    h = a
    ops = ["exp", "tanh", "sigmoid", "negative", "abs"]
    for i in range(20):
        h = getattr(sym, ops[i % len(ops)])(h)
    op = nd.CachedOp(h)
    v = nd.array(rng.uniform(-1, 1, 16))
    want = v
    for i in range(20):
        want = getattr(nd, ops[i % len(ops)])(want)
    got = op(v)
    ccheck = "ok" if np.allclose(got.asnumpy(), want.asnumpy(), rtol=1e-5) else "FAIL: result differs"
    if ccheck != "ok":
        status = 1
    for _ in range(100):
        op(v)
    nd.waitall()
    n = 2000
    rates = []
    for _ in range(repeats):
        t0 = clock()
        for _ in range(n):
            op(v)
        nd.waitall()
        rates.append(n / (clock() - t0))
    print(f"python.cachedop_20_small_ops\t{statistics.median(rates):.4g}\tcalls/s\t{ccheck}\t"
          "20 elementwise ops on 16 floats")


# the hybridized block of 10 elementwise ops on 4 M floats
if "elementwise" in parts:


    block = Elementwise()
    block.hybridize(static_alloc=True, static_shape=True)
    xe_np = rng.uniform(-2, 2, 4 << 20).astype(np.float32)
    xe = nd.array(xe_np)
    w = np.maximum(xe_np.astype(np.float64) * 2 + 1, 0)
    w = np.clip(np.exp(np.tanh(1 / (1 + np.exp(-(w - 0.5))) * 3)), 0.5, 2.5) / 4
    got = block(xe).asnumpy()
    echeck = "ok" if np.allclose(got, w, rtol=1e-5, atol=1e-6) else "FAIL: result differs from numpy"
    if echeck != "ok":
        status = 1
    for _ in range(3):
        block(xe)
    nd.waitall()
    n = 20
    rates = []
    for _ in range(repeats):
        t0 = clock()
        for _ in range(n):
            block(xe)
        nd.waitall()
        rates.append(n / (clock() - t0))
    print(f"python.hybrid_elementwise_10_ops\t{statistics.median(rates):.4g}\tcalls/s\t{echeck}\t"
          "10 elementwise ops on 4 M float32, static_alloc")

# a CachedOp of 10 cheap elementwise ops on 4 M floats
if "cheap" in parts:
    a = sym.var("a")
    h = a
    for i in range(10):
        h = h + 0.5 if i % 2 == 0 else h * 1.0001
    cop = nd.CachedOp(h)
    xc_np = rng.uniform(-2, 2, 4 << 20).astype(np.float32)
    xc = nd.array(xc_np)
    w = xc_np.copy()
    for i in range(10):
        w = w + np.float32(0.5) if i % 2 == 0 else w * np.float32(1.0001)
    got = cop(xc).asnumpy()
    kcheck = "ok" if np.allclose(got, w, rtol=1e-6, atol=1e-6) else "FAIL: result differs from numpy"
    if kcheck != "ok":
        status = 1
    for _ in range(3):
        cop(xc)
    nd.waitall()
    n = 20
    rates = []
    for _ in range(repeats):
        t0 = clock()
        for _ in range(n):
            cop(xc)
        nd.waitall()
        rates.append(n / (clock() - t0))
    print(f"python.cachedop_10_cheap_ops\t{statistics.median(rates):.4g}\tcalls/s\t{kcheck}\t"
          "10 elementwise ops (+0.5, *1.0001) on 4 M float32, no static_alloc")

sys.exit(status)
