"""Gluon's datasets through DataLoader on libmxrt against libmxnet.so (gluon_data_script.py
through the unmodified mxnet package): ImageFolderDataset over PNG and JPEG files,
ImageRecordDataset over a packed .rec, MNIST and CIFAR10 over files in their real formats, each
with num_workers 0 and 2; and a DataLoader whose worker process dies."""
import functools
import json

import numpy as np
import pytest

from conftest import libmxrt, run_script

LIBS = ("mxnet", "mxrt")


def lib(name):
    return "mxnet" if name == "mxnet" else str(libmxrt())


@functools.lru_cache(maxsize=None)
def datasets(name, d):
    proc = run_script("gluon_data_script.py", lib(name), args=("datasets", d))
    assert proc.returncode == 0, f"datasets on {name} failed:\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout), dict(np.load(f"{d}/batches.npz"))


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return {name: datasets(name, str(tmp_path_factory.mktemp(f"gluon-data-{name}")))
            for name in LIBS}


def test_lengths_labels_and_shapes_equal_mxnet(results):
    (theirs, _), (ours, _) = results["mxnet"], results["mxrt"]
    assert ours == theirs
    assert ours["folder_len"] == 15 and ours["rec_len"] == 8
    assert ours["mnist_train_len"] == 20 and ours["mnist_test_len"] == 12
    assert ours["cifar10_train_len"] == 30 and ours["cifar10_test_len"] == 6


def test_workers_give_the_same_batches(results):
    for name in LIBS:
        facts, arrays = results[name]
        zero = sorted(k for k in arrays if "_w0_" in k)
        assert len(zero) > 40
        for k in zero:
            two = k.replace("_w0_", "_w2_")
            assert np.array_equal(arrays[k], arrays[two]), (name, k)
        for k in [k for k in facts if "_w0_" in k]:
            assert facts[k] == facts[k.replace("_w0_", "_w2_")], (name, k)


def jpeg_close(key, got, want, step=1.0):
    """JPEG pixels: libjpeg-turbo's chroma upsampling differs at sharp colour edges (as in
    test_image.py): at most 4 steps, over 2 in under 0.2% of the pixels; PNG pixels exact."""
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64)) / step
    assert diff.max() <= 4 + 1e-4, (key, diff.max())
    assert (diff > 2 + 1e-4).mean() < 0.002, (key, (diff > 2 + 1e-4).sum())


def test_batches_equal_mxnet(results):
    (facts, theirs), (_, ours) = results["mxnet"], results["mxrt"]
    assert sorted(ours) == sorted(theirs)
    items = [name for name, _ in facts["folder_items"]]
    checked = 0
    for k, want in theirs.items():
        got = ours[k]
        assert got.shape == want.shape and got.dtype == want.dtype, (k, got.shape, want.shape)
        if k.startswith("cubic"):
            # bicubic: 8-bit images in OpenCV's fixed point (OpenCV's vectorised pass may round
            # one step apart: at most one step, in under 5% of the pixels); float images to
            # float32 rounding
            diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
            if got.dtype == np.uint8:
                assert diff.max() <= 1, (k, diff.max())
                assert (diff > 0).mean() < 0.05, (k, (diff > 0).mean())
            else:
                assert diff.max() <= 1e-4 * max(1.0, float(np.abs(want).max())), (k, diff.max())
        elif k.startswith(("mnist", "cifar10")):
            # no decoding: the files' bytes
            assert np.array_equal(got, want), k
        elif k.startswith(("folder_w", "folder_gray_w")) and items[int(k.split("_b")[-1])].endswith(".png"):
            assert np.array_equal(got, want), k
        elif "tensor" in k:
            # float images in [0, 1] (resized ones: one more step of rounding)
            jpeg_close(k, got, want, step=1 / 255)
        else:
            jpeg_close(k, got, want)
        checked += 1
    assert checked == len(theirs) > 60
    assert sum(k.startswith("cubic") for k in theirs) == 8


def test_values_match_the_files(results):
    """MNIST and CIFAR10 batches are the generated files' bytes (checked on mxrt without MXNet:
    the first batch's first image against the file, read with numpy)."""
    _, ours = results["mxrt"]
    a = ours["mnist_train_w0_b0"]
    assert a.shape == (7, 28, 28, 1) and a.dtype == np.uint8
    t = ours["mnist_tensor_w0_b0"]
    assert t.shape == (6, 1, 28, 28) and t.dtype == np.float32
    np.testing.assert_allclose(t[0, 0], a[0, :, :, 0] / 255.0, rtol=0, atol=1e-6)


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_dead_worker_is_an_error_not_a_hang(tmp_path, how):
    """A worker process that leaves (os._exit, SIGKILL) in the dataset's __getitem__: MXNet's
    DataLoader (Python code: a multiprocessing pool) waits for the lost batch up to its `timeout`
    and raises multiprocessing's TimeoutError, or fails at once with EOFError when the worker
    died while the pool was reading from it; which one is up to timing, on both libraries. mxrt
    must raise as well, within the same bound, after the same batches."""
    expected = [[[float(2 * b), float(2 * b)], [float(2 * b + 1), float(2 * b + 1)]]
                for b in range(8)]
    for name in LIBS:
        proc = run_script("gluon_data_script.py", lib(name), args=("dies", str(tmp_path), how))
        assert proc.returncode == 0, f"{name}:\n{proc.stderr[-3000:]}"
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        assert r["raised"] in ("multiprocessing.context.TimeoutError", "builtins.EOFError"), \
            (name, r)
        assert r["seconds"] < 60, (name, r)
        # the batches before the lost one (item 3 is in batch 1)
        assert r["batches"] == expected[:len(r["batches"])] and len(r["batches"]) <= 1, (name, r)
