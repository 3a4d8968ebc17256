"""CachedOp and Gluon's hybridize through the unmodified mxnet package. Prints each scenario's
outcome as JSON (test_cached_op.py compares libmxrt with libmxnet.so). `--list` prints the
scenario names; names as arguments run just those.

Parameters come from a fixed numpy generator, so both libraries start from the same values."""
import json
import os
import sys
import tempfile
import warnings

import numpy as np
import mxnet as mx
from mxnet import autograd, gluon, nd, sym
from mxnet.gluon import nn

warnings.simplefilter("ignore")
scenarios = {}


def scenario(fn):
    scenarios[fn.__name__] = fn
    return fn


def rng(seed=0):
    return np.random.RandomState(seed)


def set_params(net, seed=1):
    """Every parameter from a fixed generator (same values on both libraries)."""
    r = rng(seed)
    for name in sorted(net.collect_params().keys()):
        p = net.collect_params()[name]
        lo, hi = (0.5, 1.5) if name.endswith("var") else (-0.5, 0.5)
        p.set_data(nd.array(r.uniform(lo, hi, p.shape).astype(p.dtype)))


def arr(a):
    return np.asarray(a.asnumpy(), dtype=np.float64).round(5).tolist()


def mlp(prefix):
    net = nn.HybridSequential(prefix=prefix)
    with net.name_scope():
        net.add(nn.Dense(16, activation="relu"), nn.Dense(8, activation="tanh"), nn.Dense(4))
    return net


def train(net, x, y, steps=3, **hyb):
    net.initialize(mx.init.Xavier())
    net(x)  # deferred init
    set_params(net)
    if hyb is not None:
        net.hybridize(**hyb)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    tr = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    losses = []
    for _ in range(steps):
        with autograd.record():
            out = net(x)
            loss = loss_fn(out, y)
        loss.backward()
        tr.step(x.shape[0])
        losses.append(float(loss.mean().asscalar()))
    params = {k: arr(v.data()) for k, v in sorted(net.collect_params().items())}
    return {"losses": [round(l, 5) for l in losses], "params": params, "out": arr(net(x))}


def data(n=6, d=10, classes=4, seed=3):
    r = rng(seed)
    return nd.array(r.uniform(-1, 1, (n, d))), nd.array(r.randint(0, classes, n))


@scenario
def hybrid_mlp_forward():
    x, _ = data()
    net = mlp("m_")
    net.initialize()
    net(x)
    set_params(net)
    before = arr(net(x))
    net.hybridize()
    return {"eager": before, "hybrid": arr(net(x)), "again": arr(net(x))}


@scenario
def hybrid_mlp_train():
    x, y = data()
    return train(mlp("t_"), x, y)


@scenario
def hybrid_mlp_train_static():
    x, y = data()
    return train(mlp("s_"), x, y, static_alloc=True, static_shape=True)


@scenario
def hybrid_mlp_train_static_alloc_only():
    x, y = data()
    return train(mlp("a_"), x, y, static_alloc=True)


@scenario
def deferred_init_shapes():
    x, _ = data(d=7)
    net = mlp("d_")
    net.initialize()
    net.hybridize()
    net(x)
    return {k: list(v.shape) for k, v in sorted(net.collect_params().items())}


class TwoInTwoOut(gluon.HybridBlock):
    def __init__(self, **kw):
        super().__init__(**kw)
        with self.name_scope():
            self.a = nn.Dense(5)
            self.b = nn.Dense(5)

    def hybrid_forward(self, F, x, y):
        h = F.tanh(self.a(x)) + self.b(y)
        return h * 2, F.sum(h, axis=1)


@scenario
def multiple_inputs_outputs():
    r = rng(5)
    x = nd.array(r.uniform(-1, 1, (3, 4)))
    y = nd.array(r.uniform(-1, 1, (3, 6)))
    net = TwoInTwoOut(prefix="two_")
    net.initialize()
    net(x, y)
    set_params(net)
    net.hybridize()
    x.attach_grad()
    with autograd.record():
        o1, o2 = net(x, y)
        loss = (o1 * o1).sum() + o2.sum()
    loss.backward()
    grads = {k: arr(v.grad()) for k, v in sorted(net.collect_params().items())}
    return {"o1": arr(o1), "o2": arr(o2), "dx": arr(x.grad), "grads": grads}


def bn_net(prefix):
    net = nn.HybridSequential(prefix=prefix)
    with net.name_scope():
        net.add(nn.Dense(8), nn.BatchNorm(), nn.Activation("relu"), nn.Dropout(0.5), nn.Dense(3))
    return net


@scenario
def batchnorm_dropout_modes():
    x, y = data(n=8, classes=3)
    net = bn_net("bn_")
    net.initialize()
    net(x)
    set_params(net)
    net.hybridize()
    predict = arr(net(x))  # predict mode: dropout off, moving stats
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    with autograd.record(train_mode=False):
        out = net(x)
        loss = loss_fn(out, y)
    loss.backward()
    # the layers after BatchNorm and its own parameters (the gradient BatchNorm passes to its
    # input in predict mode is an operator matter, checked by the operator suites)
    grads_predict = {k: arr(v.grad()) for k, v in sorted(net.collect_params().items())
                     if v.grad_req != "null" and "dense0" not in k}
    with autograd.record():  # train mode: batch stats, moving stats updated; dropout random
        out = net(x)
    moving = {k: arr(v.data()) for k, v in sorted(net.collect_params().items())
              if "running" in k}
    mask_ok = bool(np.isfinite(out.asnumpy()).all())
    return {"predict": predict, "grads_predict": grads_predict, "moving": moving,
            "train_finite": mask_ok, "after": arr(net(x))}


def small_cnn(prefix):
    net = nn.HybridSequential(prefix=prefix)
    with net.name_scope():
        net.add(nn.Conv2D(6, 3, padding=1), nn.BatchNorm(), nn.Activation("relu"),
                nn.MaxPool2D(2), nn.Conv2D(8, 3, strides=2), nn.GlobalAvgPool2D(),
                nn.Flatten(), nn.Dense(4))
    return net


@scenario
def hybrid_cnn_train_and_export():
    # convolution, BatchNorm (moving statistics as aux states) and pooling in a static graph,
    # trained, then exported and imported
    r = rng(5)
    x = nd.array(r.uniform(-1, 1, (4, 3, 12, 12)))
    y = nd.array(r.randint(0, 4, 4))
    net = small_cnn("cnn_")
    result = train(net, x, y, steps=3, static_alloc=True)
    d = tempfile.mkdtemp()
    path = os.path.join(d, "cnn")
    net.export(path)
    blk = gluon.SymbolBlock.imports(path + "-symbol.json", ["data"], path + "-0000.params")
    result["imported"] = arr(blk(x))
    return result


@scenario
def export_and_import():
    x, _ = data()
    net = mlp("e_")
    net.initialize()
    net(x)
    set_params(net)
    net.hybridize()
    out = arr(net(x))
    d = tempfile.mkdtemp()
    path = os.path.join(d, "model")
    net.export(path, epoch=3)
    blk = gluon.SymbolBlock.imports(path + "-symbol.json", ["data"], path + "-0003.params")
    back = arr(blk(x))
    blk.hybridize(static_alloc=True)
    again = arr(blk(x))
    files = sorted(os.listdir(d))
    keys = sorted(nd.load(path + "-0003.params").keys())
    return {"out": out, "imported": back, "imported_hybrid": again, "files": files, "keys": keys}


@scenario
def symbol_block_of_symbols():
    data_ = sym.var("data")
    w = sym.var("w")
    out = sym.FullyConnected(data_, weight=w, num_hidden=3, no_bias=True, name="fc")
    out = sym.Group([sym.relu(out), sym.exp(out)])
    blk = gluon.SymbolBlock(out, [data_])
    blk.initialize()
    r = rng(7)
    blk.collect_params()["w"].set_data(nd.array(r.uniform(-1, 1, (3, 4))))
    x = nd.array(r.uniform(-1, 1, (2, 4)))
    a, b = blk(x)
    return {"relu": arr(a), "exp": arr(b)}


@scenario
def cached_op_direct():
    a = sym.var("a")
    b = sym.var("b")
    c = sym.broadcast_mul(sym.exp(a), b) + a
    op = nd.CachedOp(sym.Group([c, a]))
    r = rng(9)
    x = nd.array(r.uniform(-1, 1, (2, 3)))
    y = nd.array(r.uniform(-1, 1, (1, 3)))
    o1, o2 = op(x, y)
    out = nd.zeros((2, 3))
    op2 = nd.CachedOp(c, flags=[("static_alloc", True)])
    op2(x, y, out=out)
    x.attach_grad()
    with autograd.record():
        z = op2(x, y)
    z.backward()
    return {"o1": arr(o1), "o2": arr(o2), "out": arr(out), "dx": arr(x.grad)}


@scenario
def output_that_is_an_input():
    # MXNet returns a graph input that is also a graph output as the input array itself (a
    # write to the input shows in the output), and a repeated output as a copy
    class Pass(gluon.HybridBlock):
        def hybrid_forward(self, F, x, y):
            return x, y + 1, x

    res = {}
    for static in (False, True):
        blk = Pass()
        blk.hybridize(static_alloc=static, static_shape=static)
        x = nd.ones((2, 3))
        y = nd.ones((2, 3))
        for _ in range(2):
            a, b, c = blk(x, y)
        x[:] = 5
        res[f"static={static}"] = {"a": arr(a), "b": arr(b), "c": arr(c)}
    s = sym.var("s")
    t = s * 2
    op = nd.CachedOp(sym.Group([t, t, s, s]))
    x = nd.ones((3,))
    o = op(x)
    o[0][:] = 9
    x[:] = 4
    res["direct"] = [arr(v) for v in o]
    # recorded: the first output is still the input
    x = nd.ones((2,))
    x.attach_grad()
    op2 = nd.CachedOp(sym.Group([s, s * 3]))
    with autograd.record():
        a, b = op2(x)
    x[:] = 6
    res["recorded"] = arr(a)
    return res


@scenario
def wrong_input_count():
    a = sym.var("a")
    op = nd.CachedOp(sym.exp(a) + sym.var("b"))
    try:
        op(nd.ones((2,)))
    except mx.MXNetError as e:
        return {"refused": "inputs" in str(e)}
    return {"refused": False}


@scenario
def bad_flag():
    try:
        nd.CachedOp(sym.exp(sym.var("a")), flags=[("no_such_flag", "1")])
    except mx.MXNetError:
        return {"refused": True}
    return {"refused": False}


@scenario
def wrong_output_count():
    op = nd.CachedOp(sym.exp(sym.var("a")))
    try:
        op(nd.ones((2,)), out=[nd.zeros((2,)), nd.zeros((2,))])
    except mx.MXNetError as e:
        return {"refused": "outputs" in str(e)}
    return {"refused": False}


def main():
    if "--list" in sys.argv:
        print("\n".join(scenarios))
        return
    names = [a for a in sys.argv[1:] if not a.startswith("-")] or list(scenarios)
    results = {}
    for n in names:
        try:
            results[n] = {"ok": scenarios[n]()}
        except Exception as e:  # noqa: BLE001 - outcome recorded, compared by the test
            results[n] = {"error": f"{type(e).__name__}: {e}"[:2000]}
    print(json.dumps(results))


if __name__ == "__main__":
    main()
