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

# sums, differences and products on a GPU (mxrt's kernels; the fake runs their host twins)
# equal the CPU's bit for bit
specials = np.array([0.0, -0.0, 65504, np.inf, -np.inf, np.nan, 6e-8, 1e-5, -3.5, 2049], "float16")
for dtype in ["float32", "float64", "float16", "int32", "int64", "int8", "uint8"]:
    xs = [(rng.standard_normal((7, 33)) * 100).astype(dtype) for _ in range(3)]
    if dtype == "float16":
        xs[0][0, :10] = specials
        xs[1][0, :10] = specials[::-1]
    cpu = [mx.nd.array(x, dtype=dtype) for x in xs]
    gpu = [x.as_in_context(mx.gpu(1)) for x in cpu]
    for name, f in [("a + b", lambda v: v[0] + v[1]),
                    ("elemwise_add", lambda v: mx.nd.elemwise_add(v[0], v[1])),
                    ("add_n", lambda v: mx.nd.add_n(*v)), ("add_n of one", lambda v: mx.nd.add_n(v[2])),
                    ("a - b", lambda v: v[0] - v[1]), ("a * b", lambda v: v[0] * v[1]),
                    ("elemwise_sub", lambda v: mx.nd.elemwise_sub(v[2], v[0])),
                    ("elemwise_mul", lambda v: mx.nd.elemwise_mul(v[1], v[2]))]:
        got = f(gpu)
        assert got.context == mx.gpu(1), name
        assert got.asnumpy().tobytes() == f(cpu).asnumpy().tobytes(), (dtype, name)
    g, c = gpu[0].copy(), cpu[0].copy()
    g += gpu[1]
    c += cpu[1]
    mx.nd.add_n(gpu[1], g, gpu[2], out=g)
    mx.nd.add_n(cpu[1], c, cpu[2], out=c)
    assert g.asnumpy().tobytes() == c.asnumpy().tobytes(), (dtype, "in place")
try:
    (gpu[0] + cpu[0]).asnumpy()
    raise AssertionError("a sum across devices ran")
except mx.base.MXNetError as e:
    assert "every array must be on gpu(1)" in str(e), e

x = rng.standard_normal((4, 3)).astype("float32")
a = mx.nd.array(x, ctx=mx.gpu(1))
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "arrays.params")
    mx.nd.save(path, {"g": a, "c": a.as_in_context(mx.cpu())})
    loaded = mx.nd.load(path)
    assert loaded["g"].context == mx.gpu(1) and loaded["c"].context == mx.cpu()
    np.testing.assert_array_equal(loaded["g"].asnumpy(), x)

# DLPack: a GPU array is exported as kDLGPU memory and imported back without a copy
shared = mx.nd.from_dlpack(a.to_dlpack_for_read())
assert shared.context == mx.gpu(1)
np.testing.assert_array_equal(shared.asnumpy(), x)
writable = mx.nd.from_dlpack(a.to_dlpack_for_write())
writable[:] = mx.nd.zeros((4, 3))
writable.wait_to_read()  # a DLPack import has its own variable: the write is not ordered with a
np.testing.assert_array_equal(a.asnumpy(), np.zeros((4, 3), "float32"))

try:
    (a * 2).asnumpy()
    raise AssertionError("an op without a GPU kernel ran")
except mx.base.MXNetError as e:
    assert "has no GPU kernel yet" in str(e), e
try:
    mx.nd.zeros((2,), ctx=mx.gpu(2))
    raise AssertionError("gpu(2) exists")
except mx.base.MXNetError as e:
    assert "gpu(2) does not exist" in str(e), e
# KVStores with values on both GPUs: the pulled sums equal a CPU-only store's, with and without
# an optimizer on the store
shape = (6, 50)
for dtype in ["float32", "float64", "float16", "int32", "int64", "uint8"]:
    for kind in ["local", "device"]:
        xs = [(rng.standard_normal(shape) * 30).astype(dtype) for _ in range(4)]
        results = {}
        for place in ["cpu", "gpu"]:
            kv = mx.kv.create(kind)
            ctxs = [mx.cpu()] * 4 if place == "cpu" else [mx.gpu(i % 2) for i in range(4)]
            kv.init(7, mx.nd.array(xs[0], ctx=ctxs[1], dtype=dtype))
            kv.push(7, [mx.nd.array(x, ctx=c, dtype=dtype) for x, c in zip(xs, ctxs)])
            outs = [mx.nd.zeros(shape, ctx=c, dtype=dtype) for c in ctxs]
            kv.pull(7, out=outs)
            got = [o.asnumpy() for o in outs]
            assert all(g.tobytes() == got[0].tobytes() for g in got), (dtype, kind, place)
            results[place] = got[0]
        assert results["cpu"].tobytes() == results["gpu"].tobytes(), (dtype, kind)
for kind in ["local", "device"]:
    results = {}
    for place in ["cpu", "gpu"]:
        kv = mx.kv.create(kind)
        kv.set_optimizer(mx.optimizer.SGD(learning_rate=0.1, momentum=0.9))
        ctxs = [mx.cpu()] * 2 if place == "cpu" else [mx.gpu(0), mx.gpu(1)]
        kv.init(3, mx.nd.array(np.ones(shape, "float32"), ctx=ctxs[0]))
        for step in range(3):
            kv.push(3, [mx.nd.array(np.full(shape, 0.5 + i + step, "float32"), ctx=c)
                        for i, c in enumerate(ctxs)])
        outs = [mx.nd.zeros(shape, ctx=c) for c in ctxs]
        kv.pull(3, out=outs)
        results[place] = outs[1].asnumpy()
    assert results["cpu"].tobytes() == results["gpu"].tobytes(), (kind, "sgd")
print("ok: MXNet's Python package with gpu(0) and gpu(1) arrays")
