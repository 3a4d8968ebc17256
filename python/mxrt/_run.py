"""Runs a Python program on libmxrt the way ``python`` would have run it."""
import os
import runpy
import signal
import sys

from . import __version__, activate, ActivationError

USAGE = """usage: python -m mxrt [--mpi | --no-mpi] SCRIPT [ARGS...]
       python -m mxrt [--mpi | --no-mpi] -m MODULE [ARGS...]
       python -m mxrt [--mpi | --no-mpi] -c CODE [ARGS...]
       python -m mxrt --version | --library | --include-dir

Runs an unmodified MXNet program with the mxnet package on libmxrt: as `python SCRIPT ARGS`
would (sys.argv, __main__, exit status and tracebacks as there), with MXNET_LIBRARY_PATH set
for it and for the processes it starts. --mpi / --no-mpi pick the build with or without the
distributed KVStore (default: the MPI build where Open MPI's libmpi.so.40 loads)."""


def _trimmed(tb):
    """`tb` without the frames of this module and of runpy, so the traceback starts where the
    program's own would."""
    skip = (os.path.abspath(__file__), runpy.__file__)
    while tb is not None and (tb.tb_frame.f_code.co_filename in skip
                              or tb.tb_frame.f_code.co_filename.startswith("<frozen runpy")):
        tb = tb.tb_next
    return tb


def _report(exc):
    tb = _trimmed(exc.__traceback__)
    sys.excepthook(type(exc), exc.with_traceback(tb), tb)


def main(argv):
    mpi = None
    while argv and argv[0] in ("--mpi", "--no-mpi"):
        mpi = argv.pop(0) == "--mpi"
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] == "--version":
        print(f"mxrt {__version__}")
        return 0
    if argv[0] in ("--library", "--include-dir"):
        from . import library_path, include_dir
        print(library_path(mpi) if argv[0] == "--library" else include_dir())
        return 0
    try:
        activate(mpi)
    except ActivationError as e:
        print(e, file=sys.stderr)
        return 2

    try:
        if argv[0] == "-m":
            if len(argv) < 2:
                print("python -m mxrt: -m needs a module name", file=sys.stderr)
                return 2
            sys.argv = argv[1:]
            sys.path[0] = os.getcwd()
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        elif argv[0] == "-c":
            if len(argv) < 2:
                print("python -m mxrt: -c needs a program text", file=sys.stderr)
                return 2
            sys.argv = ["-c", *argv[2:]]
            sys.path[0] = ""
            main_module = sys.modules["__main__"]
            main_module.__dict__.clear()
            main_module.__dict__.update(__name__="__main__", __builtins__=__builtins__)
            exec(compile(argv[1], "<string>", "exec"), main_module.__dict__)
        else:
            script = argv[0]
            if not os.path.exists(script):
                print(f"{sys.executable}: can't open file {os.path.abspath(script)!r}: "
                      f"[Errno 2] No such file or directory", file=sys.stderr)
                return 2
            sys.argv = list(argv)
            sys.path[0] = os.path.dirname(os.path.abspath(script))
            runpy.run_path(script, run_name="__main__")
    except SystemExit:
        raise
    except KeyboardInterrupt as e:
        _report(e)
        # as python itself: end by SIGINT, so the parent sees an interrupted child
        sys.stdout.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        return 130
    except BaseException as e:  # noqa: B902 - reported as python reports an uncaught exception
        _report(e)
        return 1
    return 0


def console_main():
    """The `mxrt-run` console script."""
    sys.exit(main(sys.argv[1:]))
