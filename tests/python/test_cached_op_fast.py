"""CachedOp calls that mxrt runs as one engine op (cached_op_fast_script.py): the outcomes match
libmxnet.so's, the values match numpy, and the per-op path (a monitor hook set) gives the same
bits."""

import pytest

from conftest import assert_close, json_results, libmxrt, run_script


def names():
    proc = run_script("cached_op_fast_script.py", "mxnet", args=("--list",))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.split()


def pytest_generate_tests(metafunc):
    if "scenario" in metafunc.fixturenames:
        metafunc.parametrize("scenario", names())


def errors(result):
    """Every value under an "err" key (max abs difference from numpy)."""
    if isinstance(result, dict):
        for k, v in result.items():
            if k.endswith("err"):
                yield from (v if isinstance(v, list) else [v])
            else:
                yield from errors(v)


@pytest.mark.parametrize("library", ["mxnet", "mxrt"])
def test_values_match_numpy(library):
    lib = "mxnet" if library == "mxnet" else str(libmxrt())
    res = json_results("cached_op_fast_script.py", lib)
    checked = 0
    for name, out in res.items():
        assert "ok" in out, f"{name} fails on {library}: {out.get('error')}"
        for e in errors(out["ok"]):
            assert e < 1e-5, f"{name} on {library}: {e} from numpy"
            checked += 1
    assert checked >= 10


def test_scenario_matches_mxnet(scenario):
    real = json_results("cached_op_fast_script.py", "mxnet")[scenario]
    ours = json_results("cached_op_fast_script.py", str(libmxrt()))[scenario]
    assert "ok" in real, f"MXNet fails: {real['error']}"
    assert "ok" in ours, f"mxrt fails: {ours['error']}"
    # numpy differences are checked above; the rest must agree
    strip = lambda r: {k: v for k, v in r.items() if not k.endswith("err")} \
        if isinstance(r, dict) else r
    assert_close({k: strip(v) for k, v in real["ok"].items()} if scenario == "several_signatures"
          else strip(real["ok"]),
          {k: strip(v) for k, v in ours["ok"].items()} if scenario == "several_signatures"
          else strip(ours["ok"]), 1e-4, 2e-6)


def test_hooked_run_is_bit_identical():
    ours = json_results("cached_op_fast_script.py", str(libmxrt()))
    r = ours["hook_gives_identical_results"]["ok"]
    assert r["bit_equal"] and r["ops_seen"]
    assert ours["kernel_error_surfaces_at_wait"]["ok"]["when"] == "wait"
    assert ours["shape_error_at_call"]["ok"]["when"] == "call"
