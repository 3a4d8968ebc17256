"""Gradient cases: the machinery. grad_cases.py runs each case's forward under autograd.record() and its backward through the
unmodified mxnet package, and prints the gradients as JSON.

test_gradients.py runs this on libmxrt and on the wheel's libmxnet.so and checks, case by case:
the float32 gradients against MXNet's, and (on libmxrt) the float64 gradients against central
differences of the forward. A case lists the operators it covers (`covers`), so the operator
table's sweep (src/operator/table.rs) can tell a differentiable op without a gradient check.

Kinds of case:
- `grad(name, covers, inputs)(fn)`: fn(*arrays) -> output (or list of outputs); the head
  gradients are fixed pseudo-random arrays; every input gets a gradient. `train_mode=False`
  records, differentiates and evaluates the forward in predict mode (default: training mode,
  for the central differences too).
- `zero_grad(...)`: the same, where the gradient is zero on both libraries.
- `nondiff(name, covers)(fn)`: fn() -> outputs of a recorded op that MXNet cannot
  differentiate; the backward must fail on both libraries.
The cases live in grad_cases_*.py, one file per operator family.
"""
import json
import os
import sys

import numpy as np
import mxnet as mx

nd = mx.nd
ag = mx.autograd
cases = {}


def grad(name, covers, inputs, numeric=True, rtol=1e-3, atol=1e-4, dtypes=("float32",),
         train_mode=True):
    """`inputs`: numpy arrays (float64) or (array, needs_grad) pairs."""
    def register(fn):
        cases[name] = dict(kind="grad", covers=covers, inputs=inputs, fn=fn, numeric=numeric,
                           rtol=rtol, atol=atol, dtypes=dtypes, train_mode=train_mode)
        return fn
    return register


def zero_grad(name, covers, inputs, train_mode=True):
    def register(fn):
        cases[name] = dict(kind="grad", covers=covers, inputs=inputs, fn=fn, numeric=False,
                           rtol=0, atol=0, dtypes=("float32",), train_mode=train_mode)
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
    train = case.get("train_mode", True)
    with ag.record(train_mode=train):
        outs = as_list(case["fn"](*xs))
    ag.backward(outs, head_grads(outs, dtype), train_mode=train)
    return [x.grad.asnumpy().astype(np.float64).ravel().tolist() if need else None
            for x, need in zip(xs, needs)]


def forward64(case, vals):
    xs = [nd.array(v, dtype="float64" if v.dtype.kind == "f" else v.dtype) for v in vals]
    with ag.train_mode() if case.get("train_mode", True) else ag.predict_mode():
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
        lines = [ln for ln in str(e).splitlines() if ln.strip()]
        msg = next((ln for ln in reversed(lines) if "Error" in ln or "error" in ln), lines[-1] if lines else "")
        out = {"error": msg[:400]}
    return out


