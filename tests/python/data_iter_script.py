"""MNISTIter, CSVIter and LibSVMIter through the unmodified mxnet package; prints each
scenario's batches (data, label, pad, index over several epochs) or its error as JSON
(test_data_iter.py compares libmxrt with libmxnet.so).

  data_iter_script.py DIR           writes the input files into DIR and runs every scenario,
                                    printing one JSON line {name: outcome} per scenario
  data_iter_script.py DIR --list    prints the scenario names
  data_iter_script.py DIR NAME...   runs just those scenarios

Scenarios named `mxrt_*` are inputs MXNet does not check (it builds invalid arrays or crashes);
they run on libmxrt only and must fail with a message.
"""
import json
import os
import struct
import sys

import numpy as np
import mxnet as mx

ON_MXRT = bool(os.environ.get("MXNET_LIBRARY_PATH"))
D = sys.argv[1]
scenarios = {}


def scenario(fn):
    scenarios[fn.__name__] = fn
    return fn


def path(name):
    return os.path.join(D, name)


def make_files():
    rng = np.random.RandomState(3)
    # CSV: 10 rows of 6 values (data_shape (6,) or (2, 3)), labels of 2 values
    data = rng.randint(-50, 50, size=(10, 6))
    with open(path("data.csv"), "w") as f:
        for row in data:
            f.write(",".join(f"{v / 4}" for v in row) + "\n")
    with open(path("data_int.csv"), "w") as f:
        for row in data:
            f.write(",".join(str(v * 1000003) for v in row) + "\n")
    with open(path("label.csv"), "w") as f:
        for i in range(10):
            f.write(f"{i},{i * 2 + 0.5}\n")
    with open(path("label1.csv"), "w") as f:
        for i in range(10):
            f.write(f"{i * 3}\n")
    os.makedirs(path("csvdir"), exist_ok=True)
    with open(path("csvdir/a.csv"), "w") as f:
        f.write("1,2\n3,4\n")
    with open(path("csvdir/b.csv"), "w") as f:
        f.write("5,6\n7,8\n9,10\n")
    with open(path("bad_row.csv"), "w") as f:
        f.write("1,2,3\n4,5,6\n7,8\n")
    with open(path("short_label.csv"), "w") as f:
        f.write("1\n2\n")
    # MNIST: 50 images of 4x5
    n, rows, cols = 50, 4, 5
    img = rng.randint(0, 256, size=n * rows * cols).astype(np.uint8)
    lab = rng.randint(0, 10, size=n).astype(np.uint8)
    with open(path("img"), "wb") as f:
        f.write(struct.pack(">iiii", 2051, n, rows, cols) + img.tobytes())
    with open(path("lab"), "wb") as f:
        f.write(struct.pack(">ii", 2049, n) + lab.tobytes())
    with open(path("img_short"), "wb") as f:
        f.write(struct.pack(">ii", 2051, n))
    # LibSVM: 11 rows over 7 columns, labels file with 3 columns
    with open(path("data.libsvm"), "w") as f:
        for i in range(11):
            cols_i = sorted(rng.choice(7, size=rng.randint(0, 4), replace=False))
            f.write(f"{i - 5}" + "".join(f" {c}:{(c + 1) * (i + 1) / 8}" for c in cols_i) + "\n")
    with open(path("label.libsvm"), "w") as f:
        for i in range(11):
            f.write(f"{i}" + (f" {i % 3}:{i + 0.25}" if i % 4 else "") + "\n")
    with open(path("bad_index.libsvm"), "w") as f:
        f.write("1 0:1 2:2\n2 7:1\n")


def arr(a):
    if a.stype != "default":
        a = a.tostype("default")
    return np.asarray(a.asnumpy(), dtype=np.float64).round(5).tolist()


def epochs(it, n=3, data=True):
    out = []
    for _ in range(n):
        ep = []
        for b in it:
            rec = {"label": arr(b.label[0]), "pad": b.pad,
                   "index": None if b.index is None else [int(i) for i in b.index],
                   "dtype": str(b.data[0].dtype), "shape": list(b.data[0].shape),
                   "stype": b.data[0].stype, "label_shape": list(b.label[0].shape)}
            if data:
                rec["data"] = arr(b.data[0])
            ep.append(rec)
        out.append(ep)
        it.reset()
    return out


for bs in (3, 4, 5, 10):
    for rb in (True, False):
        def csv_case(bs=bs, rb=rb):
            it = mx.io.CSVIter(data_csv=path("data.csv"), data_shape=(6,), batch_size=bs,
                               round_batch=rb)
            return {"provide": [list(it.provide_data[0].shape), list(it.provide_label[0].shape)],
                    "epochs": epochs(it)}
        csv_case.__name__ = f"csv_batch{bs}_round{int(rb)}"
        scenario(csv_case)


@scenario
def csv_number_forms_bit_for_bit():
    # numbers of every magnitude in the forms the one-pass parser converts itself (short
    # decimals) and those it hands to the full parser (exponents, long mantissas, spaces, signs),
    # over a file larger than one parallel piece, with CRLF line ends and blank lines; the values
    # compared as float32 bit patterns
    rng = np.random.RandomState(5)
    fmts = ["%.9g", "%g", "%.3f", "%.2e", "%.7g", "%.10f", " %g", "%g ", "%+.4f", "%.1f"]
    with open(path("forms.csv"), "w", newline="") as f:
        for i in range(6000):
            vals = rng.standard_normal(8) * 10.0 ** rng.randint(-9, 9, size=8)
            f.write(",".join(fmts[(i + j) % len(fmts)] % v for j, v in enumerate(vals)))
            f.write("\r\n" if i % 3 == 0 else "\n")
            if i % 100 == 0:
                f.write("\n")
    it = mx.io.CSVIter(data_csv=path("forms.csv"), data_shape=(8,), batch_size=500)
    bits = []
    for b in it:
        bits += b.data[0].asnumpy().view(np.uint32)[: 500 - b.pad].ravel().tolist()
    # the correctly rounded values (strtof's), through float64 (no field here is a double
    # rounding case)
    with open(path("forms.csv")) as f:
        fields = [v for line in f.read().splitlines() if line for v in line.split(",")]
    ref = np.array([float(v) for v in fields], dtype=np.float32).view(np.uint32).tolist()
    return {"bits": bits, "ref": ref}


@scenario
def csv_labels_and_shapes():
    it = mx.io.CSVIter(data_csv=path("data.csv"), data_shape=(2, 3), label_csv=path("label.csv"),
                       label_shape=(2,), batch_size=4)
    return epochs(it, 2)


@scenario
def csv_one_label_column():
    it = mx.io.CSVIter(data_csv=path("data.csv"), data_shape=(6,), label_csv=path("label1.csv"),
                       batch_size=3, round_batch=False)
    return epochs(it, 2)


@scenario
def csv_int_dtypes():
    out = {}
    for dt in ("int32", "int64", "float32"):
        it = mx.io.CSVIter(data_csv=path("data_int.csv"), data_shape=(6,), batch_size=5,
                           dtype=dt)
        out[dt] = epochs(it, 1)
    return out


@scenario
def csv_directory():
    it = mx.io.CSVIter(data_csv=path("csvdir"), data_shape=(2,), batch_size=2)
    return epochs(it, 2)


@scenario
def csv_prefetch_buffer_one_and_reset_mid_epoch():
    it = mx.io.CSVIter(data_csv=path("data.csv"), data_shape=(6,), batch_size=3,
                       prefetch_buffer=1)
    first = arr(it.next().data[0])
    second = arr(it.next().data[0])
    it.reset()
    out = {"first": first, "second": second}
    if ON_MXRT:
        # mxrt starts over; MXNet continues after the instances its thread already wrapped to
        # when it read ahead that far (it reads up to 16 batches ahead)
        out["mxrt_after"] = epochs(it, 2)
    return out


@scenario
def csv_kept_arrays_stay_valid():
    it = mx.io.CSVIter(data_csv=path("data.csv"), data_shape=(6,), batch_size=2,
                       round_batch=False, prefetch_buffer=1)
    kept = [b.data[0] for b in it]
    # the file's rows, batch by batch: what each kept array must still hold
    rows = np.loadtxt(path("data.csv"), delimiter=",", ndmin=2)
    rows = [rows[i:i + 2].round(5).tolist() for i in range(0, len(rows) - 1, 2)]
    return {"kept": [arr(a) for a in kept], "rows": rows}


for bs in (7, 10, 64):
    for flat in (False, True):
        def mnist_case(bs=bs, flat=flat):
            it = mx.io.MNISTIter(image=path("img"), label=path("lab"), batch_size=bs, flat=flat,
                                 shuffle=False, silent=True)
            return epochs(it, 2, data=bs != 64)
        mnist_case.__name__ = f"mnist_batch{bs}_flat{int(flat)}"
        scenario(mnist_case)


@scenario
def mnist_shuffle_seeds():
    out = {}
    for seed in (0, 5, -3):
        it = mx.io.MNISTIter(image=path("img"), label=path("lab"), batch_size=10, shuffle=True,
                             seed=seed, silent=True, flat=True)
        out[str(seed)] = epochs(it, 2)
    return out


@scenario
def mnist_parts():
    out = []
    for k in range(3):
        it = mx.io.MNISTIter(image=path("img"), label=path("lab"), batch_size=4, num_parts=3,
                             part_index=k, shuffle=k == 1, seed=2, silent=True)
        out.append(epochs(it, 1))
    return out


for bs in (3, 4, 11):
    def libsvm_case(bs=bs):
        it = mx.io.LibSVMIter(data_libsvm=path("data.libsvm"), data_shape=(7,), batch_size=bs)
        return epochs(it, 3)
    libsvm_case.__name__ = f"libsvm_batch{bs}"
    scenario(libsvm_case)


@scenario
def libsvm_label_file():
    it = mx.io.LibSVMIter(data_libsvm=path("data.libsvm"), data_shape=(7,),
                          label_libsvm=path("label.libsvm"), label_shape=(3,), batch_size=4)
    return epochs(it, 2)


@scenario
def libsvm_parts():
    out = []
    for k in range(2):
        it = mx.io.LibSVMIter(data_libsvm=path("data.libsvm"), data_shape=(7,), batch_size=2,
                              num_parts=2, part_index=k)
        out.append(epochs(it, 2))
    return out


def error_of(fn):
    try:
        it = fn()
        for _ in it:
            pass
    except mx.base.MXNetError as e:
        return {"error": str(e).splitlines()[0][:300]}
    return {"no_error": True}


@scenario
def errors():
    cases = {
        "csv_missing_file": lambda: mx.io.CSVIter(data_csv=path("nope.csv"), data_shape=(3,),
                                                  batch_size=2),
        "csv_bad_row": lambda: mx.io.CSVIter(data_csv=path("bad_row.csv"), data_shape=(3,),
                                             batch_size=1),
        "csv_short_label": lambda: mx.io.CSVIter(data_csv=path("data.csv"), data_shape=(6,),
                                                 label_csv=path("short_label.csv"),
                                                 batch_size=2),
        "csv_float64": lambda: mx.io.CSVIter(data_csv=path("data.csv"), data_shape=(6,),
                                             batch_size=2, dtype="float64"),
        "csv_no_shape": lambda: mx.io.CSVIter(data_csv=path("data.csv"), batch_size=2),
        "csv_bad_batch_size": lambda: mx.io.CSVIter(data_csv=path("data.csv"), data_shape=(6,),
                                                    batch_size="abc"),
        "csv_more_batch_than_rows": lambda: mx.io.CSVIter(data_csv=path("data.csv"),
                                                          data_shape=(6,), batch_size=11),
        "mnist_missing_file": lambda: mx.io.MNISTIter(image=path("nope"), label=path("lab"),
                                                      silent=True),
        "mnist_short_header": lambda: mx.io.MNISTIter(image=path("img_short"),
                                                      label=path("lab"), silent=True),
        "mnist_bad_part": lambda: mx.io.MNISTIter(image=path("img"), label=path("lab"),
                                                  num_parts=2, part_index=2, silent=True),
        "mnist_bad_bool": lambda: mx.io.MNISTIter(image=path("img"), label=path("lab"),
                                                  shuffle="maybe", silent=True),
        "libsvm_2d_shape": lambda: mx.io.LibSVMIter(data_libsvm=path("data.libsvm"),
                                                    data_shape=(7, 2), batch_size=2),
        "libsvm_no_round_batch": lambda: mx.io.LibSVMIter(data_libsvm=path("data.libsvm"),
                                                          data_shape=(7,), batch_size=2,
                                                          round_batch=False),
        "image_record_iter": lambda: mx.io.ImageRecordIter(path_imgrec=path("nope.rec"),
                                                           data_shape=(3, 8, 8), batch_size=2),
    }
    if ON_MXRT:
        cases["mxrt_libsvm_index_out_of_range"] = lambda: mx.io.LibSVMIter(
            data_libsvm=path("bad_index.libsvm"), data_shape=(3,), batch_size=1)
        cases["mxrt_libsvm_part_out_of_range"] = lambda: mx.io.LibSVMIter(
            data_libsvm=path("data.libsvm"), data_shape=(7,), batch_size=1, num_parts=2,
            part_index=2)
    return {k: error_of(f) for k, f in cases.items()}


if __name__ == "__main__":
    if "--list" in sys.argv:
        print(" ".join(scenarios))
        sys.exit(0)
    make_files()
    only = [a for a in sys.argv[2:] if not a.startswith("-")]
    for name, fn in scenarios.items():
        if only and name not in only:
            continue
        try:
            result = {"ok": fn()}
        except (mx.base.MXNetError, StopIteration) as e:
            result = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        # one line per scenario, written at once: libmxnet.so sometimes crashes in its
        # LibSVMIter, and the harness then reruns what is missing
        print(json.dumps({name: result}), flush=True)
