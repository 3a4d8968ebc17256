"""Data loading through MXNet's Python package on the library MXNET_LIBRARY_PATH names (the
wheel's own libmxnet.so when unset): reading raw RecordIO records (MB/s), and full epochs of
MNISTIter and CSVIter (images or rows per second), each checked against the values written.

The input files are made once in MXBENCH_IO_DIR (default target/mxbench/io) by whichever run
comes first; the page cache holds them, so the figures are the libraries' own costs.
Prints mxbench's result lines: name, value, unit, check, note (tab-separated).
MXBENCH_CLOCK=process times the process's CPU time (all its threads: the iterator's included)
instead of the wall clock, for figures that hold on a loaded machine.
"""
import os
import statistics
import struct
import sys
import time

import numpy as np
import mxnet as mx
from mxnet import recordio

REPEATS = int(os.environ.get("MXBENCH_REPEATS", "3"))
clock = time.process_time if os.environ.get("MXBENCH_CLOCK") == "process" else time.perf_counter
D = os.environ.get("MXBENCH_IO_DIR", os.path.join("target", "mxbench", "io"))
os.makedirs(D, exist_ok=True)
status = 0


def report(name, rates, unit, check, note):
    global status
    if check != "ok":
        status = 1
    print(f"{name}\t{statistics.median(rates):.4g}\t{unit}\t{check}\t{note}", flush=True)


def once(path, make):
    """Makes `path` with `make(tmp)` unless it exists (written under a temporary name first)."""
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}.tmp"
        make(tmp)
        os.replace(tmp, path)
    return path


# RecordIO: 1024 records of 64 KiB (64 MiB), record k filled with byte k % 251
REC_N, REC_SIZE = 1024, 64 << 10


def make_rec(p):
    w = recordio.MXRecordIO(p, "w")
    for k in range(REC_N):
        w.write(bytes([k % 251]) * REC_SIZE)
    w.close()


rec = once(os.path.join(D, "bench.rec"), make_rec)
rates, check = [], "ok"
for _ in range(REPEATS):
    r = recordio.MXRecordIO(rec, "r")
    t0 = clock()
    n, total, probe = 0, 0, 0
    while True:
        b = r.read()
        if b is None:
            break
        total += len(b)
        probe += b[REC_SIZE // 2]
        n += 1
    dt = clock() - t0
    r.close()
    rates.append(total / dt / 1e6)
    if n != REC_N or probe != sum(k % 251 for k in range(REC_N)):
        check = f"FAIL: {n} records, probe {probe}"
report("python.recordio_read_64KiB", rates, "MB/s", check, "MXRecordIO.read, 1024 records")

# MNIST: 60000 images of 28x28, pixel (i, r, c) = (i + r * 28 + c) % 256, label i % 10
MN = 60000


def make_images(p):
    i = np.arange(MN, dtype=np.int64)[:, None]
    px = (i + np.arange(28 * 28)[None, :]) % 256
    with open(p, "wb") as f:
        f.write(struct.pack(">iiii", 2051, MN, 28, 28) + px.astype(np.uint8).tobytes())


def make_labels(p):
    with open(p, "wb") as f:
        f.write(struct.pack(">ii", 2049, MN) + (np.arange(MN) % 10).astype(np.uint8).tobytes())


img = once(os.path.join(D, "train-images-idx3-ubyte"), make_images)
lab = once(os.path.join(D, "train-labels-idx1-ubyte"), make_labels)
it = mx.io.MNISTIter(image=img, label=lab, batch_size=128, shuffle=False, silent=True)
rates = []
for _ in range(REPEATS):
    t0 = clock()
    n = 0
    for b in it:
        b.data[0].wait_to_read()
        n += b.data[0].shape[0]
    rates.append(n / (clock() - t0))
    # reset only after a whole epoch: MXNet's CSVIter reset right after creation (its thread
    # mid-way through the data) gives 121500 rows of 100000 and labels out of step
    it.reset()
# an untimed epoch checks every label and a pixel of every image (copied at once: MXNet reuses
# a batch's buffer a few batches later)
labels, pixels = [], []
for b in it:
    labels.append(b.label[0].asnumpy().copy())
    pixels.append(b.data[0].asnumpy()[:, 0, 1, 2].copy())
labels, pixels = np.concatenate(labels), np.concatenate(pixels)
i = np.arange(MN - MN % 128)
check = "ok"
if n != len(i) or not np.array_equal(labels, i % 10) \
        or not np.array_equal(pixels, ((i + 28 + 2) % 256 / 256.0).astype(np.float32)):
    check = f"FAIL: {n} images per epoch; labels or pixels differ"
report("python.mnistiter_epoch_b128", rates, "images/s", check, "60000 28x28 images, batch 128")
del it

# CSV: 100000 rows of 32 values, value (i, j) = (i * 7 + j) % 1000 / 8; label file i % 5
CN, CW = 100000, 32


def make_csv(p):
    i = np.arange(CN)[:, None]
    v = ((i * 7 + np.arange(CW)[None, :]) % 1000) / 8
    np.savetxt(p, v, delimiter=",", fmt="%g")


def make_csv_labels(p):
    np.savetxt(p, np.arange(CN) % 5, fmt="%d")


data_csv = once(os.path.join(D, "bench_data.csv"), make_csv)
label_csv = once(os.path.join(D, "bench_label.csv"), make_csv_labels)
it = mx.io.CSVIter(data_csv=data_csv, data_shape=(CW,), label_csv=label_csv, batch_size=250)
rates = []
for _ in range(REPEATS):
    t0 = clock()
    n = 0
    for b in it:
        b.data[0].wait_to_read()
        n += b.data[0].shape[0]
    rates.append(n / (clock() - t0))
    # reset only after a whole epoch: MXNet's CSVIter reset right after creation (its thread
    # mid-way through the data) gives 121500 rows of 100000 and labels out of step
    it.reset()
rows, labels = [], []
for b in it:
    rows.append(b.data[0].asnumpy().copy())
    labels.append(b.label[0].asnumpy().copy())
rows, labels = np.concatenate(rows), np.concatenate(labels)
i = np.arange(CN)[:, None]
want = (((i * 7 + np.arange(CW)[None, :]) % 1000) / 8).astype(np.float32)
check = "ok"
if n != CN or not np.array_equal(rows, want) or not np.array_equal(labels, np.arange(CN) % 5):
    check = f"FAIL: {n} rows per epoch; values differ"
report("python.csviter_epoch_b250", rates, "rows/s", check, "100000 rows of 32 floats, batch 250")
sys.exit(status)
