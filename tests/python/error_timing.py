"""Where an operator's error reaches Python: at the call (what MXNet checks when an op is invoked:
shapes, dtypes, parameter syntax) or at the next wait on its output (what MXNet checks in the
kernel: parameter values of the samplers). Prints JSON: for each case, "call", "wait" or "none"."""
import json

import mxnet as mx
from mxnet import nd


def when(make):
    try:
        out = make()
    except mx.MXNetError:
        return "call"
    try:
        (out[0] if isinstance(out, (list, tuple)) else out).asnumpy()
    except mx.MXNetError:
        return "wait"
    return "none"


cases = {
    "normal_negative_scale": lambda: nd.random.normal(0, -1, shape=(2, 2)),
    "uniform_low_above_high": lambda: nd.random.uniform(2, 1, shape=(3,)),
    "gamma_negative_alpha": lambda: nd.random.gamma(-1, 1, shape=(2,)),
    "exponential_negative": lambda: nd.random.exponential(-2, shape=(2,)),
    "poisson_negative": lambda: nd.random.poisson(-1, shape=(2,)),
    "normal_like_negative": lambda: nd.random.normal_like(nd.ones((2,)), loc=0, scale=-1),
    "dot_after_bad_normal": lambda: nd.dot(nd.random.normal(0, -1, (2, 2)), nd.ones((2, 2))),
    "sample_normal_negative": lambda: nd.sample_normal(nd.array([0.0]), nd.array([-1.0]), shape=(2,)),
    "shape_mismatch": lambda: nd.ones((2, 3)) + nd.ones((4, 5)),
    "unknown_parameter": lambda: nd.sum(nd.ones((2,)), axiss=0),
    "bad_axis": lambda: nd.sum(nd.ones((2,)), axis=3),
    "valid": lambda: nd.random.normal(0, 1, shape=(2,)),
}
print(json.dumps({k: when(f) for k, f in cases.items()}))
