"""Gluon's datasets and DataLoader through the unmodified mxnet package (test_gluon_data.py runs
it on libmxrt and on libmxnet.so and compares).

  gluon_data_script.py datasets DIR   writes, under DIR, a folder of PNG and JPEG files (the
                                      fixtures of tests/fixtures/images), a .rec/.idx pair packed
                                      by mx.recordio, MNIST files (idx, gzip) and CIFAR10 binary
                                      batches in their real formats; reads each dataset through
                                      DataLoader with num_workers 0 and 2; writes every batch to
                                      DIR/batches.npz and prints facts (lengths, labels, dtypes)
                                      as JSON
  gluon_data_script.py dies DIR HOW   a DataLoader (2 workers, timeout 2 s) whose dataset's
                                      worker leaves through os._exit (HOW=exit) or SIGKILL
                                      (HOW=kill) at item 3; prints what the loop raised and when

The published datasets are checked by SHA-1 and downloaded when the check fails; the files here
are generated, so the script replaces the package's `check_sha1` by an existence check and its
`download` by a function that returns the local file (and raises when it is missing: nothing is
fetched).
"""
import gzip
import json
import os
import pickle
import shutil
import signal
import struct
import sys
import time

import numpy as np
import mxnet as mx
from mxnet import gluon, recordio
from mxnet.gluon.data.vision import datasets

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "images")


def _local_file(url, path=None, sha1_hash=None, **kwargs):
    """The file `download` would fetch, when it is already in `path` (else an error)."""
    name = os.path.join(path, url.split("/")[-1])
    if not os.path.exists(name):
        raise RuntimeError(f"download attempted: {url}")
    return name


datasets.check_sha1 = lambda path, sha1: os.path.exists(path)
datasets.download = _local_file


def make_folder(d):
    """Two classes of the fixture images, JPEG and PNG."""
    root = os.path.join(d, "folder")
    names = sorted(os.listdir(FIXTURES))
    for k, name in enumerate(n for n in names if n.endswith((".jpg", ".png"))):
        cls = os.path.join(root, "class_a" if k % 2 == 0 else "class_b")
        os.makedirs(cls, exist_ok=True)
        shutil.copy(os.path.join(FIXTURES, name), os.path.join(cls, name))
    # a file that is not an image is skipped (with a warning) by ImageFolderDataset
    with open(os.path.join(root, "class_a", "notes.txt"), "w") as f:
        f.write("not an image")
    return root


def make_rec(d):
    """The 96x96 JPEG fixtures packed by mx.recordio (labels 0..7, some vector labels)."""
    rec, idx = os.path.join(d, "images.rec"), os.path.join(d, "images.idx")
    w = recordio.MXIndexedRecordIO(idx, rec, "w")
    for i in range(8):
        with open(os.path.join(FIXTURES, f"rgb96_{i}.jpg"), "rb") as f:
            jpg = f.read()
        w.write_idx(i, recordio.pack(recordio.IRHeader(0, float(i % 3), i, 0), jpg))
    w.close()
    return rec


def make_mnist(d, rng):
    root = os.path.join(d, "mnist")
    os.makedirs(root, exist_ok=True)
    for prefix, n in (("train", 20), ("t10k", 12)):
        images = rng.randint(0, 256, size=(n, 28, 28)).astype(np.uint8)
        labels = rng.randint(0, 10, size=n).astype(np.uint8)
        with gzip.open(os.path.join(root, f"{prefix}-images-idx3-ubyte.gz"), "wb") as f:
            f.write(struct.pack(">IIII", 0x803, n, 28, 28) + images.tobytes())
        with gzip.open(os.path.join(root, f"{prefix}-labels-idx1-ubyte.gz"), "wb") as f:
            f.write(struct.pack(">II", 0x801, n) + labels.tobytes())
    return root


def make_cifar10(d, rng):
    root = os.path.join(d, "cifar10")
    # the batch files the archive holds, where CIFAR10 looks for them (its root)
    batches = root
    os.makedirs(batches, exist_ok=True)
    for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
        n = 6
        rows = np.concatenate([rng.randint(0, 10, size=(n, 1)),
                               rng.randint(0, 256, size=(n, 3072))], axis=1).astype(np.uint8)
        with open(os.path.join(batches, name), "wb") as f:
            f.write(rows.tobytes())
    return root


def loaders(dataset, batch_size, shuffle=False):
    for workers in (0, 2):
        yield workers, gluon.data.DataLoader(dataset, batch_size=batch_size, shuffle=shuffle,
                                             num_workers=workers, last_batch="keep")


def run_datasets(d):
    rng = np.random.RandomState(5)
    folder, rec = make_folder(d), make_rec(d)
    mnist, cifar = make_mnist(d, rng), make_cifar10(d, rng)
    facts, arrays = {}, {}
    T = gluon.data.vision.transforms

    def record(name, dataset, batch_size):
        facts[name + "_len"] = len(dataset)
        for workers, loader in loaders(dataset, batch_size):
            labels, shapes = [], []
            for b, (x, y) in enumerate(loader):
                arrays[f"{name}_w{workers}_b{b}"] = x.asnumpy()
                labels.append(y.asnumpy().tolist())
                shapes.append([list(x.shape), str(x.dtype)])
            facts[f"{name}_w{workers}_labels"] = labels
            facts[f"{name}_w{workers}_shapes"] = shapes

    folder_ds = gluon.data.vision.ImageFolderDataset(folder)
    facts["folder_synsets"] = folder_ds.synsets
    facts["folder_items"] = [[os.path.basename(p), c] for p, c in folder_ds.items]
    record("folder", folder_ds, 1)
    record("folder_gray", gluon.data.vision.ImageFolderDataset(folder, flag=0), 1)
    record("folder_tensor", folder_ds.transform_first(
        T.Compose([T.Resize((24, 16)), T.ToTensor()])), 3)
    rec_ds = gluon.data.vision.ImageRecordDataset(rec)
    record("rec", rec_ds, 3)
    record("rec_tensor", rec_ds.transform_first(T.ToTensor()), 4)
    for train in (True, False):
        tag = "train" if train else "test"
        record(f"mnist_{tag}", gluon.data.vision.MNIST(root=mnist, train=train), 7)
        record(f"cifar10_{tag}", gluon.data.vision.CIFAR10(root=cifar, train=train), 8)
    record("mnist_tensor", gluon.data.vision.MNIST(root=mnist).transform_first(T.ToTensor()), 6)
    # bicubic resizing (interp 2, the default of mx.image's crops and resizes): 8-bit images up
    # and down, gray, float32 arrays, through imresize, mx.nd.image.resize and center_crop
    with open(os.path.join(FIXTURES, "rgb37x45.png"), "rb") as f:
        png = f.read()
    im, gray = mx.image.imdecode(png), mx.image.imdecode(png, flag=0)
    arrays["cubic_up"] = mx.image.imresize(im, 61, 50, interp=2).asnumpy()
    arrays["cubic_down"] = mx.image.imresize(im, 20, 17, interp=2).asnumpy()
    arrays["cubic_gray"] = mx.image.imresize(gray, 23, 71, interp=2).asnumpy()
    arrays["cubic_up_3x"] = mx.image.imresize(im, 111, 135, interp=2).asnumpy()
    f32 = mx.nd.array(rng.uniform(0, 255, size=(7, 5, 2)), dtype="float32")
    arrays["cubic_f32"] = mx.nd.image.resize(f32, size=(11, 9), interp=2).asnumpy()
    arrays["cubic_f32_down"] = mx.nd.image.resize(f32, size=(3, 4), interp=2).asnumpy()
    arrays["cubic_center_crop"] = mx.image.center_crop(im, (30, 30), interp=2)[0].asnumpy()
    arrays["cubic_transform"] = T.Resize((19, 26), interpolation=2)(im).asnumpy()
    np.savez(os.path.join(d, "batches.npz"), **arrays)
    print(json.dumps(facts))


class Dying(gluon.data.Dataset):
    """Items are arrays; in a worker process, item 3 ends that process."""

    def __init__(self, how):
        self.how, self.parent = how, os.getpid()

    def __len__(self):
        return 16

    def __getitem__(self, i):
        if i == 3 and os.getpid() != self.parent:
            if self.how == "exit":
                os._exit(3)
            os.kill(os.getpid(), signal.SIGKILL)
        return mx.nd.full((2,), i)


def run_dies(how):
    loader = gluon.data.DataLoader(Dying(how), batch_size=2, num_workers=2, timeout=2)
    start, seen, raised = time.time(), [], None
    try:
        for x in loader:
            seen.append(x.asnumpy().tolist())
    except Exception as e:  # what the loop raises is the finding
        raised = type(e).__module__ + "." + type(e).__name__
    print(json.dumps({"raised": raised, "seconds": time.time() - start, "batches": seen}),
          flush=True)


if __name__ == "__main__":
    mode, d = sys.argv[1], sys.argv[2]
    if mode == "datasets":
        run_datasets(d)
    elif mode == "dies":
        run_dies(sys.argv[3])
    else:
        raise SystemExit(f"unknown mode {mode}")
