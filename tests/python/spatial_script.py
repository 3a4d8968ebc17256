"""GridGenerator, BilinearSampler, SpatialTransformer, ROIPooling, ROIAlign, Correlation and
CTCLoss through MXNet's Python package: forward outputs and autograd gradients over several
parameter combinations and odd sizes, symbol arguments and shapes, and bad parameters' errors.
Prints one JSON object (case name -> {"ok": ...} or {"error": message}); test_spatial.py runs it
on both libraries and compares (and checks CTCLoss against a numpy reference).
"""
import json
import os

import numpy as np
import mxnet as mx

from case_runner import flat, rand, results, run

nd = mx.nd
ag = mx.autograd


def forward_backward(op, arrays, dtype="float32", grads=None, **params):
    """`arrays`: numpy inputs; `grads`: which get gradients (default all)."""
    xs = [nd.array(a, dtype=dtype) for a in arrays]
    grads = grads if grads is not None else [True] * len(xs)
    for x, g in zip(xs, grads):
        if g:
            x.attach_grad()
    with ag.record():
        y = op(*xs, **params)
    y.backward(nd.array(rand(y.shape, 99, 0.5, 1.5), dtype=dtype))
    return {"shape": list(y.shape), "y": flat(y.asnumpy()),
            "grads": [flat(x.grad.asnumpy()) if g else None for x, g in zip(xs, grads)]}


# ---- GridGenerator
def theta(n, seed):
    t = np.tile(np.array([[0.9, 0.1, 0.05, -0.15, 1.1, -0.1]]), (n, 1))
    return t + rand((n, 6), seed, -0.1, 0.1)


run("grid_affine", lambda: forward_backward(nd.GridGenerator, [theta(2, 1)],
                                            transform_type="affine", target_shape=(3, 5)))
run("grid_affine_float64", lambda: forward_backward(nd.GridGenerator, [theta(3, 2)], "float64",
                                                    transform_type="affine", target_shape=(4, 2)))
run("grid_warp", lambda: forward_backward(nd.GridGenerator, [rand((2, 2, 3, 5), 3, -2, 2)],
                                          transform_type="warp"))
run("grid_warp_float64", lambda: forward_backward(nd.GridGenerator, [rand((1, 2, 4, 3), 4, -2, 2)],
                                                  "float64", transform_type="warp"))
# MXNet computes GridGenerator in float32 only (mxrt in float64 too): the same inputs in float32
run("grid_affine_float64@f32", lambda: forward_backward(nd.GridGenerator, [theta(3, 2)],
                                                        transform_type="affine", target_shape=(4, 2)))
run("grid_warp_float64@f32", lambda: forward_backward(nd.GridGenerator, [rand((1, 2, 4, 3), 4, -2, 2)],
                                                      transform_type="warp"))


# ---- BilinearSampler: grids inside, across and outside the borders
def grid(n, h, w, seed, reach=1.2):
    return rand((n, 2, h, w), seed, -reach, reach)


run("sampler", lambda: forward_backward(nd.BilinearSampler, [rand((2, 3, 5, 4), 5), grid(2, 3, 6, 6)]))
run("sampler_float64", lambda: forward_backward(nd.BilinearSampler,
                                                [rand((1, 2, 4, 7), 7), grid(1, 5, 3, 8, 1.5)], "float64"))
run("sampler_far_outside", lambda: forward_backward(nd.BilinearSampler,
                                                    [rand((1, 1, 3, 3), 9), grid(1, 4, 4, 10, 3.0)]))
run("sampler_cudnn_off", lambda: forward_backward(nd.BilinearSampler,
                                                  [rand((2, 2, 4, 4), 11), grid(2, 2, 3, 12)],
                                                  cudnn_off=True))
run("sampler_data_only", lambda: forward_backward(nd.BilinearSampler,
                                                  [rand((1, 2, 3, 4), 13), grid(1, 3, 3, 14)],
                                                  grads=[True, False]))

# ---- SpatialTransformer
run("stn", lambda: forward_backward(nd.SpatialTransformer, [rand((2, 3, 6, 5), 15), theta(2, 16)],
                                    target_shape=(4, 3), transform_type="affine",
                                    sampler_type="bilinear"))
run("stn_float64", lambda: forward_backward(nd.SpatialTransformer,
                                            [rand((1, 2, 5, 5), 17), theta(1, 18) * 0.8], "float64",
                                            target_shape=(5, 4), transform_type="affine",
                                            sampler_type="bilinear"))
run("stn_zoom_out", lambda: forward_backward(nd.SpatialTransformer,
                                             [rand((1, 1, 4, 4), 19), theta(1, 20) * 1.7],
                                             target_shape=(3, 3), transform_type="affine",
                                             sampler_type="bilinear", cudnn_off=True))


# ---- ROIPooling
def rois(n_batch, h, w, count, seed, scale=1.0):
    r = np.random.RandomState(seed)
    out = []
    for _ in range(count):
        b = r.randint(0, n_batch)
        x1, x2 = sorted(r.uniform(0, w / scale, 2))
        y1, y2 = sorted(r.uniform(0, h / scale, 2))
        out.append([b, x1, y1, x2, y2])
    return np.array(out)


def distinct(shape, seed):
    """Values without ties (argmax routing is unambiguous)."""
    n = int(np.prod(shape))
    return np.random.RandomState(seed).permutation(n).reshape(shape) / n - 0.5


run("roipool", lambda: forward_backward(nd.ROIPooling, [distinct((2, 3, 7, 6), 21), rois(2, 7, 6, 4, 22)],
                                        grads=[True, False], pooled_size=(2, 3), spatial_scale=1.0))
run("roipool_scale", lambda: forward_backward(
    nd.ROIPooling, [distinct((1, 2, 8, 9), 23), rois(1, 8, 9, 3, 24, 0.5)],
    grads=[True, False], pooled_size=(3, 2), spatial_scale=0.5))
run("roipool_float64", lambda: forward_backward(
    nd.ROIPooling, [distinct((2, 2, 5, 5), 25), rois(2, 5, 5, 3, 26)], "float64",
    grads=[True, False], pooled_size=(2, 2), spatial_scale=1.0))
run("roipool_big_bins", lambda: forward_backward(
    nd.ROIPooling, [distinct((1, 1, 4, 4), 27), np.array([[0, 0, 0, 1, 1], [0, 1, 1, 3, 2]])],
    grads=[True, False], pooled_size=(4, 3), spatial_scale=1.0))
run("roipool_rois_grad", lambda: forward_backward(
    nd.ROIPooling, [distinct((1, 1, 4, 4), 28), np.array([[0, 0, 0, 3, 3]])],
    pooled_size=(2, 2), spatial_scale=1.0))

# ---- ROIAlign
for name, kw, shape in [
        ("roialign", dict(pooled_size=(2, 2), spatial_scale=1.0), (2, 3, 7, 6)),
        ("roialign_sample2", dict(pooled_size=(3, 2), spatial_scale=0.5, sample_ratio=2), (1, 2, 5, 6)),
        ("roialign_aligned", dict(pooled_size=(2, 3), spatial_scale=1.0, aligned=True), (2, 2, 6, 6)),
        ("roialign_position_sensitive", dict(pooled_size=(2, 2), spatial_scale=1.0,
                                             position_sensitive=True), (1, 8, 5, 5)),
]:
    scale = kw["spatial_scale"]
    run(name, lambda kw=kw, shape=shape, scale=scale: forward_backward(
        nd.contrib.ROIAlign, [rand(shape, 30), rois(shape[0], shape[2], shape[3], 4, 31, scale)],
        grads=[True, False], **kw))
run("roialign_float64", lambda: forward_backward(
    nd.contrib.ROIAlign, [rand((1, 2, 5, 4), 32), rois(1, 5, 4, 3, 33)], "float64",
    grads=[True, False], pooled_size=(2, 2), spatial_scale=1.0, sample_ratio=3))
run("roialign_rois_grad", lambda: forward_backward(
    nd.contrib.ROIAlign, [rand((1, 1, 4, 4), 34), np.array([[0, 0.5, 0.5, 2.5, 3.0]])],
    pooled_size=(2, 2), spatial_scale=1.0))

# ---- Correlation
for name, kw, shape in [
        ("corr_default", dict(), (2, 3, 5, 6)),
        ("corr_k3_d2", dict(kernel_size=3, max_displacement=2, pad_size=2), (1, 2, 6, 5)),
        ("corr_strides", dict(kernel_size=1, max_displacement=2, stride1=2, stride2=2, pad_size=1),
         (2, 2, 7, 7)),
        ("corr_subtract", dict(kernel_size=3, max_displacement=1, pad_size=1, is_multiply=False),
         (1, 3, 5, 4)),
        ("corr_no_pad", dict(kernel_size=1, max_displacement=1), (1, 2, 4, 5)),
]:
    run(name, lambda kw=kw, shape=shape: forward_backward(
        nd.Correlation, [rand(shape, 40), rand(shape, 41)], **kw))
run("corr_float64", lambda: forward_backward(nd.Correlation, [rand((1, 2, 5, 5), 42), rand((1, 2, 5, 5), 43)],
                                             "float64", kernel_size=3, max_displacement=1, pad_size=1))


# ---- CTCLoss
def ctc(dtype="float32", label=None, data_lengths=None, label_lengths=None, op=None, **kw):
    t, n, a = 6, len(label), 5
    data = nd.array(rand((t, n, a), 50, -2, 2), dtype=dtype)
    lab = nd.array(np.array(label), dtype=dtype)
    ins = [data, lab]
    if data_lengths is not None:
        ins.append(nd.array(data_lengths, dtype=dtype))
    if label_lengths is not None:
        ins.append(nd.array(label_lengths, dtype=dtype))
    data.attach_grad()
    with ag.record():
        y = (op or nd.CTCLoss)(*ins, **kw)
    y.backward(nd.array(rand(y.shape, 51, 0.5, 1.5), dtype=dtype))
    return {"y": flat(y.asnumpy()), "grad": flat(data.grad.asnumpy()),
            "data": flat(data.asnumpy()), "shape": [t, n, a], "label": label,
            "data_lengths": data_lengths, "label_lengths": label_lengths,
            "blank_label": kw.get("blank_label", "first"), "head": flat(rand(y.shape, 51, 0.5, 1.5))}


run("ctc_first", lambda: ctc(label=[[1, 2, 0], [3, 3, 4], [2, 0, 0]]))
run("ctc_last", lambda: ctc(label=[[0, 1, -1], [3, 3, 2], [-1, -1, -1]], blank_label="last"))
run("ctc_data_lengths", lambda: ctc(label=[[1, 2, 0], [4, 1, 0]], data_lengths=[4, 6],
                                    use_data_lengths=True))
run("ctc_label_lengths", lambda: ctc(label=[[1, 2, 3], [4, 4, 1]], label_lengths=[2, 3],
                                     use_label_lengths=True))
run("ctc_both_lengths_last", lambda: ctc(label=[[0, 1, 2], [3, 3, 0]], data_lengths=[5, 6],
                                         label_lengths=[3, 1], use_data_lengths=True,
                                         use_label_lengths=True, blank_label="last"))
run("ctc_too_short", lambda: ctc(label=[[1, 1, 1, 1, 2, 0], [2, 3, 0, 0, 0, 0]]))
run("ctc_float64", lambda: ctc("float64", label=[[1, 2, 0], [3, 1, 1]]))
# MXNet computes CTCLoss in float32 only (mxrt in float64 too)
run("ctc_float64@f32", lambda: ctc(label=[[1, 2, 0], [3, 1, 1]]))
run("ctc_alias_ctc_loss", lambda: ctc(label=[[2, 1, 0]], op=nd.ctc_loss))
run("ctc_alias_contrib", lambda: ctc(label=[[2, 1, 0]], op=nd.contrib.CTCLoss))
run("ctc_alias_contrib_lower", lambda: ctc(label=[[2, 1, 0]], op=nd.contrib.ctc_loss))


# ---- symbols: arguments, outputs, shapes
def symbol_case():
    v = mx.sym.var
    out = {}
    for name, s, shapes in [
            ("grid", mx.sym.GridGenerator(v("a"), transform_type="affine", target_shape=(3, 4)), dict(a=(2, 6))),
            ("sampler", mx.sym.BilinearSampler(v("a"), v("b")), dict(a=(2, 3, 5, 5), b=(2, 2, 4, 3))),
            ("stn", mx.sym.SpatialTransformer(v("a"), v("b"), target_shape=(3, 3), transform_type="affine",
                                              sampler_type="bilinear"), dict(a=(1, 2, 4, 4), b=(1, 6))),
            ("roipool", mx.sym.ROIPooling(v("a"), v("b"), pooled_size=(2, 2), spatial_scale=0.5),
             dict(a=(1, 3, 8, 8), b=(4, 5))),
            ("roialign", mx.sym.contrib.ROIAlign(v("a"), v("b"), pooled_size=(2, 2), spatial_scale=0.5),
             dict(a=(1, 3, 8, 8), b=(4, 5))),
            ("corr", mx.sym.Correlation(v("a"), v("b"), kernel_size=3, max_displacement=2, pad_size=2),
             dict(a=(1, 3, 8, 8), b=(1, 3, 8, 8))),
            ("ctc", mx.sym.CTCLoss(v("a"), v("b"), label_lengths=v("c"), use_label_lengths=True),
             dict(a=(6, 2, 5), b=(2, 3), c=(2,))),
    ]:
        _, outs, _ = s.infer_shape(**shapes)
        out[name] = [s.list_arguments(), s.list_outputs(), [list(t) for t in outs]]
    return out


run("symbol_arguments_and_shapes", symbol_case)


def symbol_backward():
    """SpatialTransformer and CTCLoss bound in an executor: forward and gradients."""
    v = mx.sym.var
    s = mx.sym.SpatialTransformer(v("data"), v("loc"), target_shape=(3, 4), transform_type="affine",
                                  sampler_type="bilinear")
    args = {"data": nd.array(rand((1, 2, 5, 5), 60)), "loc": nd.array(theta(1, 61))}
    grads = {k: nd.zeros(a.shape) for k, a in args.items()}
    ex = s.bind(mx.cpu(), args, args_grad=grads)
    y = ex.forward(is_train=True)[0]
    ex.backward(nd.array(rand(y.shape, 62, 0.5, 1.5)))
    return {"y": flat(y.asnumpy()), "data": flat(grads["data"].asnumpy()),
            "loc": flat(grads["loc"].asnumpy())}


run("symbol_stn_backward", symbol_backward)

# ---- float16 (MXNet computes in half precision, mxrt in float32)
run("sampler_float16", lambda: forward_backward(nd.BilinearSampler, [rand((1, 2, 4, 5), 70), grid(1, 3, 3, 71)],
                                                "float16"))
run("roipool_float16", lambda: forward_backward(
    nd.ROIPooling, [distinct((1, 2, 6, 6), 72), rois(1, 6, 6, 3, 73)], "float16",
    grads=[True, False], pooled_size=(2, 2), spatial_scale=1.0))
run("roialign_float16", lambda: forward_backward(
    nd.contrib.ROIAlign, [rand((1, 2, 5, 5), 74), rois(1, 5, 5, 2, 75)], "float16",
    grads=[True, False], pooled_size=(2, 2), spatial_scale=1.0, sample_ratio=2))
run("corr_float16", lambda: forward_backward(nd.Correlation, [rand((1, 2, 4, 4), 76), rand((1, 2, 4, 4), 77)],
                                             "float16", kernel_size=1, max_displacement=1, pad_size=1))

# ---- errors
run("bad_grid_type", lambda: forward_backward(nd.GridGenerator, [theta(1, 1)], transform_type="rotate",
                                              target_shape=(2, 2)))
run("bad_grid_affine_shape", lambda: forward_backward(nd.GridGenerator, [rand((1, 5), 1)],
                                                      transform_type="affine", target_shape=(2, 2)))
run("bad_grid_target", lambda: forward_backward(nd.GridGenerator, [theta(1, 1)], transform_type="affine"))
run("bad_grid_warp_channels", lambda: forward_backward(nd.GridGenerator, [rand((1, 3, 2, 2), 1)],
                                                       transform_type="warp"))
run("bad_sampler_grid_channels", lambda: forward_backward(nd.BilinearSampler,
                                                          [rand((1, 1, 3, 3), 1), rand((1, 3, 2, 2), 2)]))
run("bad_sampler_data_ndim", lambda: forward_backward(nd.BilinearSampler,
                                                      [rand((1, 3, 3), 1), rand((1, 2, 2, 2), 2)]))
run("bad_stn_loc", lambda: forward_backward(nd.SpatialTransformer, [rand((1, 1, 3, 3), 1), rand((1, 4), 2)],
                                            target_shape=(2, 2), transform_type="affine",
                                            sampler_type="bilinear"))
run("bad_roipool_rois", lambda: forward_backward(nd.ROIPooling, [rand((1, 1, 3, 3), 1), rand((2, 4), 2)],
                                                 pooled_size=(2, 2), spatial_scale=1.0))
run("bad_roipool_data", lambda: forward_backward(nd.ROIPooling, [rand((1, 3, 3), 1), rand((2, 5), 2)],
                                                 pooled_size=(2, 2), spatial_scale=1.0))
run("bad_roialign_ps_channels", lambda: forward_backward(
    nd.contrib.ROIAlign, [rand((1, 3, 4, 4), 1), np.array([[0, 0, 0, 2, 2]])],
    pooled_size=(2, 2), spatial_scale=1.0, position_sensitive=True))
# MXNet 1.9.1 checks Correlation's parameters inside the op on an engine thread and, after
# raising, sometimes segfaults or aborts the process there: these cases run on libmxrt only
ON_MXNET = "MXNET_LIBRARY_PATH" not in os.environ
if not ON_MXNET:
    run("bad_corr_even_kernel", lambda: forward_backward(nd.Correlation, [rand((1, 1, 5, 5), 1), rand((1, 1, 5, 5), 2)],
                                                         kernel_size=2))
    run("bad_corr_no_fit", lambda: forward_backward(nd.Correlation, [rand((1, 1, 3, 3), 1), rand((1, 1, 3, 3), 2)],
                                                    max_displacement=3))
run("bad_ctc_data_ndim", lambda: forward_backward(nd.CTCLoss, [rand((4, 3), 1), np.ones((3, 2))]))
run("bad_ctc_batch", lambda: forward_backward(nd.CTCLoss, [rand((4, 3, 5), 1), np.ones((2, 2))]))
run("bad_ctc_label_too_long", lambda: forward_backward(nd.CTCLoss, [rand((2, 1, 5), 1), np.ones((1, 3))]))
run("bad_ctc_blank", lambda: forward_backward(nd.CTCLoss, [rand((4, 1, 5), 1), np.ones((1, 2))],
                                              blank_label="middle"))

print(json.dumps(results))
