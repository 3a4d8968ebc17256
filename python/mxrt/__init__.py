"""mxrt: Apache MXNet 1.9.1's C ABI in Rust (libmxrt.so), for the unmodified ``mxnet`` package.

Run an existing MXNet script on libmxrt::

    python -m mxrt train.py --epochs 3        # or: mxrt-run train.py --epochs 3

or, inside a program, before ``import mxnet``::

    import mxrt
    mxrt.activate()
    import mxnet as mx

C, C++ and FFI users find the library and its header with :func:`library_path` and
:func:`include_dir`.

The package holds two builds of the library: one without MPI, which loads anywhere, and one with
the distributed KVStore over Open MPI (``libmpi.so.40``). The MPI build is used where that library
loads; ``MXRT_MPI=0`` or ``1`` in the environment forces the choice.
"""
import ctypes
import os
import sys

from ._version import __version__, MXNET_VERSION

__all__ = ["activate", "active", "library_path", "include_dir", "mxnet_library", "has_mpi",
           "ActivationError", "__version__", "MXNET_VERSION"]

_HERE = os.path.dirname(os.path.abspath(__file__))
_MPI_SONAME = "libmpi.so.40"
# an export libmxnet.so does not have: tells the two libraries apart once loaded
_MXRT_ONLY_SYMBOL = "MXEngineNewVariable"


class ActivationError(RuntimeError):
    """``mxnet`` is already running on another library, or the library cannot be used."""


def has_mpi():
    """True when Open MPI's ``libmpi.so.40`` loads in this process (the MPI build can run)."""
    try:
        ctypes.CDLL(_MPI_SONAME, mode=ctypes.RTLD_GLOBAL)
        return True
    except OSError:
        return False


def _want_mpi(mpi):
    if mpi is not None:
        return bool(mpi)
    forced = os.environ.get("MXRT_MPI", "").strip().lower()
    if forced in ("0", "no", "false", "off"):
        return False
    if forced in ("1", "yes", "true", "on"):
        return True
    return has_mpi()


def library_path(mpi=None):
    """The absolute path of the packaged ``libmxrt.so``.

    ``mpi=None`` picks the MPI build when ``libmpi.so.40`` loads (or as ``MXRT_MPI`` says),
    ``True``/``False`` asks for one of the two builds."""
    want = _want_mpi(mpi)
    path = os.path.join(_HERE, "lib", "mpi" if want else "", "libmxrt.so.0")
    if not os.path.isfile(path):
        if want and mpi is None and not os.environ.get("MXRT_MPI"):
            return library_path(mpi=False)
        raise ActivationError(f"mxrt: {path} is missing: the package is incomplete, reinstall it")
    return os.path.normpath(path)


def include_dir():
    """The directory holding ``mxrt.h`` (compile with ``-I`` it, link ``library_path()``)."""
    return os.path.join(_HERE, "include")


def mxnet_library():
    """The path of the library the imported ``mxnet`` package runs on, or None before
    ``import mxnet``."""
    base = sys.modules.get("mxnet.base")
    lib = getattr(base, "_LIB", None)
    if lib is None:
        return None
    return os.path.realpath(lib._name)


def active():
    """True when the imported ``mxnet`` package runs on libmxrt (this package's or another),
    False when it runs on MXNet's own libmxnet.so, None before ``import mxnet``."""
    base = sys.modules.get("mxnet.base")
    lib = getattr(base, "_LIB", None)
    if lib is None:
        return None
    try:
        getattr(lib, _MXRT_ONLY_SYMBOL)
        return True
    except AttributeError:
        return False


def activate(mpi=None):
    """Makes the ``mxnet`` package load libmxrt: call it before ``import mxnet``.

    Sets ``MXNET_LIBRARY_PATH`` (child processes inherit it, so DataLoader workers and launched
    processes run on libmxrt too) and returns the library's path. Calling it again is harmless;
    calling it after ``mxnet`` was imported on another library raises :class:`ActivationError`."""
    path = library_path(mpi)
    loaded = mxnet_library()
    if loaded is not None:
        if loaded != os.path.realpath(path):
            raise ActivationError(
                f"mxrt.activate: mxnet is already imported and runs on {loaded}; call "
                f"mxrt.activate() before the first 'import mxnet' (or run the program with "
                f"'python -m mxrt')")
        return path
    if "mxnet" in sys.modules:
        raise ActivationError(
            "mxrt.activate: the mxnet package is partly imported (an import of it failed or is "
            "under way); call mxrt.activate() before the first 'import mxnet'")
    os.environ["MXNET_LIBRARY_PATH"] = path
    return path
