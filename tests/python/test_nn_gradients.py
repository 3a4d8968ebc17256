"""Gradients of the neural-network operators beyond the gradient cases (nn_grad_checks.py):
Dropout's gradient is its mask (the same draw as the forward), rrelu's its drawn slopes,
float16 products and BatchNorm agree with float32, large arrays take the parallel kernels,
second-order gradients (beyond MXNet) match central differences of the first-order ones, and
BatchNorm's backward updates the moving statistics as MXNet's does."""
import json

import pytest

from conftest import json_results, libmxrt, run_script


@pytest.fixture(scope="module")
def ours():
    proc = run_script("nn_grad_checks.py", str(libmxrt()), args=("--checks",))
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout)


def check_names():
    proc = run_script("nn_grad_checks.py", "mxnet", args=("--list",))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.split()


@pytest.mark.parametrize("name", check_names())
def test_nn_gradient_check(ours, name):
    assert ours["checks"][name] == [], ours["checks"][name]


def test_batchnorm_backward_updates_moving_statistics_as_mxnet(ours):
    real = json_results("nn_grad_checks.py", "mxnet")["moving_stats"]
    for mode, (mean, var) in real.items():
        got_mean, got_var = ours["moving_stats"][mode]
        for a, b in zip(got_mean + got_var, mean + var):
            assert abs(a - b) <= 1e-5 + 1e-5 * abs(b), f"{mode}: {ours['moving_stats'][mode]} vs MXNet's {[mean, var]}"


def test_gluon_training_steps_match_mxnet(ours):
    real = json_results("nn_grad_checks.py", "mxnet")["gluon_training"]
    assert sorted(ours["gluon_training"]) == sorted(real)
    for name, want in real.items():
        got = ours["gluon_training"][name]
        assert all(abs(a - b) <= 1e-5 + 1e-4 * abs(b) for a, b in zip(got, want)), f"{name}: {got} vs MXNet's {want}"
