"""Gradient cases of the small tensor and contrib operators (ops/misc.rs, ops/im2col.rs) and
the random densities (ops/pdf.rs)."""
import numpy as np

from gradlib import grad, mx, nd, nondiff, pos, rand, zero_grad  # noqa: F401

nondiff("khatri_rao", ["khatri_rao"], [rand(2, 3, seed=1), rand(4, 3, seed=2)])(lambda a, b: nd.khatri_rao(a, b))
grad("cumsum", ["_np_cumsum"], [rand(3, 4, seed=3)])(
    lambda x: [nd.cumsum(x, axis=1), nd.cumsum(x), nd.cumsum(x, axis=0) * x])
zero_grad("ravel_multi_index", ["_ravel_multi_index"], [np.array([[3.0, 6.0, 1.0], [4.0, 5.0, 2.0]])])(
    lambda i: nd.ravel_multi_index(i, shape=(7, 6)))
zero_grad("unravel_index", ["_unravel_index"], [np.array([22.0, 41.0, 3.0])])(
    lambda i: nd.unravel_index(i, shape=(7, 6)))
grad("scatter_nd", ["scatter_nd"], [rand(3, 2, seed=4), (np.array([[0, 2, 3], [1, 0, 2]], dtype=np.int32), False)])(
    lambda d, i: nd.scatter_nd(d, i, shape=(4, 3, 2)) * 2)
grad("backward_gather_nd", ["_backward_gather_nd"],
     [rand(3, 2, seed=24), (np.array([[0, 2, 0], [1, 0, 1]], dtype=np.int32), False)])(
    lambda d, i: nd._internal._backward_gather_nd(d, i, shape=(4, 3, 2)) * 2)
nondiff("all_finite", ["all_finite"], [rand(2, 3, seed=5)])(lambda x: nd.all_finite(x))
nondiff("multi_all_finite", ["multi_all_finite"], [rand(2, 3, seed=6), rand(4, seed=7)])(
    lambda a, b: nd.multi_all_finite(a, b, num_arrays=2))
grad("amp_multicast", ["amp_multicast"], [rand(2, 3, seed=8), rand(4, seed=9)], numeric=False)(
    lambda a, b: list(nd.amp_multicast(a, b, num_outputs=2)))


def reset_recorded(x):
    # reset_arrays has no outputs and no gradient (recording it crashes MXNet 1.9.1): run
    # unrecorded inside the recorded graph, the zeroed array keeps its place in the graph
    y = x * 3
    with mx.autograd.pause():
        nd.reset_arrays(y, num_arrays=1)
    return y + x


grad("reset_arrays", ["reset_arrays"], [rand(2, 3, seed=10)], numeric=False)(reset_recorded)


def kl_sparse_reg(x):
    # called through a CachedOp: the moving average is an auxiliary input the nd function does not take
    op = nd.CachedOp(mx.sym.IdentityAttachKLSparseReg(mx.sym.var("data"), penalty=0.01, name="kl"))
    return op(x, nd.array([0.3, 0.5, 0.7], dtype=x.dtype))


# the backward adds the sparseness penalty, which the forward does not contain: no central differences
grad("kl_sparse_reg", ["IdentityAttachKLSparseReg"], [rand(4, 3, lo=0.1, hi=0.9, seed=11)], numeric=False)(
    kl_sparse_reg)
grad("adaptive_avg_pool", ["_contrib_AdaptiveAvgPooling2D"], [rand(1, 2, 5, 7, seed=12)])(
    lambda x: [nd.contrib.AdaptiveAvgPooling2D(x, output_size=(3, 4)), nd.contrib.AdaptiveAvgPooling2D(x)])
grad("im2col", ["im2col"], [rand(1, 2, 5, 4, seed=13)])(
    lambda x: nd.im2col(x, kernel=(2, 3), stride=(2, 1), pad=(1, 1)))
grad("col2im", ["col2im"], [rand(1, 8, 12, seed=14)])(
    lambda c: nd.col2im(c, output_size=(5, 4), kernel=(2, 2), pad=(1, 0), stride=(1, 1), dilate=(1, 2)))

S = rand(2, 3, lo=0.3, hi=2.0, seed=15)
P = rand(2, lo=0.6, hi=1.8, seed=16)
COUNTS = np.array([[0.0, 2.0, 1.0], [4.0, 1.0, 3.0]])
for is_log in [False, True]:
    t = "_log" if is_log else ""
    grad("pdf_uniform" + t, ["_random_pdf_uniform"], [S, P - 0.6, P + 2.0])(
        lambda s, a, b, l=is_log: nd.random_pdf_uniform(s, a, b, is_log=l))
    grad("pdf_normal" + t, ["_random_pdf_normal"], [S, P, P + 0.3])(
        lambda s, a, b, l=is_log: nd.random_pdf_normal(s, a, b, is_log=l))
    grad("pdf_gamma" + t, ["_random_pdf_gamma"], [S, P + 0.5, P])(
        lambda s, a, b, l=is_log: nd.random_pdf_gamma(s, a, b, is_log=l))
    grad("pdf_exponential" + t, ["_random_pdf_exponential"], [S, P])(
        lambda s, a, l=is_log: nd.random_pdf_exponential(s, a, is_log=l))
    grad("pdf_poisson" + t, ["_random_pdf_poisson"], [(COUNTS, False), P * 2])(
        lambda s, a, l=is_log: nd.random_pdf_poisson(s, a, is_log=l))
    grad("pdf_negative_binomial" + t, ["_random_pdf_negative_binomial"],
         [(COUNTS, False), P * 2, rand(2, lo=0.3, hi=0.7, seed=17)])(
        lambda s, a, b, l=is_log: nd.random_pdf_negative_binomial(s, a, b, is_log=l))
    grad("pdf_generalized_negative_binomial" + t, ["_random_pdf_generalized_negative_binomial"],
         [(COUNTS, False), P * 2, rand(2, lo=0.3, hi=0.9, seed=18)])(
        lambda s, a, b, l=is_log: nd.random_pdf_generalized_negative_binomial(s, a, b, is_log=l))
    D = rand(2, 3, 4, lo=0.1, hi=1.0, seed=19)
    grad("pdf_dirichlet" + t, ["_random_pdf_dirichlet"], [D / D.sum(axis=-1, keepdims=True), pos(2, 4, seed=20)])(lambda s, a, l=is_log: nd.random_pdf_dirichlet(s, a, is_log=l))


def batchnorm_v1(x, g, b):
    # through a CachedOp: the nd function does not take the moving statistics
    v = mx.sym.var
    op = nd.CachedOp(mx.sym.BatchNorm_v1(v("data"), v("gamma"), v("beta"), fix_gamma=False, name="bn"))
    return op(x, g, b, nd.zeros((3,), dtype=x.dtype), nd.ones((3,), dtype=x.dtype))


# float32 only (as MXNet's legacy kernel): no float64 central differences
grad("batchnorm_v1", ["BatchNorm_v1"], [rand(4, 3, seed=21), pos(3, seed=22), rand(3, seed=23)], numeric=False)(
    batchnorm_v1)
