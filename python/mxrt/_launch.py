"""``mxrt-launch``: starts a distributed-KVStore job of Python programs on libmxrt.

Takes the options of the launcher script it wraps (``-n WORKERS [-s SERVERS] [--hostfile FILE]
[--dry-run] [--] prog [args...]``). A program that is a Python script (``*.py``) runs as
``python -m mxrt --mpi SCRIPT ARGS`` in every process, with this interpreter; any other program
runs as given, with ``MXNET_LIBRARY_PATH`` set to the MPI build."""
import os
import sys

from . import has_mpi, library_path

_WITH_VALUE = {"-n", "--num-workers", "-s", "--num-servers", "-H", "--hostfile"}
_FLAGS = {"--dry-run", "-h", "--help"}


def _split(argv):
    """(launcher options, program and its arguments)."""
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in _WITH_VALUE:
            i += 2
        elif a in _FLAGS:
            i += 1
        elif a == "--":
            return argv[:i + 1], argv[i + 1:]
        else:
            break
    return argv[:i], argv[i:]


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    opts, prog = _split(argv)
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "mxrt-launch")
    dry = "--dry-run" in opts
    if prog and not dry and not has_mpi():
        print("mxrt-launch: the distributed KVStore needs Open MPI (libmpi.so.40 and mpirun), "
              "which this machine does not have: install it (Debian/Ubuntu: apt-get install "
              "openmpi-bin) and run again", file=sys.stderr)
        return 2
    if prog and prog[0].endswith(".py"):
        prog = [sys.executable, "-m", "mxrt", "--mpi", *prog]
    env = dict(os.environ)
    if prog:
        env["MXRT_MPI"] = "1"
        env["MXNET_LIBRARY_PATH"] = library_path(mpi=True)
    os.execve("/bin/sh", ["/bin/sh", script, *opts, *prog], env)


def console_main():
    sys.exit(main())
