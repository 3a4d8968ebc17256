"""UpSampling (nearest with one or several inputs, concatenated or summed; bilinear),
BilinearResize2D (every mode, with and without align_corners) and the legacy Crop through MXNet's
Python package: forward outputs and autograd gradients, and bad parameters' errors. Prints one
JSON object (case name -> {"ok": ...} or {"error": message}); test_resize.py runs it on both
libraries and compares.
"""
import json

import numpy as np
import mxnet as mx

from case_runner import flat, rand, results, run

nd = mx.nd
ag = mx.autograd


def forward_backward(op, shapes, dtype="float32", **params):
    xs = [nd.array(rand(s, 10 + i), dtype=dtype) for i, s in enumerate(shapes)]
    for x in xs:
        x.attach_grad()
    with ag.record():
        y = op(*xs, **params)
    y.backward(nd.array(rand(y.shape, 99), dtype=dtype))
    return {"shape": list(y.shape), "y": flat(y.asnumpy()),
            "grads": [flat(x.grad.asnumpy()) for x in xs]}


# ---- UpSampling, nearest
run("up_nearest_2", lambda: forward_backward(nd.UpSampling, [(2, 3, 4, 5)], scale=2,
                                             sample_type="nearest", num_args=1))
run("up_nearest_3_float64", lambda: forward_backward(nd.UpSampling, [(1, 2, 3, 3)], "float64", scale=3,
                                                     sample_type="nearest", num_args=1))
run("up_nearest_concat", lambda: forward_backward(
    nd.UpSampling, [(2, 3, 4, 4), (2, 2, 2, 2), (2, 1, 8, 8)], scale=2, sample_type="nearest",
    num_args=3))
run("up_nearest_sum", lambda: forward_backward(
    nd.UpSampling, [(2, 3, 2, 3), (2, 3, 4, 6)], scale=2, sample_type="nearest", num_args=2,
    multi_input_mode="sum"))
run("up_nearest_scale1", lambda: forward_backward(nd.UpSampling, [(2, 2, 3, 3)], scale=1,
                                                  sample_type="nearest", num_args=1))


# ---- UpSampling, bilinear (a grouped transposed convolution with the given kernel)
def up_bilinear(scale, c, dtype="float32"):
    k = 2 * scale - scale % 2
    return forward_backward(nd.UpSampling, [(2, c, 3, 4), (c, 1, k, k)], dtype, scale=scale,
                            sample_type="bilinear", num_filter=c, num_args=2)


run("up_bilinear_2", lambda: up_bilinear(2, 3))
run("up_bilinear_3", lambda: up_bilinear(3, 2))
run("up_bilinear_4_float64", lambda: up_bilinear(4, 2, "float64"))

# ---- BilinearResize2D
R = nd.contrib.BilinearResize2D
run("resize_size_up", lambda: forward_backward(R, [(2, 3, 4, 5)], height=7, width=9))
run("resize_size_down", lambda: forward_backward(R, [(1, 2, 9, 8)], height=4, width=3))
run("resize_size_same", lambda: forward_backward(R, [(1, 2, 4, 5)], height=4, width=5))
run("resize_size_one", lambda: forward_backward(R, [(1, 2, 4, 5)], height=1, width=3))
run("resize_no_align_up", lambda: forward_backward(R, [(2, 2, 4, 5)], height=7, width=11,
                                                   align_corners=False))
run("resize_no_align_down", lambda: forward_backward(R, [(1, 2, 9, 7)], height=4, width=3,
                                                     align_corners=False))
run("resize_scale", lambda: forward_backward(R, [(1, 3, 4, 6)], scale_height=1.5, scale_width=0.5))
run("resize_odd_scale", lambda: forward_backward(R, [(1, 2, 5, 6)], scale_height=2.0, scale_width=2.0,
                                                 mode="odd_scale"))
run("resize_like", lambda: forward_backward(R, [(1, 2, 3, 4), (1, 5, 6, 7)], mode="like"))
for m in ["to_even_down", "to_even_up", "to_odd_down", "to_odd_up"]:
    run(f"resize_{m}", lambda m=m: forward_backward(R, [(1, 2, 5, 6)], mode=m))
run("resize_float64", lambda: forward_backward(R, [(2, 2, 3, 4)], "float64", height=5, width=7))

# ---- Crop
run("crop_h_w", lambda: forward_backward(nd.Crop, [(2, 3, 6, 7)], num_args=1, h_w=(3, 4)))
run("crop_offset", lambda: forward_backward(nd.Crop, [(2, 3, 6, 7)], num_args=1, h_w=(3, 4),
                                            offset=(2, 1)))
run("crop_center", lambda: forward_backward(nd.Crop, [(2, 3, 7, 8)], num_args=1, h_w=(4, 3),
                                            center_crop=True))
run("crop_like", lambda: forward_backward(nd.Crop, [(2, 3, 6, 7), (2, 1, 4, 5)], num_args=2,
                                          offset=(1, 2)))
run("crop_like_center", lambda: forward_backward(nd.Crop, [(1, 2, 9, 6), (1, 1, 4, 3)], num_args=2,
                                                 center_crop=True))

# ---- errors
run("bad_up_type", lambda: forward_backward(nd.UpSampling, [(1, 1, 2, 2)], scale=2,
                                            sample_type="cubic", num_args=1))
run("bad_up_not_4d", lambda: forward_backward(nd.UpSampling, [(1, 2, 2)], scale=2,
                                              sample_type="nearest", num_args=1))
run("bad_up_sum_channels", lambda: forward_backward(
    nd.UpSampling, [(1, 3, 2, 2), (1, 2, 4, 4)], scale=2, sample_type="nearest", num_args=2,
    multi_input_mode="sum"))
run("bad_resize_mode", lambda: forward_backward(R, [(1, 1, 2, 2)], mode="nearest"))
run("bad_crop_offset", lambda: forward_backward(nd.Crop, [(1, 1, 5, 5)], num_args=1, h_w=(3, 3),
                                                offset=(3, 0)))
run("bad_crop_too_big", lambda: forward_backward(nd.Crop, [(1, 1, 5, 5)], num_args=1, h_w=(6, 3)))


def symbol_case():
    v = mx.sym.var
    u = mx.sym.UpSampling(v("a"), v("b"), scale=2, sample_type="nearest", num_args=2)
    c = mx.sym.Crop(v("a"), v("b"), num_args=2)
    r = mx.sym.contrib.BilinearResize2D(v("a"), height=5, width=4)
    return {"up": [u.list_arguments(), [list(t) for t in u.infer_shape(a=(1, 2, 3, 3), b=(1, 1, 6, 6))[1]]],
            "crop": [c.list_arguments(), [list(t) for t in c.infer_shape(a=(1, 2, 7, 7), b=(1, 1, 3, 4))[1]]],
            "resize": [r.list_arguments(), [list(t) for t in r.infer_shape(a=(1, 2, 3, 3))[1]]]}


run("symbol_arguments_and_shapes", symbol_case)

print(json.dumps(results))
