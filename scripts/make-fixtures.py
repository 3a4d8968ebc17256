#!/usr/bin/env python3
"""Write the MXNet-made NDArray fixtures under tests/fixtures/ and their manifest.json.

Run once with the venv of scripts/setup-mxnet.sh:
    "$(dirname "$(scripts/setup-mxnet.sh)")/../../../../bin/python" scripts/make-fixtures.py
or simply  .venv-mxnet/bin/python scripts/make-fixtures.py
The outputs are committed; Rust tests read them without MXNet. Every file is loaded back with
MXNet (through mxnet-inspect.py's describe_file) and compared with the arrays we meant to save, so
the manifest describes what the reference library actually reads from each file.

legacy_ndarray.v0 is not made here: it is apache/mxnet 1.9.1 tests/python/unittest/legacy_ndarray.v0
(6 x float32 (128,), values 0..127), copied verbatim; this script only describes it.
"""
import ctypes
import hashlib
import importlib.util
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(os.path.dirname(HERE), "tests", "fixtures")

_spec = importlib.util.spec_from_file_location("mxnet_inspect", os.path.join(HERE, "mxnet-inspect.py"))
inspect = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(inspect)

import mxnet as mx  # noqa: E402
from mxnet.base import _LIB, check_call  # noqa: E402
from mxnet.ndarray.ndarray import _DTYPE_MX_TO_NP  # noqa: E402

BF16 = _DTYPE_MX_TO_NP[12]


def bf16_array(values, shape):
    """A bfloat16 NDArray holding `values` (each exactly representable), made via the C API."""
    bits = (np.asarray(values, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
    assert np.array_equal((bits.astype(np.uint32) << 16).view(np.float32),
                          np.asarray(values, dtype=np.float32)), "value not exact in bfloat16"
    nd = mx.nd.empty(shape, dtype=BF16)
    check_call(_LIB.MXNDArraySyncCopyFromCPU(nd.handle, bits.ctypes.data_as(ctypes.c_void_p),
                                             ctypes.c_size_t(bits.size)))
    return nd, bits.reshape(shape).view(BF16)


def dense(np_arr):
    return mx.nd.array(np_arr, dtype=np_arr.dtype)


def named_dtypes():
    """(a) one array per supported dtype, incl. a 0-size and a 3-d shape."""
    arrs = {}
    arrs["f32"] = (np.arange(6, dtype=np.float32) * 0.25 - 0.5).reshape(2, 3)
    arrs["f32_big"] = ((np.arange(64 * 64) % 251) * 0.125 - 3.0).astype(np.float32).reshape(64, 64)
    arrs["f64_3d"] = (np.arange(24, dtype=np.float64) / 3.0).reshape(2, 3, 4)
    arrs["f16"] = np.array([-2.0, -0.5, 0.0, 0.333, 65504.0], dtype=np.float16)
    arrs["u8"] = (np.arange(16) * 17).astype(np.uint8)
    arrs["i32"] = np.array([[-2147483648, -1], [0, 2147483647]], dtype=np.int32)
    arrs["i8"] = np.array([-128, -3, -1, 0, 1, 3, 127], dtype=np.int8)
    arrs["i64"] = np.array([-(2 ** 40), 0, 2 ** 53 + 1], dtype=np.int64)
    arrs["bool"] = np.array([1, 0, 0, 1, 1, 0], dtype=np.bool_)
    arrs["empty_0x3"] = np.zeros((0, 3), dtype=np.float32)
    nds = {k: dense(v) for k, v in arrs.items()}
    bf_nd, bf_np = bf16_array([-1.5, 0.0, 1.0, 2.5, 100.0, 3.140625], (2, 3))
    nds["bf16"] = bf_nd
    arrs["bf16"] = bf_np
    mx.nd.save(os.path.join(OUT, "named_dtypes.params"), nds)
    return list(nds.keys()), [arrs[k] for k in nds.keys()]


def unnamed_list():
    """(b) a list without names."""
    arrs = [np.arange(4, dtype=np.float32),
            np.array([[7, -8], [9, -10]], dtype=np.int32),
            np.array([[[42.0]]], dtype=np.float32)]
    mx.nd.save(os.path.join(OUT, "unnamed_list.params"), [dense(a) for a in arrs])
    return None, arrs


def np_shape():
    """(c) numpy-shape semantics (V3 record magic) incl. a scalar () and zero-size shapes."""
    arrs = {"scalar": np.array(3.5, dtype=np.float32),
            "zero_size": np.zeros((2, 0, 3), dtype=np.float32),
            "vec_i32": np.arange(3, dtype=np.int32),
            "f64_2x2": np.array([[1.0, -2.0], [0.1, 1e300]], dtype=np.float64)}
    mx.npx.set_np()
    try:
        nds = {k: mx.np.array(v, dtype=v.dtype) for k, v in arrs.items()}
        mx.npx.save(os.path.join(OUT, "np_shape.params"), nds)
    finally:
        mx.npx.reset_np()
    return list(arrs.keys()), list(arrs.values())


def sparse():
    """(d) one row_sparse and one csr array (mxrt rejects them; tests need the bytes)."""
    rsp = mx.nd.sparse.row_sparse_array(
        (np.array([[1.0, 2.0], [5.0, 6.0]], dtype=np.float32), np.array([0, 2], dtype=np.int64)),
        shape=(3, 2))
    csr = mx.nd.sparse.csr_matrix(
        (np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32), np.array([0, 2, 1, 3], dtype=np.int64),
         np.array([0, 2, 3, 4], dtype=np.int64)), shape=(3, 4))
    mx.nd.save(os.path.join(OUT, "sparse.params"), {"rsp": rsp, "csr": csr})
    return ["rsp", "csr"], [rsp.tostype("default").asnumpy(), csr.tostype("default").asnumpy()]


def raw_record():
    """A single record as MXNDArraySaveRawBytes writes it (what pickle uses)."""
    arr = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    nd = dense(arr)
    size = ctypes.c_size_t()
    buf = ctypes.c_char_p()
    check_call(_LIB.MXNDArraySaveRawBytes(nd.handle, ctypes.byref(size), ctypes.byref(buf)))
    with open(os.path.join(OUT, "raw_record.bin"), "wb") as f:
        f.write(ctypes.string_at(buf, size.value))
    return None, [arr]


def legacy_v0():
    return None, [np.arange(128, dtype=np.float32)] * 6


def check(name, entry, names, expected):
    assert entry["names"] == names, (name, entry["names"], names)
    assert len(entry["arrays"]) == len(expected), name
    for desc, exp in zip(entry["arrays"], expected):
        if desc["stype"] != 0:
            assert list(desc["shape"]) == list(exp.shape), (name, desc, exp.shape)
            continue
        want = inspect.describe_blob(exp)
        for key in ("shape", "dtype", "nbytes", "sha256"):
            assert desc[key] == want[key], (name, key, desc[key], want[key])


def compact_json(obj, indent=0):
    """JSON with objects indented and lists of scalars kept on one line."""
    pad = " " * indent
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [f'{pad}  {json.dumps(k)}: {compact_json(v, indent + 2)}' for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, list) and any(isinstance(x, (dict, list)) for x in obj):
        items = [pad + "  " + compact_json(v, indent + 2) for v in obj]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return json.dumps(obj)


def main():
    os.makedirs(OUT, exist_ok=True)
    makers = [
        ("named_dtypes.params", named_dtypes, False,
         "MXNet mx.nd.save of a named dict: one array per dtype (bfloat16 via the C API), "
         "a 0-size (0,3) and a 3-d shape"),
        ("unnamed_list.params", unnamed_list, False, "mx.nd.save of a list (no names)"),
        ("np_shape.params", np_shape, False,
         "mx.npx.save under set_np(): V3 record magic, scalar () and zero-size (2,0,3) shapes; "
         "loading needs np-shape mode on"),
        ("sparse.params", sparse, False,
         "mx.nd.save of a row_sparse (3,2) with rows [0,2] and a csr (3,4); "
         "aux: row_sparse [indices], csr [indptr, indices]"),
        ("raw_record.bin", raw_record, True,
         "MXNDArraySaveRawBytes of a float32 (2,2) [[1,2],[3,4]]: one record, no list header"),
        ("legacy_ndarray.v0", legacy_v0, False,
         "apache/mxnet 1.9.1 tests/python/unittest/legacy_ndarray.v0 (V0 records: u32 ndim, "
         "u32 dims): 6 x float32 (128,) 0..127"),
    ]
    files = {}
    for fname, make, raw, desc in makers:
        names, expected = make()
        path = os.path.join(OUT, fname)
        entry = inspect.describe_file(path, raw=raw)
        check(fname, entry, names, expected)
        with open(path, "rb") as f:
            data = f.read()
        files[fname] = {"description": desc, "size": len(data),
                        "file_sha256": hashlib.sha256(data).hexdigest(), **entry}
        sys.stderr.write(f"{fname}: {len(data)} bytes, {len(entry['arrays'])} arrays\n")
    manifest = {
        "generator": "scripts/make-fixtures.py",
        "mxnet_version": mx.__version__,
        "notes": ("per array: shape, dtype code (mshadow TypeFlag), stype (0 dense, 1 row_sparse, "
                  "2 csr), nbytes and sha256 of the raw little-endian data blob in C order, values "
                  "when the blob has <= %d elements (bool as 0/1, float16/bfloat16 as exact floats); "
                  "sparse arrays also have storage_shape and aux blobs" % inspect.VALUES_LIMIT),
        "files": files,
    }
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        f.write(compact_json(manifest) + "\n")
    total = sum(os.path.getsize(os.path.join(OUT, n)) for n in os.listdir(OUT))
    sys.stderr.write(f"total fixtures: {total} bytes\n")


if __name__ == "__main__":
    main()
