"""Executor memory plans and the C predict API's speed on gluon.model_zoo.vision networks,
mxrt against libmxnet.so 1.9.1.

    bench/python_memplan.py [--nets resnet18_v1,mobilenet1.0] [--batches 1,32] [--repeats 20]
                            [--only plan|predict]

Runs itself once per library (the library is chosen when mxnet is imported): `MXRT_LIB`
(default target/release/libmxrt.so) and the wheel's own libmxnet.so (`.venv-mxnet`). For each
network (pretrained=False, its symbol exported by `HybridBlock.export`):

- plan: `simple_bind` for inference (grad_req null) and for training (grad_req write), and the
  `Total N MB allocated` line of `debug_str()` (`MXExecutorPrint`);
- predict: `MXPredCreate` from the exported files through ctypes, then the median milliseconds
  of `MXPredSetInput` + `MXPredForward` + `MXPredGetOutput` over `--repeats` calls (after two
  warm-up calls).

MXBENCH_CLOCK=process times the process's CPU time (all its threads) instead of the wall clock,
a figure that holds on a loaded machine when run at one thread (OMP_NUM_THREADS=1).

Prints one table per part with both libraries' figures. MXNet runs without its MKLDNN subgraph
fusion (MXNET_SUBGRAPH_BACKEND=NONE) so both run the exported graph as it is.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def child(args):
    os.environ.setdefault("MXNET_SUBGRAPH_BACKEND", "NONE")
    import ctypes
    import statistics
    import time

    import mxnet as mx
    import numpy as np
    from mxnet.base import _LIB
    from mxnet.gluon.model_zoo import vision

    out = {"plan": {}, "predict": {}}
    tmp = tempfile.mkdtemp()
    for name in args.nets.split(","):
        prefix = os.path.join(args.dir or tmp, name)
        # the first library run exports the network; the other loads the same files
        if not os.path.exists(prefix + "-0000.params"):
            net = vision.get_model(name, pretrained=False, classes=1000)
            net.initialize(mx.init.Xavier(magnitude=2), ctx=mx.cpu())
            net.hybridize()
            net(mx.nd.zeros((1, 3, 224, 224)))
            net.export(prefix, 0)
        sym = mx.sym.load(prefix + "-symbol.json")
        for batch in [int(b) for b in args.batches.split(",")]:
            shape = (batch, 3, 224, 224)
            if args.only in (None, "plan"):
                for train in (False, True):
                    ex = sym.simple_bind(mx.cpu(), data=shape,
                                         grad_req="write" if train else "null")
                    tail = [l for l in ex.debug_str().split("\n") if l.startswith("Total")]
                    mb = int(tail[0].split()[1])
                    out["plan"][f"{name} b{batch} {'train' if train else 'infer'}"] = mb
                    del ex
            if args.only in (None, "predict"):
                js = open(prefix + "-symbol.json").read().encode()
                params = open(prefix + "-0000.params", "rb").read()
                keys = (ctypes.c_char_p * 1)(b"data")
                indptr = (ctypes.c_uint32 * 2)(0, 4)
                dims = (ctypes.c_uint32 * 4)(*shape)
                h = ctypes.c_void_p()
                rc = _LIB.MXPredCreate(js, params, ctypes.c_int(len(params)), 1, 0, 1, keys,
                                       indptr, dims, ctypes.byref(h))
                assert rc == 0, _LIB.MXGetLastError()
                x = np.random.RandomState(0).uniform(-1, 1, shape).astype(np.float32)
                y = np.zeros((batch, 1000), dtype=np.float32)
                xp = x.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
                yp = y.ctypes.data_as(ctypes.POINTER(ctypes.c_float))

                def once():
                    assert _LIB.MXPredSetInput(h, b"data", xp, ctypes.c_uint32(x.size)) == 0
                    assert _LIB.MXPredForward(h) == 0
                    assert _LIB.MXPredGetOutput(h, 0, yp, ctypes.c_uint32(y.size)) == 0

                once()
                once()
                clock = (time.process_time if os.environ.get("MXBENCH_CLOCK") == "process"
                         else time.perf_counter)
                times = []
                for _ in range(args.repeats):
                    t = clock()
                    once()
                    times.append((clock() - t) * 1e3)
                _LIB.MXPredFree(h)
                out["predict"][f"{name} b{batch}"] = {
                    "ms": statistics.median(times),
                    "checksum": float(np.abs(y).sum()),
                }
    print(json.dumps(out))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--nets", default="resnet18_v1,mobilenet1.0,vgg11,densenet121")
    p.add_argument("--batches", default="1,32")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--only", choices=["plan", "predict"])
    p.add_argument("--child", action="store_true")
    p.add_argument("--dir", help="where the exported networks are (made if missing)")
    args = p.parse_args()
    if args.child:
        return child(args)
    py = str(ROOT / ".venv-mxnet" / "bin" / "python")
    lib = os.environ.get("MXRT_LIB", str(ROOT / "target" / "release" / "libmxrt.so"))
    results = {}
    tmp = tempfile.TemporaryDirectory()
    for label, path in (("mxnet", None), ("mxrt", lib)):
        env = dict(os.environ)
        env.pop("MXNET_LIBRARY_PATH", None)
        if path:
            env["MXNET_LIBRARY_PATH"] = path
        cmd = [py, __file__, "--child", "--nets", args.nets, "--batches", args.batches,
               "--repeats", str(args.repeats), "--dir", tmp.name] + (["--only", args.only] if args.only else [])
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"{label} failed:\n{proc.stderr[-3000:]}")
        results[label] = json.loads(proc.stdout.strip().split("\n")[-1])
    if results["mxnet"]["plan"]:
        print("| network, batch, mode | MXNet MB | mxrt MB |\n|---|---|---|")
        for k, v in results["mxnet"]["plan"].items():
            print(f"| {k} | {v} | {results['mxrt']['plan'][k]} |")
    failed = False
    if results["mxnet"]["predict"]:
        print("\n| network, batch | MXNet ms | mxrt ms | MXNet/mxrt |\n|---|---|---|---|")
        for k, v in results["mxnet"]["predict"].items():
            o = results["mxrt"]["predict"][k]
            same = abs(v["checksum"] - o["checksum"]) <= 1e-3 * abs(v["checksum"])
            print(f"| {k} | {v['ms']:.2f} | {o['ms']:.2f} | {v['ms'] / o['ms']:.2f} |"
                  + ("" if same else " outputs differ"))
            if not same:
                failed = True
    if failed:
        sys.exit("mxrt's predictions differ from MXNet's")


if __name__ == "__main__":
    main()
