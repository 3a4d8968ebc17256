#!/usr/bin/env python3
"""Load an NDArray file with the real MXNet 1.9.1 and print a JSON description of it.

Usage: mxnet-inspect.py [--raw] FILE

The output has the same shape as one entry of tests/fixtures/manifest.json "files":

  {"format": "list" | "raw", "np_shape": bool, "names": [str] | null,
   "arrays": [{"shape": [int], "dtype": int, "dtype_name": str, "stype": int,
               "nbytes": int, "sha256": hex, "values": [...]?,        # data blob
               "storage_shape": [int]?, "aux": [{"dtype", "shape", "nbytes", "sha256", "values"?}]?}]}

"sha256" is over the raw little-endian bytes of the data blob (C order); "values" is present when the
blob has at most VALUES_LIMIT elements (bool as 0/1, bfloat16 as its float value). A file whose
first record carries the V3 (np-shape) magic is loaded with np-shape semantics switched on. --raw
treats FILE as a single record as written by MXNDArraySaveRawBytes (loaded via
MXNDArrayLoadFromRawBytes). Run it with the venv of scripts/setup-mxnet.sh.
"""
import ctypes
import hashlib
import json
import struct
import sys

import numpy as np

VALUES_LIMIT = 32
LIST_MAGIC = 0x112
V2_MAGIC = 0xF993FAC9
V3_MAGIC = 0xF993FACA
DTYPE_NAMES = {0: "float32", 1: "float64", 2: "float16", 3: "uint8", 4: "int32", 5: "int8",
               6: "int64", 7: "bool", 12: "bfloat16"}
STYPE_CODES = {"default": 0, "row_sparse": 1, "csr": 2}


def _mx():
    import mxnet as mx  # imported lazily: it takes a few seconds
    return mx


def _dtype_code(np_dtype):
    dt = np.dtype(np_dtype)
    if dt.names == ("bfloat16",):
        return 12
    return {np.dtype(np.float32): 0, np.dtype(np.float64): 1, np.dtype(np.float16): 2,
            np.dtype(np.uint8): 3, np.dtype(np.int32): 4, np.dtype(np.int8): 5,
            np.dtype(np.int64): 6, np.dtype(np.bool_): 7}[dt]


def _plain_values(arr, code):
    flat = arr.reshape(-1)
    if code == 12:  # bfloat16: the upper half of a float32
        bits = flat.view(np.uint16).astype(np.uint32) << 16
        return [float(v) for v in bits.view(np.float32)]
    if code == 7:
        return [int(v) for v in flat.astype(np.uint8)]
    if code in (0, 1, 2):
        return [float(v) for v in flat]
    return [int(v) for v in flat]


def describe_blob(arr):
    """arr: numpy array (C order). Returns shape/dtype/nbytes/sha256 (+values if small)."""
    arr = np.array(arr, order="C")  # (np.ascontiguousarray would turn a 0-d array into 1-d)
    code = _dtype_code(arr.dtype)
    raw = arr.tobytes(order="C")
    out = {"shape": [int(d) for d in arr.shape], "dtype": code, "dtype_name": DTYPE_NAMES[code],
           "nbytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest()}
    if arr.size <= VALUES_LIMIT:
        out["values"] = _plain_values(arr, code)
    return out


def describe_array(nd):
    stype = STYPE_CODES[nd.stype]
    if stype == 0:
        d = describe_blob(nd.asnumpy())
        d["stype"] = 0
        return d
    data = describe_blob(nd.data.asnumpy())
    d = {"shape": [int(x) for x in nd.shape], "dtype": data["dtype"],
         "dtype_name": data["dtype_name"], "stype": stype, "storage_shape": data["shape"],
         "nbytes": data["nbytes"], "sha256": data["sha256"]}
    if "values" in data:
        d["values"] = data["values"]
    if stype == 1:
        aux = [nd.indices.asnumpy()]
    else:  # csr: kIndPtr = 0, kIdx = 1
        aux = [nd.indptr.asnumpy(), nd.indices.asnumpy()]
    d["aux"] = [describe_blob(a) for a in aux]
    for a in d["aux"]:
        a.pop("dtype_name", None)
    return d


def first_record_magic(buf):
    if len(buf) >= 28 and struct.unpack_from("<Q", buf, 0)[0] == LIST_MAGIC:
        if struct.unpack_from("<Q", buf, 16)[0] > 0:
            return struct.unpack_from("<I", buf, 24)[0]
    return None


def describe_file(path, raw=False):
    mx = _mx()
    with open(path, "rb") as f:
        buf = f.read()
    if raw:
        np_shape = struct.unpack_from("<I", buf, 0)[0] == V3_MAGIC
    else:
        np_shape = first_record_magic(buf) == V3_MAGIC
    with mx.util.np_shape(np_shape):
        if raw:
            from mxnet.base import _LIB, NDArrayHandle, check_call
            handle = NDArrayHandle()
            check_call(_LIB.MXNDArrayLoadFromRawBytes(
                ctypes.c_char_p(buf), ctypes.c_size_t(len(buf)), ctypes.byref(handle)))
            loaded = [mx.nd.NDArray(handle)]
        else:
            loaded = mx.nd.load(path)
        if isinstance(loaded, dict):
            names = list(loaded.keys())
            arrays = [loaded[k] for k in names]
        else:
            names, arrays = None, list(loaded)
        descs = [describe_array(a) for a in arrays]
    return {"format": "raw" if raw else "list", "np_shape": np_shape, "names": names,
            "arrays": descs}


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


def main(argv):
    args = [a for a in argv[1:] if a != "--raw"]
    if len(args) != 1:
        sys.stderr.write("usage: mxnet-inspect.py [--raw] FILE\n")
        return 2
    try:
        entry = describe_file(args[0], raw="--raw" in argv)
    except Exception as e:  # MXNetError, OSError: one line for the caller's assertion message
        lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
        msg = lines[-1] if lines else ""
        if not msg.startswith(type(e).__name__ + ":"):
            msg = "%s: %s" % (type(e).__name__, msg)
        sys.stderr.write("mxnet-inspect: %s\n" % msg)
        return 1
    print(compact_json(entry))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
