"""An unmodified-style MXNet script: a few Gluon training steps. Prints its argv, which library
mxnet runs on and the final loss; exits with the status given by --exit."""
import sys

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

print("argv", sys.argv[1:])
print("name", __name__)
print("library", mx.base._LIB._name)
rng = np.random.RandomState(1)  # the same data and weights on every library
net = gluon.nn.HybridSequential()
net.add(gluon.nn.Dense(16, activation="relu", in_units=8), gluon.nn.Dense(1, in_units=16))
net.initialize()
for p in net.collect_params().values():
    p.set_data(mx.nd.array(rng.uniform(-0.5, 0.5, p.shape)))
net.hybridize()
trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.05})
x = mx.nd.array(rng.uniform(size=(64, 8)))
y = x.sum(axis=1, keepdims=True)
loss_fn = gluon.loss.L2Loss()
for _ in range(30):
    with autograd.record():
        loss = loss_fn(net(x), y)
    loss.backward()
    trainer.step(64)
print("loss %.6f" % loss.mean().asscalar())
if "--raise" in sys.argv:
    raise ValueError("raised by the script")
if "--exit" in sys.argv:
    sys.exit(int(sys.argv[sys.argv.index("--exit") + 1]))
