"""Gradient cases: runs each case's forward under autograd.record() and its backward through the
unmodified mxnet package, and prints the gradients as JSON.

test_gradients.py runs this on libmxrt and on the wheel's libmxnet.so and checks, case by case:
the float32 gradients against MXNet's, and (on libmxrt) the float64 gradients against central
differences of the forward. A case lists the operators it covers (`covers`), so the operator
table's sweep (src/operator/table.rs) can tell a differentiable op without a gradient check.

Kinds of case:
- `grad(name, covers, inputs)(fn)`: fn(*arrays) -> output (or list of outputs); the head
  gradients are fixed pseudo-random arrays; every input gets a gradient.
- `zero_grad(...)`: the same, where the gradient is zero on both libraries.
- `nondiff(name, covers)(fn)`: fn() -> outputs of a recorded op that MXNet cannot
  differentiate; the backward must fail on both libraries.
`--list` prints the case names; names as arguments run just those cases.
"""
import json
import os
import sys

import numpy as np
import mxnet as mx

nd = mx.nd
ag = mx.autograd
cases = {}


def grad(name, covers, inputs, numeric=True, rtol=1e-3, atol=1e-4, dtypes=("float32",)):
    """`inputs`: numpy arrays (float64) or (array, needs_grad) pairs."""
    def register(fn):
        cases[name] = dict(kind="grad", covers=covers, inputs=inputs, fn=fn, numeric=numeric,
                           rtol=rtol, atol=atol, dtypes=dtypes)
        return fn
    return register


def zero_grad(name, covers, inputs):
    def register(fn):
        cases[name] = dict(kind="grad", covers=covers, inputs=inputs, fn=fn, numeric=False,
                           rtol=0, atol=0, dtypes=("float32",))
        return fn
    return register


def nondiff(name, covers, inputs):
    def register(fn):
        cases[name] = dict(kind="nondiff", covers=covers, inputs=inputs, fn=fn)
        return fn
    return register


def rand(*shape, lo=-1.0, hi=1.0, seed=0):
    r = np.random.RandomState(seed + 7 * len(shape) + sum(shape))
    return r.uniform(lo, hi, size=shape)


def pos(*shape, seed=0):
    return rand(*shape, lo=0.5, hi=2.0, seed=seed)


def unit(*shape, seed=0):
    return rand(*shape, lo=-0.8, hi=0.8, seed=seed)


def as_list(out):
    return list(out) if isinstance(out, (list, tuple)) else [out]


def head_grads(outs, dtype):
    hs = []
    for i, o in enumerate(outs):
        r = np.random.RandomState(100 + i)
        hs.append(nd.array(r.uniform(0.5, 1.5, size=o.shape), dtype=dtype))
    return hs


def split_inputs(case):
    vals, needs = [], []
    for x in case["inputs"]:
        if isinstance(x, tuple):
            vals.append(np.asarray(x[0]))
            needs.append(x[1])
        else:
            vals.append(np.asarray(x))
            needs.append(True)
    return vals, needs


def run_grad(case, dtype):
    vals, needs = split_inputs(case)
    xs = [nd.array(v, dtype=dtype if v.dtype.kind == "f" else v.dtype) for v in vals]
    for x, need in zip(xs, needs):
        if need:
            x.attach_grad()
    with ag.record():
        outs = as_list(case["fn"](*xs))
    ag.backward(outs, head_grads(outs, dtype))
    return [x.grad.asnumpy().astype(np.float64).ravel().tolist() if need else None
            for x, need in zip(xs, needs)]


def forward64(case, vals):
    xs = [nd.array(v, dtype="float64" if v.dtype.kind == "f" else v.dtype) for v in vals]
    outs = as_list(case["fn"](*xs))
    hs = head_grads(outs, "float64")
    return sum(float((o * h).sum().asscalar()) for o, h in zip(outs, hs))


def numeric(case, eps=1e-6):
    vals, needs = split_inputs(case)
    grads = []
    for i, (v, need) in enumerate(zip(vals, needs)):
        if not need:
            grads.append(None)
            continue
        g = np.zeros(v.size)
        for j in range(v.size):
            plus = [w.copy() for w in vals]
            minus = [w.copy() for w in vals]
            plus[i].flat[j] += eps
            minus[i].flat[j] -= eps
            g[j] = (forward64(case, plus) - forward64(case, minus)) / (2 * eps)
        grads.append(g.tolist())
    return grads


def run_case(name, with_numeric):
    case = cases[name]
    out = {}
    try:
        if case["kind"] == "nondiff":
            vals, needs = split_inputs(case)
            xs = [nd.array(v) for v in vals]
            for x in xs:
                x.attach_grad()
            with ag.record():
                outs = as_list(case["fn"](*xs))
            ag.backward(outs)
            nd.waitall()
            out["ok"] = "differentiated"
        else:
            out["ok"] = {d: run_grad(case, d) for d in case["dtypes"]}
            if with_numeric and case["numeric"]:
                out["analytic64"] = run_grad(case, "float64")
                out["numeric"] = numeric(case)
    except Exception as e:  # noqa: BLE001 - the outcome is what is compared
        out = {"error": str(e).split("\n")[0][:400]}
    return out


# ---------------------------------------------------------------------------------------------
# elementwise unary
UNARY = ["abs", "square", "exp", "expm1", "sin", "cos", "tan", "arctan", "sinh", "cosh", "tanh",
         "arcsinh", "degrees", "radians", "sigmoid", "softsign", "erf", "negative", "_copy"]
for op in UNARY:
    grad("unary_" + op, [op], [rand(2, 3, seed=1)])(lambda x, op=op: getattr(nd, op)(x))
for op in ["sqrt", "rsqrt", "cbrt", "rcbrt", "log", "log10", "log2", "log1p", "reciprocal",
           "gamma", "gammaln"]:
    grad("unary_pos_" + op, [op], [pos(2, 3, seed=2)])(lambda x, op=op: getattr(nd, op)(x))
for op in ["arcsin", "arccos", "arctanh", "erfinv"]:
    grad("unary_unit_" + op, [op], [unit(2, 3, seed=3)])(lambda x, op=op: getattr(nd, op)(x))
grad("unary_arccosh", ["arccosh"], [pos(2, 3) + 1.5])(lambda x: nd.arccosh(x))
# relu away from its kink
grad("unary_relu", ["relu"], [np.array([[-1.0, 0.5, 2.0], [0.3, -0.2, -3.0]])])(lambda x: nd.relu(x))
grad("unary_f64", ["exp"], [rand(4)], dtypes=("float64",))(lambda x: nd.exp(x) * x)
grad("unary_f16", ["exp", "sin"], [rand(4)], numeric=False, dtypes=("float16",))(
    lambda x: nd.exp(x) + nd.sin(x))
for op in ["sign", "round", "rint", "ceil", "floor", "trunc", "fix", "logical_not"]:
    zero_grad("zero_" + op, [op], [rand(2, 3, seed=4) * 3])(lambda x, op=op: getattr(nd, op)(x) * x)
zero_grad("zero_BlockGrad", ["BlockGrad"], [rand(3)])(lambda x: nd.BlockGrad(x) * x)
grad("make_loss", ["make_loss"], [rand(2, 2)], numeric=False)(lambda x: nd.make_loss(x * 2))

# elementwise binary, broadcast, scalar
A, B = rand(2, 3, seed=5), rand(2, 3, seed=6) + 2.5
for name in ["add", "sub", "mul", "div"]:
    grad("binary_" + name, ["elemwise_" + name], [A, B])(
        lambda a, b, name=name: getattr(nd, "elemwise_" + name)(a, b))
grad("binary_operators", ["elemwise_add", "elemwise_sub", "elemwise_mul", "elemwise_div"], [A, B])(
    lambda a, b: [a + b, a - b, a * b, a / b])
grad("binary_mod", ["_mod"], [pos(2, 3) * 3, pos(2, 3, seed=1) + 0.3])(lambda a, b: a % b)
grad("binary_power", ["_power"], [pos(2, 3), rand(2, 3)])(lambda a, b: a ** b)
grad("binary_maximum", ["_maximum"], [A, B - 2.5])(lambda a, b: nd.maximum(a, b))
grad("binary_minimum", ["_minimum"], [A, B - 2.5])(lambda a, b: nd.minimum(a, b))
grad("binary_hypot", ["_hypot"], [A, B])(lambda a, b: nd._internal._hypot(a, b))
ROWV = rand(1, 3, seed=9) + 2.0
COLV = rand(2, 1, seed=10) + 2.0
for op in ["add", "sub", "mul", "div", "maximum", "minimum", "hypot"]:
    grad("broadcast_" + op, ["broadcast_" + op], [A, ROWV])(
        lambda a, b, op=op: getattr(nd, "broadcast_" + op)(a, b))
grad("broadcast_power", ["broadcast_power"], [pos(2, 3), COLV - 2.0])(
    lambda a, b: nd.broadcast_power(a, b))
grad("broadcast_mod", ["broadcast_mod"], [pos(2, 3) * 3, pos(1, 3) + 0.3])(
    lambda a, b: nd.broadcast_mod(a, b))
grad("broadcast_lowrank", ["broadcast_mul", "broadcast_add"], [rand(2, 3, 4), rand(4, seed=2)])(
    lambda a, b: nd.broadcast_mul(a, b) + nd.broadcast_add(a, b))
grad("scalar_ops", ["_plus_scalar", "_minus_scalar", "_rminus_scalar", "_mul_scalar",
                    "_div_scalar", "_rdiv_scalar", "_power_scalar", "_rpower_scalar",
                    "_maximum_scalar", "_minimum_scalar", "_hypot_scalar"], [pos(2, 3)])(
    lambda x: [x + 1, x - 2, 3 - x, x * 4, x / 5, 2 / x, x ** 3, 2 ** x,
               nd.maximum(x, 1.0), nd.minimum(x, 1.0), nd._internal._hypot_scalar(x, scalar=2.0)])
grad("scalar_mod", ["_mod_scalar", "_rmod_scalar"], [pos(2, 3) + 0.1])(
    lambda x: [x % 0.7, 3 % x])
for op in ["equal", "not_equal", "greater", "greater_equal", "lesser", "lesser_equal",
           "logical_and", "logical_or", "logical_xor"]:
    zero_grad("zero_" + op, ["_" + op, "broadcast_" + op, "_" + op + "_scalar"], [A, B])(
        lambda a, b, op=op: [getattr(nd._internal, "_" + op)(a, b) * a,
                             getattr(nd, "broadcast_" + op)(a, b) * b,
                             getattr(nd._internal, "_" + op + "_scalar")(a, scalar=0.5) * a])

# composition, reuse, views, in-place outside recording
grad("chain_reuse", ["elemwise_mul", "exp"], [rand(3)])(lambda x: nd.exp(x) * x * x)
grad("view_slice_reshape", ["slice", "Reshape"], [rand(4, 3)], numeric=False)(
    lambda x: (x[1:3] * 2).reshape((3, 2)) * x[0:2].reshape((3, 2)))

if __name__ == "__main__":
    args = sys.argv[1:]
    if args == ["--list"]:
        print("\n".join(cases))
        sys.exit(0)
    if args == ["--covers"]:
        print(json.dumps({k: v["covers"] for k, v in cases.items()}))
        sys.exit(0)
    with_numeric = "--numeric" in args or os.environ.get("MXRT_GRAD_NUMERIC") == "1"
    names = [a for a in args if not a.startswith("--")] or list(cases)
    print(json.dumps({n: run_case(n, with_numeric) for n in names}))
