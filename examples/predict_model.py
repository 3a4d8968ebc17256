"""Writes the model c_examples/predict.c runs: a small CNN exported by Gluon
(`cnn-symbol.json`, `cnn-0000.params`), an input batch (`input.nd`, one array named `data`)
and the output of the library that ran this script (`expected.nd`, named `prob`).

    python examples/predict_model.py OUT_DIR

`make run-examples` runs it on MXNet's own libmxnet.so (MXNET_LIBRARY_PATH unset), so the C
example checks libmxrt's predictions against MXNet's. Parameters and inputs come from a fixed
numpy generator."""
import os
import sys

import numpy as np

os.environ.setdefault("MXNET_SUBGRAPH_BACKEND", "NONE")
from mxnet import nd  # noqa: E402
from mxnet.gluon import nn  # noqa: E402

CLASSES = 10


def build():
    net = nn.HybridSequential(prefix="cnn_")
    with net.name_scope():
        net.add(nn.Conv2D(8, 3, padding=1), nn.BatchNorm(), nn.Activation("relu"),
                nn.MaxPool2D(2), nn.Conv2D(16, 3, padding=1), nn.Activation("relu"),
                nn.GlobalAvgPool2D(), nn.Flatten(), nn.Dense(CLASSES))
    return net


def main(out):
    os.makedirs(out, exist_ok=True)
    rng = np.random.RandomState(42)
    net = build()
    net.initialize()
    x = nd.array(rng.uniform(0, 1, (2, 3, 16, 16)))
    net(x)  # shapes the parameters
    for name, p in sorted(net.collect_params().items()):
        if name.endswith("running_var") or name.endswith("gamma"):
            p.set_data(nd.array(rng.uniform(0.5, 1.5, p.shape)))
        else:
            p.set_data(nd.array(rng.uniform(-0.5, 0.5, p.shape)))
    net.hybridize()
    # the exported graph ends at the Dense layer: the C example compares these logits and
    # applies the softmax itself
    logits = net(x)
    prob = nd.softmax(logits)
    net.export(os.path.join(out, "cnn"))
    nd.save(os.path.join(out, "input.nd"), {"data": x})
    nd.save(os.path.join(out, "expected.nd"), {"logits": logits, "prob": prob})


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "predict_model")
