"""A server-less dist_sync job with MXNet's unmodified package on libmxrt (run by
tests/dist/run.sh): each worker pushes one row of a row_sparse key; every worker applies the
same lazy SGD update (weight decay included) to the allreduced sum, so rows nobody pushed keep
their value, and row_sparse_pull returns the model's rows."""
import mxnet as mx
import numpy as np

kv = mx.kv.create("dist_sync")
rank, n = kv.rank, kv.num_workers
# before any updater: a bool key sums as the local stores sum booleans (any true is true)
kv.init(9, mx.nd.array([0, 0, 1, 0], dtype="bool"))
kv.push(9, mx.nd.array([1, rank, 0, 0], dtype="bool"))
flags = mx.nd.zeros((4,), dtype="bool")
kv.pull(9, out=flags)
assert flags.asnumpy().view(np.uint8).tolist() == [1, 1 if n > 1 else 0, 0, 0], flags.asnumpy()
kv._set_updater(mx.optimizer.get_updater(mx.optimizer.SGD(learning_rate=0.1, wd=0.1)))
kv.init(7, (mx.nd.ones((4, 2)) * 3).tostype("row_sparse"))
want = np.ones((4, 2)) * 3
for step in range(3):
    kv.push(7, mx.nd.sparse.row_sparse_array(([[1.0, 2.0]], [rank]), shape=(4, 2)))
    for r in range(n):
        want[r] = 0.99 * want[r] - 0.1 * np.array([1.0, 2.0])
    out = mx.nd.sparse.zeros("row_sparse", (4, 2))
    kv.row_sparse_pull(7, out=out, row_ids=mx.nd.array([0, 1, 2, 3]))
    np.testing.assert_allclose(out.asnumpy(), want, rtol=1e-5)
print("ok sparse serverless rank %d" % rank)
