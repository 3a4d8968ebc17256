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
# a row_sparse key: each worker pushes one row; the servers' SGD (with weight decay) is lazy, so
# rows nobody pushed keep their value, as in MXNet
kv.init(7, (mx.nd.ones((4, 2)) * 3).tostype("row_sparse"))
wd = 0.1
kv.set_optimizer(mx.optimizer.SGD(learning_rate=lr, rescale_grad=1.0, wd=wd))
want3 = np.ones(shape)
want5 = np.ones((10,)) * 2
out3, out5 = mx.nd.zeros(shape), mx.nd.zeros((10,))
total = n * (n + 1) / 2.0
for step in range(4):
    kv.push([3, 5], [mx.nd.ones(shape) * (rank + 1), mx.nd.arange(10) * (rank + 1)])
    kv.pull([3, 5], out=[out3, out5])
    want3 = (1 - lr * wd) * want3 - lr * total
    want5 = (1 - lr * wd) * want5 - lr * total * np.arange(10)
    np.testing.assert_allclose(out3.asnumpy(), want3, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out5.asnumpy(), want5, rtol=1e-5, atol=1e-6)
    if rank == 0:
        print("step %d: key 3 = %.3f" % (step + 1, out3.asnumpy()[0, 0]))
want7 = np.ones((4, 2)) * 3
rows = mx.nd.sparse.zeros("row_sparse", (4, 2))
for step in range(3):
    g = mx.nd.sparse.row_sparse_array(([[1.0, 2.0]], [rank]), shape=(4, 2))
    kv.push(7, g)
    for r in range(n):
        want7[r] = (1 - lr * wd) * want7[r] - lr * np.array([1.0, 2.0])
    kv.row_sparse_pull(7, out=rows, row_ids=mx.nd.array([0, 1, 2, 3]))
    np.testing.assert_allclose(rows.asnumpy(), want7, rtol=1e-5, atol=1e-6)
    ignored = mx.nd.sparse.zeros("row_sparse", (4, 2))
    kv.pull(7, out=ignored)
    assert ignored.indices.shape == (0,), "pull leaves row_sparse outputs alone"
dense7 = mx.nd.zeros((4, 2))
kv.pull(7, out=dense7)
np.testing.assert_allclose(dense7.asnumpy(), want7, rtol=1e-5, atol=1e-6)
kv._barrier()
print("ok python rank %d" % rank)
