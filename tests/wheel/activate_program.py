"""mxrt.activate() inside a program, then the same training as train_script.py; then activate()
after mxnet is imported: harmless on the same library."""
import runpy
import sys

import mxrt

path = mxrt.activate()
assert mxrt.active() is None, "mxnet is not imported yet"
import mxnet  # noqa: E402

assert mxrt.active() is True, mxrt.mxnet_library()
assert mxrt.mxnet_library() == __import__("os").path.realpath(path), (mxrt.mxnet_library(), path)
assert mxrt.activate() == path
sys.argv = [sys.argv[0], "from-activate"]
runpy.run_path(sys.argv[0].replace("activate_program.py", "train_script.py"), run_name="__main__")
print("activate ok", mxrt.__version__)
