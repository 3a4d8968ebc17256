"""Float32 matrix products through MXNet's Python package in every operand layout: `nd.dot`
with and without `transpose_a` / `transpose_b`, and `batch_dot`, over shapes that reach the
AVX-512 GEMM's packing paths (row-major and transposed operands, partial 8-row panels, partial
16-step blocks, edge tiles of 1, 2 and 3 vectors, few-column products) and a few that stay on
the small-product path. Prints one JSON object (case name -> {"ok": {"shape", "y", "ref"}} or
{"error": message}); test_gemm_layouts.py runs it on both libraries and compares.
"""
import json

import mxnet as mx
import numpy as np

from case_runner import flat, rand, results, run

nd = mx.nd

# (m, n, k)
SHAPES = [
    (37, 196, 61),     # a 4-column edge tile after four 48-column tiles
    (64, 64, 300),     # 48 + 16 columns
    (29, 17, 257),     # one partial vector, a partial depth block past 256
    (130, 33, 65),     # 2-vector edge, partial panel of 2 rows
    (9, 95, 130),
    (200, 48, 40),
    (8, 16, 1024),
    (300, 100, 7),     # short depth: partial 16-step packing block
    (5, 8, 9),         # tiny: the small-product path
]


def dot_case(m, n, k, ta, tb, seed):
    a = rand((k, m) if ta else (m, k), seed).astype(np.float32)
    b = rand((n, k) if tb else (k, n), seed + 1).astype(np.float32)
    y = nd.dot(nd.array(a), nd.array(b), transpose_a=ta, transpose_b=tb).asnumpy()
    ref = (a.T if ta else a).astype(np.float64) @ (b.T if tb else b).astype(np.float64)
    return {"shape": list(y.shape), "y": flat(y), "ref": flat(ref)}


for i, (m, n, k) in enumerate(SHAPES):
    for ta in (False, True):
        for tb in (False, True):
            run(f"dot_{m}x{n}x{k}_{int(ta)}{int(tb)}",
                lambda m=m, n=n, k=k, ta=ta, tb=tb, i=i: dot_case(m, n, k, ta, tb, 10 * i))


def batch_case(bs, m, n, k, ta, tb, seed):
    a = rand((bs, k, m) if ta else (bs, m, k), seed).astype(np.float32)
    b = rand((bs, n, k) if tb else (bs, k, n), seed + 1).astype(np.float32)
    y = nd.batch_dot(nd.array(a), nd.array(b), transpose_a=ta, transpose_b=tb).asnumpy()
    at = a.transpose(0, 2, 1) if ta else a
    bt = b.transpose(0, 2, 1) if tb else b
    ref = np.matmul(at.astype(np.float64), bt.astype(np.float64))
    return {"shape": list(y.shape), "y": flat(y), "ref": flat(ref)}


for ta in (False, True):
    for tb in (False, True):
        run(f"batch_dot_3x40x70x50_{int(ta)}{int(tb)}",
            lambda ta=ta, tb=tb: batch_case(3, 40, 70, 50, ta, tb, 500))

print(json.dumps(results))
