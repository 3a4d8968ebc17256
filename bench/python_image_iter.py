"""ImageRecordIter throughput, libmxrt.so against libmxnet.so in the same run: 96x96 JPEG
records (the committed fixtures, repeated to 1024 records) decoded, cropped at random to 64x64,
mirrored at random, batch 32, with preprocess_threads 1 and 2. Each figure is the median of
MXBENCH_REPEATS epochs (after one warm-up epoch), images per second; the libraries alternate
within a repeat. Every epoch checks its batch count, shapes, labels and pixel range.

  python bench/python_image_iter.py [path/to/libmxrt.so]   (default target/release/libmxrt.so)

Prints mxbench's result lines (name, value, unit, check, note; tab-separated) and the ratio.
"""
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
REPEATS = int(os.environ.get("MXBENCH_REPEATS", "5"))
N = 1024


def child(rec, threads):
    import time
    import numpy as np
    import mxnet as mx
    it = mx.io.ImageRecordIter(path_imgrec=rec, data_shape=(3, 64, 64), batch_size=32, rand_crop=True,
                               rand_mirror=True, preprocess_threads=threads, prefetch_buffer=4)

    def epoch():
        t = time.perf_counter()
        n, labels, ok = 0, [], True
        for b in it:
            d = b.data[0]
            ok &= d.shape == (32, 3, 64, 64)
            lo, hi = float(d.min().asscalar()), float(d.max().asscalar())
            ok &= 0 <= lo and hi <= 255
            labels += b.label[0].asnumpy().tolist()
            n += 32 - b.pad
        it.reset()
        ok &= n == N and sorted(set(labels)) == list(range(8))
        return time.perf_counter() - t, ok
    epoch()
    return [epoch() for _ in range(1)]


def make_rec(path):
    sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
    import mxnet as mx
    from mxnet import recordio
    fx = os.path.join(ROOT, "tests", "fixtures", "images")
    imgs = [open(os.path.join(fx, f"rgb96_{i}.jpg"), "rb").read() for i in range(8)]
    w = recordio.MXRecordIO(path, "w")
    for k in range(N):
        w.write(recordio.pack(recordio.IRHeader(0, float(k % 8), k, 0), imgs[k % 8]))
    w.close()


def run(lib, rec, threads):
    env = dict(os.environ)
    env.pop("MXNET_LIBRARY_PATH", None)
    if lib != "mxnet":
        env["MXNET_LIBRARY_PATH"] = lib
    code = (f"import sys; sys.path.insert(0, {HERE!r}); import python_image_iter as b, json; "
            f"print(json.dumps(b.child({rec!r}, {threads})))")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise SystemExit(f"{lib} threads={threads} failed:\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    lib = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "target", "release", "libmxrt.so")
    d = os.environ.get("MXBENCH_IO_DIR", os.path.join(ROOT, "target", "mxbench", "io"))
    os.makedirs(d, exist_ok=True)
    rec = os.path.join(d, "jpeg96.rec")
    if not os.path.exists(rec):
        make_rec(rec)
    status = 0
    for threads in (1, 2):
        rates = {"mxrt": [], "mxnet": []}
        checks = {"mxrt": True, "mxnet": True}
        for _ in range(REPEATS):
            for name, l in (("mxrt", lib), ("mxnet", "mxnet")):
                for secs, ok in run(l, rec, threads):
                    rates[name].append(N / secs)
                    checks[name] &= ok
        med = {k: statistics.median(v) for k, v in rates.items()}
        for name in ("mxrt", "mxnet"):
            check = "ok" if checks[name] else "FAIL"
            status |= check != "ok"
            print(f"python.image_record_iter_t{threads}.{name}\t{med[name]:.4g}\timages/s\t{check}\t"
                  f"96x96 JPEG -> 64x64 rand_crop, rand_mirror, batch 32", flush=True)
        print(f"# preprocess_threads={threads}: mxrt/libmxnet.so = {med['mxrt'] / med['mxnet']:.2f}x",
              flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
