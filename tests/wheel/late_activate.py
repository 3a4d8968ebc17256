"""mxnet imported on its own libmxnet.so first: activate() must refuse with a clear error."""
import mxnet  # noqa: F401

import mxrt

assert mxrt.active() is False
try:
    mxrt.activate()
except mxrt.ActivationError as e:
    assert "already imported" in str(e) and "libmxnet.so" in str(e), e
    print("refused:", e)
else:
    raise SystemExit("activate() after import mxnet on libmxnet.so did not refuse")
