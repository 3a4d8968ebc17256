"""Convolution and pooling forward + backward through MXNet's Python package on the library
MXNET_LIBRARY_PATH names (the wheel's libmxnet.so, with oneDNN, when unset): the layers of LeNet
and ResNet-18 (3x3 and 1x1 at stride 1 and 2, the 7x7 stem), MobileNet depthwise 3x3 (stride 1, 2), and
pooling, at batch MXBENCH_CONV_BATCH (32). Each figure is the median over MXBENCH_REPEATS
(3) timings of a few autograd steps (record, forward, backward, wait), in milliseconds per
step. The intra-op threads are the caller's OMP_NUM_THREADS (run.sh sets it to its thread
count); the figure's name carries it. MXBENCH_CLOCK=process times the process's CPU time
(all its threads) instead of the wall clock: at one thread on a loaded machine it still measures
the kernels' own work.

Prints mxbench's result lines: name, value, unit, check, note (tab-separated).
"""
import os
import statistics
import sys
import time

import numpy as np
import mxnet as mx
from mxnet import autograd as ag, nd

repeats = int(os.environ.get("MXBENCH_REPEATS", "3"))
batch = int(os.environ.get("MXBENCH_CONV_BATCH", "32"))
threads = os.environ.get("OMP_NUM_THREADS", "all")
only = os.environ.get("MXBENCH_CONV_ONLY", "")
clock = time.process_time if os.environ.get("MXBENCH_CLOCK") == "process" else time.perf_counter

# name, data shape (without batch), op parameters
CONV = [
    ("lenet_conv1_5x5", (1, 28, 28), dict(kernel=(5, 5), num_filter=20)),
    ("lenet_conv2_5x5", (20, 12, 12), dict(kernel=(5, 5), num_filter=50)),
    ("resnet_stem_7x7_s2", (3, 224, 224), dict(kernel=(7, 7), stride=(2, 2), pad=(3, 3), num_filter=64)),
    ("resnet_3x3_64_s1", (64, 56, 56), dict(kernel=(3, 3), pad=(1, 1), num_filter=64, no_bias=True)),
    ("resnet_3x3_128_s2", (64, 56, 56), dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), num_filter=128, no_bias=True)),
    ("resnet_1x1_128_s2", (64, 56, 56), dict(kernel=(1, 1), stride=(2, 2), num_filter=128, no_bias=True)),
    ("resnet_3x3_256_s1", (256, 14, 14), dict(kernel=(3, 3), pad=(1, 1), num_filter=256, no_bias=True)),
    ("resnet_3x3_512_s1", (512, 7, 7), dict(kernel=(3, 3), pad=(1, 1), num_filter=512, no_bias=True)),
    ("conv_1x1_256_s1", (256, 14, 14), dict(kernel=(1, 1), num_filter=256, no_bias=True)),
    ("mobilenet_dw_3x3_128", (128, 56, 56), dict(kernel=(3, 3), pad=(1, 1), num_filter=128, num_group=128, no_bias=True)),
    ("mobilenet_dw_3x3_128_s2", (128, 56, 56), dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), num_filter=128, num_group=128, no_bias=True)),
]
POOL = [
    ("resnet_maxpool_3x3_s2", (64, 112, 112), dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="max")),
    ("resnet_global_avgpool", (512, 7, 7), dict(global_pool=True, kernel=(7, 7), pool_type="avg")),
    ("lenet_maxpool_2x2", (20, 24, 24), dict(kernel=(2, 2), stride=(2, 2), pool_type="max")),
    ("avgpool_3x3_s1", (64, 56, 56), dict(kernel=(3, 3), pad=(1, 1), pool_type="avg")),
]


def timed(fn, arrays):
    for a in arrays:
        a.attach_grad()
    def step():
        with ag.record():
            y = fn(*arrays)
        y.backward()
        nd.waitall()
        return y
    y = step()  # warm up (and plan caches)
    once = clock()
    step()
    once = clock() - once
    n = max(1, min(20, int(0.5 / max(once, 1e-6))))
    times = []
    for _ in range(repeats):
        t0 = clock()
        for _ in range(n):
            step()
        times.append((clock() - t0) / n * 1e3)
    ok = all(np.isfinite(a.grad.asnumpy()).all() for a in arrays)
    return statistics.median(times), ok


rng = np.random.RandomState(0)
status = 0
for name, shape, p in CONV:
    if only and only not in name:
        continue
    c = shape[0]
    groups = p.get("num_group", 1)
    x = nd.array(rng.uniform(-1, 1, size=(batch,) + shape))
    w = nd.array(rng.uniform(-0.1, 0.1, size=(p["num_filter"], c // groups) + p["kernel"]))
    arrays = [x, w]
    if not p.get("no_bias", False):
        arrays.append(nd.array(rng.uniform(-0.1, 0.1, size=(p["num_filter"],))))
    ms, ok = timed(lambda *a, p=p: nd.Convolution(*a, **p), arrays)
    status |= not ok
    print(f"python.conv_{name}_t{threads}\t{ms:.4g}\tms/step\t{'ok' if ok else 'FAIL: non-finite gradient'}"
          f"\tforward+backward, batch {batch}, data {shape}")
for name, shape, p in POOL:
    if only and only not in name:
        continue
    x = nd.array(rng.uniform(-1, 1, size=(batch,) + shape))
    ms, ok = timed(lambda a, p=p: nd.Pooling(a, **p), [x])
    status |= not ok
    print(f"python.pool_{name}_t{threads}\t{ms:.4g}\tms/step\t{'ok' if ok else 'FAIL: non-finite gradient'}"
          f"\tforward+backward, batch {batch}, data {shape}")
sys.stdout.flush()
sys.exit(status)
