"""Embedding and LayerNorm forward + backward through MXNet's Python package on the library
MXNET_LIBRARY_PATH names (the wheel's own libmxnet.so when unset), at a language model's sizes:
a 32 × 35 batch of indices into a 10000 × 512 embedding, and LayerNorm over its 512-wide output.
Each step records the op, backpropagates a head gradient and waits; the first step's outputs are
checked against numpy. Prints mxbench's result lines: name, value, unit, check, note.
"""
import os
import statistics
import time

import numpy as np
import mxnet as mx

nd = mx.nd
ag = mx.autograd
REPEATS = int(os.environ.get("MXBENCH_REPEATS", "3"))
STEPS = 20
status = 0


def report(name, times, check, note):
    global status
    if check != "ok":
        status = 1
    print(f"{name}\t{statistics.median(times) * 1e3:.4g}\tms/step\t{check}\t{note}", flush=True)


def measure(step):
    times = []
    for _ in range(REPEATS):
        t = time.perf_counter()
        for _ in range(STEPS):
            step()
        nd.waitall()
        times.append((time.perf_counter() - t) / STEPS)
    return times


r = np.random.RandomState(0)
idx_np = r.randint(0, 10000, size=(32, 35)).astype(np.float32)
w_np = r.uniform(-1, 1, size=(10000, 512)).astype(np.float32)
head_np = r.uniform(0.5, 1.5, size=(32, 35, 512)).astype(np.float32)
idx, w, head = nd.array(idx_np), nd.array(w_np), nd.array(head_np)
w.attach_grad()


def embedding_step():
    with ag.record():
        y = nd.Embedding(idx, w, input_dim=10000, output_dim=512)
    y.backward(head)
    return y


y = embedding_step().asnumpy()
gw = w.grad.asnumpy()
want_gw = np.zeros_like(w_np)
np.add.at(want_gw, idx_np.astype(np.int64).ravel(), head_np.reshape(-1, 512))
ok = np.allclose(y, w_np[idx_np.astype(np.int64)]) and np.allclose(gw, want_gw, rtol=1e-4, atol=1e-4)
report("nn embedding 32x35 into 10000x512 fwd+bwd", measure(embedding_step), "ok" if ok else "FAIL",
       "dense weight gradient")

x_np = r.uniform(-1, 1, size=(32 * 35, 512)).astype(np.float32)
g_np = r.uniform(0.5, 1.5, size=512).astype(np.float32)
b_np = r.uniform(-1, 1, size=512).astype(np.float32)
x, g, b = nd.array(x_np), nd.array(g_np), nd.array(b_np)
hx = nd.array(head_np.reshape(-1, 512))
for a in (x, g, b):
    a.attach_grad()


def layernorm_step():
    with ag.record():
        y = nd.LayerNorm(x, g, b)
    y.backward(hx)
    return y


y = layernorm_step().asnumpy()
mean = x_np.mean(-1, keepdims=True)
std = np.sqrt(x_np.var(-1, keepdims=True) + 1e-5)
ok = np.allclose(y, (x_np - mean) / std * g_np + b_np, rtol=1e-4, atol=1e-4) and np.allclose(
    b.grad.asnumpy(), head_np.reshape(-1, 512).sum(0), rtol=1e-4)
report("nn layernorm 1120x512 fwd+bwd", measure(layernorm_step), "ok" if ok else "FAIL", "gradients of data, gamma, beta")
raise SystemExit(status)
