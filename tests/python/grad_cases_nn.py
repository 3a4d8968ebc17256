"""Gradient cases of the neural-network, matrix-product, reduction, ordering, optimizer and random
operators."""
import numpy as np

from gradlib import grad, nd, nondiff, pos, rand, unit, zero_grad  # noqa: F401


def away_from_zero(*shape, seed=0):
    """Values in [-1, -0.2] and [0.2, 1]: no kink of relu-like functions within reach of the
    central differences."""
    x = rand(*shape, seed=seed)
    return np.sign(x) * (0.2 + 0.8 * np.abs(x))


X = away_from_zero(2, 3, 4, seed=1)

# Activation
for act in ["relu", "sigmoid", "tanh", "softrelu", "softsign"]:
    grad("activation_" + act, ["Activation"], [X])(
        lambda x, act=act: nd.Activation(x, act_type=act))
grad("activation_f64", ["Activation"], [X], dtypes=("float64",))(
    lambda x: [nd.Activation(x, act_type="sigmoid"), nd.Activation(x, act_type="softsign")])
grad("activation_f16", ["Activation"], [X], numeric=False, dtypes=("float16",))(
    lambda x: [nd.Activation(x, act_type=a) for a in ["relu", "sigmoid", "tanh", "softrelu", "softsign"]])
grad("activation_softrelu_large", ["Activation"], [rand(6, lo=-30, hi=30, seed=2)])(
    lambda x: nd.Activation(x, act_type="softrelu"))

# LeakyReLU
grad("leaky_leaky", ["LeakyReLU"], [X])(lambda x: nd.LeakyReLU(x, act_type="leaky", slope=0.1))
grad("leaky_default", ["LeakyReLU"], [X])(lambda x: nd.LeakyReLU(x))
grad("leaky_elu", ["LeakyReLU"], [X])(lambda x: nd.LeakyReLU(x, act_type="elu", slope=0.7))
# MXNet's selu gradient is wrong below zero (test_gradients.DIFFERS_FROM_MXNET)
grad("leaky_selu", ["LeakyReLU"], [X])(lambda x: nd.LeakyReLU(x, act_type="selu"))
grad("leaky_gelu", ["LeakyReLU"], [X])(lambda x: nd.LeakyReLU(x, act_type="gelu"))
grad("leaky_f16", ["LeakyReLU"], [X], numeric=False, dtypes=("float16",))(
    lambda x: [nd.LeakyReLU(x, act_type=a) for a in ["leaky", "elu", "gelu"]])
grad("leaky_prelu_channels", ["LeakyReLU"], [X, rand(3, seed=3)])(
    lambda x, g: nd.LeakyReLU(x, g, act_type="prelu"))
grad("leaky_prelu_scalar", ["LeakyReLU"], [X, rand(1, seed=4)])(
    lambda x, g: nd.LeakyReLU(x, g, act_type="prelu"))
# rrelu: MXNet 1.9.1 crashes differentiating it; test_nn_gradients.py checks it on libmxrt

# softmax family
S = rand(2, 3, 4, seed=5) * 2
grad("softmax", ["softmax"], [S])(lambda x: nd.softmax(x))
grad("softmax_axis0", ["softmax"], [S])(lambda x: nd.softmax(x, axis=0))
grad("softmax_neg_axis_temperature", ["softmax"], [S])(
    lambda x: nd.softmax(x, axis=-2, temperature=2.5))
grad("softmax_f64", ["softmax"], [S], dtypes=("float64",))(lambda x: nd.softmax(x, axis=1))
grad("softmax_f16", ["softmax", "log_softmax", "softmin"], [S], numeric=False, dtypes=("float16",))(
    lambda x: [nd.softmax(x), nd.log_softmax(x, axis=1), nd.softmin(x, axis=0)])
grad("log_softmax", ["log_softmax"], [S])(lambda x: nd.log_softmax(x))
grad("log_softmax_axis_temperature", ["log_softmax"], [S])(
    lambda x: nd.log_softmax(x, axis=1, temperature=0.7))
grad("softmin", ["softmin"], [S])(lambda x: nd.softmin(x))
grad("softmin_axis_temperature", ["softmin"], [S])(lambda x: nd.softmin(x, axis=-3, temperature=3.0))

# clip, add_n
grad("clip", ["clip"], [rand(3, 4, seed=6) * 2])(lambda x: nd.clip(x, a_min=-0.5, a_max=0.7))
grad("add_n", ["add_n"], [rand(2, 3, seed=7), rand(2, 3, seed=8), rand(2, 3, seed=9)])(
    lambda a, b, c: nd.add_n(a, b, c, a) * b)

# Dropout: the draws are random, so the gradient cases use deterministic settings (the random
# mask is checked in test_nn_gradients.py)
grad("dropout_p0_train", ["Dropout"], [X])(lambda x: nd.Dropout(x, p=0.0) * x)
grad("dropout_predict", ["Dropout"], [X], train_mode=False)(lambda x: nd.Dropout(x, p=0.5) * x)
grad("dropout_always_p0_axes", ["Dropout"], [X])(
    lambda x: nd.Dropout(x, p=0.0, mode="always", axes=(1,)) * x)

# BatchNorm: batch statistics in training, moving statistics with use_global_stats or in predict
# mode; the moving statistics get no gradient
BN_X = rand(4, 3, 2, seed=10) * 2 + 0.5
BN_ARGS = [BN_X, pos(3, seed=11), rand(3, seed=12), (rand(3, seed=13) * 0.1, False),
           (pos(3, seed=14), False)]
grad("batchnorm_train", ["BatchNorm"], BN_ARGS)(
    lambda x, g, b, m, v: nd.BatchNorm(x, g, b, m, v, fix_gamma=False))
grad("batchnorm_train_fix_gamma", ["BatchNorm"], BN_ARGS)(
    lambda x, g, b, m, v: nd.BatchNorm(x, g, b, m, v))
grad("batchnorm_train_eps_momentum", ["BatchNorm"], BN_ARGS)(
    lambda x, g, b, m, v: nd.BatchNorm(x, g, b, m, v, fix_gamma=False, eps=1e-5, momentum=0.5))
grad("batchnorm_global_stats", ["BatchNorm"], BN_ARGS)(
    lambda x, g, b, m, v: nd.BatchNorm(x, g, b, m, v, fix_gamma=False, use_global_stats=True))
grad("batchnorm_predict", ["BatchNorm"], BN_ARGS, train_mode=False)(
    lambda x, g, b, m, v: nd.BatchNorm(x, g, b, m, v, fix_gamma=False))
grad("batchnorm_last_axis", ["BatchNorm"], [rand(2, 4, 3, seed=15)] + BN_ARGS[1:])(
    lambda x, g, b, m, v: nd.BatchNorm(x, g, b, m, v, fix_gamma=False, axis=-1))
grad("batchnorm_2d", ["BatchNorm"], [rand(5, 3, seed=16)] + BN_ARGS[1:])(
    lambda x, g, b, m, v: nd.BatchNorm(x, g, b, m, v, fix_gamma=False))
grad("batchnorm_output_mean_var", ["BatchNorm"], BN_ARGS)(
    lambda x, g, b, m, v: nd.BatchNorm(x, g, b, m, v, fix_gamma=False, output_mean_var=True)[0])

# FullyConnected
grad("fc", ["FullyConnected"], [rand(2, 3, 2, seed=17), rand(4, 6, seed=18), rand(4, seed=19)])(
    lambda x, w, b: nd.FullyConnected(x, w, b, num_hidden=4))
grad("fc_no_bias", ["FullyConnected"], [rand(3, 5, seed=20), rand(2, 5, seed=21)])(
    lambda x, w: nd.FullyConnected(x, w, num_hidden=2, no_bias=True))
grad("fc_no_flatten", ["FullyConnected"], [rand(2, 3, 5, seed=22), rand(4, 5, seed=23), rand(4, seed=24)])(
    lambda x, w, b: nd.FullyConnected(x, w, b, num_hidden=4, flatten=False))
grad("fc_f64", ["FullyConnected"], [rand(2, 3, seed=25), rand(4, 3, seed=26), rand(4, seed=27)],
     dtypes=("float64",))(lambda x, w, b: nd.FullyConnected(x, w, b, num_hidden=4, flatten=False))

# dot, batch_dot
for ta in (False, True):
    for tb in (False, True):
        a = rand(*((3, 2) if ta else (2, 3)), seed=28)
        b = rand(*((4, 3) if tb else (3, 4)), seed=29)
        grad(f"dot_{int(ta)}{int(tb)}", ["dot"], [a, b])(
            lambda a, b, ta=ta, tb=tb: nd.dot(a, b, transpose_a=ta, transpose_b=tb))
        a = rand(*((2, 4, 3) if ta else (2, 3, 4)), seed=30)
        b = rand(*((2, 5, 4) if tb else (2, 4, 5)), seed=31)
        grad(f"batch_dot_{int(ta)}{int(tb)}", ["batch_dot"], [a, b])(
            lambda a, b, ta=ta, tb=tb: nd.batch_dot(a, b, transpose_a=ta, transpose_b=tb))
grad("dot_vectors", ["dot"], [rand(4, seed=32), rand(4, seed=33)])(lambda a, b: nd.dot(a, b))
grad("dot_nd", ["dot"], [rand(2, 2, 3, seed=34), rand(3, 2, 2, seed=35)])(lambda a, b: nd.dot(a, b))
grad("dot_nd_transposed", ["dot"], [rand(3, 2, 2, seed=36), rand(2, 2, 3, seed=37)])(
    lambda a, b: nd.dot(a, b, transpose_a=True, transpose_b=True))
# float16 products: MXNet refuses them on CPU; test_nn_gradients.py checks them on libmxrt

# reductions
R = rand(2, 3, 4, seed=40)
for op in ["sum", "mean"]:
    grad(op, [op], [R])(lambda x, op=op: getattr(nd, op)(x))
    grad(op + "_axis", [op], [R])(lambda x, op=op: getattr(nd, op)(x, axis=1))
    grad(op + "_axes_keepdims", [op], [R])(lambda x, op=op: getattr(nd, op)(x, axis=(0, 2), keepdims=True))
    grad(op + "_neg_axis", [op], [R])(lambda x, op=op: getattr(nd, op)(x, axis=-1))
    grad(op + "_exclude", [op], [R])(lambda x, op=op: getattr(nd, op)(x, axis=1, exclude=True))
grad("sum_f16", ["sum", "mean"], [R], numeric=False, dtypes=("float16",))(
    lambda x: [nd.sum(x, axis=1), nd.mean(x, axis=(0, 2), keepdims=True)])
P = pos(2, 3, 4, seed=41)
grad("prod", ["prod"], [P])(lambda x: nd.prod(x))
grad("prod_axis_keepdims", ["prod"], [P])(lambda x: nd.prod(x, axis=1, keepdims=True))
WITH_NAN = rand(3, 4, seed=42)
WITH_NAN[0, 1] = WITH_NAN[2, 3] = np.nan
grad("nansum", ["nansum"], [WITH_NAN])(lambda x: nd.nansum(x, axis=1))
grad("nanprod", ["nanprod"], [WITH_NAN + 2])(lambda x: nd.nanprod(x, axis=0))
grad("nan_reductions_all", ["nansum", "nanprod"], [WITH_NAN + 2])(lambda x: [nd.nansum(x), nd.nanprod(x)])
for op in ["max", "min"]:
    grad(op, [op], [R])(lambda x, op=op: getattr(nd, op)(x))
    grad(op + "_axis_keepdims", [op], [R])(lambda x, op=op: getattr(nd, op)(x, axis=-2, keepdims=True))
    grad(op + "_exclude", [op], [R])(lambda x, op=op: getattr(nd, op)(x, axis=0, exclude=True))
# ties share the gradient (each gets all of it), as in MXNet
grad("max_min_ties", ["max", "min"], [np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 0.5]])], numeric=False)(
    lambda x: [nd.max(x, axis=1), nd.min(x, axis=1)])
grad("norm", ["norm"], [R])(lambda x: nd.norm(x))
grad("norm_axis", ["norm"], [R])(lambda x: nd.norm(x, axis=1))
grad("norm_ord1_keepdims", ["norm"], [R])(lambda x: nd.norm(x, ord=1, axis=-1, keepdims=True))
grad("norm_axes", ["norm"], [R])(lambda x: nd.norm(x, axis=(0, 2)))

# index reductions and ordering
zero_grad("argmax_argmin", ["argmax", "argmin"], [R])(
    lambda x: [nd.argmax(x, axis=1), nd.argmin(x, axis=-1, keepdims=True), nd.argmax(x)])
nondiff("argmax_channel", ["argmax_channel"], [rand(2, 3)])(lambda x: nd.argmax_channel(x))
zero_grad("argsort", ["argsort"], [R])(lambda x: nd.argsort(x, axis=1))
# MXNet 1.9.1 cannot differentiate sort without an explicit axis (test_gradients.BEYOND_MXNET)
grad("sort", ["sort"], [R])(lambda x: nd.sort(x))
grad("sort_last_axis", ["sort"], [R])(lambda x: nd.sort(x, axis=-1))
grad("sort_axis0_descending", ["sort"], [R])(lambda x: nd.sort(x, axis=0, is_ascend=False))
grad("sort_flat", ["sort"], [R])(lambda x: nd.sort(x, axis=None))
grad("topk_value", ["topk"], [R])(lambda x: nd.topk(x, k=2, ret_typ="value"))
grad("topk_value_axis_ascend", ["topk"], [R])(lambda x: nd.topk(x, axis=1, k=2, ret_typ="value", is_ascend=True))
grad("topk_both", ["topk"], [R])(lambda x: nd.topk(x, axis=0, k=1, ret_typ="both")[0])
grad("topk_flat", ["topk"], [R])(lambda x: nd.topk(x, axis=None, k=5, ret_typ="value"))
zero_grad("topk_indices_mask", ["topk"], [R])(
    lambda x: [nd.topk(x, k=2), nd.topk(x, k=2, ret_typ="mask")])
nondiff("allclose", ["_contrib_allclose"], [rand(2, 3), rand(2, 3)])(lambda a, b: nd.contrib.allclose(a, b))

# optimizer updates, multi_sum_sq, multi_lars: MXNet registers no gradient
W, G, S1, S2, S3 = (rand(2, 3, seed=43 + i) for i in range(5))


def fresh(ws, half=False):
    """Output arrays for the multi-weight updates (MXNet needs them given), in no graph."""
    return [nd.zeros(w.shape, dtype="float16" if half else "float32") for w in ws]


for op, states, kw in [("sgd_update", 0, {}), ("sgd_mom_update", 1, {"momentum": 0.9}),
                       ("nag_mom_update", 1, {"momentum": 0.9}), ("signsgd_update", 0, {}),
                       ("signum_update", 1, {}), ("adam_update", 2, {}), ("rmsprop_update", 1, {}),
                       ("rmspropalex_update", 3, {}), ("ftrl_update", 2, {}), ("ftml_update", 3, {"t": 1})]:
    nondiff("optimizer_" + op, [op], [W, G, S1, S2, S3][:2 + states])(
        lambda *a, op=op, kw=kw: getattr(nd, op)(*a, lr=0.1, **kw))
for op, states, kw in [("mp_sgd_update", 0, {}), ("mp_sgd_mom_update", 1, {"momentum": 0.9}),
                       ("mp_nag_mom_update", 1, {"momentum": 0.9})]:
    nondiff("optimizer_" + op, [op], [W, G, S1, W])(
        lambda w, g, s, w32, op=op, states=states, kw=kw: getattr(nd, op)(
            w.astype("float16"), g.astype("float16"), *([s] if states else []), w32, lr=0.1, **kw))
nondiff("optimizer_sparse_adagrad", ["_sparse_adagrad_update"], [W, G, pos(2, 3)])(
    lambda w, g, h: nd.sparse.adagrad_update(w, g.tostype("row_sparse"), h, lr=0.1))
for op, preloaded, mom, mp in [
        ("multi_sgd_update", "preloaded_multi_sgd_update", False, False),
        ("multi_sgd_mom_update", "preloaded_multi_sgd_mom_update", True, False),
        ("multi_mp_sgd_update", "preloaded_multi_mp_sgd_update", False, True),
        ("multi_mp_sgd_mom_update", "preloaded_multi_mp_sgd_mom_update", True, True)]:
    def multi_args(w1, g1, w2, g2, m1, m2, mom, mp):
        args = []
        for w, g, m in [(w1, g1, m1), (w2, g2, m2)]:
            args += ([w.astype("float16"), g.astype("float16")] if mp else [w, g]) + ([m] if mom else []) \
                + ([w] if mp else [])
        return args

    def multi(w1, g1, w2, g2, m1, m2, op=op, mom=mom, mp=mp):
        return getattr(nd, op)(*multi_args(w1, g1, w2, g2, m1, m2, mom, mp), lrs=(0.1, 0.2), wds=(0.0, 0.01),
                               num_weights=2, out=fresh([w1, w2], mp), **({"momentum": 0.9} if mom else {}))
    nondiff("optimizer_" + op, [op], [W, G, S1, S2, S3, W])(multi)

    def preloaded_multi(w1, g1, w2, g2, m1, m2, op=preloaded, mom=mom, mp=mp):
        return getattr(nd, op)(*multi_args(w1, g1, w2, g2, m1, m2, mom, mp), nd.array([0.1, 0.2]),
                               nd.array([0.0, 0.01]), num_weights=2, out=fresh([w1, w2], mp),
                               **({"momentum": 0.9} if mom else {}))
    nondiff("optimizer_" + preloaded, [preloaded], [W, G, S1, S2, S3, W])(preloaded_multi)
nondiff("optimizer_adamw", ["_adamw_update"], [W, G, S1, pos(2, 3)])(
    lambda w, g, m, v: nd.contrib.adamw_update(w, g, m, v, nd.array([1.0]), lr=0.01, eta=0.5))
nondiff("optimizer_mp_adamw", ["_mp_adamw_update"], [W, G, S1, pos(2, 3)])(
    lambda w, g, m, v: nd.contrib.mp_adamw_update(w.astype("float16"), g.astype("float16"), m, v, w,
                                                  nd.array([1.0]), lr=0.01, eta=0.5))
nondiff("optimizer_multi_adamw", ["_multi_adamw_update"], [W, G, S1, pos(2, 3)])(
    lambda w, g, m, v: nd.contrib.multi_adamw_update([w], [g], [m], [v], nd.array([1.0]), lrs=(0.1,),
                                                     wds=(0.0,), etas=(1.0,), out=fresh([w])))
nondiff("optimizer_multi_mp_adamw", ["_multi_mp_adamw_update"], [W, G, S1, pos(2, 3)])(
    lambda w, g, m, v: nd.contrib.multi_mp_adamw_update([w.astype("float16")], [g.astype("float16")], [m], [v],
                                                        [w], nd.array([1.0]), lrs=(0.1,), wds=(0.0,),
                                                        etas=(1.0,), out=fresh([w], True)))
nondiff("optimizer_lamb_phase1", ["lamb_update_phase1"], [W, G, S1, pos(2, 3)])(
    lambda w, g, m, v: nd.lamb_update_phase1(w, g, m, v, t=1, wd=0.01))
nondiff("optimizer_lamb_phase2", ["lamb_update_phase2"], [W, G])(
    lambda w, d: nd.lamb_update_phase2(w, d, w.norm(), d.norm(), lr=0.1))
nondiff("optimizer_mp_lamb_phase1", ["mp_lamb_update_phase1"], [W, G, S1, pos(2, 3)])(
    lambda w, g, m, v: nd.mp_lamb_update_phase1(w.astype("float16"), g.astype("float16"), m, v, w,
                                                t=1, wd=0.01))
nondiff("optimizer_mp_lamb_phase2", ["mp_lamb_update_phase2"], [W, G])(
    lambda w, d: nd.mp_lamb_update_phase2(w.astype("float16"), d, w.norm(), d.norm(), w, lr=0.1))
nondiff("optimizer_multi_lamb", ["_multi_lamb_update"], [W, G, S1, pos(2, 3)])(
    lambda w, g, m, v: nd.contrib.multi_lamb_update([w], [g], [m], [v], [1], lrs=[0.1], wds=[0.0],
                                                    out=fresh([w])))
nondiff("optimizer_multi_mp_lamb", ["_multi_mp_lamb_update"], [W, G, S1, pos(2, 3)])(
    lambda w, g, m, v: nd.contrib.multi_mp_lamb_update([w.astype("float16")], [g.astype("float16")], [m], [v],
                                                       [w], [1], lrs=[0.1], wds=[0.0], out=fresh([w], True)))
nondiff("multi_sum_sq", ["multi_sum_sq"], [W, G])(lambda a, b: nd.multi_sum_sq(a, b, num_arrays=2))
nondiff("multi_lars", ["multi_lars"], [pos(3), pos(3, seed=1), pos(3, seed=2), pos(3, seed=3) * 0.1])(
    lambda lrs, wsq, gsq, wds: nd.multi_lars(lrs, wsq, gsq, wds, eta=0.5, eps=1e-6))

# random draws: zero gradient for the *_like and _sample_* draws, none for _shuffle; multinomial
# differentiates its log-likelihoods (one-hot probabilities make its draw deterministic)
LIKE = [("_random_uniform_like", "uniform_like", {}), ("_random_normal_like", "normal_like", {}),
        ("_random_gamma_like", "gamma_like", {}), ("_random_exponential_like", "exponential_like", {}),
        ("_random_poisson_like", "poisson_like", {}),
        ("_random_negative_binomial_like", "negative_binomial_like", {"k": 3, "p": 0.4}),
        ("_random_generalized_negative_binomial_like", "generalized_negative_binomial_like",
         {"mu": 2.0, "alpha": 0.5})]
for op, fn, kw in LIKE:
    zero_grad(op, [op], [rand(2, 3)])(lambda x, fn=fn, kw=kw: getattr(nd.random, fn)(x, **kw))
for op, args in [("_sample_uniform", [rand(3), rand(3) + 2]), ("_sample_normal", [rand(3), pos(3)]),
                 ("_sample_gamma", [pos(3), pos(3, seed=1)]), ("_sample_exponential", [pos(3)]),
                 ("_sample_poisson", [pos(3)]), ("_sample_negative_binomial", [pos(3) + 1, unit(3) * 0.5 + 0.5]),
                 ("_sample_generalized_negative_binomial", [pos(3), pos(3, seed=1)])]:
    zero_grad(op, [op], args)(lambda *a, op=op: getattr(nd._internal, op)(*a, shape=(2,)))
nondiff("shuffle", ["_shuffle"], [rand(4, 3)])(lambda x: nd._internal._shuffle(x))
ONE_HOT = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
grad("multinomial_log_likelihood", ["_sample_multinomial"], [ONE_HOT])(
    lambda p: nd.sample_multinomial(p, shape=(3,), get_prob=True)[1])
zero_grad("multinomial_draws", ["_sample_multinomial"], [ONE_HOT])(
    lambda p: nd.sample_multinomial(p, dtype="float32"))

# Convolution, Deconvolution, Pooling (odd sizes; more combinations in test_conv_pool.py)
CX = rand(2, 4, 6, 5, seed=20)
grad("convolution_2d", ["Convolution"], [CX, rand(3, 2, 3, 2, seed=21), rand(3, seed=22)])(
    lambda x, w, b: nd.Convolution(x, w, b, kernel=(3, 2), stride=(2, 1), pad=(1, 1), dilate=(1, 2),
                                   num_filter=3, num_group=2))
grad("convolution_1d_no_bias", ["Convolution"], [rand(2, 3, 9, seed=23), rand(2, 3, 3, seed=24)])(
    lambda x, w: nd.Convolution(x, w, kernel=(3,), stride=(2,), num_filter=2, no_bias=True))
grad("convolution_3d_depthwise", ["Convolution"], [rand(1, 3, 4, 3, 5, seed=25), rand(3, 1, 2, 2, 3, seed=26)])(
    lambda x, w: nd.Convolution(x, w, kernel=(2, 2, 3), pad=(1, 0, 1), num_filter=3, num_group=3, no_bias=True))
grad("convolution_f64", ["Convolution"], [CX, rand(2, 4, 1, 1, seed=27), rand(2, seed=28)], dtypes=("float64",))(
    lambda x, w, b: nd.Convolution(x, w, b, kernel=(1, 1), stride=(2, 2), num_filter=2))
grad("convolution_v1_2d", ["Convolution_v1"], [CX, rand(3, 4, 2, 2, seed=32), rand(3, seed=33)])(
    lambda x, w, b: nd.Convolution_v1(x, w, b, kernel=(2, 2), stride=(1, 2), pad=(1, 0), num_filter=3))
grad("deconvolution_2d", ["Deconvolution"], [rand(2, 4, 3, 4, seed=29), rand(4, 3, 3, 2, seed=30), rand(6, seed=31)])(
    lambda x, w, b: nd.Deconvolution(x, w, b, kernel=(3, 2), stride=(2, 2), pad=(1, 0), adj=(1, 1),
                                     num_filter=6, num_group=2, no_bias=False))
for pool_type in ["max", "avg", "sum"]:
    grad("pooling_2d_" + pool_type, ["Pooling"], [CX])(
        lambda x, t=pool_type: nd.Pooling(x, kernel=(3, 2), stride=(2, 2), pad=(1, 1), pool_type=t,
                                          pooling_convention="full" if t == "sum" else "valid"))
grad("pooling_lp2", ["Pooling"], [pos(2, 3, 5, 4, seed=32)])(
    lambda x: nd.Pooling(x, kernel=(2, 2), pool_type="lp", p_value=2))
grad("pooling_global_avg_3d", ["Pooling"], [rand(2, 2, 3, 4, 3, seed=33)])(
    lambda x: nd.Pooling(x, global_pool=True, pool_type="avg"))
grad("pooling_v1_max", ["Pooling_v1"], [CX])(
    lambda x: nd.Pooling_v1(x, kernel=(2, 2), stride=(2, 1), pool_type="max"))
