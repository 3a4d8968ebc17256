"""Gradient cases of the elementwise unary, binary, broadcast and scalar operators."""
import numpy as np

from gradlib import grad, nd, nondiff, pos, rand, unit, zero_grad  # noqa: F401

# elementwise unary
UNARY = ["abs", "square", "exp", "expm1", "sin", "cos", "tan", "arctan", "sinh", "cosh", "tanh",
         "arcsinh", "degrees", "radians", "sigmoid", "softsign", "erf", "negative", "_copy"]
for op in UNARY:
    grad("unary_" + op, [op], [rand(2, 3, seed=1)])(lambda x, op=op: getattr(nd, op)(x))
for op in ["sqrt", "rsqrt", "cbrt", "rcbrt", "log", "log10", "log2", "log1p", "reciprocal",
           "gamma", "gammaln"]:
    grad("unary_pos_" + op, [op], [pos(2, 3, seed=2)])(lambda x, op=op: getattr(nd, op)(x))
for op in ["arcsin", "arccos", "arctanh", "erfinv"]:
    grad("unary_unit_" + op, [op], [unit(2, 3, seed=3)])(lambda x, op=op: getattr(nd, op)(x))
grad("unary_arccosh", ["arccosh"], [pos(2, 3) + 1.5])(lambda x: nd.arccosh(x))
# relu away from its kink
grad("unary_relu", ["relu"], [np.array([[-1.0, 0.5, 2.0], [0.3, -0.2, -3.0]])])(lambda x: nd.relu(x))
grad("unary_f64", ["exp"], [rand(4)], dtypes=("float64",))(lambda x: nd.exp(x) * x)
grad("unary_f16", ["exp", "sin"], [rand(4)], numeric=False, dtypes=("float16",))(
    lambda x: nd.exp(x) + nd.sin(x))
for op in ["sign", "round", "rint", "ceil", "floor", "trunc", "fix", "logical_not"]:
    zero_grad("zero_" + op, [op], [rand(2, 3, seed=4) * 3])(lambda x, op=op: getattr(nd, op)(x) * x)
zero_grad("zero_BlockGrad", ["BlockGrad"], [rand(3)])(lambda x: nd.BlockGrad(x) * x)
grad("make_loss", ["make_loss"], [rand(2, 2)], numeric=False)(lambda x: nd.make_loss(x * 2))

# elementwise binary, broadcast, scalar
A, B = rand(2, 3, seed=5), rand(2, 3, seed=6) + 2.5
for name in ["add", "sub", "mul", "div"]:
    grad("binary_" + name, ["elemwise_" + name], [A, B])(
        lambda a, b, name=name: getattr(nd, "elemwise_" + name)(a, b))
grad("binary_operators", ["elemwise_add", "elemwise_sub", "elemwise_mul", "elemwise_div"], [A, B])(
    lambda a, b: [a + b, a - b, a * b, a / b])
grad("binary_mod", ["_mod"], [pos(2, 3) * 3, pos(2, 3, seed=1) + 0.3])(lambda a, b: a % b)
grad("binary_power", ["_power"], [pos(2, 3), rand(2, 3)])(lambda a, b: a ** b)
grad("binary_maximum", ["_maximum"], [A, B - 2.5])(lambda a, b: nd.maximum(a, b))
grad("binary_minimum", ["_minimum"], [A, B - 2.5])(lambda a, b: nd.minimum(a, b))
grad("binary_hypot", ["_hypot"], [A, B])(lambda a, b: nd._internal._hypot(a, b))
ROWV = rand(1, 3, seed=9) + 2.0
COLV = rand(2, 1, seed=10) + 2.0
for op in ["broadcast_add", "broadcast_sub", "broadcast_mul", "broadcast_div", "broadcast_maximum",
           "broadcast_minimum", "broadcast_hypot"]:
    grad(op, [op], [A, ROWV])(lambda a, b, op=op: getattr(nd, op)(a, b))
grad("broadcast_power", ["broadcast_power"], [pos(2, 3), COLV - 2.0])(
    lambda a, b: nd.broadcast_power(a, b))
grad("broadcast_mod", ["broadcast_mod"], [pos(2, 3) * 3, pos(1, 3) + 0.3])(
    lambda a, b: nd.broadcast_mod(a, b))
grad("broadcast_lowrank", ["broadcast_mul", "broadcast_add"], [rand(2, 3, 4), rand(4, seed=2)])(
    lambda a, b: nd.broadcast_mul(a, b) + nd.broadcast_add(a, b))
grad("scalar_ops", ["_plus_scalar", "_minus_scalar", "_rminus_scalar", "_mul_scalar",
                    "_div_scalar", "_rdiv_scalar", "_power_scalar", "_rpower_scalar",
                    "_maximum_scalar", "_minimum_scalar", "_hypot_scalar"], [pos(2, 3)])(
    lambda x: [x + 1, x - 2, 3 - x, x * 4, x / 5, 2 / x, x ** 3, 2 ** x,
               nd.maximum(x, 1.0), nd.minimum(x, 1.0), nd._internal._hypot_scalar(x, scalar=2.0)])
grad("scalar_mod", ["_mod_scalar", "_rmod_scalar"], [pos(2, 3) + 0.1])(
    lambda x: [x % 0.7, 3 % x])
COMPARISONS = {
    "equal": ["_equal", "broadcast_equal", "_equal_scalar"],
    "not_equal": ["_not_equal", "broadcast_not_equal", "_not_equal_scalar"],
    "greater": ["_greater", "broadcast_greater", "_greater_scalar"],
    "greater_equal": ["_greater_equal", "broadcast_greater_equal", "_greater_equal_scalar"],
    "lesser": ["_lesser", "broadcast_lesser", "_lesser_scalar"],
    "lesser_equal": ["_lesser_equal", "broadcast_lesser_equal", "_lesser_equal_scalar"],
    "logical_and": ["_logical_and", "broadcast_logical_and", "_logical_and_scalar"],
    "logical_or": ["_logical_or", "broadcast_logical_or", "_logical_or_scalar"],
    "logical_xor": ["_logical_xor", "broadcast_logical_xor", "_logical_xor_scalar"],
}
for op, covers in COMPARISONS.items():
    zero_grad("zero_" + op, covers, [A, B])(
        lambda a, b, op=op: [getattr(nd._internal, "_" + op)(a, b) * a,
                             getattr(nd, "broadcast_" + op)(a, b) * b,
                             getattr(nd._internal, "_" + op + "_scalar")(a, scalar=0.5) * a])

# composition, reuse, views, in-place outside recording
grad("chain_reuse", ["elemwise_mul", "exp"], [rand(3)])(lambda x: nd.exp(x) * x * x)
grad("grad_add", ["_grad_add"], [A, B])(lambda a, b: nd._internal._grad_add(a, b) * a)
zero_grad("zero_like", ["zeros_like", "ones_like"], [A])(
    lambda x: [nd.zeros_like(x) * 2, nd.ones_like(x) + 1])
grad("view_slice_reshape", ["slice", "Reshape"], [rand(4, 3)], numeric=False)(
    lambda x: (x[1:3] * 2).reshape((3, 2)) * x[0:2].reshape((3, 2)))

