"""The build without MPI (MXRT_MPI=0): everything local runs, a dist_* store is refused with a
message that says MPI is needed and how to get it."""
import mxnet as mx

import mxrt

assert mxrt.active() is True
assert "/lib/mpi/" not in mxrt.mxnet_library(), mxrt.mxnet_library()
kv = mx.kv.create("local")
kv.init(1, mx.nd.ones((2, 2)))
kv.push(1, mx.nd.ones((2, 2)) * 4)
out = mx.nd.zeros((2, 2))
kv.pull(1, out=out)
assert (out.asnumpy() == 4).all(), out
for kind in ("dist_sync", "dist_async", "dist_device_sync"):
    try:
        mx.kv.create(kind)
    except mx.base.MXNetError as e:
        msg = str(e)
        assert "needs MPI" in msg and "openmpi" in msg.lower() and kind in msg, msg
    else:
        raise SystemExit(f"{kind} was created without MPI")
print("no-mpi ok:", msg.splitlines()[0][:200])
