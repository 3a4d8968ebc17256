"""Runs MXNet operators through the unmodified mxnet package and prints each result as JSON.

test_operators.py runs this on libmxrt and on the wheel's libmxnet.so and compares the outcomes
case by case: values (with a float tolerance), shapes and dtypes, or that both fail.
`--list` prints the case names; names as arguments run just those cases.
"""
import json
import sys

import numpy as np
import mxnet as mx

nd = mx.nd
cases = {}


def case(name):
    def register(fn):
        cases[name] = fn
        return fn
    return register


def arr(values, dtype="float32"):
    return nd.array(np.array(values), dtype=dtype)


A = lambda: arr([[1.5, -2.0, 3.0], [4.0, 0.5, -6.0]])
B = lambda: arr([[0.5, 2.0, -1.0], [3.0, -4.0, 2.5]])
ROW = lambda: arr([10.0, 20.0, 30.0])
POS = lambda: arr([[0.25, 0.5, 0.75], [1.0, 2.0, 4.0]])

# creation
case("zeros")(lambda: nd.zeros((2, 3)))
case("ones_int32")(lambda: nd.ones((3,), dtype="int32"))
case("full_f64")(lambda: nd.full((2, 2), 7.5, dtype="float64"))
case("arange")(lambda: nd.arange(1, 10, 2.5))
case("arange_repeat")(lambda: nd.arange(0, 3, repeat=2, dtype="int64"))
case("eye")(lambda: nd.eye(3, 4, k=1))
case("linspace")(lambda: nd.linspace(0, 1, 5, endpoint=False))
case("linspace_endpoints")(lambda: nd.concat(nd.linspace(3.5, 50.25, 7), nd.linspace(3.5, 50.25, 1),
                                               nd.linspace(2, 9, 4, dtype="int32").astype("float32"), dim=0))
case("zeros_like")(lambda: nd.zeros_like(A()))
case("ones_like")(lambda: nd.ones_like(A()))
case("empty_shape")(lambda: nd.empty((2, 0)).shape)

# elementwise unary (positive inputs where the domain needs them)
for op in ["abs", "sign", "round", "rint", "ceil", "floor", "trunc", "fix", "square", "negative",
           "exp", "expm1", "sin", "cos", "tan", "arctan", "sinh", "cosh", "tanh", "arcsinh",
           "degrees", "radians", "relu", "sigmoid", "softsign", "erf", "cbrt"]:
    case("unary_" + op)(lambda op=op: getattr(nd, op)(A()))
for op in ["sqrt", "rsqrt", "rcbrt", "log", "log10", "log2", "log1p", "reciprocal", "gamma",
           "gammaln", "arccosh"]:
    case("unary_pos_" + op)(lambda op=op: getattr(nd, op)(POS() + 1))
for op in ["arcsin", "arccos", "arctanh"]:
    case("unary_unit_" + op)(lambda op=op: getattr(nd, op)(POS() / 5))
case("unary_int_abs")(lambda: nd.abs(arr([-3, 2, -1], "int32")))
case("unary_f16_exp")(lambda: nd.exp(arr([0.5, 1.0, 2.0], "float16")))
case("unary_f64_log")(lambda: nd.log(arr([0.5, 1.0, 2.0], "float64")))
case("clip")(lambda: nd.clip(A(), -1.0, 2.0))
case("rounding_halves")(lambda: [nd.round(arr([-2.5, -1.5, 0.5, 1.5, 2.5])),
                                 nd.rint(arr([-2.5, -1.5, 0.5, 1.5, 2.5]))])

# arithmetic, comparison, broadcasting, scalars, in place
case("add")(lambda: A() + B())
case("sub")(lambda: A() - B())
case("mul")(lambda: A() * B())
case("div")(lambda: A() / B())
case("mod")(lambda: A() % B())
case("pow")(lambda: POS() ** B())
case("broadcast_row")(lambda: A() + ROW())
case("broadcast_col")(lambda: A() * arr([[2.0], [3.0]]))
case("broadcast_ops")(lambda: [nd.broadcast_maximum(A(), ROW() / 10), nd.broadcast_minimum(A(), ROW() / 10),
                               nd.broadcast_hypot(A(), B()), nd.broadcast_power(POS(), arr([2.0]))])
case("broadcast_mismatch")(lambda: nd.broadcast_add(A(), arr([1.0, 2.0])))
case("compare")(lambda: [A() > B(), A() >= 1.5, A() < B(), A() <= 0.5, A() == B(), A() != 1.5])
case("logical")(lambda: [nd.logical_not(A() > 0), nd.broadcast_logical_and(A() > 0, B() > 0),
                         nd.broadcast_logical_or(A() > 0, B() > 0), nd.broadcast_logical_xor(A() > 0, B() > 0)])
case("scalars")(lambda: [A() + 1, 1 - A(), A() * 3, 3 / POS(), A() / 4, A() % 2, 2 % POS(),
                         POS() ** 2, 2 ** A(), nd.maximum(A(), 1), nd.minimum(A(), 1)])
case("int_arith")(lambda: [arr([7, -7, 5], "int32") / arr([2, 2, 3], "int32"),
                           arr([7, -7, 5], "int32") % arr([3, 3, 3], "int32"),
                           arr([1, 2, 3], "int64") * 4])
case("dtype_mismatch")(lambda: arr([1, 2], "float32") + arr([1, 2], "float64"))


def inplace():
    x = A()
    x += B()
    x *= 2
    x -= 1
    x /= 4
    return x


case("inplace")(inplace)
# integers add, subtract and multiply exactly in their type, wrapping on overflow
BIG = lambda: arr([2**62 + 1, -(2**53) - 3, 2**63 - 1], dtype="int64")
case("int64_add_exact")(lambda: nd.elemwise_add(BIG(), arr([2**62 + 7, -5, 1], dtype="int64")))
case("int64_broadcast_mul_wraps")(lambda: nd.broadcast_mul(BIG(), arr([3], dtype="int64")))
case("int64_sub_exact")(lambda: nd.elemwise_sub(BIG(), arr([1, 2**60 + 1, -1], dtype="int64")))
case("int8_add_wraps")(lambda: nd.elemwise_add(arr([127, -128, 100], dtype="int8"), arr([1, -1, 100], dtype="int8")))
case("uint8_mul_wraps")(lambda: nd.broadcast_mul(arr([200, 16, 3], dtype="uint8"), arr([2], dtype="uint8")))
case("elemwise_shape_mismatch")(lambda: nd.elemwise_add(A(), ROW()))

# reductions and ordering
X3 = lambda: nd.array(np.arange(24).reshape(2, 3, 4) % 7 - 3.0)
for op in ["sum", "mean", "prod", "max", "min", "nansum", "nanprod"]:
    case("reduce_all_" + op)(lambda op=op: getattr(nd, op)(X3()))
    case("reduce_axis_" + op)(lambda op=op: getattr(nd, op)(X3(), axis=1))
    case("reduce_axes_keep_" + op)(lambda op=op: getattr(nd, op)(X3(), axis=(0, 2), keepdims=True))
case("reduce_exclude")(lambda: nd.sum(X3(), axis=1, exclude=True))
# one kept block between reduced ones (a bias gradient's sum over N, H, W), column and row sums
XB = lambda dtype="float32": nd.array(np.random.RandomState(7).uniform(-1, 1, (5, 6, 7, 9)), dtype=dtype)
case("reduce_bias_grad_sum")(lambda: [nd.sum(XB(), axis=(0, 2, 3)), nd.mean(XB(), axis=(0, 2, 3)),
                                      nd.sum(XB("float64"), axis=(0, 2, 3), keepdims=True)])
case("reduce_columns_rows")(lambda: [nd.sum(XB(), axis=0), nd.sum(XB(), axis=(2, 3)), nd.sum(XB(), axis=(0, 1)),
                                     nd.mean(XB().reshape((30, 63)), axis=0), nd.sum(XB("int32"), axis=(0, 2, 3))])
XN = lambda: nd.array(np.where(np.arange(5 * 6 * 7 * 9).reshape(5, 6, 7, 9) == 200, np.nan, XB().asnumpy()))
case("reduce_extremes_kept_middle")(lambda: [nd.max(XB(), axis=(0, 2, 3)), nd.min(XB(), axis=0), nd.max(XB()),
                                             nd.min(XB(), axis=(2, 3), keepdims=True), nd.max(XN(), axis=(0, 2, 3)),
                                             nd.min(XN()), nd.max(XB("float16"), axis=(0, 1)),
                                             nd.min(nd.array(np.arange(-50, 250).reshape(3, 100), dtype="int32"), axis=1),
                                             nd.max(nd.relu(XB()), axis=(1, 2, 3)), nd.min(nd.relu(XB()))])
case("norm")(lambda: [nd.norm(X3()), nd.norm(X3(), axis=1), nd.norm(X3(), ord=1, axis=(1, 2))])
case("argmax")(lambda: [nd.argmax(X3(), axis=2), nd.argmin(X3(), axis=0), nd.argmax(A())])
case("argmax_channel")(lambda: nd.argmax_channel(A()))
case("sort")(lambda: [nd.sort(A()), nd.sort(A(), axis=0, is_ascend=False), nd.argsort(A())])
case("topk")(lambda: [nd.topk(A(), k=2), nd.topk(A(), k=2, ret_typ="value", is_ascend=True),
                      nd.topk(A(), k=1, axis=0, ret_typ="both")[0], nd.topk(A(), k=2, ret_typ="mask")])
case("reduce_bad_axis")(lambda: nd.sum(A(), axis=5))

# shapes
case("reshape_codes")(lambda: [nd.reshape(X3(), shape=(0, -1)), nd.reshape(X3(), shape=(-3, 4)),
                               nd.reshape(X3(), shape=(-4, 1, 2, -2)), nd.reshape(X3(), shape=(-1,))])
case("reshape_bad")(lambda: nd.reshape(X3(), shape=(5, 5)))
case("flatten")(lambda: nd.flatten(X3()))
case("expand_squeeze")(lambda: [nd.expand_dims(A(), axis=1), nd.squeeze(nd.expand_dims(A(), 0)),
                                nd.squeeze(arr([[[1.0]]]), axis=(0, 2))])
case("transpose")(lambda: [nd.transpose(X3()), nd.transpose(X3(), axes=(1, 0, 2)), A().T])
case("swapaxes")(lambda: nd.swapaxes(X3(), 0, 2))
case("flip")(lambda: [nd.flip(X3(), axis=1), nd.reverse(X3(), axis=(0, 2))])
case("slice")(lambda: [nd.slice(X3(), begin=(0, 1), end=(2, 3)), nd.slice(X3(), begin=(None, None, 3), end=(None, None, 0), step=(1, 1, -2)),
                       nd.slice_axis(X3(), axis=2, begin=1, end=-1), nd.slice_like(X3(), nd.zeros((1, 2, 3))), nd.slice_like(X3(), nd.zeros((1, 2)), axes=(0, 1))])
case("broadcast_to_ndim")(lambda: nd.broadcast_to(ROW(), shape=(2, 3)))
case("broadcast_to")(lambda: [nd.broadcast_to(ROW().reshape((1, 3)), shape=(2, 3)), nd.broadcast_to(arr([[1.0], [2.0]]), shape=(0, 4)), nd.broadcast_like(arr([[1.0], [2.0]]), A()),
                              nd.broadcast_axis(arr([[1.0], [2.0]]), axis=1, size=4)])
case("tile_repeat")(lambda: [nd.tile(A(), reps=(2, 1)), nd.tile(ROW(), reps=(2, 2)), nd.repeat(A(), repeats=2, axis=1),
                             nd.repeat(A(), repeats=2)])
case("concat_stack")(lambda: [nd.concat(A(), B(), dim=0), nd.concat(A(), B(), B(), dim=1), nd.stack(A(), B(), axis=1)])
case("split")(lambda: nd.split(X3(), num_outputs=3, axis=1))
case("split_squeeze")(lambda: nd.split(A(), num_outputs=2, axis=0, squeeze_axis=True))
case("split_v2")(lambda: nd.split_v2(X3(), [1, 3], axis=2))
case("reshape_like")(lambda: nd.reshape_like(X3(), nd.zeros((6, 4))))
case("shape_size_array")(lambda: [nd.shape_array(X3()), nd.size_array(X3())])

# indexing
def setitem():
    x = nd.array(np.arange(12).reshape(3, 4), dtype="float32")
    x[0] = 5
    x[1, 1:3] = arr([7.0, 8.0])
    x[:, 3] = -1
    x[2, ::2] = 9
    x[:] = x + 1
    return x


case("setitem")(setitem)
case("getitem")(lambda: [X3()[1], X3()[:, 1], X3()[1, ::-1, 1:3], X3()[:, :, ::3], X3()[[0, 1], 1]])
case("take")(lambda: [nd.take(A(), arr([1, 0, 1])), nd.take(X3(), arr([[0, 3], [1, 5]]), axis=2, mode="wrap"),
                      nd.take(A(), arr([-1, 7]))])
case("pick")(lambda: [nd.pick(A(), arr([0, 2])), nd.pick(X3(), arr([[0, 1, 2, 0], [2, 2, 1, 0]]), axis=1, keepdims=True)])
case("one_hot")(lambda: nd.one_hot(arr([1, 0, 2, 5]), 3, on_value=2.0, off_value=-1.0))
case("where")(lambda: [nd.where(A() > 0, A(), B()), nd.where(arr([1.0, 0.0]), A(), B())])
case("gather_nd")(lambda: nd.gather_nd(X3(), arr([[0, 1], [2, 0]])))

# conversions and copies
case("astype")(lambda: [A().astype("int32"), A().astype("float64"), arr([0, 1, 2]).astype("bool"), A().astype("float16")])
case("cast")(lambda: nd.cast(A(), dtype="uint8"))
case("copyto")(lambda: A().copyto(nd.zeros((2, 3), dtype="float64")))

# linear algebra and neural-network ops
M1 = lambda: nd.array(np.arange(12).reshape(3, 4) / 7.0)
M2 = lambda: nd.array(np.arange(20).reshape(4, 5) / 9.0 - 1)
case("dot")(lambda: [nd.dot(M1(), M2()), nd.dot(M1(), M1(), transpose_b=True), nd.dot(M2(), M2(), transpose_a=True),
                     nd.dot(ROW(), ROW())])
case("dot_f64")(lambda: nd.dot(M1().astype("float64"), M2().astype("float64")))
case("dot_mismatch")(lambda: nd.dot(M1(), M1()))
case("batch_dot")(lambda: [nd.batch_dot(nd.stack(M1(), M1()), nd.stack(M2(), M2())),
                           nd.batch_dot(nd.stack(M1(), M1()), nd.stack(M1(), M1()), transpose_b=True)])
case("fully_connected")(lambda: [nd.FullyConnected(M1(), M2().T, nd.arange(5), num_hidden=5),
                                 nd.FullyConnected(X3(), nd.ones((2, 12)), no_bias=True, num_hidden=2),
                                 nd.FullyConnected(X3(), nd.ones((2, 4)), nd.ones((2,)), num_hidden=2, flatten=False)])
case("fully_connected_bad_weight")(lambda: nd.FullyConnected(M1(), nd.ones((5, 3)), nd.ones((5,)), num_hidden=5))
case("activation")(lambda: [nd.Activation(A(), act_type=t) for t in ["relu", "sigmoid", "tanh", "softrelu", "softsign"]])
case("leaky_relu")(lambda: [nd.LeakyReLU(A(), act_type="leaky", slope=0.1), nd.LeakyReLU(A(), act_type="elu", slope=0.5),
                            nd.LeakyReLU(A(), act_type="selu"), nd.LeakyReLU(A(), act_type="gelu"),
                            nd.LeakyReLU(A(), arr([0.5, 0.25, 0.1]), act_type="prelu")])
case("softmax")(lambda: [nd.softmax(A()), nd.softmax(X3(), axis=1), nd.log_softmax(A()), nd.softmin(A(), axis=0),
                         nd.softmax(A(), temperature=2.0)])
case("add_n")(lambda: nd.add_n(A(), B(), A()))

# optimizer updates (state and weight after two steps)
def optimizer(kind, extra_states, **kw):
    def run():
        w = nd.array(np.linspace(-1, 1, 6).reshape(2, 3))
        states = [nd.zeros((2, 3)) + 0.1 * i for i in range(extra_states)]
        for step in range(2):
            g = nd.array(np.linspace(0.5, -0.7, 6).reshape(2, 3) * (step + 1))
            getattr(nd, kind)(w, g, *states, out=w, **kw)
        return [w] + states
    return run


case("sgd")(optimizer("sgd_update", 0, lr=0.1, wd=0.01))
case("sgd_clip")(optimizer("sgd_update", 0, lr=0.1, wd=0.01, clip_gradient=0.3, rescale_grad=2.0))
case("sgd_mom")(optimizer("sgd_mom_update", 1, lr=0.1, momentum=0.9, wd=0.01))
case("nag_mom")(optimizer("nag_mom_update", 1, lr=0.1, momentum=0.9, wd=0.01))
case("adam")(optimizer("adam_update", 2, lr=0.01, beta1=0.9, beta2=0.99, epsilon=1e-6, wd=0.001))
case("rmsprop")(optimizer("rmsprop_update", 1, lr=0.01, gamma1=0.9, epsilon=1e-6))
case("rmspropalex")(optimizer("rmspropalex_update", 3, lr=0.01, gamma1=0.9, gamma2=0.8, epsilon=1e-4))
case("ftrl")(optimizer("ftrl_update", 2, lr=0.1, lamda1=0.01, beta=1.0))
case("ftml")(optimizer("ftml_update", 3, lr=0.1, t=1))
case("signsgd")(optimizer("signsgd_update", 0, lr=0.1, wd=0.01))
case("signum")(optimizer("signum_update", 1, lr=0.1, momentum=0.9, wd_lh=0.01))


def mp_sgd_mom():
    w = nd.array(np.linspace(-1, 1, 6), dtype="float16")
    w32 = w.astype("float32")
    mom = nd.zeros((6,))
    for _ in range(2):
        nd.mp_sgd_mom_update(w, nd.ones((6,), dtype="float16"), mom, w32, out=w, lr=0.1, momentum=0.9)
    return [w, w32, mom]


case("mp_sgd_mom")(mp_sgd_mom)


def multi_sgd(mom):
    def run():
        ws = [nd.ones((3,)) * (i + 1) for i in range(3)]
        gs = [nd.ones((3,)) * 0.5 for _ in range(3)]
        ms = [nd.zeros((3,)) for _ in range(3)]
        args = []
        for i in range(3):
            args += [ws[i], gs[i]] + ([ms[i]] if mom else [])
        op = nd.multi_sgd_mom_update if mom else nd.multi_sgd_update
        kw = {"momentum": 0.9} if mom else {}
        for _ in range(2):
            op(*args, out=ws, lrs=(0.1, 0.2, 0.3), wds=(0.0, 0.01, 0.02), num_weights=3, **kw)
        return ws + (ms if mom else [])
    return run


case("multi_sgd")(multi_sgd(False))
case("multi_sgd_mom")(multi_sgd(True))


def python_optimizers():
    out = []
    for name, kw in [("sgd", {"momentum": 0.9}), ("sgd", {}), ("nag", {"momentum": 0.9}), ("adam", {}),
                     ("rmsprop", {}), ("rmsprop", {"centered": True}), ("adagrad", {}), ("adadelta", {}),
                     ("ftrl", {}), ("signum", {}), ("ftml", {}), ("lars", {"momentum": 0.9}), ("lbsgd", {}),
                     ("adamax", {}), ("nadam", {}), ("dcasgd", {})]:
        opt = mx.optimizer.create(name, learning_rate=0.05, wd=0.001, **kw)
        updater = mx.optimizer.get_updater(opt)
        w = nd.array(np.linspace(-1, 1, 8))
        for step in range(3):
            updater(0, nd.array(np.linspace(1, -1, 8) * (step + 1)), w)
        out.append(w)
    return out


case("python_optimizers")(python_optimizers)


def lars_aggregated():
    opt = mx.optimizer.create("lars", learning_rate=0.1, momentum=0.9, wd=0.01, eta=0.01)
    updater = mx.optimizer.get_updater(opt)
    ws = [nd.array(np.linspace(-1, 1, 6) * (i + 1)) for i in range(3)]
    for step in range(2):
        gs = [nd.array(np.linspace(1, -1, 6) * (step + i + 1)) for i in range(3)]
        updater([0, 1, 2], gs, ws)
    return ws


case("lars_aggregated")(lars_aggregated)
case("multi_sum_sq")(lambda: nd.multi_sum_sq(A(), B(), ROW(), num_arrays=3))
case("multi_lars")(lambda: nd.multi_lars(arr([0.1, 0.2, 0.3]), arr([4.0, 0.0, 9.0]), arr([1.0, 1.0, 0.0]),
                                         arr([0.01, 0.0, 0.1]), eta=0.5, eps=1e-6, rescale_grad=2.0))



def lamb(mp):
    def run():
        dtype = "float16" if mp else "float32"
        w = nd.array(np.linspace(-1, 1, 6).reshape(2, 3), dtype=dtype)
        w32 = w.astype("float32")
        mean, var = nd.zeros((2, 3)), nd.zeros((2, 3))
        out = []
        for t in (1, 2):
            g = nd.array(np.linspace(0.5, -0.7, 6).reshape(2, 3) * t, dtype=dtype)
            if mp:
                d = nd.mp_lamb_update_phase1(w, g, mean, var, w32, t=t, wd=0.01, rescale_grad=0.5)
                r1, r2 = w32.norm(), d.norm()
                nd.mp_lamb_update_phase2(w, d, r1, r2, w32, lr=0.1, lower_bound=0.1, out=w)
            else:
                d = nd.lamb_update_phase1(w, g, mean, var, t=t, wd=0.01, clip_gradient=0.4)
                nd.lamb_update_phase2(w, d, w.norm(), d.norm(), lr=0.1, upper_bound=1.0, out=w)
            out += [d, w.copy()]
        return out + [mean, var]
    return run


case("lamb")(lamb(False))
case("mp_lamb")(lamb(True))


def multi_lamb(mp):
    def run():
        dtype = "float16" if mp else "float32"
        ws = [nd.array(np.linspace(-1, 1, 4) * (i + 1), dtype=dtype) for i in range(2)]
        gs = [nd.array(np.linspace(0.3, -0.2, 4) * (i + 1), dtype=dtype) for i in range(2)]
        means, vars_ = [nd.zeros((4,)) for _ in ws], [nd.zeros((4,)) for _ in ws]
        w32 = [w.astype("float32") for w in ws]
        for step in (1, 2):
            if mp:
                nd.contrib.multi_mp_lamb_update(ws, gs, means, vars_, w32, [step, step], lrs=[0.1, 0.05],
                                                wds=[0.01, 0.0], out=ws)
            else:
                nd.contrib.multi_lamb_update(ws, gs, means, vars_, [step, step], lrs=[0.1, 0.05],
                                             wds=[0.01, 0.0], out=ws)
        return ws + means + vars_ + (w32 if mp else [])
    return run


case("multi_lamb")(multi_lamb(False))
case("multi_mp_lamb")(multi_lamb(True))


def adamw(mp, scale):
    def run():
        dtype = "float16" if mp else "float32"
        w = nd.array(np.linspace(-1, 1, 6), dtype=dtype)
        st = [nd.zeros((6,)), nd.zeros((6,))] + ([w.astype("float32")] if mp else [])
        op = nd.contrib.mp_adamw_update if mp else nd.contrib.adamw_update
        for step in (1, 2):
            g = nd.array(np.linspace(0.5, -0.5, 6) * step, dtype=dtype)
            op(w, g, *st, nd.array([scale]), lr=0.01, eta=0.5, wd=0.1, clip_gradient=0.8, out=w)
        return [w] + st
    return run


case("adamw")(adamw(False, 1.5))
case("mp_adamw")(adamw(True, 1.0))
case("adamw_skipped_on_nan_scale")(adamw(False, float("nan")))


def multi_adamw():
    ws = [nd.array(np.linspace(-1, 1, 4) * (i + 1)) for i in range(2)]
    gs = [nd.array(np.linspace(0.3, -0.2, 4) * (i + 1)) for i in range(2)]
    means, vars_ = [nd.zeros((4,)) for _ in ws], [nd.zeros((4,)) for _ in ws]
    for _ in range(2):
        nd.contrib.multi_adamw_update(ws, gs, means, vars_, nd.array([0.5]), lrs=(0.1, 0.05), wds=(0.01, 0.0),
                                      etas=(1.0, 0.5), out=ws)
    return ws + means + vars_


case("multi_adamw")(multi_adamw)


def preloaded_multi_sgd(mom):
    def run():
        ws = [nd.ones((3,)) * (i + 1) for i in range(2)]
        ms = [nd.zeros((3,)) for _ in range(2)]
        args = []
        for i in range(2):
            args += [ws[i], nd.ones((3,)) * 0.5] + ([ms[i]] if mom else [])
        lrs, wds = nd.array([0.1, 0.2]), nd.array([0.0, 0.01])
        op = nd.preloaded_multi_sgd_mom_update if mom else nd.preloaded_multi_sgd_update
        kw = {"momentum": 0.9} if mom else {}
        for _ in range(2):
            op(*args, lrs, wds, out=ws, num_weights=2, **kw)
        return ws + (ms if mom else [])
    return run


case("preloaded_multi_sgd")(preloaded_multi_sgd(False))
case("preloaded_multi_sgd_mom")(preloaded_multi_sgd(True))
case("python_lamb")(lambda: [mx.optimizer.get_updater(mx.optimizer.create("lamb", learning_rate=0.05))(0, nd.array([0.5, -1.0, 2.0]), w) or w
                             for w in [nd.array([1.0, 2.0, -3.0])]])

# legacy NDArray functions, padding, storage casts, closeness
case("fill_element_0index")(lambda: nd.fill_element_0index(A(), arr([9.0, 8.0]), arr([2, 0])))


def onehot_encode():
    out = nd.zeros((3, 4))
    nd.onehot_encode(arr([3, 0, 1]), out)
    return out


case("onehot_encode")(onehot_encode)
P4 = lambda: nd.array(np.arange(24).reshape(1, 2, 3, 4))
def blocks():
    x = nd.arange(2 * 8 * 2 * 3).reshape((2, 8, 2, 3))
    y = nd.arange(2 * 3 * 4 * 6, dtype="float64").reshape((2, 3, 4, 6))
    return [nd.depth_to_space(x, block_size=2), nd.space_to_depth(y, block_size=2),
            nd.space_to_depth(nd.depth_to_space(x, block_size=2), block_size=2),
            nd.depth_to_space(x.astype("int32"), block_size=1)]
case("depth_to_space")(blocks)


def histogram():
    a = arr([0.1, 0.5, 0.9, 1.0, -1, 2, 0.5, 0.25, 0.75])
    out = []
    for h in [nd.histogram(a, bins=4, range=(0, 1)), nd.histogram(a, bins=arr([0, 0.3, 0.5, 2])),
              nd.histogram(a.astype("float64"), bins=3, range=(-1, 2)),
              nd.histogram(arr([1, 2, 3, 7], "int32"), bins=2, range=(1, 3)),
              nd.histogram(nd.arange(100) / 7, bins=7, range=(0.5, 13.2))]:
        out.extend(h)
    return out
case("histogram")(histogram)


def advanced_setitem():
    x = nd.array(np.arange(24).reshape(2, 3, 4))
    x[nd.array([0, 1]), nd.array([2, 0])] = nd.array([[-1, -2, -3, -4], [-5, -6, -7, -8]])
    y = nd.array(np.arange(12).reshape(3, 4))
    y[[0, 2], [1, 3]] = 100
    z = nd.array(np.arange(6), dtype="int32")
    z[nd.array([5, 2, 0], dtype="int64")] = nd.array([7, 8, 9], dtype="int32")
    s = nd.zeros((2, 2))
    nd._internal._scatter_set_nd(lhs=s, rhs=arr([3, 4]), indices=nd.array([[0, 1], [1, 0]]), shape=(2, 2), out=s)
    return [x, y, z, s]
case("scatter_set_nd")(advanced_setitem)
case("histogram_bad")(lambda: nd.histogram(A(), bins=3, range=(2, 1)))


def batch_norm():
    x = nd.array(np.arange(2 * 3 * 2 * 2).reshape(2, 3, 2, 2) * 0.5 - 3)
    g, b = arr([1.5, -0.5, 2.0]), arr([0.1, 0.2, -0.3])
    mm, mv = arr([0.5, -1.0, 2.0]), arr([1.0, 4.0, 0.25])
    g2 = arr([1.5, -0.5, 2.0])
    return [nd.BatchNorm(x, g2, b, mm, mv, fix_gamma=False, eps=1e-5),
            nd.BatchNorm(x.transpose((0, 2, 3, 1)), g2, b, mm, mv, axis=-1, fix_gamma=False),
            nd.BatchNorm(nd.ones((4, 3)), g2, b, mm, mv, fix_gamma=False),
            nd.BatchNorm(x.astype("float64"), g2.astype("float64"), b.astype("float64"),
                         mm.astype("float64"), mv.astype("float64"), fix_gamma=False),
            # fix_gamma (the default) also sets gamma to 1 in place
            nd.BatchNorm(x, g, b, mm, mv), g,
            nd.BatchNorm(x, g, b, mm, mv, output_mean_var=True)]
case("batch_norm")(batch_norm)


def training_mode():
    x = nd.array(np.arange(2 * 3 * 2 * 2).reshape(2, 3, 2, 2) * 0.5 - 3)
    g, b = arr([1.5, -0.5, 2.0]), arr([0.1, 0.2, -0.3])
    mm, mv = arr([0.5, -1.0, 2.0]), arr([1.0, 4.0, 0.25])
    flags = [mx.autograd.is_training()]
    with mx.autograd.train_mode():
        flags.append(mx.autograd.is_training())
        # batch statistics; the moving ones stay as they are in the forward pass
        out = [nd.BatchNorm(x, g, b, mm, mv, fix_gamma=False, output_mean_var=True),
               nd.BatchNorm(x.transpose((0, 2, 3, 1)), g, b, mm, mv, axis=-1, fix_gamma=False, eps=1e-5),
               nd.BatchNorm(x, g, b, mm, mv, fix_gamma=False, use_global_stats=True), mm, mv,
               nd.Dropout(A(), p=0.0)]
    flags.append(mx.autograd.is_training())
    with mx.autograd.predict_mode():
        flags.append(mx.autograd.is_training())
    return out + [nd.Dropout(A(), p=0.9), flags, mx.autograd.is_recording()]


case("training_mode")(training_mode)
case("batch_norm_bad_dtype")(lambda: nd.BatchNorm(nd.ones((2, 3), dtype="float64"), *[nd.ones(3)] * 4))
case("depth_to_space_bad")(lambda: nd.depth_to_space(nd.ones((1, 3, 2, 2)), block_size=2))
case("erfinv")(lambda: [nd.erfinv(arr([-0.999, -0.5, 0.0, 1e-4, 0.3, 0.9, 0.999999])),
                        nd.erfinv(arr([-0.25, 0.75], "float64")), nd.erfinv(arr([1.0, -1.0])),
                        nd.erfinv(arr([0.1, -0.6], "float16"))])
case("diag")(lambda: [nd.diag(X3()), nd.diag(X3(), k=1), nd.diag(X3(), k=-1, axis1=2, axis2=0),
                      nd.diag(arr([1, 2, 3])), nd.diag(arr([1, 2, 3]), k=2),
                      nd.diag(arr([1, 2, 3], "int32"), k=-1),
                      nd.diag(nd.arange(12).reshape((3, 4))), nd.diag(nd.arange(12).reshape((3, 4)), k=3),
                      nd.diag(nd.arange(12).reshape((3, 4)), k=-3)])
case("pad")(lambda: [nd.Pad(P4(), mode="constant", pad_width=(0, 0, 0, 0, 1, 2, 2, 1), constant_value=-1),
                     nd.Pad(P4(), mode="edge", pad_width=(0, 0, 0, 0, 2, 1, 0, 3)),
                     nd.Pad(P4(), mode="reflect", pad_width=(0, 0, 0, 0, 2, 2, 3, 1)),
                     nd.Pad(nd.array(np.arange(48).reshape(1, 1, 2, 4, 6)), mode="edge", pad_width=(0, 0, 0, 0, 1, 1, 1, 0, 0, 2))])
case("pad_bad")(lambda: nd.Pad(P4(), mode="constant", pad_width=(1, 0, 0, 0, 1, 2, 2, 1)))
case("cast_storage_default")(lambda: [A().tostype("default"), nd.cast_storage(A(), stype="default")])
case("allclose")(lambda: [nd.contrib.allclose(A(), A() + 1e-7), nd.contrib.allclose(A(), B()),
                          nd.contrib.allclose(arr([np.nan, 1.0]), arr([np.nan, 1.0])),
                          nd.contrib.allclose(arr([np.nan, 1.0]), arr([np.nan, 1.0]), equal_nan=False)])
case("broadcast_like_empty_axes")(lambda: nd.broadcast_like(A(), B(), lhs_axes=(), rhs_axes=()))


def unique_zipfian():
    s, tries = nd.random.unique_zipfian(20, shape=(3, 6)) if hasattr(nd.random, "unique_zipfian") else \
        nd._internal._sample_unique_zipfian(range_max=20, shape=(3, 6))
    a = s.asnumpy()
    ok = all(len(set(row)) == 6 for row in a) and a.min() >= 0 and a.max() < 20
    return [str(s.dtype), list(s.shape), str(tries.dtype), list(tries.shape), bool(ok),
            bool((tries.asnumpy() >= 6).all())]


case("unique_zipfian")(unique_zipfian)

def kvstore_sgd():
    kv = mx.kv.create("local")
    kv.set_optimizer(mx.optimizer.SGD(learning_rate=0.1, momentum=0.9))
    keys = [3, 5, 7]
    kv.init(keys, [nd.ones((4,)) * k for k in keys])
    for _ in range(3):
        kv.push(keys, [[nd.ones((4,)) * 0.5, nd.ones((4,))] for _ in keys])
    outs = [nd.zeros((4,)) for _ in keys]
    kv.pull(keys, out=outs)
    return outs


case("kvstore_sgd")(kvstore_sgd)

# sparse storage (row_sparse, csr): to_json also compares each result's storage and parts
SP = lambda: arr([[0.0, 0.0, 0.0], [5.0, 0.0, -1.0], [0.0, 0.0, 0.0], [0.0, 7.0, 0.0]])
case("sparse_cast_rsp")(lambda: SP().tostype("row_sparse"))
case("sparse_cast_csr")(lambda: SP().tostype("csr"))
case("sparse_cast_back")(lambda: [SP().tostype("row_sparse").tostype("default"),
                                  SP().tostype("csr").tostype("default")])
case("sparse_cast_csr_to_rsp")(lambda: SP().tostype("csr").tostype("row_sparse"))
case("sparse_cast_csr_3d")(lambda: nd.zeros((2, 2, 2)).tostype("csr"))
case("sparse_zeros")(lambda: [nd.sparse.zeros("row_sparse", (3, 2)), nd.sparse.zeros("csr", (2, 4), dtype="float64")])
case("sparse_csr_matrix")(lambda: nd.sparse.csr_matrix(([1.0, 2.0, 3.0], [0, 2, 1], [0, 2, 2, 3]), shape=(3, 3)))
case("sparse_row_sparse_array")(lambda: nd.sparse.row_sparse_array(([[1.0, 2.0], [3.0, 4.0]], [0, 2]), shape=(4, 2)))
case("sparse_scalar_keeps_rsp")(lambda: [SP().tostype("row_sparse") * 2, SP().tostype("csr") / 4])
case("sparse_elemwise")(lambda: [nd.elemwise_add(SP().tostype("row_sparse"), SP().tostype("row_sparse")),
                                 nd.elemwise_mul(SP().tostype("csr"), SP().tostype("csr")),
                                 SP() + SP().tostype("row_sparse")])
case("sparse_unary")(lambda: [nd.sqrt(nd.abs(SP().tostype("row_sparse"))), nd.square(SP().tostype("csr"))])
case("sparse_retain")(lambda: nd.sparse.retain(SP().tostype("row_sparse"), arr([3, 0, 1], "int64")))
case("sparse_dot")(lambda: [nd.sparse.dot(SP().tostype("csr"), arr([[1.0], [2.0], [3.0]])),
                            nd.sparse.dot(SP().tostype("csr"), arr([[1.0, 2.0]] * 4), transpose_a=True)])
case("sparse_reductions")(lambda: [nd.sum(SP().tostype("csr")), nd.norm(SP().tostype("row_sparse"))])
case("sparse_csr_rows")(lambda: [SP().tostype("csr")[1:3], SP().tostype("csr")[3], SP().tostype("row_sparse")[:]])
case("sparse_copyto")(lambda: SP().tostype("row_sparse").copyto(mx.cpu(1)))
case("sparse_compare_scalar")(lambda: [SP().tostype(st) > 0 for st in ("row_sparse", "csr")]
                                      + [1 == SP().tostype("row_sparse"), 0 == SP().tostype("row_sparse"),
                                         SP().tostype("csr") != 0, SP().tostype("row_sparse") < 0,
                                         SP().tostype("row_sparse") <= 1, SP().tostype("csr") >= 0])


def sparse_setitem():
    out = []
    for st in ("row_sparse", "csr"):
        x = nd.zeros((4, 3), stype=st)
        x[:] = SP()
        out.append(x)
        y = nd.zeros((4, 3), stype=st)
        y[:] = SP().tostype(st)
        out.append(y)
    z = nd.zeros((4, 3), stype="row_sparse")
    z[:] = 2
    return out + [z]


case("sparse_setitem")(sparse_setitem)


def sparse_copy_cast():
    # float values into integer sparse arrays: the package copies them part by part, cast
    return [nd.sparse.row_sparse_array(([[1.5, 2.5], [3.0, 4.0]], [0, 2]), shape=(3, 2), dtype="int32"),
            nd.sparse.csr_matrix(([1.5, 2.0, 3.7], [0, 2, 1], [0, 2, 2, 3]), shape=(3, 3), dtype="int64")]


case("sparse_copy_cast")(sparse_copy_cast)
case("sparse_square_sum")(lambda: [nd._internal._square_sum(SP().tostype("row_sparse"), axis=a, keepdims=k)
                                   for a in (0, 1) for k in (False, True)])
case("sparse_quadratic")(lambda: [nd.contrib.quadratic(SP().tostype("csr"), a=0.5, b=2.0, c=0.0),
                                  nd.contrib.quadratic(SP().tostype("csr"), a=0.5, b=2.0, c=1.0),
                                  nd.contrib.quadratic(A(), a=1.0, b=-1.0, c=0.5)])
case("sparse_take_dot_stype")(lambda: [nd.take(SP().tostype("csr"), arr([3, 1], "int64")),
                                       nd.sparse.dot(SP().tostype("csr"), arr([[1.0], [2.0], [3.0]]),
                                                     forward_stype="row_sparse")])
case("sparse_getnnz")(lambda: [nd.contrib.getnnz(SP().tostype("csr")),
                               nd.contrib.getnnz(SP().tostype("csr"), axis=1)])


def sparse_sgd(lazy, mom):
    w = arr([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    g = nd.sparse.row_sparse_array(([[0.5, -0.5]], [1]), shape=(3, 2))
    kw = dict(lr=0.1, wd=0.01, lazy_update=lazy, out=w)
    if mom:
        m = arr([[0.1, 0.1]] * 3)
        nd.sgd_mom_update(w, g, m, momentum=0.9, **kw)
        return [w, m]
    nd.sgd_update(w, g, **kw)
    return w


case("sparse_sgd_lazy")(lambda: sparse_sgd(True, False))
case("sparse_sgd_std")(lambda: sparse_sgd(False, False))
case("sparse_sgd_mom_lazy")(lambda: sparse_sgd(True, True))


def sparse_optimizers():
    out = []
    for opt in [mx.optimizer.Adam(learning_rate=0.1, wd=0.01), mx.optimizer.AdaGrad(learning_rate=0.1),
                mx.optimizer.Ftrl(learning_rate=0.1), mx.optimizer.SGD(learning_rate=0.1, momentum=0.9)]:
        # MXNet's sparse updates take dense weights or row_sparse ones storing every row
        for w in [arr([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]]),
                  arr([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]]).tostype("row_sparse")]:
            st = opt.create_state(0, w)
            for step in range(3):
                g = nd.sparse.row_sparse_array(([[0.5, -1.0]], [step]), shape=(4, 2))
                opt.update(0, w, g, st)
            out.append(w.tostype("default"))
    return out


case("sparse_optimizers")(sparse_optimizers)
case("sparse_adagrad_wd")(lambda: nd.sparse.adagrad_update(arr([[1.0]]), nd.sparse.zeros("row_sparse", (1, 1)),
                                                            arr([[0.0]]), lr=0.1, wd=0.1))


def sparse_save_load():
    path = "/tmp/mxrt-op-case-sparse-%d.params" % __import__("os").getpid()
    nd.save(path, {"r": SP().tostype("row_sparse"), "c": SP().tostype("csr"), "d": SP()})
    got = nd.load(path)
    __import__("os").remove(path)
    return [got["r"], got["c"], got["d"]]


case("sparse_save_load")(sparse_save_load)


def sparse_kvstore():
    kv = mx.kv.create("local")
    kv.init("w", SP().tostype("row_sparse"))
    kv.init("d", nd.zeros((4, 3)))
    kv.push("w", [SP().tostype("row_sparse"), (SP() * 2).tostype("row_sparse")])
    kv.push("d", SP().tostype("row_sparse"))
    rows = nd.sparse.zeros("row_sparse", (4, 3))
    kv.row_sparse_pull("w", out=rows, row_ids=arr([3, 3, 2]))
    ignored = nd.sparse.zeros("row_sparse", (4, 3))
    kv.pull("w", out=ignored)
    full = nd.sparse.zeros("row_sparse", (4, 3))
    kv.pull("w", out=full, ignore_sparse=False)
    dense = nd.zeros((4, 3))
    kv.pull("d", out=dense)
    return [rows, ignored, full, dense]


case("sparse_kvstore")(sparse_kvstore)
case("sparse_kvstore_rsp_pull_dense")(lambda: (lambda kv: (kv.init(1, nd.zeros((2, 2)).tostype("row_sparse")),
                                                          kv.row_sparse_pull(1, out=nd.zeros((2, 2)), row_ids=arr([0]))))(mx.kv.create("local")))

# errors every library reports
case("unknown_param")(lambda: nd.sum(A(), axiss=1))
case("missing_param")(lambda: nd.clip(A(), a_min=0.0))


def to_json(value):
    if isinstance(value, mx.nd.NDArray) and value.stype != "default":
        parts = {"row_sparse": ["indices"], "csr": ["indptr", "indices"]}[value.stype]
        return {"stype": value.stype, "dense": to_json(value.tostype("default")), "data": to_json(value.data),
                **{p: to_json(getattr(value, p)) for p in parts}}
    if isinstance(value, mx.nd.NDArray):
        a = value.asnumpy()
        if a.dtype.kind in "iu":  # integers exactly (a float64 would round those above 2**53)
            values = [int(v) for v in a.ravel()]
        else:
            values = [None if np.isnan(v) else float(v) for v in a.astype("float64").ravel()]
        return {"shape": list(a.shape), "dtype": str(a.dtype), "values": values}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    return value


if sys.argv[1:] == ["--list"]:
    print("\n".join(cases))
    sys.exit(0)
results = {}
only = sys.argv[1:]
for name, fn in cases.items():
    if only and name not in only:
        continue
    try:
        results[name] = {"ok": to_json(fn())}
    except Exception as e:  # the outcome, either way, is what is compared
        results[name] = {"error": str(e).split("\n")[0]}
json.dump(results, sys.stdout)
