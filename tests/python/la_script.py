"""Forward outputs and gradients of the linear-algebra operators (`mx.nd.linalg.*`: la_op), run
through the unmodified mxnet package; prints one JSON object for test_la.py to compare across
libraries and with numpy.

- `cases`: name -> {"out": [...], "grads": [[...] or None, ...]} or {"error": message}; every
  case records its op under autograd, backpropagates fixed pseudo-random head gradients and
  reads the inputs' gradients (float32 and float64, batched shapes, every flag).
- `refs`: name -> [ok, detail]: identities checked with numpy on this library's outputs
  (`L Lᵀ = A`, `Uᵀ diag(λ) U = A`, `A A⁻¹ = I`, numpy's determinants, ...).
- `errors`: name -> the message of a bad invoke (None if it did not fail).
- `symbolic`: outputs and gradients of a few ops through `mx.sym.linalg.*` and a bound executor.
- `shapes`: output shapes (visible outputs only, as the package sees them).
"""
import json

import numpy as np
import mxnet as mx

nd = mx.nd
ag = mx.autograd
la = nd.linalg
cases = {}
refs = {}
errors = {}


def rand(*shape, lo=-1.0, hi=1.0, seed=0):
    return np.random.RandomState(seed + 13 * len(shape) + sum(shape)).uniform(lo, hi, size=shape)


def spd(*batch, n=3, seed=0):
    """Well-conditioned symmetric positive-definite matrices."""
    a = rand(*batch, n, n, seed=seed)
    return np.matmul(a, np.swapaxes(a, -1, -2)) + n * np.eye(n)


def lower_tri(*batch, n=3, seed=0):
    """Lower triangular matrices with a diagonal away from zero."""
    a = np.tril(rand(*batch, n, n, seed=seed))
    d = np.arange(n)
    a[..., d, d] = 1.5 + np.abs(a[..., d, d])
    return a


def flat(a):
    return a.asnumpy().astype(np.float64).ravel().tolist()


def case(name, fn, inputs, needs=None, dtype="float32"):
    try:
        xs = [nd.array(v, dtype=dtype) for v in inputs]
        needs = needs if needs is not None else [True] * len(xs)
        for x, n in zip(xs, needs):
            if n:
                x.attach_grad()
        with ag.record():
            out = fn(*xs)
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        heads = [nd.array(np.random.RandomState(50 + i).uniform(0.5, 1.5, size=o.shape), dtype=o.dtype)
                 for i, o in enumerate(outs)]
        ag.backward(outs, heads)
        cases[name] = {"out": [flat(o) for o in outs],
                       "grads": [flat(x.grad) if n else None for x, n in zip(xs, needs)]}
    except Exception as e:  # noqa: BLE001 - the outcome is what is compared
        cases[name] = {"error": str(e).strip().splitlines()[0][:300]}


def error(name, fn):
    try:
        out = fn()
        for o in out if isinstance(out, (list, tuple)) else [out]:
            o.wait_to_read()
        errors[name] = None
    except Exception as e:  # noqa: BLE001
        errors[name] = str(e)[:600]


def ref(name, fn):
    try:
        ok, detail = fn()
        refs[name] = [bool(ok), str(detail)[:300]]
    except Exception as e:  # noqa: BLE001
        refs[name] = [False, str(e)[:300]]


for dt in ["float32", "float64"]:
    s = "_f64" if dt == "float64" else ""
    # --- gemm, gemm2 -----------------------------------------------------------------------
    A, B, C = rand(2, 3, 4, seed=1), rand(2, 4, 5, seed=2), rand(2, 3, 5, seed=3)
    case("gemm" + s, lambda a, b, c: la.gemm(a, b, c, alpha=1.5, beta=-0.5), [A, B, C], dtype=dt)
    case("gemm_ta_tb" + s, lambda a, b, c: la.gemm(a, b, c, transpose_a=True, transpose_b=True, alpha=0.7),
         [rand(2, 4, 3, seed=4), rand(2, 5, 4, seed=5), C], dtype=dt)
    case("gemm_axis0" + s, lambda a, b, c: la.gemm(a, b, c, axis=0, beta=2.0),
         [rand(3, 2, 4, seed=6), rand(4, 2, 5, seed=7), rand(3, 2, 5, seed=8)], dtype=dt)
    case("gemm2" + s, lambda a, b: la.gemm2(a, b, alpha=2.0), [A, B], dtype=dt)
    case("gemm2_4d" + s, lambda a, b: la.gemm2(a, b, transpose_b=True),
         [rand(2, 2, 3, 4, seed=9), rand(2, 2, 5, 4, seed=10)], dtype=dt)
    case("gemm2_ta" + s, lambda a, b: la.gemm2(a, b, transpose_a=True), [rand(4, 3, seed=11), rand(4, 2, seed=12)],
         dtype=dt)
    case("gemm2_axis1" + s, lambda a, b: la.gemm2(a, b, axis=1, transpose_a=True),
         [rand(2, 4, 3, 3, seed=13), rand(2, 4, 3, 5, seed=14)], dtype=dt)
    # --- Cholesky ---------------------------------------------------------------------------
    for lower in [True, False]:
        t = "_lower" if lower else "_upper"
        case("potrf" + t + s, lambda a, lw=lower: la.potrf(a, lower=lw), [spd(2, n=4, seed=15)], dtype=dt)
        L = lower_tri(2, n=4, seed=16)
        case("potri" + t + s, lambda b, lw=lower: la.potri(b, lower=lw), [L if lower else np.swapaxes(L, -1, -2)],
             dtype=dt)
        case("potrf_1x1" + t + s, lambda a, lw=lower: la.potrf(a, lower=lw), [rand(3, 2, 1, 1, lo=1, hi=10, seed=17)],
             dtype=dt)
        for tr in [False, True]:
            for right in [False, True]:
                k = f"{t}_t{int(tr)}_r{int(right)}{s}"
                Bm = rand(2, 4, 3, seed=18) if right else rand(2, 3, 4, seed=18)
                T = lower_tri(2, n=3, seed=19)
                T = T if lower else np.swapaxes(T, -1, -2)
                case("trmm" + k, lambda a, b, lw=lower, tr=tr, r=right: la.trmm(a, b, transpose=tr, rightside=r,
                                                                                  lower=lw, alpha=1.3),
                     [T, Bm], dtype=dt)
                case("trsm" + k, lambda a, b, lw=lower, tr=tr, r=right: la.trsm(a, b, transpose=tr, rightside=r,
                                                                                  lower=lw, alpha=-0.8),
                     [T, Bm], dtype=dt)
    case("trmm_full_input" + s, lambda a, b: la.trmm(a, b), [rand(3, 3, seed=20), rand(3, 2, seed=21)], dtype=dt)
    case("sumlogdiag" + s, lambda a: la.sumlogdiag(a), [spd(3, n=4, seed=22)], dtype=dt)
    case("sumlogdiag_2d" + s, lambda a: la.sumlogdiag(a), [spd(n=3, seed=23)], dtype=dt)
    case("sumlogdiag_4d" + s, lambda a: la.sumlogdiag(a), [rand(4, 4, 1, 1, lo=1, hi=10, seed=24)], dtype=dt)
    # --- syrk, diagonals, triangles ---------------------------------------------------------
    case("syrk" + s, lambda a: la.syrk(a, alpha=0.5), [rand(2, 3, 4, seed=25)], dtype=dt)
    case("syrk_t" + s, lambda a: la.syrk(a, transpose=True), [rand(2, 3, 4, seed=26)], dtype=dt)
    for off in [0, 1, -2]:
        case(f"extractdiag_{off}{s}", lambda a, o=off: la.extractdiag(a, offset=o), [rand(2, 4, 4, seed=27)],
             dtype=dt)
        case(f"makediag_{off}{s}", lambda a, o=off: la.makediag(a, offset=o), [rand(2, 3, seed=28)], dtype=dt)
        for lower in [True, False]:
            case(f"extracttrian_{off}_{lower}{s}", lambda a, o=off, lw=lower: la.extracttrian(a, offset=o, lower=lw),
                 [rand(2, 4, 4, seed=29)], dtype=dt)
            case(f"maketrian_{off}_{lower}{s}", lambda a, o=off, lw=lower: la.maketrian(a, offset=o, lower=lw),
                 [rand(2, 6, seed=30)], dtype=dt)
    case("extractdiag_2d" + s, lambda a: la.extractdiag(a), [rand(3, 3, seed=31)], dtype=dt)
    case("makediag_1d" + s, lambda a: la.makediag(a, offset=1), [rand(3, seed=32)], dtype=dt)
    # --- gelqf, syevd -----------------------------------------------------------------------
    case("gelqf" + s, lambda a: list(la.gelqf(a)), [rand(2, 3, 5, seed=33)], dtype=dt)
    case("gelqf_square" + s, lambda a: list(la.gelqf(a)), [rand(4, 4, seed=34)], dtype=dt)
    case("syevd" + s, lambda a: list(la.syevd(a)), [spd(2, n=4, seed=35)], dtype=dt)
    case("syevd_indefinite" + s, lambda a: list(la.syevd(a)), [rand(3, 3, seed=36) + rand(3, 3, seed=36).T],
         dtype=dt)
    # --- inverse, det, slogdet --------------------------------------------------------------
    case("inverse" + s, lambda a: la.inverse(a), [spd(2, n=3, seed=37) - 2 * np.eye(3)], dtype=dt)
    case("inverse_2d" + s, lambda a: la.inverse(a), [rand(4, 4, seed=38) + 3 * np.eye(4)], dtype=dt)
    case("det" + s, lambda a: la.det(a), [rand(2, 3, 3, seed=39) + np.eye(3)], dtype=dt)
    case("det_2d" + s, lambda a: la.det(a), [rand(4, 4, seed=40) + np.eye(4)], dtype=dt)
    case("slogdet" + s, lambda a: list(la.slogdet(a)), [rand(3, 3, 3, seed=41) - 2 * np.eye(3)], dtype=dt)
    case("slogdet_2d" + s, lambda a: list(la.slogdet(a)), [rand(4, 4, seed=42) + 2 * np.eye(4)], dtype=dt)

# MXNet's test_laop: 1x1 matrices in a 4-D batch
ONE = rand(4, 4, 1, 1, lo=1, hi=10, seed=45)
for lower in [True, False]:
    case(f"laop_1x1_potri_{lower}", lambda a, lw=lower: la.potri(a, lower=lw), [ONE], dtype="float64")
    case(f"laop_1x1_trsm_{lower}", lambda a, b, lw=lower: la.trsm(a, b, alpha=7.0, lower=lw), [ONE * 7, ONE],
         dtype="float64")
    case(f"laop_1x1_trmm_{lower}", lambda a, b, lw=lower: la.trmm(a, b, alpha=7.0, transpose=True, rightside=True,
                                                                  lower=lw), [1 / (ONE * 7), ONE], dtype="float64")
# singular input to det: the gradient is zero
case("det_singular", lambda a: la.det(a), [np.array([[1.0, 2.0], [2.0, 4.0]])], dtype="float64")
case("slogdet_singular", lambda a: list(la.slogdet(a)), [np.array([[[1.0, 2.0], [2.0, 4.0]], [[2.0, 1.0], [1.0, 3.0]]])],
     dtype="float64")
# a chain: gelqf's factors multiplied back, syevd's recomposition (as MXNet's test_laop_2 does)
case("gelqf_recompose", lambda a: (lambda q, l: [la.syrk(q), la.trmm(l, q)])(*la.gelqf(a)),
     [rand(3, 5, seed=43)], dtype="float64")
case("syevd_recompose", lambda a: (lambda u, lam: la.gemm2(u, nd.broadcast_mul(lam.reshape((-2, 1)), u),
                                                           transpose_a=True))(*la.syevd(a)),
     [spd(n=4, seed=44)], dtype="float64")


# --- numpy identities on this library's outputs ----------------------------------------------
def close(x, y, tol=1e-8):
    return np.allclose(x, y, rtol=tol, atol=tol), float(np.max(np.abs(np.asarray(x) - np.asarray(y))))


def arr(v):
    return nd.array(v, dtype="float64")


A4 = spd(2, n=4, seed=50)
ref("potrf_lower", lambda: close((lambda l: l @ np.swapaxes(l, -1, -2))(la.potrf(arr(A4)).asnumpy()), A4))
ref("potrf_upper", lambda: close((lambda u: np.swapaxes(u, -1, -2) @ u)(la.potrf(arr(A4), lower=False).asnumpy()),
                                 A4))
ref("potrf_numpy", lambda: close(la.potrf(arr(A4)).asnumpy(), np.linalg.cholesky(A4)))
ref("potri", lambda: close(la.potri(la.potrf(arr(A4))).asnumpy(), np.linalg.inv(A4)))
ref("inverse", lambda: close(la.inverse(arr(A4)).asnumpy(), np.linalg.inv(A4)))
G = rand(3, 4, 4, seed=51)
ref("det", lambda: close(la.det(arr(G)).asnumpy(), np.linalg.det(G)))
ref("slogdet", lambda: close(np.stack([o.asnumpy() for o in la.slogdet(arr(G))]), np.stack(np.linalg.slogdet(G))))
ref("syevd", lambda: (lambda u, w: close(np.swapaxes(u, -1, -2) @ (w[..., :, None] * u), A4))(
    *[o.asnumpy() for o in la.syevd(arr(A4))]))
ref("syevd_values", lambda: close(la.syevd(arr(A4))[1].asnumpy(), np.linalg.eigvalsh(A4)))
ref("syevd_signs", lambda: (lambda u: (bool(np.all(u[np.arange(4), np.argmax(np.abs(u), axis=1)] > 0)), u))(
    la.syevd(arr(A4[0]))[0].asnumpy()))
W = rand(2, 3, 6, seed=52)
ref("gelqf", lambda: (lambda q, l: close(l @ q, W))(*[o.asnumpy() for o in la.gelqf(arr(W))]))
ref("gelqf_orthonormal", lambda: (lambda q: close(q @ np.swapaxes(q, -1, -2), np.broadcast_to(np.eye(3), (2, 3, 3))))(
    la.gelqf(arr(W))[0].asnumpy()))
ref("gemm", lambda: close(la.gemm(arr(G), arr(G), arr(G), alpha=2.0, beta=0.5).asnumpy(), 2 * G @ G + 0.5 * G))
T = lower_tri(2, n=4, seed=53)
ref("trsm", lambda: close(la.trsm(arr(T), arr(A4), alpha=2.0).asnumpy(), np.linalg.solve(T, 2 * A4)))
ref("trsm_right_t", lambda: close(la.trsm(arr(T), arr(A4), rightside=True, transpose=True).asnumpy(),
                                  A4 @ np.linalg.inv(np.swapaxes(T, -1, -2))))
ref("maketrian_inverts_extracttrian",
    lambda: close(la.maketrian(la.extracttrian(arr(T))).asnumpy(), T))

# --- bad invokes ----------------------------------------------------------------------------
f = lambda *s: nd.array(rand(*s, seed=60))  # noqa: E731
error("gemm2_shapes", lambda: la.gemm2(f(2, 3), f(4, 5)))
error("gemm_c_shape", lambda: la.gemm(f(2, 3), f(3, 4), f(2, 5)))
error("gemm2_ndim", lambda: la.gemm2(f(2, 3, 4), f(4, 5)))
error("gemm2_axis", lambda: la.gemm2(f(2, 3, 4), f(2, 4, 5), axis=2))
error("potrf_not_square", lambda: la.potrf(f(3, 4)))
error("potrf_not_pd", lambda: la.potrf(nd.array(-np.eye(3))))
error("potrf_1d", lambda: la.potrf(f(3)))
error("trmm_shapes", lambda: la.trmm(f(3, 3), f(4, 2)))
error("trsm_not_square", lambda: la.trsm(f(3, 2), f(2, 2)))
error("syevd_not_square", lambda: la.syevd(f(2, 3)))
error("gelqf_tall", lambda: la.gelqf(f(4, 3)))
error("inverse_not_square", lambda: la.inverse(f(2, 3)))
error("inverse_singular", lambda: la.inverse(nd.array([[1.0, 2.0], [2.0, 4.0]])))
error("det_not_square", lambda: la.det(f(2, 3)))
error("extractdiag_offset", lambda: la.extractdiag(f(3, 3), offset=3))
error("maketrian_length", lambda: la.maketrian(f(2, 5)))
error("gemm2_int", lambda: la.gemm2(nd.ones((2, 2), dtype="int32"), nd.ones((2, 2), dtype="int32")))


# --- through symbols and a bound executor -----------------------------------------------------
def symbolic():
    out = {}
    a, b = mx.sym.Variable("a"), mx.sym.Variable("b")
    syms = {
        "gemm2": (mx.sym.linalg.gemm2(a, b, transpose_b=True, alpha=0.5), {"a": rand(2, 3, 4, seed=70),
                                                                           "b": rand(2, 5, 4, seed=71)}),
        "potrf": (mx.sym.linalg.potrf(a), {"a": spd(2, n=3, seed=72)}),
        "trsm": (mx.sym.linalg.trsm(a, b, rightside=True), {"a": lower_tri(n=3, seed=73), "b": rand(2, 3, seed=74)}),
        "syevd": (mx.sym.Group(list(mx.sym.linalg.syevd(a))), {"a": spd(n=3, seed=75)}),
        # MXNet's test_laop_2: Q Qᵀ and L Q from gelqf's outputs
        "gelqf_combined": ((lambda q, l: mx.sym.Group([mx.sym.linalg.syrk(q), mx.sym.linalg.trmm(l, q)]))(
            *mx.sym.linalg.gelqf(a)), {"a": rand(3, 5, seed=77)}),
        # MXNet's test_laop masks triangles with one_hot(int32 indices, dtype=float64) products
        "potri_one_hot_mask_f64": (mx.sym.linalg.potri(mx.sym.broadcast_mul(a, mx.sym.one_hot(
            mx.sym.arange(start=0, stop=3, step=1, dtype=np.int32), depth=3, dtype=np.float64))),
            {"a": rand(3, 3, lo=1, hi=2, seed=78)}),
        "slogdet": (mx.sym.linalg.slogdet(a)[1], {"a": rand(2, 3, 3, seed=76) + 2 * np.eye(3)}),
    }
    for name, (sym, vals) in syms.items():
        try:
            types = {k: "float64" for k in vals} if name.endswith("_f64") else None
            exe = sym.simple_bind(mx.cpu(), type_dict=types, **{k: v.shape for k, v in vals.items()})
            for k, v in vals.items():
                exe.arg_dict[k][:] = v
            outs = exe.forward(is_train=True)
            exe.backward([nd.array(np.random.RandomState(80 + i).uniform(0.5, 1.5, size=o.shape), dtype=o.dtype)
                          for i, o in enumerate(outs)])
            out[name] = {"outputs": sym.list_outputs(), "out": [flat(o) for o in outs],
                         "grads": {k: flat(exe.grad_dict[k]) for k in sorted(vals)},
                         "shapes": [list(s) for s in sym.infer_shape(**{k: v.shape for k, v in vals.items()})[1]]}
        except Exception as e:  # noqa: BLE001
            out[name] = {"error": str(e).strip().splitlines()[0][:300]}
    return out


def shapes():
    x = nd.array(rand(2, 3, 3, seed=90) + 2 * np.eye(3))
    return {
        "det": [list(o.shape) for o in [la.det(x)]],
        "det_2d": list(la.det(x[0]).shape),
        "slogdet": [list(o.shape) for o in la.slogdet(x)],
        "sumlogdiag_2d": list(la.sumlogdiag(x[0]).shape),
        "gelqf": [list(o.shape) for o in la.gelqf(nd.array(rand(2, 3, 5, seed=91)))],
        "syevd": [list(o.shape) for o in la.syevd(x)],
        "extracttrian": list(la.extracttrian(x, offset=-1).shape),
        "maketrian": list(la.maketrian(nd.ones((2, 6)), offset=1).shape),
        "makediag": list(la.makediag(nd.ones((2, 3)), offset=-1).shape),
        "syrk_t": list(la.syrk(nd.ones((2, 3, 4)), transpose=True).shape),
        "dtype_f64": str(la.inverse(x.astype("float64")).dtype.__name__),
    }


print(json.dumps({"cases": cases, "refs": refs, "errors": errors, "symbolic": symbolic(), "shapes": shapes()}))
