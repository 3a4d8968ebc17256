"""BatchNorm on shapes whose channels hold long runs (ResNet-like planes, whole vector chunks and
remainders), data far from zero (a one-pass variance must keep its precision), float64 data,
channels last and the moving statistics a training backward folds in; prints one JSON object for
test_batchnorm.py to compare across libraries and with a float64 numpy reference.

Each case: {"out", "dx", "dgamma", "dbeta", "moving_mean", "moving_var"} (flat lists), with the
reference's values under "ref" where the case has one (training-mode batch statistics)."""
import json
import sys

import numpy as np
import mxnet as mx

nd = mx.nd
ag = mx.autograd


def flat(a):
    return np.asarray(a, dtype=np.float64).ravel().tolist()


def reference(x, dy, gamma, beta, mm, mv, eps, momentum, fix_gamma, axis):
    """BatchNorm's training forward and backward in float64 numpy."""
    x, dy = x.astype(np.float64), dy.astype(np.float64)
    axis = axis % x.ndim
    red = tuple(i for i in range(x.ndim) if i != axis)
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]
    mean = x.mean(axis=red)
    var = ((x - mean.reshape(shape)) ** 2).mean(axis=red)
    invstd = 1.0 / np.sqrt(var + eps)
    g = np.ones_like(gamma, dtype=np.float64) if fix_gamma else gamma.astype(np.float64)
    xhat = (x - mean.reshape(shape)) * invstd.reshape(shape)
    out = xhat * g.reshape(shape) + beta.reshape(shape)
    dbeta = dy.sum(axis=red)
    dgamma = (dy * xhat).sum(axis=red)
    dxhat = dy * g.reshape(shape)
    dx = (dxhat - dxhat.mean(axis=red).reshape(shape)
          - xhat * (dxhat * xhat).mean(axis=red).reshape(shape)) * invstd.reshape(shape)
    return {
        "out": flat(out), "dx": flat(dx),
        "dgamma": flat(np.zeros_like(dgamma) if fix_gamma else dgamma), "dbeta": flat(dbeta),
        "moving_mean": flat(mm * momentum + mean * (1 - momentum)),
        "moving_var": flat(mv * momentum + var * (1 - momentum)),
    }


def run(name, shape, axis=1, offset=0.0, scale=1.0, dtype="float32", train=True, seed=0, **kw):
    rng = np.random.RandomState(seed)
    ch = shape[axis]
    x = (offset + scale * rng.uniform(-1, 1, size=shape)).astype(dtype)
    dy = rng.uniform(-1, 1, size=shape).astype(dtype)
    pdt = "float64" if dtype == "float64" else "float32"
    gamma = rng.uniform(0.5, 1.5, size=ch).astype(pdt)
    beta = rng.uniform(-0.5, 0.5, size=ch).astype(pdt)
    mm = rng.uniform(-0.2, 0.2, size=ch).astype(pdt)
    mv = rng.uniform(0.5, 1.5, size=ch).astype(pdt)
    a = [nd.array(v, dtype=v.dtype) for v in (x, gamma, beta, mm, mv)]
    for v in a[:3]:
        v.attach_grad()
    with ag.record(train_mode=train):
        out = nd.BatchNorm(*a, axis=axis, **kw)
    out.backward(nd.array(dy, dtype=dtype), train_mode=train)
    got = {"out": flat(out.asnumpy()), "dx": flat(a[0].grad.asnumpy()),
           "dgamma": flat(a[1].grad.asnumpy()), "dbeta": flat(a[2].grad.asnumpy()),
           "moving_mean": flat(a[3].asnumpy()), "moving_var": flat(a[4].asnumpy())}
    if train and not kw.get("use_global_stats", False):
        got["ref"] = reference(x, dy, gamma, beta, mm, mv, kw.get("eps", 1e-3),
                               kw.get("momentum", 0.9), kw.get("fix_gamma", True), axis)
    cases[name] = got


cases = {}
# a ResNet-like plane (runs of 28·28 = 784: whole 32-lane chunks and a remainder of 16)
run("plane_28", (4, 8, 28, 28), fix_gamma=False, eps=1e-5)
# runs of 117 (chunks and an odd remainder), fix_gamma (the default)
run("plane_9x13", (3, 5, 9, 13), seed=1)
# runs shorter than a chunk, and the 7x7 planes of ResNet's last stage
run("plane_7x7", (2, 16, 7, 7), fix_gamma=False, seed=2, momentum=0.5)
# far from zero: mean 100, spread 0.1 (the variance must not cancel away)
run("offset", (4, 3, 16, 16), offset=100.0, scale=0.1, fix_gamma=False, seed=3, eps=1e-5)
# a 2-D input (runs of one element) and channels last
run("dense", (64, 10), fix_gamma=False, seed=4)
run("channels_last", (2, 6, 5, 40), axis=-1, fix_gamma=False, seed=5)
# the moving statistics: use_global_stats in training, and predict mode
run("global_stats", (2, 4, 12, 12), fix_gamma=False, use_global_stats=True, seed=6)
run("predict", (2, 4, 12, 12), fix_gamma=False, train=False, seed=7)
# float64 data (its own path)
run("float64", (2, 3, 10, 10), dtype="float64", fix_gamma=False, seed=8)
json.dump(cases, sys.stdout)
