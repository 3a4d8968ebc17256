"""Training steps of small hybridized Gluon nets with BatchNorm + relu pairs, the pairs mxrt runs
as one `_mxrt_batch_norm_relu` op when a CachedOp call is recorded or in training mode. Prints
JSON per scenario: the losses, a sample of the outputs, parameters, gradients and moving
statistics after the steps (compared with libmxnet.so and with the same net run imperatively),
a digest of all their bytes (mxrt with and without MXRT_FUSION=0 must give the same bits) and
the operators the profiler saw (the fused op must have run)."""
import hashlib
import json
import os
import sys
import tempfile
import warnings

import numpy as np
import mxnet as mx
from mxnet import autograd as ag, gluon, nd
from mxnet.gluon import nn

warnings.simplefilter("ignore")


class Block(gluon.HybridBlock):
    """conv-BN-relu twice, a residual add and relu; `extra` adds a BatchNorm whose output is also
    read by another node and a BatchNorm followed by a non-relu activation (neither fusable)."""

    def __init__(self, extra, **kw):
        super().__init__(**kw)
        self.extra = extra
        with self.name_scope():
            self.c1 = nn.Conv2D(8, 3, padding=1, in_channels=4)
            self.b1 = nn.BatchNorm(in_channels=8)
            self.c2 = nn.Conv2D(4, 3, padding=1, in_channels=8)
            self.b2 = nn.BatchNorm(in_channels=4, scale=False)
            if extra:
                self.b3 = nn.BatchNorm(in_channels=4)
                self.b4 = nn.BatchNorm(in_channels=4)
            self.fc = nn.Dense(3, in_units=4 * 9 * 9)

    def hybrid_forward(self, F, x):
        h = F.Activation(self.b1(self.c1(x)), act_type="relu")
        h = F.Activation(self.b2(self.c2(h)), act_type="relu")
        h = F.Activation(h + x, act_type="relu")
        if self.extra:
            t = self.b3(h)
            h = F.Activation(t, act_type="relu") + t * 0.5
            h = F.Activation(self.b4(h), act_type="tanh")
        return self.fc(h)


def run(extra, hybrid, dtype, steps=3):
    mx.random.seed(1)
    net = Block(extra)
    net.initialize(mx.init.Xavier(magnitude=2))
    # the same starting weights on both libraries (their generators differ)
    init = np.random.RandomState(2)
    for name, p in sorted(net.collect_params().items()):
        if name.endswith("weight"):
            p.set_data(nd.array(init.normal(0, 0.3, size=p.shape)))
    net.cast(dtype)
    if hybrid:
        net.hybridize(static_alloc=True, static_shape=True)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.02, "momentum": 0.9})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    rng = np.random.RandomState(0)
    x = nd.array(rng.normal(1.0, 2.0, size=(6, 4, 9, 9)), dtype=dtype)
    y = nd.array(rng.randint(0, 3, size=6), dtype=dtype)
    # the trace goes to a scratch file, not the working directory
    trace = os.path.join(tempfile.gettempdir(), f"bn_relu_profile_{os.getpid()}.json")
    mx.profiler.set_config(profile_all=True, aggregate_stats=True, filename=trace)
    mx.profiler.set_state("run")
    losses = []
    for _ in range(steps):
        with ag.record():
            out = net(x)
            loss = loss_fn(out, y)
        loss.backward()
        trainer.step(6)
        losses.append(float(loss.mean().asscalar()))
    # a prediction (inference mode, moving statistics) and a training-mode call without recording
    pred = net(x)
    with ag.train_mode():
        train_out = net(x)
    nd.waitall()
    mx.profiler.set_state("stop")
    table = mx.profiler.dumps(reset=True)
    digest = hashlib.sha256()
    arrays = {"out": out, "pred": pred, "train_out": train_out}
    for name, p in sorted(net.collect_params().items()):
        arrays[name] = p.data()
        if p.grad_req != "null":
            arrays[name + "_grad"] = p.grad()
    sample = {}
    for k, a in sorted(arrays.items()):
        v = a.asnumpy()
        digest.update(v.tobytes())
        flat = v.astype(np.float64).ravel()
        sample[k] = flat[:: max(1, flat.size // 16)].round(5).tolist()
    ops = sorted({line.split()[0] for line in table.splitlines()
                  if line.strip() and not line.startswith((" ", "\t", "-", "=", "Name"))})
    return {"losses": losses, "values": sample, "bits": digest.hexdigest(), "ops": ops}


def main():
    res = {}
    for extra in (False, True):
        for dtype in ("float32", "float64"):
            key = f"{'extra' if extra else 'plain'}_{dtype}"
            res[key] = {mode: run(extra, mode == "hybrid", dtype)
                        for mode in ("imperative", "hybrid")}
    json.dump(res, sys.stdout)


if __name__ == "__main__":
    main()
