"""MXNet's unmodified Python package with GPU arrays on the fake CUDA driver (tests/gpu/run.sh):
every result is compared with the NumPy data it came from."""
import os
import tempfile

import mxnet as mx
import numpy as np

rng = np.random.default_rng(7)
assert mx.context.num_gpus() == 2

for dtype in ["float32", "float64", "float16", "int32", "int64", "int8", "uint8"]:
    x = (rng.standard_normal((5, 6)) * 50).astype(dtype)
    a = mx.nd.array(x, ctx=mx.gpu(0), dtype=dtype)
    assert a.context == mx.gpu(0) and a.dtype == np.dtype(dtype)
    b = a.copyto(mx.gpu(1))
    c = b.as_in_context(mx.cpu())
    p = b.as_in_context(mx.cpu_pinned(0))
    assert b.context == mx.gpu(1) and c.context == mx.cpu() and p.context == mx.cpu_pinned(0)
    for arr in (a, b, c, p):
        np.testing.assert_array_equal(arr.asnumpy(), x)
    np.testing.assert_array_equal(a[1:4].asnumpy(), x[1:4])
    np.testing.assert_array_equal(b[2].asnumpy(), x[2])
    a[:] = mx.nd.array(x[::-1].copy(), dtype=dtype)  # host -> existing GPU array
    np.testing.assert_array_equal(a.asnumpy(), x[::-1])

    np.testing.assert_array_equal(mx.nd.zeros((3, 4), ctx=mx.gpu(1), dtype=dtype).asnumpy(),
                                  np.zeros((3, 4), dtype))
    np.testing.assert_array_equal(mx.nd.ones((3, 4), ctx=mx.gpu(0), dtype=dtype).asnumpy(),
                                  np.ones((3, 4), dtype))
    np.testing.assert_array_equal(mx.nd.full((2, 2), 7, ctx=mx.gpu(1), dtype=dtype).asnumpy(),
                                  np.full((2, 2), 7, dtype))
    np.testing.assert_array_equal(mx.nd.zeros_like(b).asnumpy(), np.zeros_like(x))

x = rng.standard_normal((4, 3)).astype("float32")
a = mx.nd.array(x, ctx=mx.gpu(1))
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "arrays.params")
    mx.nd.save(path, {"g": a, "c": a.as_in_context(mx.cpu())})
    loaded = mx.nd.load(path)
    assert loaded["g"].context == mx.gpu(1) and loaded["c"].context == mx.cpu()
    np.testing.assert_array_equal(loaded["g"].asnumpy(), x)

try:
    (a + 1).asnumpy()
    raise AssertionError("an op without a GPU kernel ran")
except mx.base.MXNetError as e:
    assert "has no GPU kernel yet" in str(e), e
try:
    mx.nd.zeros((2,), ctx=mx.gpu(2))
    raise AssertionError("gpu(2) exists")
except mx.base.MXNetError as e:
    assert "gpu(2) does not exist" in str(e), e
print("ok: MXNet's Python package with gpu(0) and gpu(1) arrays")
