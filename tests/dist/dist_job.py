"""One process of a distributed-kvstore job with MXNet's unmodified Python package on libmxrt
(run by tests/dist/run.sh under mxrt-launch with MXNET_LIBRARY_PATH set).

Servers never get past `import mxnet`: the package sees DMLC_ROLE=server, creates a 'dist'
store and serves in MXKVStoreRunServer until the workers are done. Workers send an SGD
optimizer to the servers (kv.set_optimizer pickles it; the servers' controller unpickles it
and installs it as their updater), push gradients and check the weights they pull against the
SGD rule computed here.
"""
import mxnet as mx
import numpy as np

kv = mx.kv.create("dist_sync")
rank, n = kv.rank, kv.num_workers
assert kv.type == "dist_sync", kv.type
shape = (2, 3)
lr = 0.1
kv.init(3, mx.nd.ones(shape))
kv.init(5, mx.nd.ones((10,)) * 2)
kv.set_optimizer(mx.optimizer.SGD(learning_rate=lr, rescale_grad=1.0, wd=0.0))
want3 = np.ones(shape)
want5 = np.ones((10,)) * 2
out3, out5 = mx.nd.zeros(shape), mx.nd.zeros((10,))
total = n * (n + 1) / 2.0
for step in range(4):
    kv.push([3, 5], [mx.nd.ones(shape) * (rank + 1), mx.nd.arange(10) * (rank + 1)])
    kv.pull([3, 5], out=[out3, out5])
    want3 = want3 - lr * total
    want5 = want5 - lr * total * np.arange(10)
    np.testing.assert_allclose(out3.asnumpy(), want3, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out5.asnumpy(), want5, rtol=1e-5, atol=1e-6)
    if rank == 0:
        print("step %d: key 3 = %.3f" % (step + 1, out3.asnumpy()[0, 0]))
kv._barrier()
print("ok python rank %d" % rank)
