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
import struct
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


ELEM_SIZE = {0: 4, 1: 8, 2: 2, 3: 1, 4: 4, 5: 1, 6: 8, 7: 1, 12: 2}


class _Reader:
    def __init__(self, buf):
        self.buf, self.pos = buf, 0

    def take(self, fmt):
        vals = struct.unpack_from("<" + fmt, self.buf, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return vals if len(vals) > 1 else vals[0]

    def blob(self, n):
        out = self.buf[self.pos:self.pos + n]
        assert len(out) == n, "truncated"
        self.pos += n
        return out


def _shape(r, legacy_v0_ndim=None):
    if legacy_v0_ndim is not None:
        return [r.take("I") for _ in range(legacy_v0_ndim)]
    ndim = r.take("i")
    return [r.take("q") for _ in range(max(ndim, 0))]


def _record(r):
    """One array record (format of the spec, section 4.2), parsed without MXNet."""
    magic = r.take("I")
    if magic in (0xF993FAC9, 0xF993FACA):
        stype = r.take("i")
        naux = {0: 0, 1: 1, 2: 2}[stype]
        sshape = _shape(r) if naux else None
        shape = _shape(r)
    elif magic == 0xF993FAC8:
        stype, naux, sshape, shape = 0, 0, None, _shape(r)
    else:  # V0: the u32 is ndim, dims are u32
        stype, naux, sshape, shape = 0, 0, None, _shape(r, legacy_v0_ndim=magic)
    r.take("ii")  # context
    dtype = r.take("i")
    aux_meta = [(r.take("i"), _shape(r)) for _ in range(naux)]
    count = 1
    for d in (sshape if sshape is not None else shape):
        count *= d
    data = r.blob(count * ELEM_SIZE[dtype])
    aux = []
    for at, ash in aux_meta:
        n = 1
        for d in ash:
            n *= d
        aux.append((at, ash, r.blob(n * ELEM_SIZE[at])))
    return {"stype": stype, "shape": shape, "storage_shape": sshape, "dtype": dtype, "data": data,
            "aux": aux}


def raw_parse(buf, raw):
    r = _Reader(buf)
    if raw:
        recs, names = [_record(r)], None
    else:
        assert r.take("QQ") == (0x112, 0)
        recs = [_record(r) for _ in range(r.take("Q"))]
        nn = r.take("Q")
        names = [r.blob(r.take("Q")).decode() for _ in range(nn)] or None
    assert r.pos == len(buf), "trailing bytes"
    return names, recs


def check_raw(name, entry, buf, raw):
    """The manifest (from MXNet's load) must agree with a plain parse of the bytes."""
    names, recs = raw_parse(buf, raw)
    assert names == entry["names"], (name, names)
    for rec, desc in zip(recs, entry["arrays"]):
        assert rec["stype"] == desc["stype"] and rec["dtype"] == desc["dtype"], (name, desc)
        assert rec["shape"] == desc["shape"], (name, rec["shape"], desc["shape"])
        assert hashlib.sha256(rec["data"]).hexdigest() == desc["sha256"], name
        for (at, ash, blob), ad in zip(rec["aux"], desc.get("aux", [])):
            assert at == ad["dtype"] and ash == ad["shape"], name
            assert hashlib.sha256(blob).hexdigest() == ad["sha256"], name
        if rec["storage_shape"] is not None:
            assert rec["storage_shape"] == desc["storage_shape"], name


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
        check_raw(fname, entry, data, raw)
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
        f.write(inspect.compact_json(manifest) + "\n")
    total = sum(os.path.getsize(os.path.join(OUT, n)) for n in os.listdir(OUT))
    sys.stderr.write(f"total fixtures: {total} bytes\n")


if __name__ == "__main__":
    main()
