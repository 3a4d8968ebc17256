"""Gradient cases of the sparse front end's and contrib operators (ops/contrib.rs)."""
from gradlib import grad, nd, nondiff, rand  # noqa: F401

grad("square_sum", ["_square_sum"], [rand(3, 4, seed=21)])(
    lambda x: [nd._internal._square_sum(x, axis=1), nd._internal._square_sum(x, axis=0, keepdims=True),
               nd._internal._square_sum(x)])
grad("quadratic", ["_contrib_quadratic"], [rand(2, 3, seed=22)])(
    lambda x: nd.contrib.quadratic(x, a=0.5, b=-2.0, c=1.0))
nondiff("getnnz", ["_contrib_getnnz"], [rand(3, 4, seed=23)])(
    lambda x: nd.contrib.getnnz(x.tostype("csr")).astype("float32") * x.sum())

# transformer building blocks (ops/transformer.rs)
grad("interleaved_selfatt_qk", ["_contrib_interleaved_matmul_selfatt_qk"],
     [rand(3, 2, 12, seed=24)])(
    lambda x: nd.contrib.interleaved_matmul_selfatt_qk(x, heads=2))
grad("interleaved_selfatt_valatt", ["_contrib_interleaved_matmul_selfatt_valatt"],
     [rand(3, 2, 12, seed=25), rand(4, 3, 3, seed=26)])(
    lambda x, a: nd.contrib.interleaved_matmul_selfatt_valatt(x, a, heads=2))
grad("interleaved_encdec_qk", ["_contrib_interleaved_matmul_encdec_qk"],
     [rand(3, 2, 4, seed=27), rand(5, 2, 8, seed=28)])(
    lambda q, kv: nd.contrib.interleaved_matmul_encdec_qk(q, kv, heads=2))
grad("interleaved_encdec_valatt", ["_contrib_interleaved_matmul_encdec_valatt"],
     [rand(5, 2, 8, seed=29), rand(4, 3, 5, seed=30)])(
    lambda kv, a: nd.contrib.interleaved_matmul_encdec_valatt(kv, a, heads=2))
grad("boolean_mask", ["_contrib_boolean_mask"], [rand(5, 3, seed=31)])(
    lambda x: nd.contrib.boolean_mask(x, nd.array([1, 0, 1, 1, 0], dtype=x.dtype)))
grad("index_copy", ["_contrib_index_copy"], [rand(5, 3, seed=32), rand(2, 3, seed=33)])(
    lambda old, new: nd.contrib.index_copy(old, nd.array([4, 1], dtype="int64"), new))
grad("index_array", ["_contrib_index_array"], [rand(2, 3, seed=34)])(
    lambda x: nd.contrib.index_array(x).astype(x.dtype) * x.expand_dims(-1))
