"""The fused RNN operator through MXNet's Python package: forward outputs and autograd gradients
of every mode (rnn_relu, rnn_tanh, lstm, gru), one and two layers, one and two directions, with
and without state outputs, float32 and float64; bad parameters' errors; Gluon's rnn.RNN, LSTM
and GRU layers run forward and trained for a few SGD steps. Prints one JSON object (case name ->
{"ok": ...} or {"error": message}); test_rnn.py runs it on both libraries and compares.
"""
import json

import numpy as np
import mxnet as mx

from case_runner import flat, rand, results, run
from mxnet import gluon

nd = mx.nd
ag = mx.autograd


GATES = {"rnn_relu": 1, "rnn_tanh": 1, "lstm": 4, "gru": 3}


def param_size(mode, layers, dirs, inp, hid):
    g = GATES[mode] * hid
    size = 0
    for l in range(layers):
        width = inp if l == 0 else dirs * hid
        size += dirs * g * (width + hid + 2)
    return size


def rnn_case(mode, layers, bidir, state_outputs, dtype="float32", T=4, N=3, C=5, H=4, seed=0):
    dirs = 2 if bidir else 1
    arrays = [rand((T, N, C), seed + 1),
              rand((param_size(mode, layers, dirs, C, H),), seed + 2, -0.5, 0.5),
              rand((layers * dirs, N, H), seed + 3)]
    if mode == "lstm":
        arrays.append(rand((layers * dirs, N, H), seed + 4))
    xs = [nd.array(a, dtype=dtype) for a in arrays]
    for x in xs:
        x.attach_grad()
    with ag.record():
        outs = nd.RNN(*xs, state_size=H, num_layers=layers, bidirectional=bidir, mode=mode,
                      state_outputs=state_outputs)
    outs = outs if isinstance(outs, list) else [outs]
    heads = [nd.array(rand(o.shape, 90 + i), dtype=dtype) for i, o in enumerate(outs)]
    ag.backward(outs, heads)
    # predict mode gives the same forward
    plain = nd.RNN(*xs, state_size=H, num_layers=layers, bidirectional=bidir, mode=mode,
                   state_outputs=state_outputs)
    plain = plain if isinstance(plain, list) else [plain]
    return {"shapes": [list(o.shape) for o in outs],
            "outs": [flat(o.asnumpy()) for o in outs],
            "predict": [flat(o.asnumpy()) for o in plain],
            "grads": [flat(x.grad.asnumpy()) for x in xs]}


for mode in ["rnn_relu", "rnn_tanh", "lstm", "gru"]:
    for layers in (1, 2):
        for bidir in (False, True):
            name = f"{mode}_l{layers}_{'bi' if bidir else 'uni'}"
            run(name, lambda m=mode, l=layers, b=bidir: rnn_case(m, l, b, True, seed=l * 10))
    run(f"{mode}_no_state_outputs", lambda m=mode: rnn_case(m, 2, True, False, seed=5))
    run(f"{mode}_float64", lambda m=mode: rnn_case(m, 2, True, True, dtype="float64", seed=7))
run("lstm_long_wide", lambda: rnn_case("lstm", 2, True, True, T=9, N=5, C=7, H=6, seed=3))
run("gru_one_step", lambda: rnn_case("gru", 1, False, True, T=1, N=2, C=3, H=5, seed=4))


# ---- errors
def bad(**kw):
    x = nd.ones((3, 2, 4))
    p = nd.ones((param_size("lstm", 1, 1, 4, 3),))
    s = nd.zeros((1, 2, 3))
    args = dict(state_size=3, num_layers=1, mode="lstm")
    args.update(kw)
    ins = kw.pop("_ins", None)
    args.pop("_ins", None)
    out = nd.RNN(*(ins if ins is not None else [x, p, s, s]), **args)
    return flat((out[0] if isinstance(out, list) else out).asnumpy())


run("bad_mode", lambda: bad(mode="lstmx"))
run("bad_params_shape", lambda: bad(_ins=[nd.ones((3, 2, 4)), nd.ones((7,)), nd.zeros((1, 2, 3)),
                                          nd.zeros((1, 2, 3))]))
run("bad_state_shape", lambda: bad(_ins=[nd.ones((3, 2, 4)), nd.ones((param_size("lstm", 1, 1, 4, 3),)),
                                         nd.zeros((1, 3, 3)), nd.zeros((1, 2, 3))]))
run("bad_data_rank", lambda: bad(_ins=[nd.ones((3, 8)), nd.ones((param_size("lstm", 1, 1, 4, 3),)),
                                       nd.zeros((1, 2, 3)), nd.zeros((1, 2, 3))]))
# MXNet's float32 kernel ignores the clipping parameters, its float64 one refuses them
run("clip_ignored_float32", lambda: bad(lstm_state_clip_min=-0.1, lstm_state_clip_max=0.1))
run("bad_clip_float64", lambda: bad(
    lstm_state_clip_min=-1, lstm_state_clip_max=1,
    _ins=[nd.ones((3, 2, 4), dtype="float64"), nd.ones((param_size("lstm", 1, 1, 4, 3),), dtype="float64"),
          nd.zeros((1, 2, 3), dtype="float64"), nd.zeros((1, 2, 3), dtype="float64")]))


# ---- Gluon layers
def set_params(block, seed):
    for i, (name, p) in enumerate(sorted(block.collect_params().items())):
        p.set_data(nd.array(rand(p.shape, seed + i, -0.4, 0.4)))


def gluon_case(kind, hidden=5, layers=2, bidir=True, layout="TNC", steps=3):
    T, N, C = 6, 3, 4
    cls = {"lstm": gluon.rnn.LSTM, "gru": gluon.rnn.GRU, "rnn": gluon.rnn.RNN}[kind]
    layer = cls(hidden, num_layers=layers, bidirectional=bidir, input_size=C, layout=layout)
    layer.initialize()
    set_params(layer, 40)
    shape = (T, N, C) if layout == "TNC" else (N, T, C)
    x = nd.array(rand(shape, 41))
    target = nd.array(rand(shape[:2] + (hidden * (2 if bidir else 1),), 42))
    states = layer.begin_state(batch_size=N)
    out, new_states = layer(x, states)
    first = {"out": flat(out.asnumpy()), "states": [flat(s.asnumpy()) for s in new_states]}
    trainer = gluon.Trainer(layer.collect_params(), "sgd", {"learning_rate": 0.5})
    losses = []
    for _ in range(steps):
        with ag.record():
            out, _ = layer(x, layer.begin_state(batch_size=N))
            loss = ((out - target) ** 2).mean()
        loss.backward()
        trainer.step(1)
        losses.append(float(loss.asscalar()))
    weights = {name: flat(p.data().asnumpy()) for name, p in sorted(layer.collect_params().items())}
    # parameter names carry a per-process counter; compare by position
    return {"first": first, "losses": losses, "weights": list(weights.values())}


run("gluon_lstm", lambda: gluon_case("lstm"))
run("gluon_gru", lambda: gluon_case("gru", layout="NTC"))
run("gluon_rnn", lambda: gluon_case("rnn", layers=1, bidir=False))


def gluon_hybrid():
    layer = gluon.rnn.LSTM(4, num_layers=1, input_size=3)
    layer.initialize()
    set_params(layer, 60)
    layer.hybridize()
    x = nd.array(rand((5, 2, 3), 61))
    with ag.record():
        out = layer(x)
    out.backward()
    return {"out": flat(out.asnumpy()),
            "grads": [flat(p.grad().asnumpy()) for _, p in sorted(layer.collect_params().items())]}


run("gluon_lstm_hybridized", gluon_hybrid)


def gluon_deferred():
    layer = gluon.rnn.GRU(3, num_layers=2)
    layer.initialize()
    x = nd.array(rand((4, 2, 5), 71))
    layer(x)
    set_params(layer, 70)
    return {"shapes": [list(p.shape) for _, p in sorted(layer.collect_params().items())],
            "out": flat(layer(x).asnumpy())}


run("gluon_gru_deferred_init", gluon_deferred)


def symbol_case():
    s = mx.sym.RNN(mx.sym.var("x"), mx.sym.var("p"), mx.sym.var("h"), mx.sym.var("c"), state_size=4,
                   num_layers=2, mode="lstm", state_outputs=True, bidirectional=True, name="rnn")
    g = mx.sym.RNN(mx.sym.var("x"), mx.sym.var("p"), mx.sym.var("h"), state_size=3, num_layers=1,
                   mode="gru", name="gru")
    return {"arguments": s.list_arguments(), "outputs": s.list_outputs(),
            "shapes": [[list(t) for t in part] for part in s.infer_shape(x=(5, 3, 6))],
            "gru_outputs": g.list_outputs(),
            "gru_shapes": [[list(t) for t in part] for part in g.infer_shape(x=(2, 4, 5))]}


run("symbol_outputs_and_shapes", symbol_case)


# Dropout between layers (p): identity in predict mode (both libraries); in training mode the
# facts below are checked on libmxrt only (MXNet's float32 oneDNN kernel ignores p, and its
# native kernel draws from its own generator).
def dropout_arrays(mode, dtype, T=3, N=2, C=3, H=3, layers=2, seed=11):
    arrays = [rand((T, N, C), seed + 1), rand((param_size(mode, layers, 1, C, H),), seed + 2, -0.6, 0.6),
              rand((layers, N, H), seed + 3)]
    if mode == "lstm":
        arrays.append(rand((layers, N, H), seed + 4))
    return [nd.array(a, dtype=dtype) for a in arrays]


def dropout_predict(mode):
    xs = dropout_arrays(mode, "float32")
    kw = dict(state_size=3, num_layers=2, mode=mode)
    return {"p": flat(nd.RNN(*xs, p=0.6, **kw).asnumpy()), "p0": flat(nd.RNN(*xs, **kw).asnumpy())}


def dropout_training(mode, p=0.4):
    """Forward and gradients under one seed; central differences of the data and parameters
    with the generator reseeded before every forward (the same mask each time)."""
    xs = dropout_arrays(mode, "float64")
    kw = dict(state_size=3, num_layers=2, mode=mode, p=p)
    head = nd.array(rand((3, 2, 3), 99), dtype="float64")

    def f(arrays, record=False):
        mx.random.seed(42)
        with ag.record(train_mode=True):
            y = nd.RNN(*arrays, **kw)
            loss = (y * head).sum()
        if record:
            loss.backward()
        return y, float(loss.asscalar())

    for x in xs:
        x.attach_grad()
    y, _ = f(xs, record=True)
    y2, _ = f(xs)
    mx.random.seed(7)
    with ag.record(train_mode=True):
        y_other = nd.RNN(*xs, **kw)
    with ag.record(train_mode=True):
        y_nodrop = nd.RNN(*xs, state_size=3, num_layers=2, mode=mode)
    eps, worst = 1e-6, 0.0
    for which in (0, 1):
        base = xs[which].asnumpy()
        for i in range(0, base.size, max(1, base.size // 12)):
            plus, minus = base.copy(), base.copy()
            plus.flat[i] += eps
            minus.flat[i] -= eps
            args_p = [nd.array(plus, dtype="float64") if j == which else a for j, a in enumerate(xs)]
            args_m = [nd.array(minus, dtype="float64") if j == which else a for j, a in enumerate(xs)]
            num = (f(args_p)[1] - f(args_m)[1]) / (2 * eps)
            got = float(xs[which].grad.asnumpy().flat[i])
            worst = max(worst, abs(num - got) / max(1.0, abs(num)))
    return {"same_seed_same_output": bool(np.array_equal(y.asnumpy(), y2.asnumpy())),
            "other_seed_differs": bool(not np.array_equal(y.asnumpy(), y_other.asnumpy())),
            "differs_from_no_dropout": bool(not np.allclose(y.asnumpy(), y_nodrop.asnumpy())),
            "grad_error": worst}


def dropout_all():
    """p close to 1: the second layer sees zeros, so the data gets no gradient at all."""
    xs = dropout_arrays("gru", "float32")
    for x in xs:
        x.attach_grad()
    with ag.record(train_mode=True):
        y = nd.RNN(*xs, state_size=3, num_layers=2, mode="gru", p=0.99999)
    y.backward(nd.ones_like(y))
    return {"dx_abs_sum": float(nd.abs(xs[0].grad).sum().asscalar()),
            "dparams_abs_sum": float(nd.abs(xs[1].grad).sum().asscalar())}


for mode in ("lstm", "gru", "rnn_tanh"):
    run(f"dropout_predict_{mode}", lambda m=mode: dropout_predict(m))
    run(f"dropout_training_{mode}", lambda m=mode: dropout_training(m))
run("dropout_all_dropped", dropout_all)
run("dropout_one_predict", lambda: bad(p=1.0))


# LSTM with a projection (LSTMP): predict mode only on CPU, in both libraries.
def lstmp_size(layers, dirs, inp, hid, proj):
    size = 0
    for l in range(layers):
        width = inp if l == 0 else dirs * proj
        size += dirs * (4 * hid * (width + proj + 2) + proj * hid)
    return size


def lstmp_case(layers, bidir, dtype, state_outputs=True, T=4, N=3, C=5, H=6, P=3, seed=20):
    dirs = 2 if bidir else 1
    xs = [nd.array(a, dtype=dtype) for a in (
        rand((T, N, C), seed + 1), rand((lstmp_size(layers, dirs, C, H, P),), seed + 2, -0.5, 0.5),
        rand((layers * dirs, N, P), seed + 3), rand((layers * dirs, N, H), seed + 4))]
    outs = nd.RNN(*xs, state_size=H, projection_size=P, num_layers=layers, bidirectional=bidir,
                  mode="lstm", state_outputs=state_outputs)
    outs = outs if isinstance(outs, list) else [outs]
    return {"outs": [flat(o.asnumpy()) for o in outs], "shapes": [list(o.shape) for o in outs]}


def lstmp_training():
    xs = [nd.array(a) for a in (rand((2, 1, 3), 1), rand((lstmp_size(1, 1, 3, 4, 2),), 2),
                                rand((1, 1, 2), 3), rand((1, 1, 4), 4))]
    with ag.record(train_mode=True):
        y = nd.RNN(*xs, state_size=4, projection_size=2, num_layers=1, mode="lstm")
    return flat(y.asnumpy())


def lstmp_gluon():
    layer = gluon.rnn.LSTM(6, num_layers=2, bidirectional=True, projection_size=3, input_size=4)
    layer.initialize()
    x = nd.array(rand((5, 2, 4), 30))
    layer(x)
    set_params(layer, 31)
    out = layer(x)
    return {"out": flat(out.asnumpy()), "shape": list(out.shape),
            "params": sorted(layer.collect_params().keys())}


run("lstmp_1layer_float32", lambda: lstmp_case(1, False, "float32"))
run("lstmp_2layer_bidir_float32", lambda: lstmp_case(2, True, "float32"))
run("lstmp_2layer_bidir_float64", lambda: lstmp_case(2, True, "float64"))
run("lstmp_3layer_float64", lambda: lstmp_case(3, False, "float64"))
run("lstmp_gluon", lstmp_gluon)


def gluon_bidir_deferred(projection_size):
    """A bidirectional layer whose input width is deferred: two weights of unknown shape."""
    layer = gluon.rnn.LSTM(6, num_layers=2, bidirectional=True, projection_size=projection_size)
    layer.initialize()
    x = nd.array(rand((5, 2, 4), 32))
    layer(x)
    set_params(layer, 33)
    out = layer(x)
    return {"out": flat(out.asnumpy()),
            "shapes": {k: list(v.shape) for k, v in sorted(layer.collect_params().items())}}


run("gluon_lstm_bidir_deferred", lambda: gluon_bidir_deferred(None))
# MXNet's CPU kernels refuse to train an LSTMP; mxrt trains it
run("lstmp_training", lstmp_training)


# LSTMP training against an unrolled network of basic ops (the reference on both libraries)
def lstmp_inputs(layers, dirs, dtype, T=4, N=3, C=5, H=6, P=3, seed=50):
    arrays = [rand((T, N, C), seed + 1), rand((lstmp_size(layers, dirs, C, H, P),), seed + 2, -0.5, 0.5),
              rand((layers * dirs, N, P), seed + 3), rand((layers * dirs, N, H), seed + 4)]
    xs = [nd.array(a, dtype=dtype) for a in arrays]
    for x in xs:
        x.attach_grad()
    return xs


def lstmp_unrolled(x, w, hx, cx, layers, dirs, H, P):
    """y, hy, cy of an LSTMP from slices of the flat parameters, dot, sigmoid and tanh."""
    T, C = x.shape[0], x.shape[2]
    off = [0]

    def take(*shape):
        size = int(np.prod(shape))
        part = nd.slice_axis(w, axis=0, begin=off[0], end=off[0] + size).reshape(shape)
        off[0] += size
        return part

    weights = []
    for l in range(layers):
        inp = C if l == 0 else dirs * P
        weights.append([(take(4 * H, inp), take(4 * H, P), take(P, H)) for _ in range(dirs)])
    biases = [[(take(4 * H), take(4 * H)) for _ in range(dirs)] for _ in range(layers)]
    steps = [x[t] for t in range(T)]
    hy, cy = [], []
    for l in range(layers):
        outs = []
        for d in range(dirs):
            wx, wh, wr = weights[l][d]
            bx, bh = biases[l][d]
            r, c = hx[l * dirs + d], cx[l * dirs + d]
            out = [None] * T
            for t in (range(T) if d == 0 else reversed(range(T))):
                a = nd.dot(steps[t], wx, transpose_b=True) + bx + nd.dot(r, wh, transpose_b=True) + bh
                i, f, g, o = nd.split(a, num_outputs=4, axis=1)
                c = nd.sigmoid(f) * c + nd.sigmoid(i) * nd.tanh(g)
                h = nd.sigmoid(o) * nd.tanh(c)
                r = nd.dot(h, wr, transpose_b=True)
                out[t] = r
            outs.append(out)
            hy.append(r)
            cy.append(c)
        steps = [nd.concat(*[outs[d][t] for d in range(dirs)], dim=1) for t in range(T)]
    return nd.stack(*steps), nd.stack(*hy), nd.stack(*cy)


def lstmp_grads(layers, bidir, dtype, fused):
    dirs = 2 if bidir else 1
    H, P = 6, 3
    xs = lstmp_inputs(layers, dirs, dtype)
    with ag.record():
        if fused:
            outs = nd.RNN(*xs, state_size=H, projection_size=P, num_layers=layers,
                          bidirectional=bidir, mode="lstm", state_outputs=True)
        else:
            outs = lstmp_unrolled(*xs, layers, dirs, H, P)
        heads = [nd.array(rand(o.shape, 90 + i), dtype=dtype) for i, o in enumerate(outs)]
        loss = sum((o * hd).sum() for o, hd in zip(outs, heads))
    loss.backward()
    return {"outs": [flat(o.asnumpy()) for o in outs], "grads": [flat(x.grad.asnumpy()) for x in xs]}


for layers, bidir in ((1, False), (2, True), (3, False)):
    for dtype in ("float32", "float64"):
        name = f"lstmp_l{layers}_{'bi' if bidir else 'uni'}_{dtype}"
        run(f"{name}_fused", lambda l=layers, b=bidir, d=dtype: lstmp_grads(l, b, d, True))
        run(f"{name}_unrolled", lambda l=layers, b=bidir, d=dtype: lstmp_grads(l, b, d, False))


def lstmp_gluon_training():
    layer = gluon.rnn.LSTM(6, num_layers=2, bidirectional=True, projection_size=3, input_size=4)
    layer.initialize()
    set_params(layer, 34)
    x = nd.array(rand((5, 2, 4), 35))
    target = nd.array(rand((5, 2, 6), 36))
    trainer = gluon.Trainer(layer.collect_params(), "sgd", {"learning_rate": 0.5})
    losses = []
    for _ in range(4):
        with ag.record():
            loss = ((layer(x) - target) ** 2).mean()
        loss.backward()
        trainer.step(1)
        losses.append(float(loss.asscalar()))
    return {"losses": losses}


run("lstmp_gluon_training", lstmp_gluon_training)


# ---- wider layers than the cases above: several blocks of hidden units and row tiles
for mode in ["lstm", "gru", "rnn_tanh"]:
    run(f"{mode}_wide", lambda m=mode: rnn_case(m, 2, True, True, T=3, N=11, C=9, H=37, seed=9))


# ---- begin_state of batch 0 (`zeros(shape=(0, H))`): the batch comes from the graph
CELLS = {"rnn": gluon.rnn.RNNCell, "lstm": gluon.rnn.LSTMCell, "gru": gluon.rnn.GRUCell}


def unrolled_infer(kind):
    cell = CELLS[kind](7, prefix=f"{kind}_")
    inputs = [mx.sym.Variable(f"t{i}") for i in range(3)]
    outputs, states = cell.unroll(3, inputs)
    g = mx.sym.Group(outputs + states)
    args, outs, _ = g.infer_shape(t0=(4, 5), t1=(4, 5), t2=(4, 5))
    return {"args": [list(a) for a in args] if args else None,
            "outs": [list(o) for o in outs] if outs else None}


def unrolled_executor(kind, residual=False):
    cell = CELLS[kind](5, prefix=f"{kind}_")
    if residual:
        cell = gluon.rnn.ResidualCell(cell)
    out, _ = cell.unroll(3, mx.sym.Variable("data"), layout="NTC", merge_outputs=True)
    exe = out.simple_bind(mx.cpu(), data=(2, 3, 5))
    for i, name in enumerate(sorted(exe.arg_dict)):
        exe.arg_dict[name][:] = rand(exe.arg_dict[name].shape, 80 + i, -0.5, 0.5)
    exe.forward(is_train=False)
    return {"out": flat(exe.outputs[0].asnumpy()), "shape": list(exe.outputs[0].shape)}


def lstmp_cell_infer():
    cell = gluon.contrib.rnn.LSTMPCell(8, 3, prefix="p_")
    inputs = [mx.sym.Variable(f"t{i}") for i in range(2)]
    outputs, _ = cell.unroll(2, inputs)
    args, outs, _ = mx.sym.Group(outputs).infer_shape(t0=(4, 5), t1=(4, 5))
    return {"args": [list(a) for a in args] if args else None,
            "outs": [list(o) for o in outs] if outs else None}


def hybrid_sequential_layer(kind):
    """A fused layer inside a hybridized block, called without states: its begin_state is
    zeros of batch 0 in the graph."""
    net = gluon.nn.HybridSequential()
    with net.name_scope():
        cls = {"lstm": gluon.rnn.LSTM, "gru": gluon.rnn.GRU}[kind]
        net.add(cls(6, num_layers=2, bidirectional=True, input_size=4))
        net.add(gluon.nn.Dense(3, flatten=False, in_units=12))
    net.initialize()
    set_params(net, 85)
    net.hybridize()
    x = nd.array(rand((5, 2, 4), 86))
    with ag.record():
        out = net(x)
    out.backward()
    return {"out": flat(out.asnumpy()),
            "grads": [flat(p.grad().asnumpy()) for _, p in sorted(net.collect_params().items())]}


for kind in CELLS:
    run(f"zero_batch_state_infer_{kind}", lambda k=kind: unrolled_infer(k))
    run(f"zero_batch_state_executor_{kind}", lambda k=kind: unrolled_executor(k))
run("zero_batch_state_residual", lambda: unrolled_executor("rnn", residual=True))
run("zero_batch_state_lstmp_cell", lstmp_cell_infer)
run("zero_batch_state_hybrid_lstm", lambda: hybrid_sequential_layer("lstm"))
run("zero_batch_state_hybrid_gru", lambda: hybrid_sequential_layer("gru"))

print(json.dumps(results))
