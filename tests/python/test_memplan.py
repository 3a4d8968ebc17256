"""Planned executors (memplan_script.py) give libmxnet.so's values: forwards reusing the planned
buffers across calls, training with grad_req write/add/null, reshaped executors and a
BucketingModule's executors; `debug_str()` ends with the two lines Module parses, and the MB
planned for a known graph is the hand-computed figure, as on MXNet."""
from conftest import assert_close, json_results, libmxrt, run_script

SCRIPT = "memplan_script.py"
# scenarios whose figures are planned memory, compared below rather than value by value
MB = {"print_lines_and_chain_mb", "cnn_mb"}


def names():
    proc = run_script(SCRIPT, "mxnet", args=("--list",))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [n for n in proc.stdout.split() if n not in MB]


def pytest_generate_tests(metafunc):
    if "scenario" in metafunc.fixturenames:
        metafunc.parametrize("scenario", names())


def results(library):
    return json_results(SCRIPT, library)


def test_scenario_matches_mxnet(scenario):
    real = results("mxnet")[scenario]
    ours = results(str(libmxrt()))[scenario]
    assert "ok" in real, real
    assert "ok" in ours, f"mxrt fails: {ours['error']}"
    assert_close(real["ok"], ours["ok"], 1e-3, 2e-4)


def test_print_lines_and_hand_computed_plan():
    real = results("mxnet")["print_lines_and_chain_mb"]
    ours = results(str(libmxrt()))["print_lines_and_chain_mb"]
    assert "ok" in ours, ours
    # four 1 MiB values; exp's output stays live for the add, relu's gets a second buffer,
    # sigmoid and the add write in place: 2 MiB. MXNet plans the same.
    assert real["ok"]["infer"] == [2, 11]
    assert ours["ok"]["infer"] == [2, 11]
    assert ours["ok"]["train_mb_at_least_infer"]


def test_planned_memory_at_most_mxnet():
    real = results("mxnet")["cnn_mb"]["ok"]
    ours = results(str(libmxrt()))["cnn_mb"]
    assert "ok" in ours, ours
    ours = ours["ok"]
    assert 0 < ours["null"] <= real["null"], (ours, real)
    assert ours["null"] <= ours["write"] <= real["write"], (ours, real)
