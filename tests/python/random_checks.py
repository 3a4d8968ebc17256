"""Random operators on the library MXNET_LIBRARY_PATH names: MXRandomSeed makes them
reproducible, and each distribution has its moments (the streams need not equal MXNet's)."""
import numpy as np
import mxnet as mx

nd = mx.nd
N = 200000


def check(name, sample, mean, var):
    s = sample.asnumpy().astype("float64")
    m, v = s.mean(), s.var()
    assert abs(m - mean) <= 0.02 * max(1.0, abs(mean)), f"{name}: mean {m}, expected {mean}"
    assert abs(v - var) <= 0.03 * max(1.0, abs(var)), f"{name}: variance {v}, expected {var}"


mx.random.seed(42)
a = nd.random.uniform(-1, 3, shape=(1000,)).asnumpy()
mx.random.seed(42)
b = nd.random.uniform(-1, 3, shape=(1000,)).asnumpy()
c = nd.random.uniform(-1, 3, shape=(1000,)).asnumpy()
assert (a == b).all(), "the same seed gives the same numbers"
assert not (a == c).all(), "the next draw differs"
assert a.min() >= -1 and a.max() < 3

check("uniform", nd.random.uniform(-1, 3, shape=(N,)), 1.0, 16 / 12)
check("normal", nd.random.normal(2, 3, shape=(N,)), 2.0, 9.0)
check("normal_f64", nd.random.normal(0, 1, shape=(N,), dtype="float64"), 0.0, 1.0)
check("gamma", nd.random.gamma(2.5, 2.0, shape=(N,)), 5.0, 10.0)
check("exponential", nd.random.exponential(0.5, shape=(N,)), 0.5, 0.25)
check("poisson", nd.random.poisson(4.0, shape=(N,)), 4.0, 4.0)
check("poisson_large", nd.random.poisson(40.0, shape=(N,)), 40.0, 40.0)
check("negative_binomial", nd.random.negative_binomial(3, 0.4, shape=(N,)), 4.5, 11.25)
check("generalized_negative_binomial", nd.random.generalized_negative_binomial(2.0, 0.5, shape=(N,)), 2.0, 4.0)
r = nd.random.randint(3, 9, shape=(N,))
assert r.dtype == np.int32 and r.asnumpy().min() == 3 and r.asnumpy().max() == 8
check("randint", r, 5.5, 35 / 12)

# per-element parameters: each row follows its own distribution
s = nd.sample_normal(nd.array([0.0, 10.0]), nd.array([1.0, 2.0]), shape=(N // 2,)).asnumpy()
assert s.shape == (2, N // 2)
check("sample_normal_row0", nd.array(s[0]), 0.0, 1.0)
check("sample_normal_row1", nd.array(s[1]), 10.0, 4.0)
u = nd.sample_uniform(nd.array([0.0, 5.0]), nd.array([1.0, 6.0]), shape=(1000,)).asnumpy()
assert u[0].max() < 1 and u[1].min() >= 5

x = nd.random.shuffle(nd.arange(100)).asnumpy()
assert sorted(x.tolist()) == list(range(100)) and x.tolist() != list(range(100))
probs = nd.array([[0.1, 0.6, 0.3], [1.0, 0.0, 0.0]])
m = nd.random.multinomial(probs, shape=(N // 4,)).asnumpy()
assert m.shape == (2, N // 4) and (m[1] == 0).all()
counts = np.bincount(m[0], minlength=3) / (N // 4)
assert np.allclose(counts, [0.1, 0.6, 0.3], atol=0.01), counts
like = nd.random.uniform_like(nd.zeros((3, 4)))
# without a dtype, a draw into an `out=` array takes its dtype (Gluon's initialisers after
# `cast("float64")`); an explicit dtype still has to match it
o = nd.zeros((N,), dtype="float64")
nd.random.uniform(-1, 3, shape=(N,), out=o)
assert o.dtype == np.float64
check("uniform_out_f64", o, 1.0, 16 / 12)
try:
    nd.random.uniform(0, 1, shape=(4,), dtype="float32", out=nd.zeros((4,), dtype="float64"))
    raise AssertionError("a float32 draw into a float64 array was accepted")
except mx.base.MXNetError:
    pass
assert like.shape == (3, 4)
# Dropout in training mode: zeros with probability p, the rest scaled by 1 / (1 - p); with axes
# one draw is shared along them; outside training (and at p = 0) an identity
with mx.autograd.train_mode():
    d = nd.Dropout(nd.ones((N,)), p=0.3).asnumpy()
    assert np.isclose(d, 0).sum() + np.isclose(d, 1 / 0.7).sum() == N, np.unique(d)
    assert abs((d == 0).mean() - 0.3) < 0.01 and abs(d.mean() - 1.0) < 0.02
    v = nd.Dropout(nd.ones((2000, 6)), p=0.5, axes=(1,)).asnumpy()
    assert (v == v[:, :1]).all() and abs((v[:, 0] == 0).mean() - 0.5) < 0.05
assert (nd.Dropout(nd.ones((100,)), p=0.5).asnumpy() == 1).all()
a = nd.Dropout(nd.ones((N,)), p=0.25, mode="always").asnumpy()
assert abs((a == 0).mean() - 0.25) < 0.01
print("all random checks passed")
