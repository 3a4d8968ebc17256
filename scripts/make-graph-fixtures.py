#!/usr/bin/env python3
"""Write the symbol JSON fixtures under tests/fixtures/graphs/ with MXNet 1.9.1 (libmxnet.so).

Run once with the reference venv:  .venv-mxnet/bin/python scripts/make-graph-fixtures.py
The outputs are committed; tests/graph_mutation.rs reads them without MXNet. Each model is a
Gluon network (model-zoo architectures with random weights, nothing downloaded) hybridized,
called once and exported; `inputs.json` gives each graph's input shape. The small CNN keeps its
`.params` file so the predict API runs it with real parameters.
"""
import json
import os

import mxnet as mx
from mxnet.gluon import nn
from mxnet.gluon.model_zoo import vision

OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "fixtures", "graphs")


def small_cnn():
    net = nn.HybridSequential()
    net.add(nn.Conv2D(4, 3, padding=1), nn.BatchNorm(), nn.Activation("relu"), nn.MaxPool2D(2),
            nn.Dropout(0.5), nn.Flatten(), nn.Dense(10))
    return net


def main():
    os.makedirs(OUT, exist_ok=True)
    mx.random.seed(7)
    models = {
        "small_cnn": (small_cnn(), (1, 3, 8, 8)),
        "mobilenet0.25": (vision.get_model("mobilenet0.25", classes=10), (1, 3, 32, 32)),
        "mobilenetv2_0.25": (vision.get_model("mobilenetv2_0.25", classes=10), (1, 3, 32, 32)),
        "resnet18_v1": (vision.get_model("resnet18_v1", classes=10), (1, 3, 32, 32)),
    }
    inputs = {}
    for name, (net, shape) in models.items():
        net.initialize(mx.init.Xavier())
        net.hybridize()
        net(mx.nd.ones(shape)).wait_to_read()
        prefix = os.path.join(OUT, name)
        net.export(prefix)
        os.remove(prefix + "-0000.params") if name != "small_cnn" else None
        inputs[name] = {"data": list(shape)}
    with open(os.path.join(OUT, "inputs.json"), "w") as f:
        json.dump(inputs, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
