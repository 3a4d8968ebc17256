"""Imports MXNet's Python package on the library MXNET_LIBRARY_PATH names (the wheel's own
libmxnet.so when unset) and prints, as JSON, what the package built from it and what a few
NDArray calls return. test_package.py runs it on libmxrt and on libmxnet and compares."""
import inspect
import json
import os
import sys
import tempfile

import mxnet as mx


def public_functions(module):
    return sorted(n for n, f in vars(module).items() if callable(f) and not n.startswith("__"))


def outcome(f):
    try:
        return {"ok": f()}
    except mx.MXNetError as e:
        return {"error": str(e).splitlines()[0]}


facts = {
    "version": mx.__version__,
    "nd_op": public_functions(mx.nd.op),
    "nd_internal": public_functions(mx.nd._internal),
    "nd_random": public_functions(mx.nd.random),
    "io_iters": sorted(n for n in vars(mx.io) if n.endswith("Iter")),
    # the generated signature and documentation of a few operators
    "docs": {
        name: [str(inspect.signature(getattr(mx.nd, name))), getattr(mx.nd, name).__doc__]
        for name in ["FullyConnected", "Concat", "sgd_update", "broadcast_add", "Activation"]
    },
}

a = mx.nd.array([[1, 2, 3], [4, 5, 6]], dtype="float32")
facts["array"] = a.asnumpy().tolist()
facts["shape"] = list(a.shape)
facts["reshape"] = a.reshape((3, 2)).asnumpy().tolist()
facts["row"] = a[1].asnumpy().tolist()
facts["slice"] = a[0:1].asnumpy().tolist()
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "x.params")
    mx.nd.save(path, {"a": a})
    facts["load"] = {k: v.asnumpy().tolist() for k, v in mx.nd.load(path).items()}
facts["zeros"] = outcome(lambda: mx.nd.zeros((2, 2)).asnumpy().tolist())
facts["unimplemented"] = outcome(lambda: mx.nd.contrib.DeformableConvolution(
    a.reshape((1, 1, 2, 3)), mx.nd.zeros((1, 2, 2, 3)), mx.nd.ones((1, 1, 1, 1)), kernel=(1, 1), num_filter=1,
    no_bias=True).asnumpy().tolist())
facts["data_iter"] = outcome(lambda: str(mx.io.ImageDetRecordIter(path_imgrec="/nonexistent.rec", data_shape=(3, 8, 8), batch_size=2)))

json.dump(facts, sys.stdout)
