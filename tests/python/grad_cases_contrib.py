"""Gradient cases of the sparse front end's and contrib operators (ops/contrib.rs)."""
from gradlib import grad, nd, nondiff, rand  # noqa: F401

grad("square_sum", ["_square_sum"], [rand(3, 4, seed=21)])(
    lambda x: [nd._internal._square_sum(x, axis=1), nd._internal._square_sum(x, axis=0, keepdims=True),
               nd._internal._square_sum(x)])
grad("quadratic", ["_contrib_quadratic"], [rand(2, 3, seed=22)])(
    lambda x: nd.contrib.quadratic(x, a=0.5, b=-2.0, c=1.0))
nondiff("getnnz", ["_contrib_getnnz"], [rand(3, 4, seed=23)])(
    lambda x: nd.contrib.getnnz(x.tostype("csr")).astype("float32") * x.sum())
