"""Executor monitors over forward and backward, and CSE in CachedOp calls
(graph_exec_script.py), compared with libmxnet.so."""
import pytest

from conftest import assert_close, json_results, libmxrt

SCRIPT = "graph_exec_script.py"


def results(library, cse=True):
    lib = "mxnet" if library == "mxnet" else str(libmxrt())
    env = () if cse else (("MXNET_ELIMINATE_COMMON_EXPR", "0"),)
    return json_results(SCRIPT, lib, env)


def both(scenario, cse=True):
    real = results("mxnet", cse)[scenario]
    ours = results("mxrt", cse)[scenario]
    assert "ok" in real, f"MXNet fails: {real['error']}"
    assert "ok" in ours, f"mxrt fails: {ours['error']}"
    return real["ok"], ours["ok"]


# The backward outputs for inputs that get no gradient (the data, with grad_req null, and the
# label): MXNet reports whatever its planned buffer holds there (another value's memory), mxrt
# zeros; their names are compared, not their values.
NO_GRADIENT = {"fc_0_backward_output0", "out_backward_output1"}


def test_monitor_reports_backward_nodes_as_mxnet():
    real, ours = both("monitor_forward_backward")
    assert [n for n, _ in ours["calls"]] == [n for n, _ in real["calls"]]
    assert any(n.endswith("_backward_output") for n, _ in ours["calls"])
    for (n, a), (_, b) in zip(ours["calls"], real["calls"]):
        if n not in NO_GRADIENT:
            assert_close(a, b, 1e-4, 1e-5), n
    assert_close(ours["grads"], real["grads"], 1e-4, 1e-5)
    # the label's gradient that mxrt reports is zeros (no gradient flows to it)
    assert all(v == 0 for v in dict(ours["calls"])["out_backward_output1"])


def test_monitor_all_reports_outputs_as_mxnet():
    real, ours = both("monitor_all_forward_backward")
    # backward nodes' inputs are each op's own selection (MXNet's `_backward_*` nodes take
    # other inputs than mxrt's gradient definitions); every output, forward and backward, is
    # reported in MXNet's order with MXNet's values, and every forward input by MXNet's name
    outs = lambda calls: [(n, v) for n, v in calls if "_output" in n]
    ours_out, real_out = outs(ours["calls"]), outs(real["calls"])
    assert [n for n, _ in ours_out] == [n for n, _ in real_out]
    for (n, a), (_, b) in zip(ours_out, real_out):
        if n not in NO_GRADIENT:
            assert_close(a, b, 1e-4, 1e-5), n
    def forward(calls):
        names = [n for n, _ in calls]
        return names[:names.index("out_output") + 1]
    assert forward(ours["calls"]) == forward(real["calls"])
    # backward inputs are reported too, each node's before its outputs
    names = [n for n, _ in ours["calls"]]
    assert names.index("act_1_backward_input0") < names.index("act_1_backward_output")
    assert_close(ours["grads"], real["grads"], 1e-4, 1e-5)


def test_monitor_all_names_inputs_and_outputs_as_mxnet():
    real, ours = both("monitor_all_names")
    # both report ops' hidden outputs (BatchNorm's mean and variance, a training Dropout's
    # mask); an inference Dropout has no mask on mxrt, so MXNet's executor alone reports that
    assert ours["executor"] == [n for n in real["executor"] if n != "drop_mask"]
    assert {"bn_mean", "bn_var"} <= set(ours["executor"])
    assert {"bn_mean", "bn_var", "drop_mask"} <= set(ours["executor_train"])
    assert ours["executor_train"] == real["executor_train"]
    # BatchNorm's hidden outputs in training: the batch mean and the inverse standard deviation
    assert set(ours["bn_stats"]) == {"bn2_mean", "bn2_var"}
    assert_close(ours["bn_stats"], real["bn_stats"], 1e-3, 1e-4)
    assert "fc_weight" in ours["executor"] and "act_input0" in ours["executor"]
    assert ours["cached_op"] == real["cached_op"]


def test_mxnet_test_monitor_counts():
    real, ours = both("mxnet_test_monitor")
    assert len(ours) == len(real) == 21
    assert [k for k, _ in ours] == [k for k, _ in real]
    for (k, a), (_, b) in zip(ours, real):
        if k not in {"fc_0_backward_output0", "softmax_backward_output1"}:
            assert abs(float(a) - float(b)) <= 1e-5 + 1e-4 * abs(float(b)), (k, a, b)


@pytest.mark.parametrize("cse", [True, False])
def test_cse_in_cached_op_keeps_results(cse):
    real, ours = both("cse_cached_op", cse)
    assert_close(ours, real, 1e-4, 1e-4)
    assert ours["twin_kept"]


def test_cse_in_cached_op_merges_nodes_unless_turned_off():
    on_real, on_ours = both("cse_hybridized_block_monitor", True)
    off_real, off_ours = both("cse_hybridized_block_monitor", False)
    assert_close(on_ours["out"], on_real["out"], 1e-5, 1e-5)
    assert_close(off_ours["out"], on_real["out"], 1e-5, 1e-5)
    # the hook sees MXNet's number of nodes: the twin branch merged, or not with
    # MXNET_ELIMINATE_COMMON_EXPR=0
    assert on_ours["nodes"] == on_real["nodes"]
    assert off_ours["nodes"] == off_real["nodes"]
    assert on_ours["nodes"] < off_ours["nodes"]


def test_buckets_sharing_one_pool_give_mxnets_values():
    real, ours = both("bucketing_shared_pool")
    assert len(ours) == len(real) == 11
    assert_close(ours, real, 1e-4, 1e-4)
