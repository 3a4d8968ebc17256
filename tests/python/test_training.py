"""Training runs (training_script.py) from the same starting parameters: a hybridized Gluon
ResNet-18 (3 SGD steps with momentum) on libmxrt against libmxnet.so, and a 2-layer LSTM
language model whose fused `rnn.LSTM` layer trains on libmxrt (hybridized and imperative) as the
same model unrolled from `LSTMCell`s does on libmxrt and on libmxnet.so (MXNet 1.9.1's own fused
LSTM training step is not the reference: it can crash on CPU). The unrolled model is hybridized,
so its cells' `begin_state` is a batch-0 `zeros` whose batch the graph infers."""
import json

import pytest

from conftest import assert_close, libmxrt, run_script


def train(kind, library):
    proc = run_script("training_script.py", library, args=(kind,))
    assert proc.returncode == 0, f"{kind} on {library}:\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout)


def test_resnet18_trains_as_on_mxnet():
    real, ours = train("resnet", "mxnet"), train("resnet", str(libmxrt()))
    assert sorted(real) == sorted(ours)
    # the steps move the parameters: the losses differ from step to step
    assert len(set(real["losses"])) == 3, real["losses"]
    # the first loss comes from the same parameters; after that the two libraries' convolution
    # algorithms (oneDNN's direct kernels, mxrt's Winograd) round differently and BatchNorm over
    # 4 values amplifies it step by step
    assert_close(real["losses"][:1], ours["losses"][:1], 1e-4, 1e-5, "first loss")
    assert_close(real["losses"], ours["losses"], 5e-2, 1e-3, "losses")
    assert_close(real["logits"], ours["logits"], 5e-2, 1e-2, "logits after training")
    for name in real:
        if name not in ("losses", "logits"):
            assert_close(real[name], ours[name], 5e-2, 1e-3, name)


@pytest.fixture(scope="module")
def unrolled_on_mxnet():
    return train("lm_unrolled", "mxnet")


@pytest.mark.parametrize("kind", ["lm_fused", "lm_fused_imperative", "lm_unrolled"])
def test_lstm_language_model_trains_as_the_unrolled_reference(kind, unrolled_on_mxnet):
    ref = unrolled_on_mxnet
    ours = train(kind, str(libmxrt()))
    losses = ref["losses"]
    assert losses[-1] < losses[0], losses
    assert_close(ref["losses"], ours["losses"], 1e-5, 1e-6, "losses")
    for name in ref:
        if name != "losses":
            assert_close(ref[name], ours[name], 1e-4, 1e-5, name)
    # every LSTM parameter moved from its start: the gradient reaches both layers
    assert all(v > 1e-5 for v in ours["moved"].values()), ours["moved"]
