"""The neural-network layer, loss and sequence operators (nn_ops_script.py) on libmxrt against
libmxnet.so: forward outputs and gradients case by case, errors of bad parameters (naming the
op and the parameter), Embedding's row_sparse weight gradient and a small Gluon model's training
losses."""

import pytest

from conftest import close, json_results, libmxrt

SCRIPT = "nn_ops_script.py"


def ours():
    return json_results(SCRIPT, str(libmxrt()))


def theirs():
    return json_results(SCRIPT, "mxnet")


def case_names():
    return sorted(theirs()["cases"])


@pytest.mark.parametrize("name", case_names())
def test_forward_and_gradients_match_mxnet(name):
    real, got = theirs()["cases"][name], ours()["cases"][name]
    assert "error" not in real, f"the case fails on MXNet: {real['error']}"
    assert "error" not in got, f"mxrt fails: {got['error']}"
    assert len(got["out"]) == len(real["out"])
    for i, (a, b) in enumerate(zip(got["out"], real["out"])):
        assert close(a, b, 1e-4, 1e-5), f"output {i}: {a} vs MXNet's {b}"
    for i, (a, b) in enumerate(zip(got["grads"], real["grads"])):
        assert close(a, b, 1e-4, 1e-5), f"gradient of input {i}: {a} vs MXNet's {b}"


# the op and the parameter each bad invoke's message must name
ERRORS = {
    "embedding_weight_shape": ("Embedding", "weight"),
    "embedding_input_dim": ("Embedding", "input_dim"),
    "layernorm_axis": ("LayerNorm", "axis"),
    "layernorm_gamma": ("LayerNorm", "gamma"),
    "groupnorm_num_groups": ("GroupNorm", "num_groups"),
    "l2norm_mode": ("L2Normalization", "mode"),
    "softmax_output_normalization": ("SoftmaxOutput", "normalization"),
    "makeloss_normalization": ("MakeLoss", "normalization"),
    "sequence_reverse_axis": ("SequenceReverse", "axis"),
    "moments_axes": ("moments", "axes"),
    "sequence_mask_length": ("SequenceMask", "sequence_length"),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_bad_parameters_fail_naming_op_and_parameter(name):
    assert theirs()["errors"][name] is not None, "MXNet accepts it"
    msg = ours()["errors"][name]
    assert msg is not None, "mxrt accepts it"
    op, param = ERRORS[name]
    assert op in msg and param in msg, msg


def test_sparse_embedding_gradients_are_row_sparse_as_in_mxnet():
    real, got = theirs()["sparse_grad"], ours()["sparse_grad"]
    assert sorted(got) == sorted(real)
    for op, want in real.items():
        have = got[op]
        assert have["stype"] == want["stype"] == "row_sparse", op
        assert have["indices"] == want["indices"], op
        assert close(have["out"], want["out"], 1e-4, 1e-5) and close(have["dense"], want["dense"], 1e-4, 1e-5), op


def test_gluon_embedding_layernorm_dense_training_matches_mxnet():
    real, got = theirs()["gluon"], ours()["gluon"]
    assert len(got) == len(real) == 5
    assert real[-1] < real[0], "the reference model does not learn"
    assert close(got, real, 2e-4, 1e-5), f"{got} vs MXNet's {real}"


def test_sequence_last_gradient_without_lengths():
    # MXNet 1.9.1 crashes here; mxrt gives the head gradient at the last step
    assert ours()["last_step_gradient"] == [True, True]


def inferred_names():
    return sorted(theirs()["inferred"])


@pytest.mark.parametrize("name", inferred_names())
def test_graph_inference_matches_mxnet(name):
    # argument names (the Module API binds `softmax_label` by them) and the shapes inferred
    # from the data's (Gluon's deferred initialisation)
    real, got = theirs()["inferred"][name], ours()["inferred"][name]
    assert "error" not in real, real
    assert got == real
