"""ImageRecordIter throughput, libmxrt.so against libmxnet.so in the same run: 96x96 JPEG
records (the committed fixtures, repeated to 1024 records) decoded, cropped at random to 64x64,
mirrored at random, batch 32, with preprocess_threads 1 and 2. Each figure is the median over
MXBENCH_REPEATS processes per library (the libraries alternating) of MXBENCH_EPOCHS timed
epochs each (after a warm-up epoch that checks every batch's pixel range), images per second.
Every epoch checks its batch count, shapes and labels, and one batch's pixel range.

  python bench/python_image_iter.py [path/to/libmxrt.so]   (default target/release/libmxrt.so)
  python bench/python_image_iter.py --train [path/to/libmxrt.so]
  python bench/python_image_iter.py --concurrent [path/to/libmxrt.so]

Prints mxbench's result lines (name, value, unit, check, note; tab-separated) and the ratio.
MXBENCH_CLOCK=process times the plain epochs with the process's CPU clock (all threads) instead
of the wall clock: images per CPU second, which hold on a loaded machine.

With --train, each batch also feeds a training step of a small Gluon CNN (hybridized; conv 3x3
stride 2 with 16 channels, ReLU, max pool, dense 8; softmax cross-entropy, SGD) on the same
library in the same process, so decoding competes with training for the cores. It reports, per
library: the images/s of the iterator feeding the training loop (the median over
MXBENCH_REPEATS processes, the libraries alternating), of the same training steps on one fixed batch (no iterator), the
process's CPU time (all threads) for an epoch of each, which shows what the iterator adds and
what the steps cost whatever the machine's load, and the
process's RSS sampled after every batch over MXBENCH_TRAIN_EPOCHS epochs (default 8, 256
batches): its growth after the first epoch shows whether memory stays bounded by
prefetch_buffer.

With --concurrent, a second thread of the same process runs training steps of that CNN on one
fixed batch through the same engine while the main thread reads the iterator as fast as it can
(MXBENCH_CONCURRENT_EPOCHS epochs per process, default 3): images/s of the iterator, the
training thread's steps/s meanwhile and the process's CPU time per epoch.
"""
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
REPEATS = int(os.environ.get("MXBENCH_REPEATS", "5"))
EPOCHS = int(os.environ.get("MXBENCH_EPOCHS", "4"))  # timed epochs per process (plain runs)
N = 1024


def child(rec, threads):
    import time
    import numpy as np
    import mxnet as mx
    it = mx.io.ImageRecordIter(path_imgrec=rec, data_shape=(3, 64, 64), batch_size=32, rand_crop=True,
                               rand_mirror=True, preprocess_threads=threads, prefetch_buffer=4)

    # MXBENCH_CLOCK=process: the process's CPU time (all threads: decoding included), which
    # holds on a loaded machine
    clock = cpu_s if os.environ.get("MXBENCH_CLOCK") == "process" else time.perf_counter

    def epoch(check_all):
        # the consumer's own work kept small (one batch's pixels checked per timed epoch), so
        # that the figure is the iterator's rate; the warm-up epoch checks every batch
        t = clock()
        n, labels, ok = 0, [], True
        for k, b in enumerate(it):
            d = b.data[0]
            ok &= d.shape == (32, 3, 64, 64)
            if check_all or k == 0:
                x = d.asnumpy()
                ok &= 0 <= float(x.min()) and float(x.max()) <= 255
            labels += b.label[0].asnumpy().tolist()
            n += 32 - b.pad
        it.reset()
        ok &= n == N and sorted(set(labels)) == list(range(8))
        return clock() - t, ok
    _, ok = epoch(True)
    return [(secs, ok and o) for secs, o in (epoch(False) for _ in range(EPOCHS))]


def rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def cpu_s():
    import resource
    r = resource.getrusage(resource.RUSAGE_SELF)  # all of the process's threads
    return r.ru_utime + r.ru_stime


def child_train(rec, threads, repeats, epochs):
    import time
    import mxnet as mx
    from mxnet import autograd, gluon
    mx.random.seed(1)
    it = mx.io.ImageRecordIter(path_imgrec=rec, data_shape=(3, 64, 64), batch_size=32, rand_crop=True,
                               rand_mirror=True, preprocess_threads=threads, prefetch_buffer=4)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Conv2D(16, 3, strides=2, activation="relu"), gluon.nn.MaxPool2D(2),
            gluon.nn.Dense(8))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.01})

    def step(x, y):
        with autograd.record():
            loss = loss_fn(net(x / 255.0), y)
        loss.backward()
        trainer.step(32)
        return float(loss.mean().asscalar())  # one wait per step, as a loss metric does

    def epoch(samples=None):
        c, t, n, losses = cpu_s(), time.perf_counter(), 0, []
        for b in it:
            losses.append(step(b.data[0], b.label[0]))
            n += 32 - b.pad
            if samples is not None:
                samples.append(rss_mib())
        it.reset()
        ok = n == N and all(l == l and l < 100 for l in losses)
        return time.perf_counter() - t, ok, cpu_s() - c

    epoch()  # warm-up: deferred init, CachedOp, pools
    fed = [epoch() for _ in range(repeats)]
    b = next(iter(it))
    it.reset()
    x, y = b.data[0].copy(), b.label[0].copy()
    step(x, y)
    # libmxnet.so decodes a whole epoch's chunk in the background after a reset: let it finish
    # so that the fixed-batch steps' CPU time is theirs alone
    time.sleep(0.5)
    c, t = cpu_s(), time.perf_counter()
    for _ in range(N // 32):
        step(x, y)
    train_only, train_cpu = time.perf_counter() - t, cpu_s() - c
    samples = []
    for _ in range(epochs):
        epoch(samples)
    per = N // 32
    return {"fed": fed, "train_only": train_only, "train_cpu": train_cpu, "rss_first_epoch": max(samples[:per]),
            "rss_max": max(samples), "rss_last": samples[-1], "batches": len(samples)}


def child_concurrent(rec, threads, repeats):
    """The iterator read as fast as the consumer can while a second thread runs training steps
    of the --train CNN on one fixed batch through the same engine; the consumer does no engine
    work itself (labels and one batch's pixels are read with synchronous copies)."""
    import threading
    import time
    import mxnet as mx
    from mxnet import autograd, gluon
    mx.random.seed(1)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Conv2D(16, 3, strides=2, activation="relu"), gluon.nn.MaxPool2D(2),
            gluon.nn.Dense(8))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.01})
    x = mx.nd.random.uniform(0, 255, shape=(32, 3, 64, 64))
    y = mx.nd.array([k % 8 for k in range(32)])

    def step():
        with autograd.record():
            loss = loss_fn(net(x / 255.0), y)
        loss.backward()
        trainer.step(32)
        return float(loss.mean().asscalar())

    step()
    it = mx.io.ImageRecordIter(path_imgrec=rec, data_shape=(3, 64, 64), batch_size=32, rand_crop=True,
                               rand_mirror=True, preprocess_threads=threads, prefetch_buffer=4)

    def epoch():
        c, t = cpu_s(), time.perf_counter()
        n, labels, ok, first = 0, [], True, True
        for b in it:
            ok &= b.data[0].shape == (32, 3, 64, 64)
            if first:
                d = b.data[0].asnumpy()
                ok &= 0 <= float(d.min()) and float(d.max()) <= 255
                first = False
            labels += b.label[0].asnumpy().tolist()
            n += 32 - b.pad
        it.reset()
        ok &= n == N and sorted(set(labels)) == list(range(8))
        return time.perf_counter() - t, ok, cpu_s() - c

    epoch()  # warm-up, without training
    stop, steps, losses = threading.Event(), [0], []

    def train():
        while not stop.is_set():
            losses.append(step())
            steps[0] += 1

    th = threading.Thread(target=train)
    th.start()
    time.sleep(0.2)  # the training loop under way
    out = []
    for _ in range(repeats):
        s0 = steps[0]
        secs, ok, cpu = epoch()
        out.append((secs, ok, cpu, steps[0] - s0))
    stop.set()
    th.join()
    ok = all(l == l and l < 100 for l in losses)
    return [(secs, o and ok, cpu, st) for secs, o, cpu, st in out]


def main_concurrent(lib, rec):
    """Iterator images/s while another thread trains, per library and preprocess_threads; one
    process per library and repeat, the libraries alternating."""
    status = 0
    epochs = int(os.environ.get("MXBENCH_CONCURRENT_EPOCHS", "3"))
    for threads in (1, 2):
        rates = {"mxrt": [], "mxnet": []}
        cpu = {"mxrt": [], "mxnet": []}
        steps = {"mxrt": [], "mxnet": []}
        ok = {"mxrt": True, "mxnet": True}
        for _ in range(REPEATS):
            for name, l in (("mxrt", lib), ("mxnet", "mxnet")):
                for secs, o, c, st in run(l, rec, threads, f"b.child_concurrent({rec!r}, {threads}, {epochs})"):
                    rates[name].append(N / secs)
                    cpu[name].append(c * 1000)
                    steps[name].append(st / secs)
                    ok[name] &= o
        med = {k: statistics.median(v) for k, v in rates.items()}
        for name in ("mxrt", "mxnet"):
            status |= not ok[name]
            print(f"python.image_iter_concurrent_t{threads}.{name}\t{med[name]:.4g}\timages/s\t"
                  f"{'ok' if ok[name] else 'FAIL'}\titerator read while another thread trains", flush=True)
            print(f"python.image_iter_concurrent_steps_t{threads}.{name}\t{statistics.median(steps[name]):.4g}\t"
                  f"steps/s\tok\tthe training thread's steps meanwhile", flush=True)
            print(f"python.image_iter_concurrent_cpu_t{threads}.{name}\t{statistics.median(cpu[name]):.0f}\t"
                  f"ms\tok\tthe process's CPU time (all threads) per epoch", flush=True)
        print(f"# preprocess_threads={threads}, while training: mxrt/libmxnet.so = "
              f"{med['mxrt'] / med['mxnet']:.2f}x; images/s per epoch, mxrt "
              f"{[round(v) for v in rates['mxrt']]}, libmxnet.so {[round(v) for v in rates['mxnet']]}",
              flush=True)
    return status


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


def run(lib, rec, threads, call=None):
    env = dict(os.environ)
    env.pop("MXNET_LIBRARY_PATH", None)
    if lib != "mxnet":
        env["MXNET_LIBRARY_PATH"] = lib
    call = call or f"b.child({rec!r}, {threads})"
    code = (f"import sys; sys.path.insert(0, {HERE!r}); import python_image_iter as b, json; "
            f"print(json.dumps({call}))")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise SystemExit(f"{lib} threads={threads} failed:\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main_train(lib, rec):
    """Iterator feeding a training loop, training alone, and RSS over a long run; one process
    per library and repeat, the libraries alternating within a repeat (the load of a shared
    machine then weighs on both alike)."""
    epochs = int(os.environ.get("MXBENCH_TRAIN_EPOCHS", "8"))
    status = 0
    for threads in (1, 2):
        fed = {"mxrt": [], "mxnet": []}
        alone = {"mxrt": [], "mxnet": []}
        cpu_fed = {"mxrt": [], "mxnet": []}
        cpu_alone = {"mxrt": [], "mxnet": []}
        growth = {"mxrt": 0.0, "mxnet": 0.0}
        ok = {"mxrt": True, "mxnet": True}
        last = {}
        for _ in range(REPEATS):
            for name, l in (("mxrt", lib), ("mxnet", "mxnet")):
                r = run(l, rec, threads, f"b.child_train({rec!r}, {threads}, 1, {epochs})")
                fed[name] += [N / s for s, _, _ in r["fed"]]
                ok[name] &= all(o for _, o, _ in r["fed"])
                cpu_fed[name] += [c * 1000 for _, _, c in r["fed"]]
                alone[name].append(N / r["train_only"])
                cpu_alone[name].append(r["train_cpu"] * 1000)
                growth[name] = max(growth[name], r["rss_max"] - r["rss_first_epoch"])
                last[name] = r
        med = {k: statistics.median(v) for k, v in fed.items()}
        for name in ("mxrt", "mxnet"):
            # bounded: no growth beyond a few batches' worth (32 x 3 x 64 x 64 floats = 1.5 MiB)
            # after the first epoch
            bounded = growth[name] < 64
            status |= not (ok[name] and bounded)
            r = last[name]
            print(f"python.image_iter_train_t{threads}.{name}\t{med[name]:.4g}\timages/s\t"
                  f"{'ok' if ok[name] else 'FAIL'}\titerator feeding a CNN training step per batch",
                  flush=True)
            print(f"python.train_only_t{threads}.{name}\t{statistics.median(alone[name]):.4g}\t"
                  f"images/s\tok\tthe same steps on one fixed batch", flush=True)
            print(f"python.image_iter_train_cpu_t{threads}.{name}\t{statistics.median(cpu_fed[name]):.0f}\t"
                  f"ms\tok\tthe process's CPU time (all threads) per epoch of the fed loop", flush=True)
            print(f"python.train_only_cpu_t{threads}.{name}\t{statistics.median(cpu_alone[name]):.0f}\t"
                  f"ms\tok\tthe process's CPU time for the same steps on one fixed batch", flush=True)
            print(f"python.image_iter_train_rss_growth_t{threads}.{name}\t{growth[name]:.1f}\tMiB\t"
                  f"{'ok' if bounded else 'FAIL'}\tRSS max over {r['batches']} batches less the first "
                  f"epoch's max ({r['rss_first_epoch']:.0f} MiB); last {r['rss_last']:.0f} MiB", flush=True)
        print(f"# preprocess_threads={threads}, training: mxrt/libmxnet.so = "
              f"{med['mxrt'] / med['mxnet']:.2f}x", flush=True)
    return status


def main():
    args = [a for a in sys.argv[1:] if a not in ("--train", "--concurrent")]
    lib = args[0] if args else os.path.join(ROOT, "target", "release", "libmxrt.so")
    d = os.environ.get("MXBENCH_IO_DIR", os.path.join(ROOT, "target", "mxbench", "io"))
    os.makedirs(d, exist_ok=True)
    rec = os.path.join(d, "jpeg96.rec")
    if not os.path.exists(rec):
        make_rec(rec)
    if "--train" in sys.argv[1:]:
        return main_train(lib, rec)
    if "--concurrent" in sys.argv[1:]:
        return main_concurrent(lib, rec)
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
