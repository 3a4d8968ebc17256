"""Runs scripts of this directory through MXNet's unmodified Python package on two libraries:
libmxrt (MXRT_LIB, default target/release/libmxrt.so) and the wheel's own libmxnet.so.

The pytest process never imports mxnet itself: the library is chosen when mxnet is imported, so
every script runs in a subprocess with MXNET_LIBRARY_PATH set (or unset for libmxnet.so) and
prints its results as JSON.
"""
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def libmxrt():
    lib = Path(os.environ.get("MXRT_LIB", ROOT / "target" / "release" / "libmxrt.so"))
    if not lib.exists():
        pytest.exit(f"{lib} is not built: run `make lib` first", returncode=2)
    return lib


def run_script(script, library, env=None, args=()):
    """Runs `script` on `library` ('mxnet' for the wheel's own) and returns its completed
    process; the script's stdout is kept as text."""
    child_env = dict(os.environ)
    child_env.pop("MXNET_LIBRARY_PATH", None)
    if library != "mxnet":
        child_env["MXNET_LIBRARY_PATH"] = str(library)
    child_env.update(env or {})
    return subprocess.run([sys.executable, str(HERE / script), *args], env=child_env,
                          capture_output=True, text=True, timeout=600)


@functools.lru_cache(maxsize=None)
def json_results(script, library, env_items=()):
    """`script`'s JSON output on `library` (cached: each script runs once per library)."""
    proc = run_script(script, library, dict(env_items))
    if proc.returncode != 0:
        raise AssertionError(f"{script} failed on {library}:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout)


def op_case_names():
    """The case names of op_cases.py, read without importing mxnet (the `case("name")` calls
    and the names the loops build are listed by the script itself with --list)."""
    proc = subprocess.run([sys.executable, str(HERE / "op_cases.py"), "--list"],
                          capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if k != "MXNET_LIBRARY_PATH"})
    if proc.returncode != 0:
        raise RuntimeError(f"op_cases.py --list failed:\n{proc.stderr[-4000:]}")
    return proc.stdout.split()


def pytest_generate_tests(metafunc):
    if "op_case" in metafunc.fixturenames:
        metafunc.parametrize("op_case", op_case_names())
