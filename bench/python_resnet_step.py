"""A Gluon ResNet-18 training step through MXNet's Python package on the library
MXNET_LIBRARY_PATH names (the wheel's libmxnet.so, with oneDNN, when unset):
gluon.model_zoo.vision.resnet18_v1 (pretrained=False, 1000 classes), SoftmaxCrossEntropyLoss,
autograd.record/backward, Trainer("sgd", momentum 0.9, wd 1e-4), imperative and hybridized.
Batch MXBENCH_BATCH (32) of MXBENCH_SIZE x MXBENCH_SIZE images (224; smaller sizes for quick
iteration). Each figure is the median images/s over MXBENCH_STEPS (5) timed steps after two
warm-up steps, each step ending in a wait. MXBENCH_CLOCK=process times the process's CPU time
(all its threads) instead of the wall clock: at one thread on a loaded machine it still measures
the step's own work. MXBENCH_RESNET_MODES picks the modes ("imperative,hybrid"; "layers" adds
BatchNorm, relu, the residual add + relu and the max pooling alone on their ResNet-18 shapes,
forward + backward, ms per step).
MXBENCH_PROFILE=1 adds the profiler's aggregate table (per operator, over MXBENCH_STEPS more
steps) on stderr.

Prints mxbench's result lines: name, value, unit, check, note (tab-separated).
"""
import os
import statistics
import sys
import time

import numpy as np
import mxnet as mx
from mxnet import autograd as ag, gluon, nd

batch = int(os.environ.get("MXBENCH_BATCH", "32"))
size = int(os.environ.get("MXBENCH_SIZE", "224"))
steps = int(os.environ.get("MXBENCH_STEPS", "5"))
modes = os.environ.get("MXBENCH_RESNET_MODES", "imperative,hybrid").split(",")
threads = os.environ.get("OMP_NUM_THREADS", "all")
clock_name = os.environ.get("MXBENCH_CLOCK", "wall")
clock = time.process_time if clock_name == "process" else time.perf_counter
profile = os.environ.get("MXBENCH_PROFILE") == "1"


def setup(hybrid):
    mx.random.seed(0)
    net = gluon.model_zoo.vision.resnet18_v1(pretrained=False)
    net.initialize(mx.init.Xavier(magnitude=2))
    if hybrid:
        net.hybridize(static_alloc=True, static_shape=True)
    trainer = gluon.Trainer(net.collect_params(), "sgd",
                            {"learning_rate": 0.01, "momentum": 0.9, "wd": 1e-4})
    rng = np.random.RandomState(0)
    x = nd.array(rng.normal(size=(batch, 3, size, size)).astype(np.float32))
    y = nd.array(rng.randint(0, 1000, size=batch).astype(np.float32))
    return net, trainer, x, y


LOSS = gluon.loss.SoftmaxCrossEntropyLoss()


def step(net, trainer, x, y):
    with ag.record():
        loss = LOSS(net(x), y)
    loss.backward()
    trainer.step(batch)
    nd.waitall()
    return loss


def run(mode):
    net, trainer, x, y = setup(mode == "hybrid")
    losses = [float(step(net, trainer, x, y).mean().asscalar()) for _ in range(2)]
    times = []
    for _ in range(steps):
        t0 = clock()
        loss = step(net, trainer, x, y)
        times.append(clock() - t0)
        losses.append(float(loss.mean().asscalar()))
    if profile:
        mx.profiler.set_config(profile_all=True, aggregate_stats=True)
        mx.profiler.set_state("run")
        for _ in range(steps):
            step(net, trainer, x, y)
        mx.profiler.set_state("stop")
        print(f"--- {mode}: {steps} steps ---\n" + mx.profiler.dumps(reset=True), file=sys.stderr)
    ok = all(np.isfinite(losses))
    check = "ok" if ok else "FAIL: non-finite loss"
    note = f"median of {steps} steps, {clock_name} clock, losses {losses[0]:.4f}..{losses[-1]:.4f}"
    rate = batch / statistics.median(times)
    print(f"python.resnet18_step_{mode}_b{batch}_{size}px_t{threads}\t{rate:.4g}\timages/s\t{check}\t{note}")
    sys.stdout.flush()
    return ok


# The step's other layers on their largest ResNet-18 shapes (after the stem; batch as above):
# one autograd step each (forward, backward of every input, wait), ms per step.
LAYERS = [
    ("batchnorm_64x112", (64, 112), lambda x, p: nd.BatchNorm(x, *p, fix_gamma=False)),
    ("batchnorm_64x56", (64, 56), lambda x, p: nd.BatchNorm(x, *p, fix_gamma=False)),
    ("relu_64x112", (64, 112), lambda x, p: nd.Activation(x, act_type="relu")),
    ("residual_add_relu_64x56", (64, 56), lambda x, p: nd.Activation(x + p[0], act_type="relu")),
    ("maxpool_64x112", (64, 112), lambda x, p: nd.Pooling(x, kernel=(3, 3), stride=(2, 2), pad=(1, 1),
                                                          pool_type="max")),
]


def layers():
    rng = np.random.RandomState(1)
    ok = True
    for name, (c, hw), fn in LAYERS:
        if name.startswith("residual"):
            params = [nd.array(rng.normal(size=(batch, c, hw, hw)).astype(np.float32))]
        else:
            params = [nd.array(rng.uniform(0.5, 1.5, size=c).astype(np.float32)),
                      nd.array(rng.uniform(-0.5, 0.5, size=c).astype(np.float32)),
                      nd.zeros(c), nd.ones(c)]
        x = nd.array(rng.normal(size=(batch, c, hw, hw)).astype(np.float32))
        grads = [x] + (params if not name.startswith(("relu", "maxpool")) else [])
        for a in grads:
            a.attach_grad()
        times = []
        for i in range(steps + 1):
            t0 = clock()
            with ag.record():
                y = fn(x, params)
            y.backward()
            nd.waitall()
            if i:
                times.append(clock() - t0)
        good = all(np.isfinite(a.grad.asnumpy()).all() for a in grads)
        ok = ok and good
        print(f"python.resnet18_layer_{name}_b{batch}_t{threads}\t{statistics.median(times) * 1e3:.4g}\tms\t"
              f"{'ok' if good else 'FAIL: non-finite gradient'}\tforward + backward, {clock_name} clock")
        sys.stdout.flush()
    return ok


if __name__ == "__main__":
    sys.exit(0 if all([layers() if m == "layers" else run(m) for m in modes]) else 1)
