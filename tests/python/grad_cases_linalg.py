"""Gradient cases of the linear-algebra operators `_linalg_*` (ops/la.rs). Inputs are
well-conditioned: symmetric positive-definite matrices for the Cholesky ops, triangular matrices
with a diagonal away from zero for trmm/trsm/potri, distinct eigenvalues for syevd. The ops that
read one triangle of a symmetric input (potrf, syevd) get it through a symmetrising product, so
the central differences perturb symmetric matrices as MXNet's gradients assume."""
import numpy as np

from gradlib import grad, nd, rand

la = nd.linalg


def lower_tri(*shape, seed=0):
    a = np.tril(rand(*shape, seed=seed))
    n = shape[-1]
    a[..., np.arange(n), np.arange(n)] = 1.5 + np.abs(a[..., np.arange(n), np.arange(n)])
    return a


def sym(a):
    """`a + aᵀ` on the last two axes."""
    return a + nd.swapaxes(a, dim1=a.ndim - 2, dim2=a.ndim - 1)


def spd(a):
    """`a aᵀ + n I`: symmetric positive definite."""
    n = a.shape[-1]
    return nd.broadcast_add(la.syrk(a), nd.array(n * np.eye(n), dtype=a.dtype))


A, B, C = rand(2, 3, 4, seed=1), rand(2, 4, 2, seed=2), rand(2, 3, 2, seed=3)
grad("linalg_gemm", ["_linalg_gemm"], [A, B, C, rand(2, 2, 3, seed=23)])(
    lambda a, b, c, d: [la.gemm(a, b, c, alpha=1.5, beta=-0.5),
                        la.gemm(b, a, d, transpose_a=True, transpose_b=True, alpha=0.5)])
grad("linalg_gemm_axis", ["_linalg_gemm"], [rand(3, 2, 4, seed=4), rand(4, 2, 2, seed=5), rand(3, 2, 2, seed=6)])(
    lambda a, b, c: la.gemm(a, b, c, axis=0, beta=2.0))
grad("linalg_gemm2", ["_linalg_gemm2"], [A, B])(
    lambda a, b: [la.gemm2(a, b, alpha=2.0), la.gemm2(b, a, transpose_a=True, transpose_b=True)])
grad("linalg_potrf", ["_linalg_potrf", "_linalg_syrk"], [rand(2, 3, 3, seed=7)])(
    lambda a: [la.potrf(spd(a)), la.potrf(spd(a), lower=False)])
L = lower_tri(2, 3, 3, seed=8)
grad("linalg_potri", ["_linalg_potri"], [L])(lambda b: la.potri(b))
grad("linalg_potri_upper", ["_linalg_potri"], [np.swapaxes(L, -1, -2)])(lambda b: la.potri(b, lower=False))
grad("linalg_trmm", ["_linalg_trmm"], [L, rand(2, 3, 2, seed=9)])(
    lambda a, b: [la.trmm(a, b, alpha=1.3), la.trmm(a, b, transpose=True)])
grad("linalg_trmm_right_upper", ["_linalg_trmm"], [np.swapaxes(L, -1, -2), rand(2, 2, 3, seed=10)])(
    lambda a, b: [la.trmm(a, b, rightside=True, lower=False), la.trmm(a, b, rightside=True, transpose=True,
                                                                      lower=False, alpha=-0.7)])
grad("linalg_trsm", ["_linalg_trsm"], [L, rand(2, 3, 2, seed=11)])(
    lambda a, b: [la.trsm(a, b, alpha=1.3), la.trsm(a, b, transpose=True)])
grad("linalg_trsm_right_upper", ["_linalg_trsm"], [np.swapaxes(L, -1, -2), rand(2, 2, 3, seed=12)])(
    lambda a, b: [la.trsm(a, b, rightside=True, lower=False), la.trsm(a, b, rightside=True, transpose=True,
                                                                      lower=False, alpha=-0.7)])
grad("linalg_sumlogdiag", ["_linalg_sumlogdiag"], [rand(2, 3, 3, lo=0.5, hi=2.0, seed=13)])(
    lambda a: la.sumlogdiag(a))
grad("linalg_syrk", ["_linalg_syrk"], [A])(lambda a: [la.syrk(a, alpha=0.5), la.syrk(a, transpose=True)])
grad("linalg_extractdiag", ["_linalg_extractdiag"], [rand(2, 4, 4, seed=14)])(
    lambda a: [la.extractdiag(a), la.extractdiag(a, offset=1), la.extractdiag(a, offset=-2)])
grad("linalg_makediag", ["_linalg_makediag"], [rand(2, 3, seed=15)])(
    lambda a: [la.makediag(a), la.makediag(a, offset=1), la.makediag(a, offset=-2)])
grad("linalg_extracttrian", ["_linalg_extracttrian"], [rand(2, 4, 4, seed=16)])(
    lambda a: [la.extracttrian(a), la.extracttrian(a, lower=False), la.extracttrian(a, offset=1),
               la.extracttrian(a, offset=-1)])
grad("linalg_maketrian", ["_linalg_maketrian"], [rand(2, 6, seed=17)])(
    lambda a: [la.maketrian(a), la.maketrian(a, lower=False), la.maketrian(a, offset=1),
               la.maketrian(a, offset=-2)])
grad("linalg_gelqf", ["_linalg_gelqf"], [rand(2, 3, 5, seed=18)])(lambda a: list(la.gelqf(a)))
# distinct eigenvalues: a diagonal spread plus a small symmetric perturbation
EV = np.diag([1.0, 2.5, 4.0, 6.0]) / 2 + 0.2 * rand(4, 4, seed=19)
grad("linalg_syevd", ["_linalg_syevd"], [EV])(lambda a: list(la.syevd(sym(a))))
grad("linalg_inverse", ["_linalg_inverse"], [rand(2, 3, 3, seed=20) + 2 * np.eye(3)])(lambda a: la.inverse(a))
grad("linalg_det", ["_linalg_det"], [rand(2, 3, 3, seed=21) + np.eye(3)])(lambda a: la.det(a))
grad("linalg_slogdet", ["_linalg_slogdet"], [rand(2, 3, 3, seed=22) - 2 * np.eye(3)])(
    lambda a: list(la.slogdet(a)))
