"""CachedOp calls of graphs of small ops, the calls mxrt runs as one engine op when autograd does
not record them and no monitor hook is set. Prints each scenario's outcome as JSON
(test_cached_op_fast.py compares libmxrt with libmxnet.so and checks the values against numpy).
`--list` prints the scenario names; names as arguments run just those."""
import json
import sys
import warnings

import numpy as np
import mxnet as mx
from mxnet import autograd, nd, sym

warnings.simplefilter("ignore")
scenarios = {}

UNARY = ["exp", "tanh", "sigmoid", "negative", "abs"]
NP_UNARY = {
    "exp": np.exp,
    "tanh": np.tanh,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "negative": np.negative,
    "abs": np.abs,
}


def scenario(fn):
    scenarios[fn.__name__] = fn
    return fn


def chain(n=20):
    a = sym.var("a")
    h = a
    for i in range(n):
        h = getattr(sym, UNARY[i % len(UNARY)])(h)
    return h


def np_chain(x, n=20):
    for i in range(n):
        x = NP_UNARY[UNARY[i % len(UNARY)]](x)
    return x


def vals(a):
    return np.asarray(a.asnumpy(), dtype=np.float64).round(6).tolist()


def err(got, want):
    return float(np.max(np.abs(np.asarray(got, dtype=np.float64) - want))) if np.size(want) else 0.0


@scenario
def chain_matches_numpy():
    x = np.random.RandomState(0).uniform(-1, 1, 16).astype(np.float32)
    op = nd.CachedOp(chain())
    outs = [op(nd.array(x)) for _ in range(3)]
    return {"values": vals(outs[0]), "err": err(outs[2].asnumpy(), np_chain(x.astype(np.float64))),
            "calls_equal": all(np.array_equal(o.asnumpy(), outs[0].asnumpy()) for o in outs)}


@scenario
def hook_gives_identical_results():
    """The same CachedOp without a hook and then with one (the per-op path): equal bits."""
    x = nd.array(np.random.RandomState(1).uniform(-2, 2, (4, 8)))
    op = nd.CachedOp(chain(12))
    plain = op(x).asnumpy()
    seen = []
    op._register_op_hook(lambda name, opr, arr: seen.append(opr), False)
    hooked = op(x).asnumpy()
    return {"bit_equal": bool(np.array_equal(plain, hooked)), "ops_seen": len(seen) > 0,
            "values": np.asarray(plain, np.float64).round(6).tolist()}


@scenario
def several_signatures():
    """Shapes and dtypes change between calls of one CachedOp, and come back."""
    r = np.random.RandomState(2)
    op = nd.CachedOp(chain(7))
    out = {}
    for i, (shape, dt) in enumerate([((3,), "float32"), ((2, 5), "float32"), ((3,), "float32"),
                                     ((4, 4), "float64"), ((2, 5), "float32")]):
        x = r.uniform(-1, 1, shape).astype(dt)
        y = op(nd.array(x, dtype=dt))
        out[str(i)] = {"shape": list(y.shape), "dtype": str(y.dtype),
                       "err": err(y.asnumpy(), np_chain(x.astype(np.float64), 7))}
    return out


@scenario
def two_inputs_several_outputs():
    a, b = sym.var("a"), sym.var("b")
    s = sym.elemwise_add(a, b)
    p = sym.broadcast_mul(sym.exp(a), sym.tanh(b))
    g = sym.Group([sym.relu(s - p), sym.sqrt(sym.abs(p) + 1), sym.sum(s * s, axis=1)])
    op = nd.CachedOp(g)
    r = np.random.RandomState(3)
    x, y = r.uniform(-1, 1, (3, 4)), r.uniform(-1, 1, (3, 4))
    o = op(nd.array(x), nd.array(y))
    sp, pp = x + y, np.exp(x) * np.tanh(y)
    ref = [np.maximum(sp - pp, 0), np.sqrt(np.abs(pp) + 1), (sp * sp).sum(axis=1)]
    return {"n": len(o), "err": [err(oi.asnumpy(), ri) for oi, ri in zip(o, ref)],
            "values": [vals(oi) for oi in o]}


@scenario
def inputs_modified_between_calls():
    op = nd.CachedOp(sym.exp(sym.tanh(sym.var("a"))))
    v = nd.array([0.5, -1.0, 2.0])
    first = op(v)
    v[:] = 1.0
    second = op(v)
    v += 1.0
    third = op(v)
    return {"first": err(first.asnumpy(), np.exp(np.tanh([0.5, -1.0, 2.0]))),
            "second": err(second.asnumpy(), np.exp(np.tanh(np.ones(3)))),
            "third": err(third.asnumpy(), np.exp(np.tanh(2 * np.ones(3))))}


@scenario
def outputs_alias_inputs_and_repeat():
    """Graph outputs that are a graph input or one node twice: a node listed twice gives two
    arrays of their own."""
    a = sym.var("a")
    e = sym.exp(a)
    op = nd.CachedOp(sym.Group([a, e, e, sym.negative(e)]))
    v = nd.array([0.0, 1.0, -1.0])
    o = op(v)
    o[1][:] = 5.0
    return {"input": vals(v), "outs": [vals(x) for x in o]}


@scenario
def out_argument():
    op = nd.CachedOp(sym.sigmoid(sym.abs(sym.var("a"))))
    v = nd.array([-2.0, 0.0, 3.0])
    dst = nd.zeros((3,))
    res = op(v, out=dst)
    return {"dst": vals(dst), "same": res is dst or vals(res) == vals(dst)}


@scenario
def kernel_error_surfaces_at_wait():
    """An index out of range for take(mode='raise') inside the graph: the call returns; the
    error comes at the wait on the output. A good call afterwards works."""
    a, i = sym.var("a"), sym.var("i")
    op = nd.CachedOp(sym.exp(sym.take(sym.tanh(a), i, mode="raise")))
    x = nd.array([0.1, 0.2, 0.3])
    try:
        bad = op(x, nd.array([0.0, 7.0]))
    except mx.MXNetError:
        return {"when": "call"}
    try:
        bad.asnumpy()
        when = "none"
    except mx.MXNetError:
        when = "wait"
    good = op(x, nd.array([2.0, 0.0]))
    return {"when": when, "good": vals(good)}


@scenario
def shape_error_at_call():
    """A shape error of a node is reported by the call, as without the fast path."""
    a, b = sym.var("a"), sym.var("b")
    op = nd.CachedOp(sym.exp(sym.elemwise_add(a, b)))
    try:
        op(nd.ones((2, 3)), nd.ones((4, 5)))
    except mx.MXNetError:
        return {"when": "call"}
    return {"when": "none"}


@scenario
def recorded_call_still_has_gradients():
    """Inputs in an autograd graph: the call is recorded op by op; a plain call after it is not."""
    op = nd.CachedOp(sym.exp(sym.sin(sym.var("a"))))
    x = nd.array([0.1, 0.5, -0.7])
    x.attach_grad()
    with autograd.record():
        y = op(x)
    y.backward()
    z = op(nd.array([0.1, 0.5, -0.7]))
    xs = np.array([0.1, 0.5, -0.7])
    return {"grad_err": err(x.grad.asnumpy(), np.exp(np.sin(xs)) * np.cos(xs)),
            "plain_err": err(z.asnumpy(), np.exp(np.sin(xs)))}


@scenario
def training_mode_and_bulk():
    """Training mode (a separate signature) and engine bulking around calls."""
    op = nd.CachedOp(chain(5))
    x = nd.array(np.linspace(-1, 1, 8))
    with autograd.train_mode():
        t = op(x)
    with mx.engine.bulk(10):
        outs = [op(x) for _ in range(5)]
    want = np_chain(np.linspace(-1, 1, 8).astype(np.float32).astype(np.float64), 5)
    return {"train_err": err(t.asnumpy(), want), "bulk_err": max(err(o.asnumpy(), want) for o in outs)}


@scenario
def gluon_inference_static_alloc():
    """A hybridized block (Dense, BatchNorm in inference, Dense) called outside recording, with
    and without static_alloc, on two inputs in turn."""
    from mxnet.gluon import nn
    out = {}
    for static in (False, True):
        net = nn.HybridSequential()
        net.add(nn.Dense(8, in_units=5, activation="relu"), nn.BatchNorm(in_channels=8),
                nn.Dense(3, in_units=8))
        net.initialize()
        r = np.random.RandomState(4)
        for name in sorted(net.collect_params().keys()):
            p = net.collect_params()[name]
            lo, hi = (0.5, 1.5) if name.endswith("var") else (-0.5, 0.5)
            p.set_data(nd.array(r.uniform(lo, hi, p.shape)))
        net.hybridize(static_alloc=static, static_shape=static)
        xs = [nd.array(r.uniform(-1, 1, (4, 5))) for _ in range(2)]
        out[str(static)] = [vals(net(x)) for x in xs + xs]
    return out


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
