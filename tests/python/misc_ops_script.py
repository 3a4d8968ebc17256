"""Forward outputs and gradients of the small tensor and contrib operators (khatri_rao, cumsum,
ravel_multi_index / unravel_index, scatter_nd, reset_arrays, all_finite, multi_all_finite,
amp_multicast, IdentityAttachKLSparseReg, AdaptiveAvgPooling2D, im2col / col2im) and the random
densities (random_pdf_*), run through the unmodified mxnet package; prints one JSON object for
test_misc_ops.py to compare across libraries.

- `cases`: name -> {"out": [...], "dtypes": [...], "grads": [[...] or None, ...]} or
  {"error": message}, in float32 and float64.
- `errors`: name -> the message of an invoke with a bad parameter or input (None if it did not
  fail).
- `inplace`: results of the ops that write their inputs or a given output (reset_arrays,
  all_finite with init_output=False, IdentityAttachKLSparseReg's moving average).
"""
import json

import numpy as np
import mxnet as mx

nd = mx.nd
ag = mx.autograd
cases = {}
errors = {}
inplace = {}
amp_types = {}


def rand(*shape, lo=-1.0, hi=1.0, seed=0):
    return np.random.RandomState(seed + 13 * len(shape) + sum(shape)).uniform(lo, hi, size=shape)


def flat(a):
    return a.asnumpy().astype(np.float64).ravel().tolist()


def as_list(r):
    return list(r) if isinstance(r, (list, tuple)) else [r]


def case(name, fn, inputs, needs=None, dtypes=("float32", "float64")):
    """`inputs`: numpy arrays (float ones take the case's dtype); `needs`: which get a gradient
    (default every float one; all False: the forward alone)."""
    for dtype in dtypes:
        key = f"{name}/{dtype}"
        try:
            xs = [nd.array(v, dtype=dtype if v.dtype.kind == "f" else v.dtype) for v in inputs]
            want = needs if needs is not None else [v.dtype.kind == "f" for v in inputs]
            if not any(want):
                outs = as_list(fn(*xs))
                cases[key] = {"out": [flat(o) for o in outs], "dtypes": [str(o.dtype.__name__) for o in outs],
                              "grads": []}
                continue
            for x, n in zip(xs, want):
                if n:
                    x.attach_grad()
            with ag.record():
                outs = as_list(fn(*xs))
            heads = [nd.array(np.random.RandomState(50 + i).uniform(0.5, 1.5, size=o.shape), dtype=o.dtype)
                     for i, o in enumerate(outs)]
            ag.backward(outs, heads)
            cases[key] = {"out": [flat(o) for o in outs], "dtypes": [str(o.dtype.__name__) for o in outs],
                          "grads": [flat(x.grad) if n else None for x, n in zip(xs, want)]}
        except Exception as e:  # noqa: BLE001 - the outcome is what is compared
            cases[key] = {"error": str(e).strip().splitlines()[0][:300]}


def error(name, fn):
    try:
        for o in as_list(fn()):
            o.wait_to_read()
        errors[name] = None
    except Exception as e:  # noqa: BLE001
        errors[name] = str(e)[:800]


# --- khatri_rao --------------------------------------------------------------------------------
case("khatri_rao_2", lambda a, b: nd.khatri_rao(a, b), [rand(2, 3, seed=1), rand(5, 3, seed=2)], needs=[False, False])
case("khatri_rao_3", lambda a, b, c: nd.khatri_rao(a, b, c),
     [rand(3, 4, seed=3), rand(1, 4, seed=4), rand(2, 4, seed=5)], needs=[False] * 3)
case("khatri_rao_1", lambda a: nd.khatri_rao(a), [rand(3, 2, seed=6)], needs=[False])
error("khatri_rao_columns", lambda: nd.khatri_rao(nd.ones((2, 3)), nd.ones((2, 4))))
error("khatri_rao_int", lambda: nd.khatri_rao(nd.ones((2, 3), dtype="int32"), nd.ones((2, 3), dtype="int32")))

# --- cumsum ------------------------------------------------------------------------------------
X = rand(3, 4, 5, seed=7)
for axis in [None, 0, 1, 2]:
    case(f"cumsum_axis{axis}", lambda x, a=axis: nd.cumsum(x, axis=a), [X])
case("cumsum_1d", lambda x: nd.cumsum(x), [rand(7, seed=8)])
case("cumsum_dtype_f64", lambda x: nd.cumsum(x, axis=1, dtype="float64"), [rand(2, 3, seed=9)])
case("cumsum_int8", lambda x: nd.cumsum(x, axis=0), [np.array([[100, 50], [100, -3], [7, 9]], dtype=np.int8)],
     dtypes=("float32",))
case("cumsum_int32_to_f32", lambda x: nd.cumsum(x, dtype="float32"), [np.arange(6, dtype=np.int32).reshape(2, 3)],
     dtypes=("float32",))
case("cumsum_bool", lambda x: nd.cumsum(x.astype("bool")), [np.array([1, 0, 1, 1], dtype=np.int32)],
     dtypes=("float32",))
error("cumsum_axis", lambda: nd.cumsum(nd.ones((2, 3)), axis=2))
error("cumsum_dtype", lambda: nd.cumsum(nd.ones((2, 3)), dtype="uint8"))

# --- ravel_multi_index / unravel_index -------------------------------------------------------------
IDX = np.array([[3, 6, 6, 0], [4, 5, 1, 2]], dtype=np.float32)
case("ravel", lambda i: nd.ravel_multi_index(i, shape=(7, 6)), [IDX], needs=[False])
case("ravel_neg_first", lambda i: nd.ravel_multi_index(i, shape=(-1, 6)), [IDX], needs=[False])
case("ravel_3d", lambda i: nd.ravel_multi_index(i, shape=(4, 5, 3)),
     [np.array([[1, 3, 0], [4, 0, 2], [2, 1, 0]], dtype=np.float32)], needs=[False])
case("ravel_int64", lambda i: nd.ravel_multi_index(i, shape=(7, 6)), [IDX.astype(np.int64)], needs=[False],
     dtypes=("float32",))
case("unravel", lambda i: nd.unravel_index(i, shape=(7, 6)), [np.array([22, 41, 37, 0], dtype=np.float32)],
     needs=[False])
case("unravel_3d", lambda i: nd.unravel_index(i, shape=(4, 5, 3)), [np.array([59, 17, 3], dtype=np.float32)],
     needs=[False])
case("unravel_neg_first", lambda i: nd.unravel_index(i, shape=(-1, 6)), [np.array([22, 41, 37], dtype=np.float32)],
     needs=[False])
case("unravel_int32", lambda i: nd.unravel_index(i, shape=(5, 4)), [np.array([19, 4, 7], dtype=np.int32)],
     needs=[False], dtypes=("float32",))
case("ravel_zero_grad", lambda i: nd.ravel_multi_index(i, shape=(7, 6)), [IDX])
error("ravel_shape_empty", lambda: nd.ravel_multi_index(nd.array(IDX)))
error("ravel_rows", lambda: nd.ravel_multi_index(nd.array(IDX), shape=(7, 6, 2)))
error("unravel_shape_empty", lambda: nd.unravel_index(nd.array([1, 2])))

# --- scatter_nd ------------------------------------------------------------------------------------
case("scatter_nd_1", lambda d, i: nd.scatter_nd(d, i, shape=(2, 2)),
     [np.array([2.0, 3.0, 0.5]), np.array([[1, 1, 0], [0, 1, 0]], dtype=np.int32)], needs=[True, False])
case("scatter_nd_slices", lambda d, i: nd.scatter_nd(d, i, shape=(2, 2, 2, 2)),
     [rand(2, 2, 2, seed=10), np.array([[0, 1], [1, 1]], dtype=np.float32)], needs=[True, False])
case("scatter_nd_partial", lambda d, i: nd.scatter_nd(d, i, shape=(4, 3)),
     [rand(2, 3, seed=11), np.array([[3, 1]], dtype=np.int64)], needs=[True, False])
case("scatter_nd_2d_index", lambda d, i: nd.scatter_nd(d, i, shape=(3, 5)),
     [rand(2, 2, seed=12), np.array([[[0, 2], [1, 0]], [[4, 0], [3, 2]]], dtype=np.int32)], needs=[True, False])
case("backward_gather_nd_repeats", lambda d, i: nd._internal._backward_gather_nd(d, i, shape=(2, 2)),
     [np.array([2.0, 3.0, 0.5]), np.array([[1, 1, 0], [1, 1, 0]], dtype=np.int32)], needs=[True, False])
case("backward_gather_nd_slices", lambda d, i: nd._internal._backward_gather_nd(d, i, shape=(3, 4)),
     [rand(4, 4, seed=13), np.array([[2, 0, 2, 1]], dtype=np.int64)], needs=[True, False])
error("scatter_nd_shape", lambda: nd.scatter_nd(nd.ones((3,)), nd.array([[0, 1]]), shape=(2, 2)))
error("scatter_nd_index_ndim", lambda: nd.scatter_nd(nd.ones((2,)), nd.array([0, 1]), shape=(2,)))
error("scatter_nd_too_many", lambda: nd.scatter_nd(nd.ones((2,)), nd.array([[0, 1], [0, 1], [0, 1]]), shape=(2, 2)))

# --- all_finite, multi_all_finite -----------------------------------------------------------------
FIN = np.array([1.0, -2.0, 3.5])
for nm, v in [("finite", FIN), ("inf", np.array([1.0, np.inf, 2.0])), ("nan", np.array([np.nan, 0.0])),
              ("big", np.array([1e300, 1.0]))]:
    case(f"all_finite_{nm}", lambda x: nd.all_finite(x), [v], needs=[False])
    case(f"multi_all_finite_{nm}", lambda a, b: nd.multi_all_finite(a, b, num_arrays=2),
         [FIN, v], needs=[False, False])
case("multi_all_finite_3", lambda a, b, c: nd.multi_all_finite(a, b, c, num_arrays=3),
     [FIN, rand(2, 2, seed=13), np.array([-np.inf])], needs=[False] * 3)
error("all_finite_int", lambda: nd.all_finite(nd.ones((2,), dtype="int32")))

# --- amp_multicast ------------------------------------------------------------------------------
# (MXNet's CPU kernel, through MKL-DNN, runs only float32, bfloat16 and integer arrays; the other
# dtypes' results are checked against MXNet's type inference in `amp_types`)
A, B = rand(2, 3, seed=14), rand(4, seed=15)
for narrow in [False, True]:
    case(f"amp_multicast_f32_narrow{narrow}", lambda a, b, n=narrow: nd.amp_multicast(a, b, num_outputs=2, cast_narrow=n),
         [A, B], dtypes=("float32",))
    case(f"amp_multicast_int_narrow{narrow}",
         lambda a, b, n=narrow: nd.amp_multicast(a, b, num_outputs=2, cast_narrow=n),
         [A, np.array([3, -1, 7], dtype=np.int32)], dtypes=("float32",))
case("amp_multicast_3", lambda a, b, c: nd.amp_multicast(a, b, c, num_outputs=3),
     [A, B, rand(3, seed=16)], dtypes=("float32",))
error("amp_multicast_count", lambda: nd.amp_multicast(nd.ones((2,)), nd.ones((2,)), num_outputs=3))
amp_types = {}
for narrow in [False, True]:
    for combo in [("float16", "float32"), ("float32", "float16"), ("float16", "float16"), ("float64", "float16"),
                  ("float16", "float64"), ("int32", "float16"), ("float64", "float32", "float16"),
                  ("float16", "int8", "float64")]:
        key = f"{'_'.join(combo)}_narrow{narrow}"
        syms = [mx.sym.var(f"v{i}") for i in range(len(combo))]
        s = mx.sym.amp_multicast(*syms, num_outputs=len(combo), cast_narrow=narrow)
        _, otypes, _ = s.infer_type(**{f"v{i}": d for i, d in enumerate(combo)})
        entry = {"inferred": [np.dtype(t).name for t in otypes]}
        try:
            xs = [nd.array(rand(3, seed=40 + i)).astype(d) for i, d in enumerate(combo)]
            outs = nd.amp_multicast(*xs, num_outputs=len(combo), cast_narrow=narrow)
            entry["run"] = [np.dtype(o.dtype).name for o in outs]
            entry["values"] = [flat(o) for o in outs]
            entry["want"] = [flat(x.astype(np.dtype(o.dtype).name)) for x, o in zip(xs, outs)]
        except Exception as e:  # noqa: BLE001 - MXNet's CPU kernel refuses these dtypes
            entry["run"] = str(e).strip().splitlines()[-1][:200]
        amp_types[key] = entry

# --- AdaptiveAvgPooling2D --------------------------------------------------------------------------
X4 = rand(2, 3, 7, 5, seed=17)
for size in [None, 1, 3, (2, 4), (7, 5), (4, 3), (9, 6)]:
    case(f"adaptive_avg_pool_{size}",
         (lambda x: nd.contrib.AdaptiveAvgPooling2D(x)) if size is None else
         (lambda x, s=size: nd.contrib.AdaptiveAvgPooling2D(x, output_size=s)), [X4])
case("adaptive_avg_pool_odd", lambda x: nd.contrib.AdaptiveAvgPooling2D(x, output_size=(2, 3)), [rand(1, 2, 5, 11, seed=18)])

# --- im2col / col2im ------------------------------------------------------------------------------
IM = rand(2, 3, 6, 5, seed=19)
for kw in [dict(kernel=(2, 2)), dict(kernel=(3, 2), stride=(2, 1)), dict(kernel=(3, 3), pad=(1, 1)),
           dict(kernel=(2, 3), dilate=(2, 1), pad=(1, 2), stride=(1, 2)), dict(kernel=(1, 1))]:
    tag = "_".join(f"{k}{''.join(map(str, v))}" for k, v in kw.items())
    case(f"im2col_{tag}", lambda x, kw=kw: nd.im2col(x, **kw), [IM])
    col = nd.im2col(nd.array(IM), **kw).asnumpy().astype(np.float64)
    case(f"col2im_{tag}", lambda c, kw=kw: nd.col2im(c, output_size=(6, 5), **kw), [rand(*col.shape, seed=20)])
error("im2col_kernel_big", lambda: nd.im2col(nd.ones((1, 1, 3, 3)), kernel=(4, 4)))
error("im2col_stride_dims", lambda: nd.im2col(nd.ones((1, 1, 3, 3)), kernel=(2, 2), stride=(1, 1, 1)))
error("col2im_size", lambda: nd.col2im(nd.ones((1, 4, 5)), output_size=(3, 3), kernel=(2, 2)))
error("col2im_output_size_dims", lambda: nd.col2im(nd.ones((1, 4, 4)), output_size=(3,), kernel=(2, 2)))

# --- BatchNorm_v1 -----------------------------------------------------------------------------------
def bn_v1(**kw):
    """BatchNorm_v1 as a CachedOp: its nd function does not take the moving statistics."""
    v = mx.sym.var
    return nd.CachedOp(mx.sym.BatchNorm_v1(v("data"), v("gamma"), v("beta"), name="bn", **kw))


for shape in [(4, 3), (2, 3, 4, 5)]:
    c = shape[1]
    for kw in [{}, dict(fix_gamma=False), dict(fix_gamma=False, eps=1e-2, output_mean_var=True),
               dict(use_global_stats=True, fix_gamma=False)]:
        tag = "_".join(f"{k}{v}" for k, v in kw.items()) or "default"
        bn_in = [rand(*shape, seed=40), rand(c, lo=0.5, hi=1.5, seed=41), rand(c, seed=42), rand(c, seed=43),
                 rand(c, lo=0.5, hi=2.0, seed=44)]
        case(f"batchnorm_v1_{len(shape)}d_{tag}", lambda x, g, b, m, v, kw=kw: bn_v1(**kw)(x, g, b, m, v),
             bn_in, needs=[True, True, True, False, False], dtypes=("float32",))


def bn_v1_state():
    x = nd.array(rand(6, 2, 3, 3, seed=45))
    g, b = nd.array(rand(2, lo=0.5, hi=1.5, seed=46)), nd.array(rand(2, seed=47))
    m, v = nd.zeros((2,)), nd.ones((2,))
    for p in (x, g, b):
        p.attach_grad()
    with ag.record():
        y = bn_v1(fix_gamma=False, momentum=0.7)(x, g, b, m, v)
    y.backward(nd.array(rand(6, 2, 3, 3, seed=48)))
    with ag.predict_mode():
        z = bn_v1(fix_gamma=False, output_mean_var=True)(x, g, b, m, v)
    return {"moving_mean": flat(m), "moving_var": flat(v), "predict": [flat(o) for o in z]}


try:
    inplace["batchnorm_v1"] = bn_v1_state()
except Exception as e:  # noqa: BLE001 - the outcome is what is compared
    inplace["batchnorm_v1"] = {"error": str(e).strip().splitlines()[-1][:300]}
error("batchnorm_v1_3d", lambda: bn_v1()(nd.ones((2, 3, 4)), nd.ones((3,)), nd.ones((3,)), nd.ones((3,)),
                                        nd.ones((3,))))

# --- the densities -----------------------------------------------------------------------------------
S23 = rand(2, 3, lo=0.2, hi=2.5, seed=21)
S234 = rand(2, 3, 4, lo=0.2, hi=2.5, seed=22)
P1 = rand(2, lo=0.5, hi=2.0, seed=23)
P2 = rand(2, lo=2.6, hi=3.5, seed=24)
P23a, P23b = rand(2, 3, lo=0.5, hi=2.0, seed=25), rand(2, 3, lo=0.6, hi=1.5, seed=26)
COUNTS = np.array([[0.0, 3.0, 1.0], [5.0, 2.0, 0.0]])
PROB = rand(2, lo=0.2, hi=0.8, seed=27)
for is_log in [False, True]:
    t = "log" if is_log else "pdf"
    case(f"pdf_uniform_{t}", lambda s, a, b, l=is_log: nd.random_pdf_uniform(s, a, b, is_log=l), [S23, P1 - 0.5, P2])
    case(f"pdf_normal_{t}", lambda s, a, b, l=is_log: nd.random_pdf_normal(s, a, b, is_log=l), [S23, P1, P1 + 0.2])
    case(f"pdf_normal_3d_{t}", lambda s, a, b, l=is_log: nd.random_pdf_normal(s, a, b, is_log=l), [S234, P23a, P23b])
    case(f"pdf_normal_same_{t}", lambda s, a, b, l=is_log: nd.random_pdf_normal(s, a, b, is_log=l), [S23, P23a, P23b])
    case(f"pdf_gamma_{t}", lambda s, a, b, l=is_log: nd.random_pdf_gamma(s, a, b, is_log=l), [S23, P1 + 0.5, P1])
    case(f"pdf_exponential_{t}", lambda s, a, l=is_log: nd.random_pdf_exponential(s, a, is_log=l), [S234, P23a])
    case(f"pdf_poisson_{t}", lambda s, a, l=is_log: nd.random_pdf_poisson(s, a, is_log=l), [COUNTS, P1 * 2],
         needs=[False, True])
    case(f"pdf_negative_binomial_{t}", lambda s, a, b, l=is_log: nd.random_pdf_negative_binomial(s, a, b, is_log=l),
         [COUNTS, P1 * 3, PROB], needs=[False, True, True])
    case(f"pdf_generalized_negative_binomial_{t}",
         lambda s, a, b, l=is_log: nd.random_pdf_generalized_negative_binomial(s, a, b, is_log=l),
         [COUNTS, P1 * 2, PROB], needs=[False, True, True])
    D = rand(2, 3, 4, lo=0.1, hi=1.0, seed=28)
    D = D / D.sum(axis=-1, keepdims=True)
    case(f"pdf_dirichlet_{t}", lambda s, a, l=is_log: nd.random_pdf_dirichlet(s, a, is_log=l),
         [D, rand(2, 4, lo=0.5, hi=3.0, seed=29)])
    case(f"pdf_dirichlet_single_{t}", lambda s, a, l=is_log: nd.random_pdf_dirichlet(s, a, is_log=l),
         [D[0, 0], rand(4, lo=0.5, hi=3.0, seed=30)])
case("pdf_normal_internal_name", lambda s, a, b: nd._internal._random_pdf_normal(s, a, b), [S23, P1, P1 + 0.2])
error("pdf_param_shape", lambda: nd.random_pdf_normal(nd.ones((2, 3)), nd.ones((3,)), nd.ones((3,))))
error("pdf_param_rank", lambda: nd.random_pdf_normal(nd.ones((2,)), nd.ones((2, 3)), nd.ones((2, 3))))
error("pdf_param_mismatch", lambda: nd.random_pdf_normal(nd.ones((2, 3)), nd.ones((2,)), nd.ones((3,))))
error("pdf_int", lambda: nd.random_pdf_exponential(nd.ones((2, 3), dtype="int32"), nd.ones((2,), dtype="int32")))

# --- ops that write their inputs or a given output ------------------------------------------------
a, b = nd.array(rand(2, 3, seed=31)), nd.array(rand(4, seed=32), dtype="float64")
r = nd.reset_arrays(a, b, num_arrays=2)
inplace["reset_arrays"] = {"returned": len(as_list(r)) if r is not None else None, "a": flat(a), "b": flat(b)}
out = nd.ones((1,))
nd.all_finite(nd.array([1.0, 2.0]), init_output=False, out=out)
first = flat(out)
nd.all_finite(nd.array([np.inf]), init_output=False, out=out)
second = flat(out)
nd.all_finite(nd.array([1.0]), init_output=False, out=out)
inplace["all_finite_no_init"] = [first, second, flat(out)]
out = nd.ones((1,))
nd.multi_all_finite(nd.array([1.0]), nd.array([2.0]), num_arrays=2, init_output=False, out=out)
inplace["multi_all_finite_no_init"] = flat(out)

# IdentityAttachKLSparseReg through a bound symbol: identity forward, penalised backward, the
# moving average updated by each backward
data = mx.sym.var("data")
net = mx.sym.IdentityAttachKLSparseReg(data, sparseness_target=0.2, penalty=0.01, momentum=0.8, name="kl")
xv = rand(4, 3, lo=0.05, hi=0.95, seed=33)
ex = net.bind(mx.cpu(), {"data": nd.array(xv)}, args_grad={"data": nd.zeros((4, 3))},
              aux_states={"kl_moving_avg": nd.array([0.3, 0.5, 0.7])})
ex.forward(is_train=True)
y = flat(ex.outputs[0])
ex.backward([nd.array(rand(4, 3, seed=34))])
g1, m1 = flat(ex.grad_arrays[0]), flat(ex.aux_arrays[0])
ex.forward(is_train=True)
ex.backward([nd.array(rand(4, 3, seed=35))])
inplace["kl_sparse_reg"] = {"out": y, "grad1": g1, "avg1": m1, "grad2": flat(ex.grad_arrays[0]),
                            "avg2": flat(ex.aux_arrays[0]),
                            "aux_names": net.list_auxiliary_states(), "args": net.list_arguments()}

# a negative axis (MXNet 1.9.1 refuses it with an internal index error): numpy's result
try:
    inplace["cumsum_negative_axis"] = {"got": flat(nd.cumsum(nd.array(X), axis=-1)),
                                       "numpy": np.cumsum(X.astype(np.float32), axis=-1).astype(np.float64).ravel().tolist()}
except Exception as e:  # noqa: BLE001
    inplace["cumsum_negative_axis"] = {"error": str(e).strip().splitlines()[-1][:200]}

print(json.dumps({"cases": cases, "errors": errors, "inplace": inplace, "amp_types": amp_types}))
