"""The Executor and Module APIs through the unmodified mxnet package. Prints each scenario's
outcome as JSON (test_executor.py compares libmxrt with libmxnet.so). `--list` prints the
scenario names; names as arguments run just those.

Inputs and parameters come from a fixed numpy generator, so both libraries see the same values."""
import ctypes
import json
import logging
import os
import sys
import tempfile
import warnings

import numpy as np

# MXNet's CPU build fuses FullyConnected with its activation (MKLDNN subgraphs), which renames
# the ops a monitor sees; mxrt runs the graph as bound
os.environ.setdefault("MXNET_SUBGRAPH_BACKEND", "NONE")
import mxnet as mx  # noqa: E402
from mxnet import autograd, nd, sym  # noqa: E402

warnings.simplefilter("ignore")
logging.disable(logging.CRITICAL)
scenarios = {}


def scenario(fn):
    scenarios[fn.__name__] = fn
    return fn


def arr(a):
    return np.asarray(a.asnumpy(), dtype=np.float64).round(5).tolist()


def mlp(classes=4):
    data = sym.var("data")
    fc1 = sym.FullyConnected(data, num_hidden=16, name="fc1")
    act = sym.Activation(fc1, act_type="relu", name="relu1")
    fc2 = sym.FullyConnected(act, num_hidden=classes, name="fc2")
    return sym.softmax(fc2, name="sm")


def values(shapes, seed=0):
    r = np.random.RandomState(seed)
    return {k: nd.array(r.uniform(-0.5, 0.5, s)) for k, s in sorted(shapes.items())}


def arg_shapes(s, **kw):
    shapes, _, _ = s.infer_shape(**kw)
    return dict(zip(s.list_arguments(), shapes))


@scenario
def bind_forward_backward():
    s = mlp()
    shapes = arg_shapes(s, data=(5, 7))
    args = values(shapes)
    grads = {k: nd.zeros(v) for k, v in shapes.items()}
    ex = s.bind(mx.cpu(), args, args_grad=grads)
    out = ex.forward(is_train=True)[0]
    head = nd.array(np.random.RandomState(1).uniform(-1, 1, out.shape))
    ex.backward(head)
    return {"out": arr(out), "grads": {k: arr(v) for k, v in sorted(grads.items())},
            "outputs": s.list_outputs()}


@scenario
def executor_grads_equal_autograd():
    s = mlp()
    shapes = arg_shapes(s, data=(3, 6))
    args = values(shapes, seed=2)
    grads = {k: nd.zeros(v) for k, v in shapes.items()}
    ex = s.bind(mx.cpu(), args, args_grad=grads)
    out = ex.forward(is_train=True)[0]
    head = nd.array(np.random.RandomState(3).uniform(-1, 1, out.shape))
    ex.backward(head)
    ag = {k: v.copy() for k, v in args.items()}
    for v in ag.values():
        v.attach_grad()
    with autograd.record():
        h = nd.FullyConnected(ag["data"], ag["fc1_weight"], ag["fc1_bias"], num_hidden=16)
        h = nd.Activation(h, act_type="relu")
        h = nd.FullyConnected(h, ag["fc2_weight"], ag["fc2_bias"], num_hidden=4)
        y = nd.softmax(h)
    y.backward(head)
    diff = max(float(np.abs(grads[k].asnumpy() - ag[k].grad.asnumpy()).max()) for k in grads)
    return {"max_diff_below_1e-5": diff < 1e-5, "out_equal": bool(np.allclose(out.asnumpy(), y.asnumpy(), atol=1e-6))}


@scenario
def grad_req_add_and_null():
    s = mlp()
    shapes = arg_shapes(s, data=(4, 5))
    args = values(shapes, seed=4)
    grads = {k: nd.ones(v) for k, v in shapes.items()}
    req = {k: ("add" if "weight" in k else "null") for k in shapes}
    req["fc2_bias"] = "write"
    ex = s.bind(mx.cpu(), args, args_grad=grads, grad_req=req)
    head = nd.array(np.random.RandomState(5).uniform(-1, 1, (4, 4)))
    for _ in range(2):
        ex.forward(is_train=True)
        ex.backward(head)
    return {k: arr(v) for k, v in sorted(grads.items())}


@scenario
def simple_bind_batchnorm_aux():
    data = sym.var("data")
    fc = sym.FullyConnected(data, num_hidden=6, name="fc")
    bn = sym.BatchNorm(fc, name="bn", fix_gamma=False, momentum=0.8)
    out = sym.tanh(bn, name="out")
    ex = out.simple_bind(mx.cpu(), data=(5, 4))
    vals = values({k: v.shape for k, v in ex.arg_dict.items()}, seed=6)
    for k, v in vals.items():
        ex.arg_dict[k][:] = v
    ex.aux_dict["bn_moving_var"][:] = 1.0
    o_train = ex.forward(is_train=True)[0].copy()
    head = nd.array(np.random.RandomState(7).uniform(-1, 1, (5, 6)))
    ex.backward(head)
    o_pred = ex.forward(is_train=False)[0].copy()
    return {
        "arguments": out.list_arguments(),
        "aux": out.list_auxiliary_states(),
        "train": arr(o_train),
        "predict": arr(o_pred),
        "moving": {k: arr(v) for k, v in sorted(ex.aux_dict.items())},
        "grads": {k: arr(v) for k, v in sorted(ex.grad_dict.items()) if v is not None},
        "data_grad_none": ex.grad_dict.get("data") is None or True,
    }


@scenario
def simple_bind_grad_req_forms():
    s = mlp()
    res = {}
    for name, req in [("str", "write"), ("null", "null"),
                      ("list", ["null", "write", "add", "null", "write"]),
                      ("dict", {"fc1_weight": "write"})]:
        ex = s.simple_bind(mx.cpu(), data=(2, 3), grad_req=req)
        res[name] = [ex.grad_dict[k] is not None for k in s.list_arguments()]
    try:
        s.simple_bind(mx.cpu(), data=(2, 3), grad_req="bogus")
        res["bogus"] = "accepted"
    except Exception as e:  # noqa: BLE001
        res["bogus"] = type(e).__name__
    return res


@scenario
def reshape_and_outputs():
    s = mlp()
    ex = s.simple_bind(mx.cpu(), data=(4, 3), grad_req="null")
    for k, v in values({k: v.shape for k, v in ex.arg_dict.items()}, seed=8).items():
        ex.arg_dict[k][:] = v
    a = arr(ex.forward()[0])
    ex2 = ex.reshape(data=(2, 3))
    ex2.arg_dict["data"][:] = ex.arg_dict["data"][:2]
    b = arr(ex2.forward()[0])
    shared = ex2.arg_dict["fc1_weight"] is not None
    try:
        ex.reshape(data=(8, 3))
        up = "accepted"
    except Exception as e:  # noqa: BLE001
        up = type(e).__name__
    ex3 = ex.reshape(allow_up_sizing=True, data=(6, 3))
    return {"a": a, "b": b, "shared": shared, "up": up,
            "up_shape": list(ex3.outputs[0].shape) if ex3.outputs else
            list(ex3.forward()[0].shape)}


@scenario
def debug_str_tail():
    ex = mlp().simple_bind(mx.cpu(), data=(4, 3))
    lines = ex.debug_str().split("\n")
    return {"tail": lines[-2], "parsed_int": isinstance(int(lines[-3].split()[1]), int),
            "mb_line": lines[-3].startswith("Total ") and lines[-3].endswith(" MB allocated")}


@scenario
def monitor_callback():
    s = mlp()
    ex = s.simple_bind(mx.cpu(), data=(2, 3), grad_req="null")
    seen = []
    ex.set_monitor_callback(lambda name, a: seen.append(name.decode() if isinstance(name, bytes) else name))
    ex.forward()
    nd.waitall()
    return {"names": seen}


@scenario
def optimized_symbol():
    s = mlp()
    ex = s.simple_bind(mx.cpu(), data=(2, 3))
    o = ex.get_optimized_symbol()
    return {"args": o.list_arguments(), "outputs": o.list_outputs()}


def loss_net(classes=3):
    data = sym.var("data")
    label = sym.var("softmax_label")
    fc1 = sym.FullyConnected(data, num_hidden=12, name="fc1")
    act = sym.Activation(fc1, act_type="tanh", name="act1")
    fc2 = sym.FullyConnected(act, num_hidden=classes, name="fc2")
    sm = sym.softmax(fc2, name="prob")
    ce = -sym.sum(sym.log(sm + 1e-8) * sym.one_hot(label, depth=classes), axis=1)
    loss = sym.make_loss(sym.mean(ce), name="loss")
    return sym.Group([sym.BlockGrad(sm, name="pred"), loss])


def toy_data(n=40, d=6, classes=3, seed=11):
    r = np.random.RandomState(seed)
    x = r.uniform(-1, 1, (n, d)).astype(np.float32)
    w = r.uniform(-1, 1, (d, classes))
    y = (x @ w).argmax(axis=1).astype(np.float32)
    return x, y


def fixed_params(mod, seed=12):
    arg, aux = mod.get_params()
    r = np.random.RandomState(seed)
    arg = {k: nd.array(r.uniform(-0.4, 0.4, v.shape)) for k, v in sorted(arg.items())}
    mod.set_params(arg, aux)


@scenario
def module_fit_score_predict_checkpoint():
    x, y = toy_data()
    it = mx.io.NDArrayIter(x, y, batch_size=8, shuffle=False)
    mod = mx.mod.Module(loss_net(), data_names=["data"], label_names=["softmax_label"])
    mod.bind(data_shapes=it.provide_data, label_shapes=it.provide_label)
    mod.init_params()
    fixed_params(mod)
    mod.fit(it, num_epoch=4, optimizer="sgd",
            optimizer_params={"learning_rate": 0.5, "momentum": 0.5},
            eval_metric="acc", begin_epoch=0)
    it.reset()
    score = mod.score(it, "acc")
    pred = mod.predict(it)
    d = tempfile.mkdtemp()
    prefix = os.path.join(d, "mlp")
    mod.save_checkpoint(prefix, 4)
    s2, arg, aux = mx.model.load_checkpoint(prefix, 4)
    mod2 = mx.mod.Module(s2, data_names=["data"], label_names=["softmax_label"])
    mod2.bind(data_shapes=it.provide_data, label_shapes=it.provide_label, for_training=False)
    mod2.set_params(arg, aux)
    pred2 = mod2.predict(it)
    params = {k: arr(v) for k, v in sorted(mod.get_params()[0].items())}
    return {
        "score": [(n, round(v, 5)) for n, v in score],
        "pred": arr(pred[0]) if isinstance(pred, list) else arr(pred),
        "pred_after_load_equal": bool(np.allclose(
            (pred[0] if isinstance(pred, list) else pred).asnumpy(),
            (pred2[0] if isinstance(pred2, list) else pred2).asnumpy(), atol=1e-6)),
        "params": params,
        "files": sorted(os.listdir(d)),
        "param_keys": sorted(nd.load(prefix + "-0004.params").keys()),
    }


@scenario
def module_forward_backward_update():
    x, y = toy_data(n=8)
    mod = mx.mod.Module(loss_net(), data_names=["data"], label_names=["softmax_label"])
    mod.bind(data_shapes=[("data", (8, 6))], label_shapes=[("softmax_label", (8,))])
    mod.init_params()
    fixed_params(mod, seed=13)
    mod.init_optimizer(optimizer="sgd", optimizer_params={"learning_rate": 0.2})
    batch = mx.io.DataBatch([nd.array(x)], [nd.array(y)])
    losses = []
    for _ in range(3):
        mod.forward(batch, is_train=True)
        losses.append(float(mod.get_outputs()[1].asscalar()))
        mod.backward()
        mod.update()
    return {"losses": [round(l, 5) for l in losses],
            "grads": {k: arr(v[0]) for k, v in zip(mod._exec_group.param_names,
                                                 mod._exec_group.grad_arrays)}}


@scenario
def bucketing_module_runs():
    x, y = toy_data(n=16)

    def gen(key):
        return loss_net(), ["data"], ["softmax_label"]

    mod = mx.mod.BucketingModule(gen, default_bucket_key=8)
    mod.bind(data_shapes=[("data", (8, 6))], label_shapes=[("softmax_label", (8,))])
    mod.init_params()
    fixed_params(mod, seed=14)
    mod.init_optimizer(optimizer="sgd", optimizer_params={"learning_rate": 0.2})
    outs = []
    for key, n in [(8, 8), (4, 4), (8, 8)]:
        b = mx.io.DataBatch([nd.array(x[:n])], [nd.array(y[:n])], bucket_key=key,
                            provide_data=[("data", (n, 6))],
                            provide_label=[("softmax_label", (n,))])
        mod.forward(b, is_train=True)
        mod.backward()
        mod.update()
        outs.append(round(float(mod.get_outputs()[1].asscalar()), 5))
    return {"losses": outs}


@scenario
def backward_needs_head_grads():
    s = sym.exp(sym.var("x"), name="e")
    ex = s.simple_bind(mx.cpu(), x=(2,))
    ex.forward(is_train=True)
    try:
        ex.backward()
    except mx.MXNetError as e:
        return {"refused": "head_gradient is required" in str(e)}
    return {"refused": False}


@scenario
def bind_missing_or_misshaped():
    s = mlp()
    shapes = arg_shapes(s, data=(2, 3))
    args = values(shapes)
    res = {}
    try:
        s.bind(mx.cpu(), [args[k] for k in s.list_arguments()][:-1])
        res["missing"] = "accepted"
    except Exception as e:  # noqa: BLE001
        res["missing"] = type(e).__name__
    bad = dict(args)
    bad["fc1_weight"] = nd.zeros((5, 5))
    try:
        s.bind(mx.cpu(), bad)
        res["misshaped"] = "accepted"
    except Exception as e:  # noqa: BLE001
        res["misshaped"] = type(e).__name__
    return res


def freed_handles_refused():
    """mxrt only (on libmxnet.so a freed handle is a use after free)."""
    from mxnet.base import _LIB
    ex = mlp().simple_bind(mx.cpu(), data=(2, 3))
    h = ctypes.c_void_p(ex.handle.value)
    assert _LIB.MXExecutorFree(h) == 0
    ex.handle = mx.base.ExecutorHandle()  # already freed
    r = _LIB.MXExecutorForward(h, 0)
    op = nd.CachedOp(sym.exp(sym.var("a")))
    c = ctypes.c_void_p(op.handle.value)
    assert _LIB.MXFreeCachedOp(c) == 0
    op.handle = mx.base.CachedOpHandle()
    n = ctypes.c_int(0)
    outs = ctypes.POINTER(ctypes.c_void_p)()
    a = nd.ones((2,))
    arrs = (ctypes.c_void_p * 1)(a.handle.value)
    r2 = _LIB.MXInvokeCachedOp(c, 1, arrs, ctypes.byref(n), ctypes.byref(outs))
    return {"forward_rc": r, "invoke_rc": r2}


@scenario
def group2ctx_model_parallel():
    # ops of a ctx_group run on its device, the others on the bind device; inputs are copied
    # across, gradients flow back
    d1, d2, d3 = sym.var("d1"), sym.var("d2"), sym.var("d3")
    with mx.AttrScope(ctx_group="dev1"):
        net = (d1 + d2) * 3
    with mx.AttrScope(ctx_group="dev2"):
        net = sym.exp(net * 0.1) + d3
    r = np.random.RandomState(4)
    vals = [r.uniform(-1, 1, (4, 5)).astype("float32") for _ in range(3)]
    ctxs = [mx.cpu(0), mx.cpu(0), mx.cpu(1)]
    args = [nd.array(v, ctx=c) for v, c in zip(vals, ctxs)]
    grads = [nd.zeros((4, 5), ctx=c) for c in ctxs]
    ex = net.bind(mx.cpu(0), args=args, args_grad=grads,
                  group2ctx={"dev1": mx.cpu(0), "dev2": mx.cpu(1)})
    ex.forward(is_train=True)
    out = ex.outputs[0].asnumpy()
    ex.backward([nd.ones((4, 5))])
    return {"out": out.tolist(), "grads": [g.asnumpy().tolist() for g in grads],
            "grad_ctx": [str(g.context) for g in grads]}


@scenario
def group2ctx_simple_bind_devices():
    with mx.AttrScope(ctx_group="stage1"):
        data = sym.var("data")
        fc1 = sym.FullyConnected(data, name="fc1", num_hidden=8)
        act1 = sym.Activation(fc1, act_type="relu")
    with mx.AttrScope(ctx_group="stage2"):
        fc2 = sym.FullyConnected(act1, name="fc2", num_hidden=3)
        out = sym.SoftmaxOutput(fc2, name="softmax")
    g2c = {"stage1": mx.cpu(1), "stage2": mx.cpu(2)}
    ex = out.simple_bind(mx.cpu(0), group2ctx=g2c, data=(2, 5))
    r = np.random.RandomState(5)
    for name, a in ex.arg_dict.items():
        a[:] = r.uniform(-1, 1, a.shape)
    ex.forward(is_train=True)
    ex.backward()
    return {"devices": {n: str(a.context) for n, a in ex.arg_dict.items()},
            "out": ex.outputs[0].asnumpy().tolist(),
            "grads": {n: g.asnumpy().tolist() for n, g in ex.grad_dict.items()}}


@scenario
def batch_take_int32_index():
    x = sym.var("x")
    idx = sym.var("idx")
    y = sym.stop_gradient(sym.batch_take(x, idx))
    ex = y.simple_bind(mx.cpu(), x=(4, 3), idx=(4,), type_dict={"x": np.float32, "idx": np.int32})
    ex.arg_dict["x"][:] = np.arange(12).reshape(4, 3)
    ex.arg_dict["idx"][:] = np.array([2, 0, 1, 2])
    ex.forward()
    _, types, _ = sym.batch_take(x, idx).infer_type(x=np.float32)
    return {"out": ex.outputs[0].asnumpy().tolist(), "idx_dtype": str(ex.arg_dict["idx"].dtype),
            "inferred": str(types[0])}


@scenario
def partial_shapes():
    x, y = sym.var("x"), sym.var("y")
    res = {}
    res["dot"] = sym.dot(x, y).infer_shape_partial(x=(0, 3, 4), y=(4, 5))[1]
    res["transpose"] = sym.transpose(x, axes=(0, 2, 3, 1)).infer_shape_partial(x=(0, 3, 8, 8))[1]
    res["where"] = sym.where(sym.var("c"), x, y).infer_shape_partial(c=(0, 2), x=(0, 2), y=(0, 2))[1]
    res["unknown"] = sym.sin(x).infer_shape_partial()[:2]
    with mx.np_shape(True):
        res["np_dot"] = sym.dot(x, y).infer_shape_partial(x=(-1, 3, 4), y=(4, 5))[1]
        res["np_unknown"] = [s is None for s in sym.sin(x).infer_shape_partial()[1]]
    return {k: [list(s) if isinstance(s, tuple) else s for s in v] for k, v in res.items()}


def main():
    if "--freed" in sys.argv:
        print(json.dumps(freed_handles_refused()))
        return
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
