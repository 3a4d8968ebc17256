"""MXNet's C predict API (c_predict_api.h) through ctypes on the library the mxnet package
loaded, and `autograd.get_symbol`. Prints each scenario's outcome as JSON (test_predict.py
compares libmxrt with libmxnet.so). `--list` prints the scenario names; names as arguments run
just those; `--mxrt-only` runs the checks MXNet itself would crash on (NULL and freed handles).

The model's parameters and inputs come from a fixed numpy generator, so both libraries see the
same values."""
import ctypes
import json
import os
import sys
import tempfile
import warnings

import numpy as np

# MXNet's CPU build fuses ops into MKLDNN subgraphs, which renames the nodes a monitor sees
os.environ.setdefault("MXNET_SUBGRAPH_BACKEND", "NONE")
import mxnet as mx  # noqa: E402
from mxnet import autograd, nd, sym  # noqa: E402
from mxnet.base import _LIB  # noqa: E402

warnings.simplefilter("ignore")
scenarios = {}
u32 = ctypes.c_uint32
PredMonitor = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p)


def scenario(fn):
    scenarios[fn.__name__] = fn
    return fn


def rounded(a):
    return np.asarray(a, dtype=np.float64).round(5).tolist()


def cnn():
    data = sym.var("data")
    c = sym.Convolution(data, kernel=(3, 3), num_filter=4, pad=(1, 1), name="conv1")
    b = sym.BatchNorm(c, fix_gamma=False, name="bn1")
    r = sym.Activation(b, act_type="relu", name="relu1")
    p = sym.Pooling(r, kernel=(2, 2), stride=(2, 2), pool_type="max", name="pool1")
    f = sym.FullyConnected(sym.flatten(p, name="flat"), num_hidden=5, name="fc1")
    return sym.softmax(f, name="prob")


def model(seed=0):
    """(json, params bytes, shapes) of the CNN with seeded parameters for 1x3x8x8 inputs."""
    s = cnn()
    r = np.random.RandomState(seed)
    arg_shapes, _, aux_shapes = s.infer_shape(data=(1, 3, 8, 8))
    params = {}
    for n, sh in zip(s.list_arguments(), arg_shapes):
        if n != "data":
            params["arg:" + n] = nd.array(r.uniform(-0.5, 0.5, sh))
    for n, sh in zip(s.list_auxiliary_states(), aux_shapes):
        v = r.uniform(0.5, 1.5, sh) if n.endswith("var") else r.uniform(-0.2, 0.2, sh)
        params["aux:" + n] = nd.array(v)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.params")
        nd.save(path, params)
        with open(path, "rb") as f:
            blob = f.read()
    return s.tojson(), blob


def check(rc):
    if rc != 0:
        raise RuntimeError(_LIB.MXGetLastError().decode())


def shape_args(shapes):
    """(n, keys, indptr, data) for {key: shape}."""
    keys = list(shapes)
    indptr = [0]
    data = []
    for k in keys:
        data.extend(shapes[k])
        indptr.append(len(data))
    return (u32(len(keys)), (ctypes.c_char_p * len(keys))(*[k.encode() for k in keys]),
            (u32 * len(indptr))(*indptr), (u32 * max(len(data), 1))(*data))


def create(shapes, output_keys=None, seed=0, json_text=None, params=None):
    js, blob = model(seed)
    js = json_text if json_text is not None else js
    blob = params if params is not None else blob
    n, keys, indptr, data = shape_args(shapes)
    h = ctypes.c_void_p()
    if output_keys:
        outs = (ctypes.c_char_p * len(output_keys))(*[k.encode() for k in output_keys])
        rc = _LIB.MXPredCreatePartialOut(js.encode(), blob, len(blob), 1, 0, n, keys, indptr,
                                         data, u32(len(output_keys)), outs, ctypes.byref(h))
    else:
        rc = _LIB.MXPredCreate(js.encode(), blob, len(blob), 1, 0, n, keys, indptr, data,
                               ctypes.byref(h))
    check(rc)
    return h


def set_input(h, key, values):
    v = np.ascontiguousarray(values, dtype=np.float32).ravel()
    check(_LIB.MXPredSetInput(h, key.encode(), v.ctypes.data_as(ctypes.c_void_p), u32(v.size)))


def outputs(h, count):
    res = []
    for i in range(count):
        shp = ctypes.POINTER(u32)()
        ndim = u32()
        check(_LIB.MXPredGetOutputShape(h, u32(i), ctypes.byref(shp), ctypes.byref(ndim)))
        shape = [shp[k] for k in range(ndim.value)]
        # MXNet 1.9.1 writes out_dtype[index] (past a single int for index > 0), mxrt
        # *out_dtype: compared for output 0, where both agree
        dt = (ctypes.c_int * 1)(-1)
        if i == 0:
            check(_LIB.MXPredGetOutputType(h, u32(0), dt))
        buf = np.zeros(int(np.prod(shape)), dtype=np.float32)
        check(_LIB.MXPredGetOutput(h, u32(i), buf.ctypes.data_as(ctypes.c_void_p), u32(buf.size)))
        res.append({"shape": shape, "dtype": dt[0], "values": rounded(buf)})
    return res


def inputs(shape, seed=1):
    return np.random.RandomState(seed).uniform(-1, 1, shape)


@scenario
def create_forward():
    h = create({"data": (2, 3, 8, 8)})
    set_input(h, "data", inputs((2, 3, 8, 8)))
    check(_LIB.MXPredForward(h))
    out = outputs(h, 1)
    check(_LIB.MXPredFree(h))
    return out


@scenario
def forward_matches_the_executor():
    """The predictor's output equals a bound executor's on the same parameters."""
    js, blob = model()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.params")
        with open(path, "wb") as f:
            f.write(blob)
        loaded = nd.load(path)
    s = sym.load_json(js)
    args = {k[4:]: v for k, v in loaded.items() if k.startswith("arg:")}
    aux = {k[4:]: v for k, v in loaded.items() if k.startswith("aux:")}
    x = inputs((2, 3, 8, 8), seed=5)
    args["data"] = nd.array(x)
    ex = s.bind(mx.cpu(), args, aux_states=aux)
    want = ex.forward(is_train=False)[0].asnumpy().ravel()
    h = create({"data": (2, 3, 8, 8)})
    set_input(h, "data", x)
    check(_LIB.MXPredForward(h))
    got = np.array(outputs(h, 1)[0]["values"])
    check(_LIB.MXPredFree(h))
    return {"max_diff_below_1e-5": bool(np.abs(got - want).max() < 1e-5)}


@scenario
def reshape():
    def reshaped(h, shape, seed):
        n, keys, indptr, data = shape_args({"data": shape})
        h2 = ctypes.c_void_p()
        check(_LIB.MXPredReshape(n, keys, indptr, data, h, ctypes.byref(h2)))
        set_input(h2, "data", inputs(shape, seed=seed))
        check(_LIB.MXPredForward(h2))
        return h2, outputs(h2, 1)

    h = create({"data": (3, 3, 8, 8)})
    set_input(h, "data", inputs((3, 3, 8, 8)))
    check(_LIB.MXPredForward(h))
    first = outputs(h, 1)
    # a smaller input shares the original's memory (MXNet's ReshapeAndAlloc): the original
    # sees the new values in its first rows
    small, smaller = reshaped(h, (1, 3, 8, 8), 2)
    check(_LIB.MXPredForward(h))
    again = outputs(h, 1)
    big, bigger = reshaped(h, (5, 3, 8, 8), 3)
    for x in (small, big, h):
        check(_LIB.MXPredFree(x))
    return {"first": first, "smaller": smaller, "again": again, "bigger": bigger}


@scenario
def reshape_of_a_parameter_is_refused():
    h = create({"data": (1, 3, 8, 8)})
    n, keys, indptr, data = shape_args({"fc1_weight": (7, 64)})
    h2 = ctypes.c_void_p()
    rc = _LIB.MXPredReshape(n, keys, indptr, data, h, ctypes.byref(h2))
    check(_LIB.MXPredFree(h))
    return {"rc": rc}


@scenario
def partial_out():
    h = create({"data": (2, 3, 8, 8)}, output_keys=["conv1", "pool1", "fc1"])
    set_input(h, "data", inputs((2, 3, 8, 8)))
    check(_LIB.MXPredForward(h))
    out = outputs(h, 3)
    check(_LIB.MXPredFree(h))
    return out


@scenario
def partial_forward():
    h = create({"data": (1, 3, 8, 8)})
    set_input(h, "data", inputs((1, 3, 8, 8), seed=3))
    lefts = []
    step = 0
    while True:
        left = ctypes.c_int(-1)
        check(_LIB.MXPredPartialForward(h, step, ctypes.byref(left)))
        lefts.append(left.value)
        if left.value == 0:
            break
        step += 1
    out = outputs(h, 1)
    check(_LIB.MXPredForward(h))
    full = outputs(h, 1)
    check(_LIB.MXPredFree(h))
    return {"steps_left": lefts, "partial": out, "full": full}


@scenario
def create_ex_with_dtypes():
    js, blob = model()
    n, keys, indptr, data = shape_args({"data": (1, 3, 8, 8)})
    names = (ctypes.c_char_p * 1)(b"data")
    dts = (ctypes.c_int * 1)(0)
    h = ctypes.c_void_p()
    check(_LIB.MXPredCreateEx(js.encode(), blob, len(blob), 1, 0, n, keys, indptr, data,
                              u32(1), names, dts, ctypes.byref(h)))
    set_input(h, "data", inputs((1, 3, 8, 8), seed=4))
    check(_LIB.MXPredForward(h))
    out = outputs(h, 1)
    check(_LIB.MXPredFree(h))
    return out


@scenario
def multi_thread():
    # MXNet insists on the NaiveEngine here (it only reads the variable); mxrt does not
    os.environ["MXNET_ENGINE_TYPE"] = "NaiveEngine"
    js, blob = model()
    n, keys, indptr, data = shape_args({"data": (1, 3, 8, 8)})
    hs = (ctypes.c_void_p * 3)()
    check(_LIB.MXPredCreateMultiThread(js.encode(), blob, len(blob), 1, 0, n, keys, indptr,
                                       data, 3, hs))
    res = []
    for i in range(3):
        h = ctypes.c_void_p(hs[i])
        set_input(h, "data", inputs((1, 3, 8, 8), seed=10 + i))
        check(_LIB.MXPredForward(h))
        res.append(outputs(h, 1))
    for i in range(3):
        check(_LIB.MXPredFree(ctypes.c_void_p(hs[i])))
    return res


@scenario
def monitor_names():
    h = create({"data": (1, 3, 8, 8)})
    seen = []

    def cb(name, arr, _):
        a = mx.nd.NDArray(ctypes.c_void_p(arr))
        seen.append([name.decode(), list(a.shape)])

    f = PredMonitor(cb)
    check(_LIB.MXPredSetMonitorCallback(h, f, None, ctypes.c_bool(False)))
    set_input(h, "data", inputs((1, 3, 8, 8)))
    check(_LIB.MXPredForward(h))
    mx.nd.waitall()
    check(_LIB.MXPredFree(h))
    # MXNet also reports hidden outputs (BatchNorm's mean and var, its MKLDNN pooling
    # workspace); mxrt's monitor sees the visible outputs
    return [x for x in seen if x[0].endswith("_output")]


@scenario
def ndlist():
    r = np.random.RandomState(7)
    arrays = {"a": nd.array(r.uniform(-1, 1, (2, 3))), "b": nd.array(r.uniform(-1, 1, (4,)))}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "l.nd")
        nd.save(path, arrays)
        with open(path, "rb") as f:
            blob = f.read()
        nd.save(path, [arrays["b"]])
        with open(path, "rb") as f:
            unnamed = f.read()
    res = []
    for b in (blob, unnamed):
        h = ctypes.c_void_p()
        length = u32()
        check(_LIB.MXNDListCreate(b, len(b), ctypes.byref(h), ctypes.byref(length)))
        items = []
        for i in range(length.value):
            key = ctypes.c_char_p()
            data = ctypes.POINTER(ctypes.c_float)()
            shape = ctypes.POINTER(u32)()
            ndim = u32()
            check(_LIB.MXNDListGet(h, u32(i), ctypes.byref(key), ctypes.byref(data),
                                   ctypes.byref(shape), ctypes.byref(ndim)))
            dims = [shape[k] for k in range(ndim.value)]
            items.append({"key": key.value.decode(), "shape": dims,
                          "values": rounded([data[k] for k in range(int(np.prod(dims)))])})
        out_of_range = _LIB.MXNDListGet(h, u32(length.value), ctypes.byref(ctypes.c_char_p()),
                                        ctypes.byref(ctypes.POINTER(ctypes.c_float)()),
                                        ctypes.byref(ctypes.POINTER(u32)()),
                                        ctypes.byref(u32()))
        check(_LIB.MXNDListFree(h))
        res.append({"items": items, "out_of_range_rc": out_of_range})
    return res


def create_rc(**kw):
    try:
        h = create(**kw)
    except RuntimeError:
        return -1
    check(_LIB.MXPredFree(h))
    return 0


@scenario
def creation_errors():
    js, blob = model()
    return {
        "corrupt_json": create_rc(shapes={"data": (1, 3, 8, 8)}, json_text="{not json"),
        "corrupt_params": create_rc(shapes={"data": (1, 3, 8, 8)}, params=b"\x12\x01" * 20),
        "truncated_params": create_rc(shapes={"data": (1, 3, 8, 8)}, params=blob[:100]),
        "no_input_shape": create_rc(shapes={}),
        "unknown_output_key": create_rc(shapes={"data": (1, 3, 8, 8)}, output_keys=["nope"]),
        "wrong_input_rank": create_rc(shapes={"data": (1, 3)}),
    }


@scenario
def call_errors():
    h = create({"data": (1, 3, 8, 8)})
    x = np.zeros(1 * 3 * 8 * 8, dtype=np.float32)
    p = x.ctypes.data_as(ctypes.c_void_p)
    res = {
        "unknown_key": _LIB.MXPredSetInput(h, b"nope", p, u32(x.size)),
        "short_input": _LIB.MXPredSetInput(h, b"data", p, u32(x.size - 1)),
    }
    check(_LIB.MXPredForward(h))
    out = np.zeros(5, dtype=np.float32)
    q = out.ctypes.data_as(ctypes.c_void_p)
    res["output_index"] = _LIB.MXPredGetOutput(h, u32(1), q, u32(5))
    res["output_size"] = _LIB.MXPredGetOutput(h, u32(0), q, u32(4))
    shp = ctypes.POINTER(u32)()
    res["shape_index"] = _LIB.MXPredGetOutputShape(h, u32(3), ctypes.byref(shp),
                                                   ctypes.byref(u32()))
    res["ok_after_errors"] = _LIB.MXPredGetOutput(h, u32(0), q, u32(5))
    check(_LIB.MXPredFree(h))
    return res


@scenario
def autograd_get_symbol():
    """MXNet's test_autograd.test_get_symbol, and the symbols evaluated on the arrays."""
    res = {}
    for label, build, leaves in (
        ("one_variable", lambda x, z: x * x + 2 * x - 1, 1),
        ("two_variables", lambda x, z: x * x + 2 * z - 1, 2),
        ("ops_and_shapes", lambda x, z: nd.sum(nd.exp(x) * nd.sin(z), axis=0, keepdims=True), 2),
    ):
        r = np.random.RandomState(8)
        xs = [nd.array(r.uniform(0.5, 1.5, (3,))) for _ in range(2)]
        for x in xs:
            x.attach_grad()
        with autograd.record():
            y = build(*xs)
        s = autograd.get_symbol(y)
        args = s.list_arguments()
        ex = s.bind(mx.cpu(), xs[:len(args)])
        res[label] = {"num_args": len(args), "expected_args": leaves,
                      "num_outputs": len(s.list_outputs()),
                      "value": rounded(ex.forward()[0].asnumpy()), "recorded": rounded(y.asnumpy())}
    # a recorded Gluon network: BatchNorm's statistics (constants when recorded) are the
    # graph's auxiliary states; the JSON loads again
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Dense(4, in_units=3), mx.gluon.nn.BatchNorm(in_channels=4),
            mx.gluon.nn.Activation("relu"))
    net.initialize()
    x = nd.array(np.random.RandomState(0).uniform(size=(2, 3)))
    with autograd.record():
        z = (net(x) ** 2).sum()
    s = autograd.get_symbol(z)
    res["gluon"] = {"args": len(s.list_arguments()), "aux": len(s.list_auxiliary_states()),
                    "ops": [n["op"] for n in json.loads(s.tojson())["nodes"]],
                    "reloaded_args": len(sym.load_json(s.tojson()).list_arguments())}
    try:
        autograd.get_symbol(nd.ones((2,)))
        res["not_recorded"] = "no error"
    except mx.base.MXNetError:
        res["not_recorded"] = "error"
    return res


def mxrt_only():
    """Checks MXNet would crash on: NULL and freed handles, NULL arguments; the messages."""
    res = {}
    h = create({"data": (1, 3, 8, 8)})
    x = np.zeros(192, dtype=np.float32)
    p = x.ctypes.data_as(ctypes.c_void_p)

    def err(rc):
        return [rc, _LIB.MXGetLastError().decode() if rc else ""]

    res["unknown_key"] = err(_LIB.MXPredSetInput(h, b"nope", p, u32(192)))
    res["short_input"] = err(_LIB.MXPredSetInput(h, b"data", p, u32(191)))
    res["null_data"] = err(_LIB.MXPredSetInput(h, b"data", None, u32(192)))
    res["null_json"] = err(_LIB.MXPredCreate(None, b"", 0, 1, 0, u32(0), None, None, None,
                                             ctypes.byref(ctypes.c_void_p())))
    js, blob = model()
    res["corrupt_params"] = err(_LIB.MXPredCreate(js.encode(), b"\x12" * 40, 40, 1, 0, u32(0),
                                                  None, None, None,
                                                  ctypes.byref(ctypes.c_void_p())))
    res["bad_device"] = err(_LIB.MXPredCreate(js.encode(), blob, len(blob), 17, 0, u32(0),
                                              None, None, None, ctypes.byref(ctypes.c_void_p())))
    hp = create({"data": (1, 3, 8, 8)}, output_keys=["conv1", "fc1"])
    dt = ctypes.c_int(-1)
    res["type_of_output_1"] = [_LIB.MXPredGetOutputType(hp, u32(1), ctypes.byref(dt)), dt.value]
    res["type_of_output_2"] = err(_LIB.MXPredGetOutputType(hp, u32(2), ctypes.byref(dt)))
    left = ctypes.c_int(-1)
    res["negative_step"] = err(_LIB.MXPredPartialForward(hp, -1, ctypes.byref(left)))
    res["step_past_end"] = [_LIB.MXPredPartialForward(hp, 1000, ctypes.byref(left)), left.value]
    check(_LIB.MXPredFree(hp))
    check(_LIB.MXPredFree(h))
    res["freed_forward"] = err(_LIB.MXPredForward(h))
    res["double_free"] = err(_LIB.MXPredFree(h))
    res["null_forward"] = err(_LIB.MXPredForward(None))
    res["null_free"] = err(_LIB.MXPredFree(None))
    res["ndlist_freed"] = err(_LIB.MXNDListFree(h))
    res["threads_agree"] = threads_agree()
    return res


def threads_agree():
    """MXPredCreateMultiThread's handles forward on their own threads at once (MXNet needs the
    NaiveEngine for this; mxrt runs them with any engine) with each thread's own results."""
    import threading
    js, blob = model()
    n, keys, indptr, data = shape_args({"data": (2, 3, 8, 8)})
    hs = (ctypes.c_void_p * 4)()
    check(_LIB.MXPredCreateMultiThread(js.encode(), blob, len(blob), 1, 0, n, keys, indptr,
                                       data, 4, hs))
    handles = [ctypes.c_void_p(hs[i]) for i in range(4)]
    alone = []
    for i, h in enumerate(handles):
        set_input(h, "data", inputs((2, 3, 8, 8), seed=20 + i))
        check(_LIB.MXPredForward(h))
        alone.append(outputs(h, 1))
    together = [[] for _ in handles]

    def work(i):
        for _ in range(10):
            set_input(handles[i], "data", inputs((2, 3, 8, 8), seed=20 + i))
            check(_LIB.MXPredForward(handles[i]))
            together[i].append(outputs(handles[i], 1))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for h in handles:
        check(_LIB.MXPredFree(h))
    distinct = len({json.dumps(a) for a in alone})
    return (distinct == 4 and all(len(rs) == 10 for rs in together)
            and all(r == alone[i] for i, rs in enumerate(together) for r in rs))


def main():
    if "--mxrt-only" in sys.argv:
        print(json.dumps(mxrt_only()))
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
