"""Planned executors through the unmodified mxnet package: values of forwards that reuse the
planned buffers (in place, shared by liveness, kept across calls), training with every
grad_req, reshape, a BucketingModule's executors, and the `Total N MB allocated` figure of
`debug_str()` (MXExecutorPrint). Prints each scenario's outcome as JSON (test_memplan.py compares
libmxrt with libmxnet.so). `--list` prints the scenario names; names as arguments run just those.

Inputs and parameters come from a fixed numpy generator, so both libraries see the same values."""
import json
import logging
import os
import sys
import warnings

import numpy as np

os.environ.setdefault("MXNET_SUBGRAPH_BACKEND", "NONE")
import mxnet as mx  # noqa: E402
from mxnet import nd, sym  # noqa: E402

warnings.simplefilter("ignore")
logging.disable(logging.CRITICAL)
scenarios = {}


def scenario(fn):
    scenarios[fn.__name__] = fn
    return fn


def arr(a):
    return np.asarray(a.asnumpy(), dtype=np.float64).round(5).tolist()


def rand(shape, seed):
    return np.random.RandomState(seed).uniform(-1, 1, shape)


def chain(rows=256, cols=1024):
    """exp -> relu -> sigmoid, plus the exp again: a value read twice and in-place candidates.
    With (256, 1024) float32 values of 1 MiB each: exp's output `a` stays live until the add,
    relu's `b` needs a buffer of its own, sigmoid and the add write in place over `b`: 2 MiB."""
    x = sym.var("x")
    a = sym.exp(x, name="e")
    b = sym.relu(a - 2.0, name="r")
    c = sym.sigmoid(b, name="s")
    return sym.elemwise_add(c, a, name="out")


def cnn():
    data = sym.var("data")
    c = sym.Convolution(data, kernel=(3, 3), num_filter=6, pad=(1, 1), name="conv1")
    b = sym.BatchNorm(c, fix_gamma=False, name="bn1")
    r = sym.Activation(b, act_type="relu", name="relu1")
    p = sym.Pooling(r, kernel=(2, 2), stride=(2, 2), pool_type="max", name="pool1")
    e = sym.exp(sym.tanh(p, name="t"), name="ex")
    f = sym.FullyConnected(sym.flatten(e + p, name="flat"), num_hidden=5, name="fc1")
    return sym.softmax(f, name="prob")


def fill(ex, seed):
    for i, (k, v) in enumerate(sorted(ex.arg_dict.items())):
        v[:] = rand(v.shape, seed + i) * (0.3 if k != "data" else 1.0)
    for i, (k, v) in enumerate(sorted(ex.aux_dict.items())):
        v[:] = np.abs(rand(v.shape, seed + 50 + i)) + (0.5 if k.endswith("var") else 0)


def total_mb(ex):
    lines = [l for l in ex.debug_str().split("\n") if l]
    mb, temp = lines[-2], lines[-1]
    assert mb.startswith("Total ") and mb.endswith(" MB allocated"), mb
    assert temp.startswith("Total ") and temp.endswith(" TempSpace resource requested"), temp
    return int(mb.split()[1]), int(temp.split()[1])


@scenario
def chain_forwards_reuse_buffers():
    ex = chain(4, 5).simple_bind(mx.cpu(), x=(4, 5), grad_req="null")
    outs = []
    for seed in (1, 2, 3):
        ex.arg_dict["x"][:] = rand((4, 5), seed)
        outs.append(arr(ex.forward()[0]))
    # an output array kept from an earlier forward keeps its values only until the next one
    first = ex.outputs[0]
    ex.arg_dict["x"][:] = rand((4, 5), 9)
    ex.forward()
    return {"outs": outs, "same_output_array": first is ex.outputs[0] or arr(first) == arr(ex.outputs[0])}


@scenario
def cnn_inference_twice():
    ex = cnn().simple_bind(mx.cpu(), data=(3, 2, 8, 8), grad_req="null")
    fill(ex, 3)
    a = arr(ex.forward(is_train=False)[0])
    ex.arg_dict["data"][:] = rand((3, 2, 8, 8), 77)
    b = arr(ex.forward(is_train=False)[0])
    return {"a": a, "b": b}


@scenario
def cnn_training_grads():
    s = cnn()
    out = {}
    for req in ("write", "add", "null"):
        ex = s.simple_bind(mx.cpu(), data=(3, 2, 8, 8), grad_req=req)
        fill(ex, 5)
        for g in ex.grad_dict.values():
            if g is not None:
                g[:] = 0.25
        head = nd.array(rand((3, 5), 6))
        for _ in range(2):
            ex.forward(is_train=True)
            ex.backward([head])
        out[req] = {
            "y": arr(ex.outputs[0]),
            "grads": {k: arr(v) for k, v in sorted(ex.grad_dict.items()) if v is not None},
            "aux": {k: arr(v) for k, v in sorted(ex.aux_dict.items())},
        }
    return out


@scenario
def reshaped_executor():
    ex = cnn().simple_bind(mx.cpu(), data=(4, 2, 8, 8), grad_req="null")
    fill(ex, 8)
    a = arr(ex.forward()[0])
    ex2 = ex.reshape(data=(2, 2, 8, 8))
    ex2.arg_dict["data"][:] = ex.arg_dict["data"][:2]
    b = arr(ex2.forward()[0])
    c = arr(ex.forward()[0])
    return {"a": a, "b": b, "c": c}


@scenario
def bucketing_module_predicts():
    def gen(key):
        data = sym.var("data")
        h = sym.Activation(sym.FullyConnected(data, num_hidden=8, name="fc1"), act_type="tanh")
        o = sym.FullyConnected(sym.exp(h) + h, num_hidden=3, name="fc2")
        return sym.SoftmaxOutput(o, name="softmax"), ["data"], ["softmax_label"]

    mod = mx.mod.BucketingModule(gen, default_bucket_key=8)
    mod.bind(data_shapes=[("data", (8, 6))], label_shapes=[("softmax_label", (8,))],
             for_training=False)
    mod.init_params(initializer=mx.init.Zero())
    args, aux = mod.get_params()
    mod.set_params({k: nd.array(rand(v.shape, i)) for i, (k, v) in enumerate(sorted(args.items()))},
                   aux)
    outs = []
    for n in (8, 4, 8, 4):
        x = rand((n, 6), n)
        b = mx.io.DataBatch([nd.array(x)], None, bucket_key=n, provide_data=[("data", (n, 6))])
        mod.forward(b, is_train=False)
        outs.append(arr(mod.get_outputs()[0]))
    return {"outs": outs}


@scenario
def print_lines_and_chain_mb():
    s = chain()
    infer = total_mb(s.simple_bind(mx.cpu(), x=(256, 1024), grad_req="null"))
    train = total_mb(s.simple_bind(mx.cpu(), x=(256, 1024), grad_req="write"))
    return {"infer": infer, "train_mb_at_least_infer": train[0] >= infer[0]}


@scenario
def cnn_mb():
    out = {}
    for req in ("null", "write"):
        ex = cnn().simple_bind(mx.cpu(), data=(64, 2, 32, 32), grad_req=req)
        out[req] = total_mb(ex)[0]
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
