"""The Symbol API through the unmodified mxnet package: graph building, names, attributes, JSON,
shape and type inference. Prints each scenario's outcome as JSON (test_symbol.py compares
libmxrt with libmxnet.so). `--list` prints the scenario names; names as arguments run just those.
`--write-json DIR` saves the JSON of a few graphs to DIR; `--read-json DIR` loads them back."""
import contextlib
import io
import json
import os
import re
import sys
import warnings

import mxnet as mx
from mxnet import sym

scenarios = {}


def scenario(fn):
    scenarios[fn.__name__] = fn
    return fn


def lists(s):
    return {
        "arguments": s.list_arguments(),
        "outputs": s.list_outputs(),
        "aux": s.list_auxiliary_states(),
        "inputs": s.list_inputs(),
        "name": s.name,
        "num_outputs": len(s),
    }


def mlp():
    data = sym.var("data")
    fc1 = sym.FullyConnected(data, num_hidden=16, name="fc1")
    act = sym.Activation(fc1, act_type="relu", name="relu1")
    fc2 = sym.FullyConnected(act, num_hidden=4, name="fc2")
    return sym.softmax(fc2, name="out")


def bn_net():
    data = sym.var("data")
    fc = sym.FullyConnected(data, num_hidden=8, no_bias=True, name="fc")
    bn = sym.BatchNorm(fc, name="bn", fix_gamma=False)
    drop = sym.Dropout(bn, p=0.5, name="drop")
    return sym.LeakyReLU(drop, act_type="leaky", slope=0.1, name="lrelu")


def shape_ops():
    a = sym.var("a")
    b = sym.var("b")
    c = sym.broadcast_add(a, b, name="badd")
    r = sym.reshape(c, shape=(0, -1), name="resh")
    t = sym.transpose(r, name="tr")
    s = sym.sum(t, axis=1, keepdims=True, name="s")
    return sym.Group([s, sym.exp(a, name="e")])


GRAPHS = {"mlp": mlp, "bn_net": bn_net, "shape_ops": shape_ops}


@scenario
def variable_and_atomic_names():
    out = {}
    v = sym.var("x")
    out["var"] = lists(v)
    out["var_print"] = v.debug_str()
    with mx.name.NameManager():
        fc = sym.FullyConnected(num_hidden=3)
        out["auto_fc"] = lists(fc)
        fc2 = sym.FullyConnected(v, num_hidden=3, no_bias=True)
        out["auto_fc_nobias"] = lists(fc2)
        bn = sym.BatchNorm(name="bn")
        out["bn"] = lists(bn)
        out["bn_internals"] = bn.get_internals().list_outputs()
    return out


@scenario
def operators_on_symbols():
    with mx.name.NameManager():
        a = sym.var("a")
        b = sym.var("b")
        exprs = [a + b, a - b, a * b, a / b, a + 1, 2 * a, a ** 2, -a, a > b, sym.exp(a),
                 sym.add_n(a, b, a, name="sum3"), sym.concat(a, b, dim=0),
                 sym.split(a, num_outputs=3, axis=1, name="sp"),
                 sym.topk(a, k=2, ret_typ="both", name="tk"),
                 sym.dot(a, b), sym.broadcast_mul(a, b), sym.clip(a, 0, 1)]
        return [lists(e) for e in exprs]


@scenario
def graph_lists():
    out = {}
    for name, make in GRAPHS.items():
        s = make()
        out[name] = lists(s)
        out[name + "_internals"] = s.get_internals().list_outputs()
        ch = s.get_children()
        out[name + "_children"] = None if ch is None else ch.list_outputs()
    return out


@scenario
def group_output_and_indexing():
    s = mlp()
    i = s.get_internals()
    fc1 = i["fc1_output"]
    g = sym.Group([fc1, s, sym.var("z")])
    return {
        "group": lists(g),
        "out1": lists(g[1]),
        "by_index": [g[k].name for k in range(len(g))],
        "fc1_args": fc1.list_arguments(),
        "split_out": lists(sym.split(sym.var("q"), num_outputs=2, name="sq")[1]),
    }


@scenario
def compose_keyword_and_copy():
    data = sym.var("data")
    net = sym.FullyConnected(data=data, num_hidden=5, name="fc")
    net2 = sym.Activation(data=net, act_type="tanh", name="act")
    x = sym.var("x")
    y = net2(data=sym.exp(x, name="ex"))
    cp = net2.__copy__()
    out = {"composed": lists(y), "original": lists(net2), "copy": lists(cp)}
    try:
        net2(sym.var("p"))
    except mx.base.MXNetError as e:
        out["positional_error"] = "General composition only support kwargs" in str(e)
    return out


@scenario
def compose_errors():
    out = {}
    cases = {
        "too_many": lambda: sym.FullyConnected(sym.var("a"), sym.var("b"), sym.var("c"),
                                               sym.var("d"), num_hidden=2),
        "bad_kw": lambda: sym.FullyConnected(data=sym.var("a"), wrong=sym.var("b"), num_hidden=2),
        "tuple_arg": lambda: sym.exp(sym.split(sym.var("a"), num_outputs=2)),
        "bad_param": lambda: sym.FullyConnected(sym.var("a"), num_hiden=2),
        "var_kwargs": lambda: sym.add_n(a=sym.var("a")),
    }
    for k, f in cases.items():
        try:
            f()
            out[k] = "ok"
        except mx.base.MXNetError as e:
            out[k] = "error"
        except TypeError:
            out[k] = "typeerror"
    return out


@scenario
def attributes():
    with mx.AttrScope(ctx_group="dev1"):
        v = sym.var("w", lr_mult=2.0, shape=(3, 4), dtype="float16", init="zeros")
    fc = sym.FullyConnected(sym.var("data"), weight=v, num_hidden=3, name="fc",
                            attr={"__mood__": "calm"})
    fc._set_attr(__extra__="yes")
    out = {
        "v_attr": v.list_attr(),
        "fc_attr": fc.list_attr(),
        "attr_dict": fc.attr_dict(),
        "get": [v.attr("lr_mult"), v.attr("__lr_mult__"), fc.attr("num_hidden"), fc.attr("nope"),
                fc.attr("name")],
    }
    g = sym.Group([fc, v])
    out["group_attr"] = g.attr("num_hidden")
    try:
        g._set_attr(x="1")
        out["group_set"] = "ok"
    except mx.base.MXNetError:
        out["group_set"] = "error"
    return out


@scenario
def print_debug_strings():
    return {name: make().debug_str() for name, make in GRAPHS.items()}


@scenario
def json_matches():
    out = {name: make().tojson() for name, make in GRAPHS.items()}
    with mx.name.NameManager():
        a = sym.var("a", shape=(2, 3), lr_mult=0.5)
        out["attrs"] = (sym.FullyConnected(a, num_hidden=7, flatten=False) + a).tojson()
        out["many"] = sym.add_n(*[sym.var("v%d" % i) for i in range(12)]).tojson()
        out["escape"] = sym.var('q"\\\t\n', attr={"__k__": 'x"y'}).tojson()
    return out


@scenario
def json_round_trip():
    out = {}
    for name, make in GRAPHS.items():
        s = make()
        back = sym.load_json(s.tojson())
        out[name] = [back.tojson() == s.tojson(), lists(back)]
    return out


LEGACY = """{
  "nodes": [
    {"op": "null", "param": {}, "name": "data", "inputs": [], "backward_source_id": -1},
    {"op": "null", "param": {}, "name": "fc1_weight", "inputs": [], "backward_source_id": -1,
     "attr": {"lr_mult": "2"}},
    {"op": "null", "param": {}, "name": "fc1_bias", "inputs": [], "backward_source_id": -1},
    {"op": "FullyConnected", "param": {"no_bias": "False", "num_hidden": "10"},
     "name": "fc1", "inputs": [[0, 0], [1, 0], [2, 0]], "backward_source_id": -1,
     "attr": {"weight_lr_mult": "3"}},
    {"op": "BatchNorm", "param": {"eps": "0.001"}, "name": "bn", "inputs": [[3, 0]],
     "backward_source_id": -1}
  ],
  "arg_nodes": [0, 1, 2],
  "heads": [[4, 0]]
}"""


@scenario
def json_legacy_load():
    s = sym.load_json(LEGACY)
    return {"lists": lists(s), "json": s.tojson(), "attrs": s.attr_dict()}


@scenario
def json_errors():
    out = {}
    bad = {
        "not_json": "{",
        "unknown_op": '{"nodes": [{"op": "NoSuchOp", "name": "x", "inputs": []}], '
                      '"arg_nodes": [], "heads": [[0, 0, 0]]}',
        "unknown_field": '{"nodes": [{"op": "null", "name": "x", "inputs": [], "zz": 1}], '
                         '"arg_nodes": [0], "heads": [[0, 0, 0]]}',
        "dangling": '{"nodes": [{"op": "exp", "name": "x", "inputs": [[5, 0, 0]]}], '
                    '"arg_nodes": [], "heads": [[0, 0, 0]]}',
    }
    for k, text in bad.items():
        try:
            sym.load_json(text)
            out[k] = "ok"
        except Exception:  # noqa: BLE001 - MXNet's message may not even decode
            out[k] = "error"
    return out


def error_site(e):
    """The node an inference error names, and whether it is a shape inconsistency (the rest of
    MXNet's message carries source locations and timestamps)."""
    text = str(e)
    m = re.search(r"Error in operator (\S+):", text)
    return [m.group(1) if m else text[:80], "Shape inconsistent" in text]


def infer(s, partial=False, **kw):
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        try:
            if partial:
                r = s.infer_shape_partial(**kw)
            else:
                r = s.infer_shape(**kw)
        except mx.base.MXNetError as e:
            return {"error": error_site(e)}
    return [None if x is None else [list(t) for t in x] for x in r]


@scenario
def infer_shapes():
    out = {}
    out["mlp"] = infer(mlp(), data=(8, 20))
    out["mlp_partial"] = infer(mlp(), partial=True)
    out["mlp_incomplete"] = infer(mlp())
    out["bn_net"] = infer(bn_net(), data=(4, 6))
    out["shape_ops"] = infer(shape_ops(), a=(2, 3, 4), b=(1, 3, 1))
    out["shape_ops_partial"] = infer(shape_ops(), partial=True, a=(2, 3, 4))
    out["mlp_bad"] = infer(mlp(), data=(8, 20), fc1_weight=(16, 21))
    w = sym.var("w", shape=(10, 0))
    out["deferred"] = infer(sym.FullyConnected(sym.var("x"), weight=w, num_hidden=10,
                                               name="d"), x=(3, 7))
    a, b = sym.var("a"), sym.var("b")
    out["backward_elemwise"] = infer(sym.exp(a + b) * a, a=(2, 5))
    out["elemwise_bad"] = infer(a + b, a=(2, 5), b=(3, 5))
    return out


@scenario
def infer_types():
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out["mlp"] = [None if x is None else [str(t.__name__) if t is not None else None
                                              for t in x]
                      for x in mlp().infer_type(data="float64")]
        out["mlp_partial"] = [None if x is None else [t.__name__ if t is not None else None
                                                      for t in x]
                              for x in mlp().infer_type_partial()]
    return out


def gluon_net():
    from mxnet import gluon
    with mx.name.NameManager():
        net = gluon.nn.HybridSequential(prefix="net_")
        with net.name_scope():
            net.add(gluon.nn.Dense(16, activation="relu"))
            net.add(gluon.nn.BatchNorm())
            net.add(gluon.nn.Dropout(0.3))
            net.add(gluon.nn.LeakyReLU(0.2))
            net.add(gluon.nn.Dense(4, in_units=16, use_bias=False))
        return net(sym.var("data"))


GRAPHS["gluon"] = gluon_net


@scenario
def gluon_blocks_on_symbols():
    s = gluon_net()
    return {"lists": lists(s), "json": s.tojson(), "infer": infer(s, data=(3, 9)),
            "attrs": s.attr_dict()}


@scenario
def shape_inference_through_many_ops():
    a, b, c = sym.var("a"), sym.var("b"), sym.var("c")
    out = {}
    out["dot"] = infer(sym.dot(a, b, transpose_b=True), a=(3, 4), b=(5, 4))
    out["concat"] = infer(sym.concat(a, b, c, dim=1), a=(2, 3), b=(2, 4), c=(2, 1))
    out["split"] = infer(sym.split(a, num_outputs=3, axis=1), a=(2, 6))
    out["reduce"] = infer(sym.mean(sym.square(a - b), axis=(0, 2)), a=(2, 3, 4))
    out["broadcast"] = infer(sym.broadcast_mul(a, b) + 1, a=(4, 1, 3), b=(1, 5, 3))
    out["reshape"] = infer(sym.flatten(sym.reshape(a, shape=(-1, 2, 3))), a=(12,))
    out["softmax"] = infer(sym.log_softmax(sym.relu(a), axis=-1), a=(2, 7))
    out["bad_dot"] = infer(sym.dot(a, b), a=(3, 4), b=(5, 4))
    out["partial_concat"] = infer(sym.concat(a, b, dim=0), partial=True, a=(2, 3))
    return out


@scenario
def shapes_inferred_backward():
    """Unknown input dimensions filled from known outputs and from other inputs: through
    FullyConnected, SliceChannel and Convolution (MXNet's FInferShape rules), dimensions two
    inputs share (batch_dot, pick), broadcasting with unknown dimensions, and
    _identity_with_attr_like_rhs as a shape constraint."""
    V = sym.var
    out = {}
    fc = sym.FullyConnected(V("a", shape=(0, 10)), num_hidden=21, name="fc")
    out["fc"] = infer(fc + V("c", shape=(5, 0)))
    fc3 = sym.FullyConnected(V("a", shape=(0, 0, 10)), num_hidden=4, flatten=False, name="fc")
    out["fc_no_flatten"] = infer(fc3 + V("c", shape=(5, 3, 4)), partial=True)
    out["fc_flatten_partial"] = infer(
        sym.FullyConnected(V("a", shape=(0, 2, 5)), num_hidden=3, name="fc") +
        V("c", shape=(4, 0)), partial=True)
    sc = sym.SliceChannel(V("a", shape=(0, 10)), num_outputs=10, axis=1, squeeze_axis=True,
                          name="sc")
    out["slice_squeeze"] = infer(sc[1] + V("c", shape=(5,)))
    sc = sym.SliceChannel(V("a", shape=(0, 15, 0)), num_outputs=3, name="sc")
    out["slice"] = infer(sc[1] + V("c", shape=(3, 5, 2)))
    sc = sym.SliceChannel(V("a", shape=(0, 0, 6)), num_outputs=3, axis=-1, name="sc")
    out["slice_last_axis"] = infer(sc[2] * V("c", shape=(4, 2, 0)), partial=True)
    out["slice_uneven"] = infer(sym.SliceChannel(V("a"), num_outputs=4, axis=1, name="sc"),
                                a=(2, 6))
    conv = sym.Convolution(V("a", shape=(0, 10, 0, 0)), num_filter=21, kernel=(3, 3),
                           dilate=(1, 1), pad=(1, 1), name="conv")
    out["conv"] = infer(conv + V("c", shape=(5, 21, 32, 32)))
    conv = sym.Convolution(V("a", shape=(0, 4, 0, 0)), num_filter=6, kernel=(3, 5),
                           dilate=(2, 1), pad=(0, 2), name="conv")
    out["conv_dilated"] = infer(conv + V("c", shape=(2, 6, 7, 9)))
    conv = sym.Convolution(V("a", shape=(0, 4, 0, 0)), num_filter=6, kernel=(3, 3),
                           stride=(2, 1), name="conv")
    out["conv_strided"] = infer(conv + V("c", shape=(2, 6, 7, 9)), partial=True)
    x, y = V("x"), V("y")
    bd = sym.batch_dot(x, y, name="bd")
    out["batch_dot"] = infer(bd, partial=True, x=(0, 3, 4), y=(0, 4, 5))
    out["batch_dot_unknown_k"] = infer(bd, partial=True, x=(0, 3, 4), y=(0, 0, 5))
    out["batch_dot_transposed"] = infer(sym.batch_dot(x, y, transpose_a=True, transpose_b=True,
                                                      name="bd"),
                                        partial=True, x=(0, 2, 4, 3), y=(0, 2, 5, 4))
    out["batch_dot_bad"] = infer(bd, partial=True, x=(0, 3, 4), y=(0, 5, 5))
    out["pick"] = infer(sym.pick(x, y, axis=1, name="p"), partial=True, x=(0, 3, 3), y=(0, 3))
    out["pick_keepdims"] = infer(sym.pick(x, y, axis=-1, keepdims=True, name="p"),
                                 partial=True, x=(0, 2, 5), y=(0, 2, 1))
    out["pick_index_from_data"] = infer(sym.pick(x, y, axis=0, name="p"), x=(4, 3), y=(3,))
    out["broadcast_partial"] = infer(sym.broadcast_add(x, y, name="b"), partial=True,
                                     x=(0, 10), y=(12, 1))
    out["broadcast_bad"] = infer(sym.broadcast_mul(x, y, name="b"), partial=True,
                                 x=(3, 0), y=(5, 1))
    w = V("weight")
    wt = sym.broadcast_add(w, V("wshift", shape=(1,)))
    wt = sym._internal._identity_with_attr_like_rhs(wt, w, name="like")
    net = sym.FullyConnected(data=V("data"), weight=wt, num_hidden=11, no_bias=True, name="fc")
    out["identity_like_rhs"] = infer(net, data=(7, 100))
    out["identity_like_rhs_bad"] = infer(
        sym._internal._identity_with_attr_like_rhs(x, y, name="like"), x=(2, 3), y=(3, 2))
    return out


@scenario
def identity_with_attr_like_rhs_values():
    from mxnet import nd
    a = nd.array([[1, 2, 3], [4, 5, 6]])
    out = {"same": nd._internal._identity_with_attr_like_rhs(a, nd.zeros((2, 3))).asnumpy()
           .tolist()}
    try:
        nd._internal._identity_with_attr_like_rhs(a, nd.zeros((3, 2))).asnumpy()
        out["mismatch"] = "ok"
    except mx.base.MXNetError:
        out["mismatch"] = "error"
    e = sym._internal._identity_with_attr_like_rhs(sym.var("a") * 2, sym.var("b"), name="l")
    ex = e.bind(mx.cpu(), {"a": a, "b": nd.ones((2, 3))},
                args_grad={"a": nd.zeros((2, 3)), "b": nd.ones((2, 3))})
    ex.forward(is_train=True)
    ex.backward(nd.ones((2, 3)))
    out["bound"] = [ex.outputs[0].asnumpy().tolist(),
                    {k: v.asnumpy().tolist() for k, v in ex.grad_dict.items()}]
    return out


def optimized(s, env, **shapes):
    """The graph an executor runs with MXNET_ELIMINATE_COMMON_EXPR=env, and its results."""
    from mxnet import nd
    old = os.environ.get("MXNET_ELIMINATE_COMMON_EXPR")
    os.environ["MXNET_ELIMINATE_COMMON_EXPR"] = env
    try:
        ex = s.simple_bind(mx.cpu(), **shapes)
    finally:
        if old is None:
            del os.environ["MXNET_ELIMINATE_COMMON_EXPR"]
        else:
            os.environ["MXNET_ELIMINATE_COMMON_EXPR"] = old
    for i, (k, v) in enumerate(sorted(ex.arg_dict.items())):
        v[:] = nd.arange(v.size).reshape(v.shape) / 7 + i
    outs = ex.forward(is_train=True)
    ex.backward([nd.ones_like(o) for o in outs])
    opt = ex.get_optimized_symbol()
    return {"internals": opt.get_internals().list_outputs(), "outputs": opt.list_outputs(),
            "values": [o.asnumpy().astype("float64").round(3).tolist() for o in outs],
            "grads": {k: v.asnumpy().astype("float64").round(3).tolist()
                      for k, v in sorted(ex.grad_dict.items())}}


@scenario
def common_subexpressions():
    """Executors merge nodes computing the same thing (MXNET_ELIMINATE_COMMON_EXPR, default on):
    the optimised graph, outputs that became one node copied apart, and the same values."""
    a, b, c = sym.var("a"), sym.var("b"), sym.var("c")
    d = a + 1
    graphs = {
        "distinct": (a + 1) + (a + 2),
        "pair": (a + b) + (a + b),
        "chain": ((a + b) + c) + ((a + b) + c),
        "group": sym.Group([a * d, a * d]),
        "group_plus": sym.Group([a * d + b, a * d + b]),
        "attrs_differ": sym.sum(a, axis=1) + sym.sum(a, axis=1, keepdims=False),
        "dropout": sym.Dropout(a, p=0.0) + sym.Dropout(a, p=0.0),
        "fc_shared": sym.FullyConnected(a, num_hidden=3, name="f1") * sym.FullyConnected(
            a, num_hidden=3, name="f2"),
    }
    out = {}
    for name, s in graphs.items():
        shapes = {k: (2, 3) for k in s.list_arguments() if k in "abc"}
        out[name] = {env: optimized(s, env, **shapes) for env in ("0", "1")}
    return out


@scenario
def bind_checks_gradients():
    """A bind that computes gradients fails where a gradient would reach an op without one
    (batch_take), as MXNet's gradient pass does, and binds once stop_gradient cuts it off."""
    import numpy as np
    x, idx = sym.var("x"), sym.var("idx")
    y = sym.batch_take(x, idx)
    out = {}
    for name, s, req in [("stopped", sym.stop_gradient(y), "write"), ("reached", y, "write"),
                         ("no_grad", y, "null"), ("reached_add", y * 2, "add"),
                         ("zero_grad_path", sym.BlockGrad(y) + x.sum(axis=1), "write")]:
        try:
            ex = s.simple_bind(mx.cpu(), x=(4, 3), idx=(4,), grad_req=req,
                               type_dict={"x": np.float32, "idx": np.int32})
            ex.arg_dict["x"][:] = mx.nd.arange(12).reshape((4, 3))
            ex.arg_dict["idx"][:] = mx.nd.array([0, 2, 1, 2])
            ex.forward(is_train=True)
            out[name] = ex.outputs[0].asnumpy().tolist()
        except (mx.base.MXNetError, RuntimeError) as e:
            out[name] = "error: non-differentiable" if "non-differentiable" in str(e) else \
                "error"
    return out


@scenario
def executor_allocations():
    """simple_bind fills creation ops' unknown dimensions from inference (an RNN cell's zero
    begin state), allocates sparse arrays for variables declared sparse, and fills the
    shared buffer with the arrays of the arguments that are not shared parameters."""
    from mxnet import nd
    a = sym.var("a")
    s = sym.zeros(shape=(0, 4)) + a
    ex = s.simple_bind(mx.cpu(), a=(3, 4))
    ex.arg_dict["a"][:] = 2
    out = {"zeros_filled": ex.forward()[0].asnumpy().tolist()}
    v = sym.var("v", stype="row_sparse")
    d = sym.var("d", stype="csr")
    ex = sym.dot(d, v).simple_bind(mx.cpu(), d=(3, 4), v=(4, 2))
    out["stypes"] = {k: x.stype for k, x in sorted(ex.arg_dict.items())}
    w = sym.var("w")
    net = sym.FullyConnected(sym.var("data"), weight=w, num_hidden=2, no_bias=True, name="f")
    buf = {}
    ex1 = net.simple_bind(mx.cpu(), data=(4, 3), shared_arg_names=["w"], shared_buffer=buf,
                          grad_req={"data": "write", "w": "write"})
    out["buffer"] = sorted(buf)
    ex2 = net.simple_bind(mx.cpu(), data=(4, 3), shared_arg_names=["w"], shared_buffer=buf,
                          shared_exec=ex1)
    out["buffer_after"] = sorted(buf)
    ex2.arg_dict["data"][:] = 5
    out["data_shared"] = ex1.arg_dict["data"].asnumpy().tolist()
    out["weight_shared"] = ex2.arg_dict["w"] is not None and ex1.arg_dict["w"].shape == (2, 3)
    nd.waitall()
    return out


@scenario
def type_inference_with_casts():
    a, b = sym.var("a"), sym.var("b")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = (sym.Cast(a, dtype="float16") * b).infer_type(a="float32")
        r2 = sym.FullyConnected(a, num_hidden=3, name="f").infer_type(a="float16")
        try:
            (a + b).infer_type(a="float32", b="int32")
            bad = "ok"
        except mx.base.MXNetError as e:
            bad = error_site(e)[0]
    name = lambda x: [t.__name__ for t in x]
    return {"cast": [name(x) for x in r], "fc16": [name(x) for x in r2], "bad": bad}


@scenario
def pickled_symbols():
    import pickle
    s = mlp()
    back = pickle.loads(pickle.dumps(s))
    return {"same_json": back.tojson() == s.tojson(), "lists": lists(back)}


@scenario
def variables_with_hints():
    v = sym.var("v", shape=(2, 0), dtype="float64", lr_mult=0.1, wd_mult=0, init=mx.init.One(),
                stype="default", __extra__="x")
    fc = sym.FullyConnected(sym.var("x"), weight=v, num_hidden=2, no_bias=True, name="f")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = fc.infer_type()
    return {"json": fc.tojson(), "infer": infer(fc, x=(5, 3)),
            "types": [[None if x is None else x.__name__ for x in g] for g in t]}


@scenario
def gluon_deferred_initialisation():
    """Layers without input sizes get their parameters' shapes from Symbol shape inference."""
    from mxnet import gluon, nd
    with mx.name.NameManager():
        net = gluon.nn.HybridSequential(prefix="deferred_")
        with net.name_scope():
            net.add(gluon.nn.Dense(8, activation="relu"), gluon.nn.BatchNorm(),
                    gluon.nn.Dense(3, flatten=False))
        net.initialize()
        net.infer_shape(nd.ones((4, 2, 6)))
        net.infer_type(nd.ones((4, 2, 6)))
        params = net.collect_params()
        return {"shapes": {k: list(v.shape) for k, v in params.items()},
                "dtypes": {k: str(v.dtype) for k, v in params.items()},
                "output": list(net(nd.ones((4, 2, 6))).shape)}


def write_json(d):
    for name, make in GRAPHS.items():
        make().save(os.path.join(d, name + "-symbol.json"))


def read_json(d):
    out = {}
    for name in sorted(GRAPHS):
        s = sym.load(os.path.join(d, name + "-symbol.json"))
        out[name] = [lists(s), s.tojson()]
    return out


def main():
    if "--list" in sys.argv:
        print("\n".join(scenarios))
        return
    if "--write-json" in sys.argv:
        write_json(sys.argv[sys.argv.index("--write-json") + 1])
        return
    if "--read-json" in sys.argv:
        print(json.dumps(read_json(sys.argv[sys.argv.index("--read-json") + 1])))
        return
    chosen = sys.argv[1:] or list(scenarios)
    results = {}
    for name in chosen:
        try:
            # MXNet's package prints argument lists on inference errors: keep stdout JSON
            with contextlib.redirect_stdout(io.StringIO()):
                results[name] = {"ok": scenarios[name]()}
        except Exception as e:  # noqa: BLE001 - the failure is the result
            results[name] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
