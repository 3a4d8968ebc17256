"""Convolutions with BatchNorm and relu folded into them (inference runs): Gluon model-zoo
networks through the C predict API, an inference executor and a hybridized block, and small
graphs around the folding rules. Prints a JSON object of results; test_fold.py compares it
between libmxnet.so and libmxrt (and with MXRT_FOLD=0).

Parameters come from numpy generators (same values on both libraries), with BatchNorm
statistics far from 0 and 1 so that a wrong fold shows."""
import ctypes
import json
import os
import sys
import tempfile
import warnings

import numpy as np

os.environ.setdefault("MXNET_SUBGRAPH_BACKEND", "NONE")
import mxnet as mx  # noqa: E402
from mxnet import nd  # noqa: E402
from mxnet.base import _LIB  # noqa: E402
from mxnet.gluon.model_zoo import vision  # noqa: E402

warnings.simplefilter("ignore")
SIDE = 64


def values(name, shape, rs):
    if name.endswith("running_var"):
        return rs.uniform(0.3, 2.0, shape)
    if name.endswith("gamma"):
        return rs.uniform(0.5, 1.5, shape)
    if name.endswith(("beta", "running_mean", "bias")):
        return rs.uniform(-0.3, 0.3, shape)
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    return rs.normal(0, np.sqrt(2.0 / fan_in), shape)


def network(name):
    net = vision.get_model(name, pretrained=False, classes=10)
    net.initialize(mx.init.Zero())
    net(nd.zeros((1, 3, SIDE, SIDE)))
    rs = np.random.RandomState(0)
    for pname, p in sorted(net.collect_params().items()):
        p.set_data(nd.array(values(pname, p.shape, rs)))
    return net


def rounded(a):
    return [round(float(v), 5) for v in np.asarray(a).ravel()]


def data(batch, seed=1):
    return np.random.RandomState(seed).uniform(-1, 1, (batch, 3, SIDE, SIDE)).astype(np.float32)


def predict(prefix, batch, updates=(), forward_first=True):
    """Outputs of MXPred* at `batch`; then, per (key, values) of `updates`, the outputs after
    MXPredSetInput of that parameter (`forward_first=False`: set before the first forward;
    libmxnet.so cannot set a parameter its MKLDNN kernels have reordered)."""
    js = open(prefix + "-symbol.json").read().encode()
    params = open(prefix + "-0000.params", "rb").read()
    keys = (ctypes.c_char_p * 1)(b"data")
    indptr = (ctypes.c_uint32 * 2)(0, 4)
    dims = (ctypes.c_uint32 * 4)(batch, 3, SIDE, SIDE)
    h = ctypes.c_void_p()
    assert _LIB.MXPredCreate(js, params, len(params), 1, 0, 1, keys, indptr, dims,
                             ctypes.byref(h)) == 0
    x = data(batch)
    y = np.zeros((batch, 10), dtype=np.float32)

    def run():
        assert _LIB.MXPredSetInput(h, b"data", x.ctypes.data_as(ctypes.c_void_p),
                                   ctypes.c_uint32(x.size)) == 0
        assert _LIB.MXPredForward(h) == 0
        assert _LIB.MXPredGetOutput(h, 0, y.ctypes.data_as(ctypes.c_void_p),
                                    ctypes.c_uint32(y.size)) == 0
        return rounded(y)

    out = [run(), run()] if forward_first else [None, None]
    for key, v in updates:
        v = np.ascontiguousarray(v, dtype=np.float32)
        rc = _LIB.MXPredSetInput(h, key.encode(), v.ctypes.data_as(ctypes.c_void_p),
                                 ctypes.c_uint32(v.size))
        assert rc == 0, _LIB.MXGetLastError()
        out.append(run())
    _LIB.MXPredFree(h)
    return out


def zoo(name, tmp):
    net = network(name)
    net.hybridize(static_alloc=True)
    x = nd.array(data(2))
    res = {"gluon_b2": rounded(net(x).asnumpy())}
    # the same call again (kept plan and prepared weights), then after a weight changes
    res["gluon_b2_again"] = rounded(net(x).asnumpy())
    params = net.collect_params()
    conv_w = sorted(k for k in params if k.endswith("conv0_weight"))[0]
    bn_var = sorted(k for k in params if k.endswith("running_var"))[0]
    params[conv_w].set_data(params[conv_w].data() * 0.5)
    res["gluon_b2_new_weight"] = rounded(net(x).asnumpy())
    params[bn_var].set_data(params[bn_var].data() * 3.0)
    res["gluon_b2_new_var"] = rounded(net(x).asnumpy())
    prefix = os.path.join(tmp, name)
    net.export(prefix, 0)
    for b in (1, 2):
        res[f"predict_b{b}"] = predict(prefix, b)[0]
    # the executor: forward, an argument written in place, an auxiliary state replaced
    sym = mx.sym.load(prefix + "-symbol.json")
    saved = nd.load(prefix + "-0000.params")
    args = {k[4:]: v for k, v in saved.items() if k.startswith("arg:")}
    aux = {k[4:]: v for k, v in saved.items() if k.startswith("aux:")}
    args["data"] = nd.array(data(2))
    ex = sym.bind(mx.cpu(), args, aux_states=aux, grad_req="null")
    ex.forward(is_train=False)
    res["executor_b2"] = rounded(ex.outputs[0].asnumpy())
    ex.arg_dict[conv_w][:] = ex.arg_dict[conv_w] * -1.0
    ex.forward(is_train=False)
    res["executor_b2_weight_written"] = rounded(ex.outputs[0].asnumpy())
    ex.aux_dict[bn_var][:] = ex.aux_dict[bn_var] + 1.0
    ex.forward(is_train=False)
    res["executor_b2_aux_written"] = rounded(ex.outputs[0].asnumpy())
    # MXPredSetInput of a parameter after forwards
    w = saved["arg:" + conv_w].asnumpy()
    res["predict_b1_set_weight_first"] = predict(prefix, 1, [(conv_w, w * 2.0)], False)[2]
    try:
        res["predict_b1_set_weight_after"] = predict(prefix, 1, [(conv_w, w * 2.0)])[2]
    except AssertionError:
        res["predict_b1_set_weight_after"] = None
    return res


def small():
    """Graphs around the rules: what folds and what must not."""
    rs = np.random.RandomState(5)
    x = mx.sym.var("data")
    w, b = mx.sym.var("w"), mx.sym.var("b")
    g, be, m, v = (mx.sym.var(n) for n in ("g", "be", "m", "v"))
    conv = mx.sym.Convolution(x, w, b, kernel=(3, 3), pad=(1, 1), num_filter=8, name="c")
    conv_nb = mx.sym.Convolution(x, w, kernel=(3, 3), pad=(1, 1), num_filter=8, no_bias=True,
                                 name="cn")

    def bn(d, **kw):
        return mx.sym.BatchNorm(d, g, be, m, v, fix_gamma=False, eps=1e-4, name="bn", **kw)

    shared = bn(conv)
    graphs = {
        "conv_bn_relu": mx.sym.Activation(bn(conv), act_type="relu"),
        "conv_nobias_bn": bn(conv_nb),
        "conv_relu": mx.sym.relu(conv_nb),
        "global_stats": mx.sym.Activation(bn(conv, use_global_stats=True), act_type="relu"),
        # the BatchNorm's output is also a graph output: no relu absorbed
        "bn_also_output": mx.sym.Group([shared, mx.sym.relu(shared) * 2]),
        # the convolution's output has two readers: no BatchNorm folded
        "conv_two_readers": mx.sym.Group([bn(conv), conv + 1]),
        # fix_gamma: gamma is taken as 1, and an inference forward leaves the array alone
        "fix_gamma": mx.sym.BatchNorm(conv, g, be, m, v, fix_gamma=True, name="bnf"),
        "fix_gamma_relu": mx.sym.relu(mx.sym.BatchNorm(conv_nb, g, be, m, v, fix_gamma=True,
                                                       name="bnf")),
        "stride2_7x7": mx.sym.relu(mx.sym.BatchNorm(
            mx.sym.Convolution(x, w, b, kernel=(3, 3), stride=(2, 2), num_filter=8, name="c2"),
            g, be, m, v, fix_gamma=False, name="bn2")),
    }
    arrays = {
        "data": rs.uniform(-1, 1, (2, 16, 9, 9)),
        "w": rs.normal(0, 0.3, (8, 16, 3, 3)),
        "b": rs.uniform(-0.5, 0.5, (8,)),
        "g": rs.uniform(0.5, 1.5, (8,)),
        "be": rs.uniform(-0.5, 0.5, (8,)),
        "m": rs.uniform(-0.5, 0.5, (8,)),
        "v": rs.uniform(0.2, 2.0, (8,)),
    }
    res = {}
    for name, s in graphs.items():
        args = {k: nd.array(arrays[k]) for k in s.list_arguments()}
        aux = {k: nd.array(arrays[k]) for k in s.list_auxiliary_states()}
        ex = s.bind(mx.cpu(), args, aux_states=aux, grad_req="null")
        for train in (False, True):
            outs = ex.forward(is_train=train)
            res[f"{name}_{'train' if train else 'infer'}"] = [rounded(o.asnumpy()) for o in outs]
            if not train and "g" in args:
                res[f"{name}_gamma_after_infer"] = rounded(args["g"].asnumpy())
        res[f"{name}_aux"] = {k: rounded(a.asnumpy()) for k, a in ex.aux_dict.items()}
    return res


def main():
    names = sys.argv[1:] or ["resnet18_v1", "mobilenet1.0"]
    out = {"small": small()}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            out[name] = zoo(name, tmp)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
