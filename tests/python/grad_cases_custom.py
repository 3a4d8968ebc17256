"""Gradient cases of the Custom operator: operators registered from Python
(mx.operator.CustomOpProp), their backward callbacks checked against libmxnet.so and, in
float64, against central differences of their forward callbacks."""
import mxnet as mx

from gradlib import grad, nd, rand


class SinMul(mx.operator.CustomOp):
    """y = sin(a) * b and z = a * a (two outputs, computed with mxnet operators)."""

    def forward(self, is_train, req, in_data, out_data, aux):
        a, b = in_data
        self.assign(out_data[0], req[0], nd.sin(a) * b)
        self.assign(out_data[1], req[1], a * a)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        a, b = in_data
        dy, dz = out_grad
        self.assign(in_grad[0], req[0], dy * nd.cos(a) * b + 2 * a * dz)
        self.assign(in_grad[1], req[1], dy * nd.sin(a))


@mx.operator.register("grad_case_sin_mul")
class SinMulProp(mx.operator.CustomOpProp):
    def __init__(self):
        super().__init__(need_top_grad=True)

    def list_arguments(self):
        return ["a", "b"]

    def list_outputs(self):
        return ["y", "z"]

    def infer_shape(self, in_shape):
        return in_shape, [in_shape[0], in_shape[0]], []

    def create_operator(self, ctx, shapes, dtypes):
        return SinMul()


grad("custom_two_outputs", ["Custom"], [rand(2, 3, seed=1), rand(2, 3, seed=2)],
     dtypes=("float32", "float64"))(
    lambda a, b: list(nd.Custom(a, b, op_type="grad_case_sin_mul")))
