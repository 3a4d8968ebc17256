"""Gluon model-zoo networks (pretrained=False) exported by one library and run by another.

    model_zoo_script.py export DIR [NAME ...]   build, initialize, run and export each network
                                                into DIR (NAME-symbol.json, NAME-0000.params,
                                                NAME-io.nd with the input and this library's
                                                output); prints {name: "ok" | error}
    model_zoo_script.py run DIR [NAME ...]      load each exported network with
                                                SymbolBlock.imports, run it on the saved input
                                                and compare with the saved output; prints
                                                {name: {"max_abs": ..., "max_ref": ...} | error}

test_model_zoo.py runs export on one library and run on the other, both ways."""
import json
import os
import sys
import warnings

import numpy as np

os.environ.setdefault("MXNET_SUBGRAPH_BACKEND", "NONE")
import mxnet as mx  # noqa: E402
from mxnet import gluon, nd  # noqa: E402
from mxnet.gluon.model_zoo import vision  # noqa: E402

warnings.simplefilter("ignore")

# name: input side (the smallest each network's fixed pooling windows allow)
NETS = {
    "resnet18_v1": 64,
    "resnet18_v2": 64,
    "mobilenet0.25": 64,
    "mobilenetv2_0.25": 64,
    "squeezenet1.1": 224,
    "densenet121": 224,
    # further networks for manual runs (large parameter files or slow on small machines)
    "vgg11_bn": 32,
    "alexnet": 224,
    "inceptionv3": 299,
    "resnet50_v2": 64,
}


def export(out, names):
    os.makedirs(out, exist_ok=True)
    res = {}
    for name in names:
        try:
            mx.random.seed(0)
            net = vision.get_model(name, pretrained=False, classes=10)
            net.initialize(mx.init.Xavier(magnitude=2.0))
            side = NETS[name]
            x = nd.array(np.random.RandomState(1).uniform(-1, 1, (1, 3, side, side)))
            net.hybridize()
            y = net(x)
            # non-trivial BatchNorm statistics, so inference mode uses them
            for pname, p in net.collect_params().items():
                if pname.endswith("running_mean"):
                    p.set_data(nd.array(np.random.RandomState(2).uniform(-0.1, 0.1, p.shape)))
                if pname.endswith("running_var"):
                    p.set_data(nd.array(np.random.RandomState(3).uniform(0.5, 1.5, p.shape)))
            y = net(x)
            net.export(os.path.join(out, name))
            nd.save(os.path.join(out, name + "-io.nd"), {"x": x, "y": y})
            res[name] = "ok"
        except Exception as e:  # noqa: BLE001 - reported to the test
            res[name] = f"{type(e).__name__}: {e}"[:1000]
    return res


def run(out, names):
    res = {}
    for name in names:
        try:
            io = nd.load(os.path.join(out, name + "-io.nd"))
            net = gluon.SymbolBlock.imports(os.path.join(out, name + "-symbol.json"), ["data"],
                                            os.path.join(out, name + "-0000.params"))
            y = net(io["x"]).asnumpy()
            want = io["y"].asnumpy()
            res[name] = {"shape": list(y.shape), "want_shape": list(want.shape),
                         "max_abs": float(np.abs(y - want).max()),
                         "max_ref": float(np.abs(want).max())}
        except Exception as e:  # noqa: BLE001 - reported to the test
            res[name] = f"{type(e).__name__}: {e}"[:1000]
    return res


def main():
    cmd, out = sys.argv[1], sys.argv[2]
    names = sys.argv[3:] or list(NETS)
    print(json.dumps(export(out, names) if cmd == "export" else run(out, names)))


if __name__ == "__main__":
    main()
