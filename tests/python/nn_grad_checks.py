"""Gradient checks of the neural-network operators that the gradient cases cannot make: random
draws (Dropout's mask, rrelu's slopes), float16 products MXNet refuses on CPU, second-order
gradients, BatchNorm's moving statistics (which MXNet updates in the backward pass), large arrays
(the parallel kernels) and a few Gluon training steps.

`--list` prints the checks' names. Otherwise prints one JSON object: `moving_stats` and
`gluon_training` (values to compare across libraries) and, with `--checks`, `checks` (name ->
list of failure messages, empty when the check passed; for the library under test alone: MXNet
1.9.1 crashes differentiating rrelu, refuses float16 products on CPU and has second-order
gradients for few ops).
"""
import json
import sys

import numpy as np
import mxnet as mx

nd = mx.nd
ag = mx.autograd
checks = {}
names = []
RUN_CHECKS = "--checks" in sys.argv


def check(name):
    def register(fn):
        names.append(name)
        if not RUN_CHECKS:
            return fn
        failures = []
        try:
            fn(failures)
        except Exception as e:  # noqa: BLE001 - reported as a failure
            failures.append("raised: " + str(e).strip().splitlines()[-1][:300])
        checks[name] = failures
        return fn
    return register


def grad_of(fn, *arrays, train=True, head=None):
    xs = [nd.array(a, dtype=a.dtype) for a in arrays]
    for x in xs:
        x.attach_grad()
    with ag.record(train_mode=train):
        out = fn(*xs)
    out.backward(head, train_mode=train)
    return out.asnumpy(), [x.grad.asnumpy() for x in xs]


@check("dropout_gradient_is_its_mask")
def _(failures):
    p = 0.3
    x = np.random.RandomState(0).uniform(0.5, 1.5, size=(60, 50)).astype(np.float32)
    y, (dx,) = grad_of(lambda x: nd.Dropout(x, p=p), x)
    dropped = y == 0
    if not np.all(dx[dropped] == 0):
        failures.append("nonzero gradient where the output was dropped")
    if not np.allclose(dx[~dropped], 1 / (1 - p), rtol=1e-6):
        failures.append("kept elements' gradient is not 1 / (1 - p)")
    if not np.allclose(y, x * dx, rtol=1e-6):
        failures.append("output is not input times the gradient's mask")
    kept = 1 - dropped.mean()
    if abs(kept - (1 - p)) > 0.05:
        failures.append(f"kept fraction {kept}")


@check("dropout_mask_of_zero_inputs")
def _(failures):
    # the output cannot tell kept zeros from dropped ones: the gradient needs the mask itself
    p = 0.5
    x = np.zeros((40, 50), dtype=np.float32)
    _, (dx,) = grad_of(lambda x: nd.Dropout(x, p=p), x)
    kept = (dx != 0).mean()
    if abs(kept - (1 - p)) > 0.06 or not np.allclose(dx[dx != 0], 1 / (1 - p)):
        failures.append(f"gradient of zeros: kept fraction {kept}, values {np.unique(dx)}")


@check("dropout_axes_share_the_draw")
def _(failures):
    x = np.random.RandomState(1).uniform(0.5, 1.5, size=(20, 6, 30)).astype(np.float32)
    y, (dx,) = grad_of(lambda x: nd.Dropout(x, p=0.5, axes=(1,)), x)
    if not np.all(dx == dx[:, :1, :]):
        failures.append("the mask differs along a shared axis")
    if not np.allclose(y, x * dx):
        failures.append("output is not input times the mask")


@check("dropout_float16_and_float64")
def _(failures):
    for dtype in ("float16", "float64"):
        x = np.random.RandomState(2).uniform(0.5, 1.5, size=(30, 30)).astype(dtype)
        y, (dx,) = grad_of(lambda x: nd.Dropout(x, p=0.25), x)
        if dx.dtype != np.dtype(dtype) or not np.allclose(y, x * dx, rtol=1e-3):
            failures.append(f"{dtype}: gradient does not match the output")


@check("dropout_predict_is_identity_and_always_drops")
def _(failures):
    x = np.random.RandomState(3).uniform(0.5, 1.5, size=(30, 30)).astype(np.float32)
    _, (dx,) = grad_of(lambda x: nd.Dropout(x, p=0.5), x, train=False)
    if not np.all(dx == 1):
        failures.append("predict mode does not pass the gradient through")
    y, (dx,) = grad_of(lambda x: nd.Dropout(x, p=0.5, mode="always"), x, train=False)
    if not (np.any(dx == 0) and np.allclose(y, x * dx)):
        failures.append("mode='always' does not drop in predict mode")


@check("dropout_out_argument")
def _(failures):
    x = nd.ones((4, 5))
    o = nd.zeros((4, 5))
    with ag.train_mode():
        r = nd.Dropout(x, p=0.5, out=o)
    if not (isinstance(r, nd.NDArray) and set(np.unique(o.asnumpy())) <= {0.0, 2.0}):
        failures.append("out= does not receive the output")


@check("rrelu_slopes")
def _(failures):
    lo, hi = 0.1, 0.4
    x = np.random.RandomState(4).uniform(-1, 1, size=(40, 30)).astype(np.float32)
    xs = nd.array(x)
    xs.attach_grad()
    with ag.record():
        y, mask = nd.LeakyReLU(xs, act_type="rrelu", lower_bound=lo, upper_bound=hi)
    y.backward()
    y, mask, dx = y.asnumpy(), mask.asnumpy(), xs.grad.asnumpy()
    if not (mask.min() >= lo and mask.max() < hi and mask.std() > 0.05):
        failures.append(f"slopes outside [{lo}, {hi}) or not drawn: {mask.min()} {mask.max()}")
    if not np.allclose(y, np.where(x > 0, x, x * mask)):
        failures.append("output is not x or x * slope")
    if not np.allclose(dx, np.where(x > 0, 1.0, mask)):
        failures.append("gradient is not 1 or the slope")
    with ag.predict_mode():
        _, mask = nd.LeakyReLU(xs, act_type="rrelu", lower_bound=lo, upper_bound=hi)
    if not np.allclose(mask.asnumpy(), (lo + hi) / 2):
        failures.append("predict mode does not use the bounds' mean")


def float16_matches_float32(failures, fn, *arrays):
    want = grad_of(fn, *[a.astype(np.float32) for a in arrays])[1]
    got = grad_of(fn, *[a.astype(np.float16) for a in arrays])[1]
    for i, (w, g) in enumerate(zip(want, got)):
        if g.dtype != np.float16 or not np.allclose(g.astype(np.float32), w, rtol=2e-2, atol=2e-2):
            failures.append(f"input {i}: float16 {g} vs float32 {w}")


@check("float16_products")
def _(failures):
    r = np.random.RandomState(5)
    a, b, w, bias = r.uniform(-1, 1, (3, 4)), r.uniform(-1, 1, (4, 2)), r.uniform(-1, 1, (5, 4)), r.uniform(-1, 1, 5)
    float16_matches_float32(failures, lambda a, b: nd.dot(a, b), a, b)
    float16_matches_float32(failures, lambda a, b: nd.dot(a, b, transpose_a=True), b, b)
    float16_matches_float32(failures, lambda a, b: nd.batch_dot(a, b, transpose_b=True),
                            r.uniform(-1, 1, (2, 3, 4)), r.uniform(-1, 1, (2, 5, 4)))
    float16_matches_float32(failures, lambda x, w, b: nd.FullyConnected(x, w, b, num_hidden=5), a, w, bias)


@check("batchnorm_float16")
def _(failures):
    r = np.random.RandomState(6)
    x = r.uniform(-1, 1, (4, 3, 5))
    g, b = r.uniform(0.5, 1.5, 3).astype(np.float32), r.uniform(-1, 1, 3).astype(np.float32)
    m, v = np.zeros(3, np.float32), np.ones(3, np.float32)
    grads = {}
    for dtype in ("float32", "float16"):
        xs = nd.array(x, dtype=dtype)
        gs, bs = nd.array(g), nd.array(b)
        for a in (xs, gs, bs):
            a.attach_grad()
        with ag.record():
            y = nd.BatchNorm(xs, gs, bs, nd.array(m), nd.array(v), fix_gamma=False)
            y = y * y
        y.backward()
        grads[dtype] = [a.grad.asnumpy().astype(np.float32) for a in (xs, gs, bs)]
    for i, (w, h) in enumerate(zip(grads["float32"], grads["float16"])):
        if not np.allclose(w, h, rtol=2e-2, atol=2e-2):
            failures.append(f"input {i}: float16 {h} vs float32 {w}")


@check("softmax_wider_output_dtype")
def _(failures):
    x = np.random.RandomState(7).uniform(-1, 1, (3, 4)).astype(np.float32)
    h = nd.array(np.arange(12).reshape(3, 4), dtype="float64")
    _, (d32,) = grad_of(lambda x: nd.softmax(x, dtype="float64"), x, head=h)
    _, (d64,) = grad_of(lambda x: nd.softmax(x), x.astype(np.float64), head=h)
    if d32.dtype != np.float32 or not np.allclose(d32, d64, rtol=1e-5, atol=1e-6):
        failures.append(f"{d32.dtype} {d32} vs {d64}")


@check("large_arrays")
def _(failures):
    # above the parallel threshold: the fused kernels split their range over threads
    x = np.random.RandomState(8).uniform(-3, 3, (300, 1000)).astype(np.float32)
    h = np.random.RandomState(9).uniform(0.5, 1.5, x.shape).astype(np.float32)
    sig = 1 / (1 + np.exp(-x))
    for act, want in [("relu", (x > 0) * h), ("sigmoid", sig * (1 - sig) * h), ("tanh", (1 - np.tanh(x) ** 2) * h)]:
        _, (dx,) = grad_of(lambda x: nd.Activation(x, act_type=act), x, head=nd.array(h))
        if not np.allclose(dx, want, rtol=1e-5, atol=1e-6):
            failures.append(f"Activation {act}")
    e = np.exp(x - x.max(axis=1, keepdims=True))
    s = e / e.sum(axis=1, keepdims=True)
    want = s * (h - (h * s).sum(axis=1, keepdims=True))
    _, (dx,) = grad_of(lambda x: nd.softmax(x), x, head=nd.array(h))
    if not np.allclose(dx, want, rtol=1e-4, atol=1e-6):
        failures.append("softmax")
    _, (dx,) = grad_of(lambda x: nd.sum(x, axis=0), x, head=nd.array(h[0]))
    if not np.allclose(dx, np.broadcast_to(h[0], x.shape)):
        failures.append("sum")


def second_order(fn, arrays, eps=1e-6):
    """Failures of fn's second-order gradient: z(x) = Σ_i <grad_i(Σ fn(x)·h), k_i>, z's gradient
    through the recorded first-order gradient against central differences of z (float64)."""
    r = np.random.RandomState(11)
    out_shape = fn(*[nd.array(a, dtype="float64") for a in arrays]).shape
    h = r.uniform(0.5, 1.5, out_shape)
    ks = [r.uniform(-1, 1, np.shape(a)) for a in arrays]

    def z_of(values, create):
        xs = [nd.array(v, dtype="float64") for v in values]
        for x in xs:
            x.attach_grad()
        with ag.record():
            y = fn(*xs)
            gs = ag.grad(y, xs, head_grads=nd.array(h, dtype="float64"), create_graph=create,
                         retain_graph=True)
            z = sum((g * nd.array(k, dtype="float64")).sum() for g, k in zip(gs, ks))
        return xs, z

    xs, z = z_of(arrays, True)
    z.backward()
    failures = []
    for i, a in enumerate(arrays):
        analytic = xs[i].grad.asnumpy()
        numeric = np.zeros(np.shape(a))
        for j in range(numeric.size):
            plus = [np.array(v, dtype=np.float64) for v in arrays]
            minus = [np.array(v, dtype=np.float64) for v in arrays]
            plus[i].flat[j] += eps
            minus[i].flat[j] -= eps
            numeric.flat[j] = (z_of(plus, False)[1].asscalar() - z_of(minus, False)[1].asscalar()) / (2 * eps)
        if not np.allclose(analytic, numeric, rtol=1e-4, atol=1e-5):
            failures.append(f"input {i}: {analytic.ravel()} vs central differences {numeric.ravel()}")
    return failures


SECOND_ORDER_X = np.random.RandomState(12).uniform(-1, 1, (2, 3, 2)) * 1.5
SECOND_ORDER = {
    "sigmoid": (lambda x: nd.Activation(x, act_type="sigmoid"), [SECOND_ORDER_X]),
    "tanh": (lambda x: nd.Activation(x, act_type="tanh"), [SECOND_ORDER_X]),
    "softrelu": (lambda x: nd.Activation(x, act_type="softrelu"), [SECOND_ORDER_X]),
    "softsign": (lambda x: nd.Activation(x, act_type="softsign"), [SECOND_ORDER_X]),
    "elu": (lambda x: nd.LeakyReLU(x, act_type="elu", slope=0.7), [SECOND_ORDER_X]),
    "selu": (lambda x: nd.LeakyReLU(x, act_type="selu"), [SECOND_ORDER_X]),
    "gelu": (lambda x: nd.LeakyReLU(x, act_type="gelu"), [SECOND_ORDER_X]),
    "prelu": (lambda x, g: nd.LeakyReLU(x, g, act_type="prelu") ** 2, [SECOND_ORDER_X, np.array([0.2, -0.5, 0.7])]),
    "softmax": (lambda x: nd.softmax(x, axis=1, temperature=1.5), [SECOND_ORDER_X]),
    "log_softmax": (lambda x: nd.log_softmax(x, axis=-1, temperature=0.8), [SECOND_ORDER_X]),
    "softmin": (lambda x: nd.softmin(x, axis=0), [SECOND_ORDER_X]),
    "fc": (lambda x, w, b: nd.FullyConnected(x, w, b, num_hidden=2) ** 2,
           [SECOND_ORDER_X, np.random.RandomState(13).uniform(-1, 1, (2, 6)), np.array([0.1, -0.2])]),
    "fc_no_flatten": (lambda x, w: nd.FullyConnected(x, w, num_hidden=3, no_bias=True, flatten=False) ** 2,
                      [SECOND_ORDER_X, np.random.RandomState(14).uniform(-1, 1, (3, 2))]),
    "dot_transposed": (lambda a, b: nd.dot(a, b, transpose_a=True) ** 2,
                       [np.random.RandomState(15).uniform(-1, 1, (3, 2)), np.random.RandomState(16).uniform(-1, 1, (3, 4))]),
    "batch_dot": (lambda a, b: nd.batch_dot(a, b, transpose_b=True) ** 2,
                  [SECOND_ORDER_X, np.random.RandomState(17).uniform(-1, 1, (2, 4, 2))]),
    "sum_mean": (lambda x: nd.sum(nd.sum(x, axis=1) ** 2) + nd.sum(nd.mean(x, axis=(0, 2), keepdims=True) ** 3),
                 [SECOND_ORDER_X]),
    "prod": (lambda x: nd.prod(x, axis=1), [SECOND_ORDER_X + 2]),
    "max": (lambda x: nd.max(x, axis=-1) ** 2, [SECOND_ORDER_X]),
    "norm": (lambda x: nd.norm(x, axis=1), [SECOND_ORDER_X]),
    "sort": (lambda x: nd.sort(x, axis=1) ** 2, [SECOND_ORDER_X]),
    "topk": (lambda x: nd.topk(x, axis=0, k=1, ret_typ="value") ** 2, [SECOND_ORDER_X]),
}
for _name, (_fn, _arrays) in SECOND_ORDER.items():
    check("second_order_" + _name)(lambda failures, fn=_fn, arrays=_arrays: failures.extend(second_order(fn, arrays)))


def moving_stats():
    """BatchNorm's moving statistics after a recorded forward and backward, per mode."""
    r = np.random.RandomState(10)
    x = r.uniform(-1, 2, (4, 3, 2)).astype(np.float32)
    out = {}
    for name, kw, train in [("train", {}, True), ("train_momentum", {"momentum": 0.5}, True),
                            ("global_stats", {"use_global_stats": True}, True), ("predict", {}, False)]:
        xs, g, b = nd.array(x), nd.ones(3), nd.zeros(3)
        m, v = nd.array([0.1, 0.2, 0.3]), nd.array([1.0, 2.0, 0.5])
        xs.attach_grad()
        with ag.record(train_mode=train):
            y = nd.BatchNorm(xs, g, b, m, v, fix_gamma=False, **kw)
        y.backward(train_mode=train)
        out[name] = [m.asnumpy().tolist(), v.asnumpy().tolist()]
    return out


def gluon_training():
    """A Gluon network's parameters after three SGD steps (Dense, tanh, BatchNorm with its moving
    statistics, LeakyReLU, softmax, two losses)."""
    from mxnet import gluon
    net = gluon.nn.Sequential()
    net.add(gluon.nn.Dense(8, activation="tanh", in_units=4), gluon.nn.BatchNorm(in_channels=8),
            gluon.nn.Dense(6, in_units=8), gluon.nn.LeakyReLU(0.1), gluon.nn.Dense(3, flatten=False, in_units=6))
    net.initialize()
    params = net.collect_params()
    for i, (name, p) in enumerate(sorted(params.items())):
        shift = 1.0 if name.endswith(("gamma", "running_var")) else 0.0
        p.set_data(nd.array(np.random.RandomState(20 + i).uniform(-0.5, 0.5, p.shape) + shift))
    x = nd.array(np.random.RandomState(21).uniform(-1, 1, (5, 4)))
    y = nd.array(np.random.RandomState(22).uniform(-1, 1, (5, 3)))
    trainer = gluon.Trainer(params, "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    for _ in range(3):
        with ag.record():
            losses = [gluon.loss.L2Loss()(net(x), y), nd.softmax(net(x), axis=-1).max()]
        ag.backward(losses)
        trainer.step(5)
    return {name.split("_", 1)[1]: p.data().asnumpy().ravel().tolist() for name, p in sorted(params.items())}


if __name__ == "__main__":
    if "--list" in sys.argv:
        print("\n".join(names))
        sys.exit(0)
    print(json.dumps({"checks": checks, "moving_stats": moving_stats(), "gluon_training": gluon_training()}))
