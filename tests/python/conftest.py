"""Runs scripts of this directory through MXNet's unmodified Python package on two libraries:
libmxrt (MXRT_LIB, default target/release/libmxrt.so) and the wheel's own libmxnet.so.

The pytest process never imports mxnet itself: the library is chosen when mxnet is imported, so
every script runs in a subprocess with MXNET_LIBRARY_PATH set (or unset for libmxnet.so) and
prints its results as JSON.
"""
import functools
import json
import math
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


def _number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def close(a, b, rtol, atol, skip=()):
    """Two results (numbers, or lists and dicts of them, as the scripts print them) equal within
    `atol + rtol * |b|`: NaN matches NaN, an infinity itself; dicts need the same keys, those in
    `skip` are not compared; None matches only None."""
    if a is None or b is None:
        return a is b
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(
            close(x, y, rtol, atol, skip) for x, y in zip(a, b))
    if isinstance(a, dict):
        keys = set(a) - set(skip)
        return isinstance(b, dict) and keys == set(b) - set(skip) and all(
            close(a[k], b[k], rtol, atol, skip) for k in keys)
    if _number(a) and _number(b) and (isinstance(a, float) or isinstance(b, float)):
        return a == b or (math.isnan(a) and math.isnan(b)) or abs(a - b) <= atol + rtol * abs(b)
    return a == b


def assert_close(real, ours, rtol, atol, path="result"):
    """`close`, failing with the path of the first difference (MXNet's value first)."""
    if isinstance(real, dict):
        assert isinstance(ours, dict) and sorted(real) == sorted(ours), \
            f"{path}: keys {sorted(real)} vs {ours}"
        for k in real:
            assert_close(real[k], ours[k], rtol, atol, f"{path}.{k}")
    elif isinstance(real, list):
        assert isinstance(ours, list) and len(real) == len(ours), f"{path}: {real} vs {ours}"
        for i, (x, y) in enumerate(zip(real, ours)):
            assert_close(x, y, rtol, atol, f"{path}[{i}]")
    else:
        assert close(real, ours, rtol, atol), f"{path}: MXNet {real!r}, mxrt {ours!r}"


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
