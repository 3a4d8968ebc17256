"""Embedding, LayerNorm and the softmax family forward + backward through MXNet's Python package
on the library MXNET_LIBRARY_PATH names (the wheel's own libmxnet.so when unset), at a language
model's sizes: a 32 × 35 batch of indices into a 10000 × 512 embedding, LayerNorm over its
512-wide output, softmax and log_softmax over 1120 × 10000 logits; and SoftmaxOutput and
softmax_cross_entropy over a 128 × 1000 classifier output. Each step records the op,
backpropagates a head gradient and waits; the first step's outputs are checked against numpy.
MXBENCH_CLOCK=process times the process's CPU time (all its threads) instead of the wall clock.
MXBENCH_NNOPS_ONLY=word runs the workloads whose name contains it.
Prints mxbench's result lines: name, value, unit, check, note.
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
clock = time.process_time if os.environ.get("MXBENCH_CLOCK") == "process" else time.perf_counter
only = os.environ.get("MXBENCH_NNOPS_ONLY", "")


def report(name, times, check, note):
    global status
    if only and only not in name:
        return
    if check != "ok":
        status = 1
    print(f"{name}\t{statistics.median(times) * 1e3:.4g}\tms/step\t{check}\t{note}", flush=True)


def measure(step):
    times = []
    for _ in range(REPEATS):
        t = clock()
        for _ in range(STEPS):
            step()
        nd.waitall()
        times.append((clock() - t) / STEPS)
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
report("nn embedding 32x35 into 10000x512 fwd+bwd", measure(embedding_step) if not only or "embedding" in only else [0], "ok" if ok else "FAIL",
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
report("nn layernorm 1120x512 fwd+bwd", measure(layernorm_step) if not only or "layernorm" in only else [0], "ok" if ok else "FAIL", "gradients of data, gamma, beta")

def np_softmax(v):
    e = np.exp(v - v.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


logits_np = r.uniform(-4, 4, size=(1120, 10000)).astype(np.float32)
lhead_np = r.uniform(-1, 1, size=(1120, 10000)).astype(np.float32)
logits, lhead = nd.array(logits_np), nd.array(lhead_np)
logits.attach_grad()
for name, fn in (("softmax", nd.softmax), ("log_softmax", nd.log_softmax)):
    if only and only not in f"nn {name}":
        continue

    def soft_step(fn=fn):
        with ag.record():
            y = fn(logits)
        y.backward(lhead)
        return y

    y = soft_step().asnumpy()
    p = np_softmax(logits_np.astype(np.float64))
    if name == "softmax":
        want_y, want_g = p, p * (lhead_np - (lhead_np * p).sum(-1, keepdims=True))
    else:
        want_y, want_g = np.log(p), lhead_np - p * lhead_np.sum(-1, keepdims=True)
    ok = np.allclose(y, want_y, rtol=1e-4, atol=1e-6) and np.allclose(logits.grad.asnumpy(), want_g, rtol=1e-3, atol=1e-5)
    report(f"nn {name} 1120x10000 fwd+bwd", measure(soft_step), "ok" if ok else "FAIL", "axis -1, head gradient")

cls_np = r.uniform(-4, 4, size=(128, 1000)).astype(np.float32)
label_np = r.randint(0, 1000, size=128).astype(np.float32)
cls, label = nd.array(cls_np), nd.array(label_np)
cls.attach_grad()
onehot = np.eye(1000, dtype=np.float64)[label_np.astype(np.int64)]


def softmax_output_step():
    with ag.record():
        y = nd.SoftmaxOutput(cls, label)
    y.backward()
    return y


def softmax_ce_step():
    with ag.record():
        y = nd.softmax_cross_entropy(cls, label)
    y.backward()
    return y


p = np_softmax(cls_np.astype(np.float64))
if not only or only in "nn softmaxoutput 128x1000 fwd+bwd":
    y = softmax_output_step().asnumpy()
    ok = np.allclose(y, p, rtol=1e-4, atol=1e-7) and np.allclose(cls.grad.asnumpy(), p - onehot, rtol=1e-3, atol=1e-6)
    report("nn softmaxoutput 128x1000 fwd+bwd", measure(softmax_output_step), "ok" if ok else "FAIL", "class labels")
if not only or only in "nn softmax_cross_entropy 128x1000 fwd+bwd":
    y = softmax_ce_step().asnumpy()
    ok = np.allclose(y, -(np.log(p) * onehot).sum(), rtol=1e-4) and np.allclose(cls.grad.asnumpy(), p - onehot, rtol=1e-3, atol=1e-6)
    report("nn softmax_cross_entropy 128x1000 fwd+bwd", measure(softmax_ce_step), "ok" if ok else "FAIL", "class labels")
raise SystemExit(status)
