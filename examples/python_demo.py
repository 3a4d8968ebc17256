"""MXNet's own Python package on libmxrt: NDArray arithmetic, then a linear regression trained
with mx.optimizer's SGD through a KVStore (gradients computed with NDArray operators).

    MXNET_LIBRARY_PATH=target/release/libmxrt.so python examples/python_demo.py
"""
import os

import mxnet as mx

nd = mx.nd
print("library:", os.environ.get("MXNET_LIBRARY_PATH", "libmxnet.so (the wheel's)"))
a = nd.array([[1, 2, 3], [4, 5, 6]])
print("a * 2 + [10, 20, 30] =\n", (a * 2 + nd.array([10, 20, 30])).asnumpy())
print("softmax(a) rows sum to", nd.softmax(a).sum(axis=1).asnumpy())

mx.random.seed(0)
n, d = 1000, 8
true_w = nd.arange(1, d + 1).reshape((d, 1)) / d
x = nd.random.normal(shape=(n, d))
y = nd.dot(x, true_w) + 0.01 * nd.random.normal(shape=(n, 1))

kv = mx.kv.create("local")
kv.set_optimizer(mx.optimizer.SGD(learning_rate=0.1, momentum=0.9))
w = nd.zeros((d, 1))
kv.init("w", w)
for step in range(60):
    err = nd.dot(x, w) - y
    grad = nd.dot(x, err, transpose_a=True) / n
    kv.push("w", grad)
    kv.pull("w", out=w)
    if step % 20 == 19:
        print(f"step {step + 1:2d}: loss {float((err ** 2).mean().asscalar()):.6f}")
print("learned w:", w.reshape((-1,)).asnumpy().round(3))
print("true w:   ", true_w.reshape((-1,)).asnumpy().round(3))
