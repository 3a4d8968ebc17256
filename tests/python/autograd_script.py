"""Autograd and imperative Gluon training through the unmodified mxnet package; prints each
scenario's outcome as JSON (test_autograd.py compares libmxrt with libmxnet.so).
`--list` prints the scenario names; names as arguments run just those."""
import json
import sys
import warnings

import numpy as np
import mxnet as mx
from mxnet import autograd as ag, gluon, nd

scenarios = {}


def scenario(fn):
    scenarios[fn.__name__] = fn
    return fn


def v(a):
    return np.asarray(a.asnumpy(), dtype=np.float64).round(5).tolist()


@scenario
def modes_follow_scopes():
    out = [ag.is_recording(), ag.is_training()]
    with ag.record():
        out += [ag.is_recording(), ag.is_training()]
        with ag.pause():
            out += [ag.is_recording(), ag.is_training()]
        with ag.predict_mode():
            out += [ag.is_recording(), ag.is_training()]
    with ag.record(train_mode=False):
        out += [ag.is_recording(), ag.is_training()]
    with ag.train_mode():
        out += [ag.is_recording(), ag.is_training()]
    out += [ag.set_recording(True), ag.set_recording(False), ag.set_training(True), ag.set_training(False)]
    return out


@scenario
def backward_with_head_gradient_and_reuse():
    x = nd.array([[1.0, 2.0], [3.0, 4.0]])
    x.attach_grad()
    with ag.record():
        y = x * x + nd.exp(x) * 2 - x / 4
        z = y * x
    z.backward(nd.array([[1.0, 0.5], [2.0, -1.0]]))
    return v(x.grad)


@scenario
def grad_req_add_accumulates():
    x = nd.array([1.0, 2.0, 3.0])
    x.attach_grad(grad_req="add")
    for _ in range(3):
        with ag.record():
            y = nd.sin(x) * 2
        y.backward()
    return v(x.grad)


@scenario
def gradients_written_into_buffers_the_graph_reads():
    # the gradient buffer is read by the graph (a constant input, a head gradient) or
    # receives several contributions: each result is as if written after the whole pass
    out = {}
    x = nd.array([1.0, -2.0, 3.0])
    x.attach_grad()
    x.grad[:] = 5
    with ag.record():
        y = nd.exp(x) * x.grad + x * x
    y.backward()
    out["constant"] = v(x.grad)
    x.grad[:] = 0.5
    with ag.record():
        y = nd.sigmoid(x) * 3
    y.backward(x.grad)
    out["head_grad"] = v(x.grad)
    w = nd.array([[0.5, -1.0], [2.0, 0.25]])
    w.attach_grad()
    with ag.record():
        h = nd.tanh(nd.dot(w, w)) + nd.relu(w) * w
    h.backward(nd.array([[1.0, 2.0], [-1.0, 0.5]]))
    out["shared"] = v(w.grad)
    a = nd.array([0.3, 0.6])
    b = nd.array([1.5, -0.5])
    a.attach_grad()
    b.attach_grad()
    with ag.record():
        c = nd.exp(a) * 2 + nd.sigmoid(b) * a
    c.backward()
    out["two_vars"] = [v(a.grad), v(b.grad)]
    # a view of the buffer stays a view of it
    g = x.grad
    with ag.record():
        y = x * 4
    y.backward()
    out["same_buffer"] = [v(g), v(x.grad)]
    return out


@scenario
def nan_in_relu_gradients():
    # relu's gradient is NaN where its input is; Activation's (MXNet's oneDNN kernel) is 0
    out = []
    for f in (nd.relu, lambda x: nd.Activation(x, act_type="relu")):
        x = nd.array([[np.nan, 1.0], [-1.0, 2.0]])
        x.attach_grad()
        with ag.record():
            y = f(x)
        y.backward()
        out.append([[None if np.isnan(g) else float(g) for g in row] for row in x.grad.asnumpy()])
    return out


@scenario
def multiple_heads_and_retain_graph():
    x = nd.array([0.5, -1.0])
    x.attach_grad()
    with ag.record():
        a = nd.tanh(x)
        b = a * 3 + x
        c = nd.square(a)
    ag.backward([b, c], retain_graph=True)
    first = v(x.grad)
    ag.backward([b, c])
    second = v(x.grad)
    try:
        b.backward()
        third = "no error"
    except mx.MXNetError as e:
        third = "Cannot differentiate node" in str(e)
    return [first, second, third]


@scenario
def autograd_grad_returns_new_arrays():
    x = nd.array([1.0, 2.0, 3.0])
    x.attach_grad()
    with ag.record():
        y = nd.log(x) * x
    g = ag.grad(y, x)
    return [v(g), v(x.grad), x._fresh_grad]


@scenario
def second_order_of_sin():
    x = nd.array([0.3, 1.2])
    x.attach_grad()
    with ag.record():
        y = nd.sin(x)
        dx = ag.grad(y, [x], create_graph=True, retain_graph=True)[0]
    dx.backward()
    return [v(dx), v(x.grad)]


@scenario
def fresh_gradient_flags():
    a, b = nd.array([1.0]), nd.array([2.0])
    a.attach_grad()
    b.attach_grad()
    with ag.record():
        y = a * 3
    y.backward()
    out = [a._fresh_grad, b._fresh_grad]
    a._fresh_grad = False
    return out + [a._fresh_grad]


@scenario
def detach_and_grad_of_constants():
    x = nd.array([1.0, 2.0])
    x.attach_grad()
    c = nd.array([5.0, 6.0])
    with ag.record():
        y = x * c + x.detach() * 10
    y.backward()
    return [v(x.grad), c.grad is None]


@scenario
def inplace_on_a_recorded_array_is_refused():
    x = nd.array([1.0, 2.0])
    x.attach_grad()
    with ag.record():
        y = x * 2
        try:
            y += 1
            res = "no error"
        except mx.MXNetError as e:
            res = "already in a computational graph" in str(e)
    return res


@scenario
def backward_outside_a_graph_is_refused():
    x = nd.array([1.0, 2.0])
    try:
        x.backward()
        return "no error"
    except mx.MXNetError as e:
        return "Cannot differentiate node" in str(e)


class StableSigmoid(ag.Function):
    def forward(self, x):
        y = 1 / (1 + nd.exp(-x))
        self.save_for_backward(y)
        return y

    def backward(self, dy):
        y, = self.saved_tensors
        return dy * y * (1 - y)


class TwoOut(ag.Function):
    def forward(self, a, b):
        return a * b, a + b

    def backward(self, da, db):
        return da * 2 + db, da * 3 - db


@scenario
def custom_function():
    x = nd.array([0.5, -1.0, 2.0])
    x.attach_grad()
    with ag.record():
        m = StableSigmoid()(x) * 2
    m.backward()
    a, b = nd.array([1.0, 2.0]), nd.array([3.0, 4.0])
    a.attach_grad()
    b.attach_grad()
    with ag.record():
        p, q = TwoOut()(a, b)
        loss = p * 2 + q
    loss.backward()
    outside = StableSigmoid()(nd.array([0.0]))
    return [v(x.grad), v(a.grad), v(b.grad), v(outside)]


def mlp(seed, in_units=20):
    net = gluon.nn.Sequential()
    net.add(gluon.nn.Dense(32, in_units=in_units, activation="relu"))
    net.add(gluon.nn.Dense(10, in_units=32))
    net.initialize(mx.init.Xavier(rnd_type="gaussian", magnitude=2), force_reinit=True)
    rng = np.random.RandomState(seed)
    for p in net.collect_params().values():
        p.set_data(nd.array(rng.normal(0, 0.3, size=p.shape)))
    return net


def data(seed, n=64, in_units=20):
    rng = np.random.RandomState(seed)
    x = rng.normal(size=(n, in_units))
    y = rng.randint(0, 10, size=n)
    return nd.array(x), nd.array(y)


def train(optimizer, opt_args, loss_fn, kvstore=None, update_on_kvstore=None, steps=6,
          batch=16, clip=None, allreduce_update=False):
    net = mlp(1)
    x, y = data(2)
    kwargs = {}
    if kvstore is not None:
        kwargs["kvstore"] = kvstore
    if update_on_kvstore is not None:
        kwargs["update_on_kvstore"] = update_on_kvstore
    trainer = gluon.Trainer(net.collect_params(), optimizer, opt_args, **kwargs)
    metric = mx.metric.Accuracy()
    losses = []
    for s in range(steps):
        lo = (s * batch) % x.shape[0]
        xb, yb = x[lo:lo + batch], y[lo:lo + batch]
        with ag.record():
            out = net(xb)
            loss = loss_fn(out, yb)
        loss.backward()
        if clip is not None:
            grads = [p.grad() for p in net.collect_params().values()]
            gluon.utils.clip_global_norm(grads, clip)
        if allreduce_update:
            trainer.allreduce_grads()
            trainer.update(batch)
        else:
            trainer.step(batch)
        metric.update([yb], [out])
        losses.append(float(loss.mean().asscalar()))
    params = {k.split("_", 1)[-1]: np.asarray(p.data().asnumpy(), dtype=np.float64).round(4).ravel()[:12].tolist()
              for k, p in net.collect_params().items()}
    return {"losses": np.round(losses, 4).tolist(), "params": params, "acc": metric.get()[1]}


CE = gluon.loss.SoftmaxCrossEntropyLoss()


@scenario
def gluon_sgd():
    return train("sgd", {"learning_rate": 0.1}, CE)


@scenario
def gluon_sgd_momentum_wd():
    return train("sgd", {"learning_rate": 0.05, "momentum": 0.9, "wd": 1e-3}, CE)


@scenario
def gluon_adam():
    return train("adam", {"learning_rate": 0.01}, CE)


@scenario
def gluon_optimizers():
    out = {}
    for name, args in [("nag", {"learning_rate": 0.05, "momentum": 0.9}),
                       ("rmsprop", {"learning_rate": 0.01}), ("adagrad", {"learning_rate": 0.1}),
                       ("adadelta", {}), ("ftrl", {"learning_rate": 0.1}),
                       ("signum", {"learning_rate": 0.01}), ("ftml", {"learning_rate": 0.01}),
                       ("lamb", {"learning_rate": 0.01}), ("adamax", {"learning_rate": 0.01}),
                       ("nadam", {"learning_rate": 0.01})]:
        try:
            out[name] = train(name, args, CE, steps=3)
        except Exception as e:  # noqa: BLE001 - compared as outcomes
            out[name] = {"error": str(e).splitlines()[-1][:200]}
    return out


@scenario
def gluon_kvstore_modes():
    return {
        "local_on_kv": train("sgd", {"learning_rate": 0.1, "momentum": 0.5}, CE, kvstore="local",
                             update_on_kvstore=True, steps=4),
        "device_off_kv": train("sgd", {"learning_rate": 0.1, "momentum": 0.5}, CE, kvstore="device",
                               update_on_kvstore=False, steps=4),
        "allreduce_update": train("sgd", {"learning_rate": 0.1}, CE, kvstore="local",
                                  update_on_kvstore=False, steps=4, allreduce_update=True),
        "clip": train("sgd", {"learning_rate": 0.1}, CE, steps=4, clip=0.5),
    }


@scenario
def gluon_losses():
    out = {}
    rng = np.random.RandomState(3)
    pred = nd.array(rng.normal(size=(8, 5)))
    label_cls = nd.array(rng.randint(0, 5, size=8))
    label_reg = nd.array(rng.normal(size=(8, 5)))
    label_bin = nd.array(rng.randint(0, 2, size=(8, 5)))
    label_pm = nd.array(rng.randint(0, 2, size=(8, 5)) * 2 - 1)
    prob = nd.softmax(nd.array(rng.normal(size=(8, 5))))
    losses = {
        "l2": (gluon.loss.L2Loss(), label_reg), "l1": (gluon.loss.L1Loss(), label_reg),
        "sce": (gluon.loss.SoftmaxCrossEntropyLoss(), label_cls),
        "sce_dense": (gluon.loss.SoftmaxCrossEntropyLoss(sparse_label=False), prob),
        "sigmoid_bce": (gluon.loss.SigmoidBinaryCrossEntropyLoss(), label_bin),
        "bce_no_logits": (gluon.loss.SigmoidBinaryCrossEntropyLoss(from_sigmoid=True), label_bin),
        "kl": (gluon.loss.KLDivLoss(), prob),
        "huber": (gluon.loss.HuberLoss(), label_reg), "hinge": (gluon.loss.HingeLoss(), label_pm),
        "sq_hinge": (gluon.loss.SquaredHingeLoss(), label_pm),
        "logistic": (gluon.loss.LogisticLoss(), label_pm),
        "poisson": (gluon.loss.PoissonNLLLoss(), nd.abs(label_reg)),
        "cosine": (gluon.loss.CosineEmbeddingLoss(), nd.array(rng.randint(0, 2, size=8) * 2 - 1)),
    }
    for name, (fn, label) in losses.items():
        p = pred.copy()
        if name == "bce_no_logits":
            p = nd.sigmoid(p)
        if name == "cosine":
            p.attach_grad()
            other = nd.array(rng.normal(size=(8, 5)))
            try:
                with ag.record():
                    loss = fn(p, other, label)
                loss.backward()
                out[name] = [v(loss), v(p.grad)]
            except Exception as e:  # noqa: BLE001
                out[name] = {"error": str(e).splitlines()[-1][:200]}
            continue
        p.attach_grad()
        try:
            with ag.record():
                loss = fn(p, label)
            loss.backward()
            out[name] = [v(loss), v(p.grad)]
        except Exception as e:  # noqa: BLE001
            out[name] = {"error": str(e).splitlines()[-1][:200]}
    return out


def sv(a):
    """An array's storage type and values."""
    return [a.stype, v(a)]


def sparse_inputs():
    rng = np.random.RandomState(3)
    dense = rng.rand(5, 4).astype("float32")
    dense[[1, 3]] = 0
    return nd.array(dense), nd.array(dense).tostype("csr"), nd.array(rng.rand(4, 3))


@scenario
def dot_of_csr_gives_row_sparse_weight_gradients():
    dense, csr, w = sparse_inputs()
    out = {}
    for lhs_name, lhs in (("csr", csr), ("dense", dense)):
        for grad_stype in ("default", "row_sparse"):
            for ta in (False, True):
                ww = nd.array(np.ones((5, 3)) * 0.5) if ta else w.copy()
                ww.attach_grad(stype=grad_stype)
                with ag.record():
                    y = nd.dot(lhs, ww, transpose_a=ta)
                y.backward(nd.ones_like(y) * 2 if y.stype == "default" else None)
                out[f"{lhs_name}/{grad_stype}/ta={ta}"] = sv(ww.grad)
    # autograd.grad returns the gradient in the storage the backward computes it in
    ww = w.copy()
    ww.attach_grad()
    with ag.record():
        y = nd.dot(csr, ww)
    out["grad"] = sv(ag.grad(y, [ww], head_grads=nd.ones_like(y))[0])
    # the csr operand's own gradient, into its csr buffer
    c = csr.copy()
    c.attach_grad()
    with ag.record():
        y = nd.dot(c, w)
    y.backward()
    out["lhs"] = sv(c.grad)
    return out


@scenario
def row_sparse_gradients_of_sparse_ops():
    dense, _, _ = sparse_inputs()
    ops = {
        "square_sum": lambda x: nd._internal._square_sum(x, axis=1),
        "retain": lambda x: nd.sparse.retain(x, nd.array([0, 2], dtype="int64")),
        "elemwise_add": lambda x: nd.elemwise_add(x, x),
        "sum": nd.sum,
        "dense_op": lambda x: x * 2,
    }
    out = {}
    for name, f in ops.items():
        x = nd.array(dense).tostype("row_sparse") if name != "dense_op" else nd.array(dense)
        x.attach_grad(stype="row_sparse")
        with ag.record():
            y = f(x)
        y.backward()
        out[name] = sv(x.grad)
    w = nd.array(np.arange(15).reshape(5, 3))
    w.attach_grad(stype="row_sparse")
    with ag.record():
        y = nd.take(w, nd.array([0, 3, 3]))
    y.backward()
    out["take"] = sv(w.grad)
    return out


@scenario
def trainer_warns_on_stale_gradients():
    net = mlp(4)
    extra = gluon.Parameter("unused", shape=(3,))
    extra.initialize()
    params = list(net.collect_params().values()) + [extra]
    trainer = gluon.Trainer(params, "sgd", {"learning_rate": 0.1})
    x, _ = data(5, n=4)
    with ag.record():
        loss = net(x).sum()
    loss.backward()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        try:
            trainer.step(4)
            res = "no error"
        except UserWarning as e:
            res = "has not been updated by backward" in str(e)
        except Exception as e:  # noqa: BLE001
            res = "has not been updated by backward" in str(e)
    return [res, len(w) >= 0]


if __name__ == "__main__":
    args = sys.argv[1:]
    if args == ["--list"]:
        print("\n".join(scenarios))
        sys.exit(0)
    names = args or list(scenarios)
    out = {}
    for n in names:
        try:
            out[n] = {"ok": scenarios[n]()}
        except Exception as e:  # noqa: BLE001 - compared as outcomes
            out[n] = {"error": str(e).splitlines()[-1][:300] if str(e) else repr(e)}
    print(json.dumps(out))
