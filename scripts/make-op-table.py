#!/usr/bin/env python3
"""Writes the operator and data-iterator table of the reference libmxnet.so as JSON.

Usage: make-op-table.py [OUT]   (default data/mxnet-1.9.1-ops.json; run with the venv of
scripts/setup-mxnet.sh, whose wheel carries libmxnet.so 1.9.1)

The table is what MXNet's C API reports, nothing more: every name MXListAllOpNames lists, the op
each name resolves to (aliases share one op), and per op what MXSymbolGetAtomicSymbolInfo returns;
per data iterator what MXDataIterGetIterInfo returns. mxrt serves these facts through the same
functions (src/operator/registry.rs), so that MXNet's Python package generates the same functions
on both libraries.
"""
import ctypes
import json
import os
import sys

import mxnet  # noqa: F401  (loads libmxnet.so and registers its ops)
from mxnet.base import _LIB

c_str_p = ctypes.c_char_p
c_str_pp = ctypes.POINTER(c_str_p)


def check(rc):
    if rc != 0:
        raise RuntimeError(_LIB.MXGetLastError().decode())


def s(p):
    return None if p is None else p.decode()


def op_info(handle):
    name, desc, key_var, ret = c_str_p(), c_str_p(), c_str_p(), c_str_p()
    n = ctypes.c_uint32()
    names, types, descs = c_str_pp(), c_str_pp(), c_str_pp()
    check(_LIB.MXSymbolGetAtomicSymbolInfo(
        handle, ctypes.byref(name), ctypes.byref(desc), ctypes.byref(n), ctypes.byref(names),
        ctypes.byref(types), ctypes.byref(descs), ctypes.byref(key_var), ctypes.byref(ret)))
    return {
        "name": s(name.value),
        "description": s(desc.value),
        "arguments": [[s(names[i]), s(types[i]), s(descs[i])] for i in range(n.value)],
        "key_var_num_args": s(key_var.value),
        "return_type": s(ret.value),
    }


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "data/mxnet-1.9.1-ops.json"
    size = ctypes.c_uint32()
    plist = c_str_pp()
    check(_LIB.MXListAllOpNames(ctypes.byref(size), ctypes.byref(plist)))
    listed = [plist[i].decode() for i in range(size.value)]
    ops, index_of, names = [], {}, []
    for name in listed:
        h = ctypes.c_void_p()
        check(_LIB.NNGetOpHandle(c_str_p(name.encode()), ctypes.byref(h)))
        if h.value not in index_of:
            index_of[h.value] = len(ops)
            ops.append(op_info(h))
        names.append([name, index_of[h.value]])

    n_iters = ctypes.c_uint32()
    iters_p = ctypes.POINTER(ctypes.c_void_p)()
    check(_LIB.MXListDataIters(ctypes.byref(n_iters), ctypes.byref(iters_p)))
    iters = []
    for i in range(n_iters.value):
        name, desc = c_str_p(), c_str_p()
        n = ctypes.c_uint32()
        anames, atypes, adescs = c_str_pp(), c_str_pp(), c_str_pp()
        check(_LIB.MXDataIterGetIterInfo(
            ctypes.c_void_p(iters_p[i]), ctypes.byref(name), ctypes.byref(desc), ctypes.byref(n),
            ctypes.byref(anames), ctypes.byref(atypes), ctypes.byref(adescs)))
        iters.append({
            "name": s(name.value),
            "description": s(desc.value),
            "arguments": [[s(anames[k]), s(atypes[k]), s(adescs[k])] for k in range(n.value)],
        })

    table = {"mxnet": "1.9.1", "names": names, "ops": ops, "data_iters": iters}
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w") as f:
        json.dump(table, f, indent=0, sort_keys=True)
        f.write("\n")
    print(f"{out}: {len(names)} names, {len(ops)} ops, {len(iters)} data iterators")


if __name__ == "__main__":
    main()
