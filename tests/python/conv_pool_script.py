"""Convolution, Deconvolution and Pooling through MXNet's Python package: forward outputs and
autograd gradients over a grid of parameters (odd sizes), bad parameters' errors, and a small
Gluon CNN trained for a few steps. Prints one JSON object (case name -> {"ok": ...} or
{"error": message}); test_conv_pool.py runs it on both libraries and compares.
"""
import json
import sys

import numpy as np
import mxnet as mx

from case_runner import flat, rand, results, run

nd = mx.nd
ag = mx.autograd


def forward_backward(op, arrays, dtype="float32", **params):
    """The op's output and every input's gradient under a random head gradient."""
    xs = [nd.array(a, dtype=dtype) for a in arrays]
    for x in xs:
        x.attach_grad()
    with ag.record():
        y = op(*xs, **params)
    head = nd.array(rand(y.shape, 99), dtype=dtype)
    y.backward(head)
    out = {"shape": list(y.shape), "y": flat(y.asnumpy()),
           "grads": [flat(x.grad.asnumpy()) for x in xs]}
    if op in (nd.Pooling, nd.Pooling_v1) and params.get("pool_type") in ("avg", "sum"):
        # linear in x: <pool(x), head> = <x, dx> for the true gradient
        out["adjoint_gap"] = float((y * head).sum().asscalar() - (xs[0] * xs[0].grad).sum().asscalar())
    return out


# ---- Convolution: (name, data shape, kernel, extra params, num_filter, num_group, no_bias)
CONV = [
    ("1d", (2, 3, 11), (3,), {}, 4, 1, False),
    ("1d_stride_dilate_pad", (2, 3, 11), (3,), dict(stride=(2,), dilate=(2,), pad=(1,)), 5, 1, False),
    ("1d_groups", (3, 4, 9), (2,), dict(stride=(3,)), 6, 2, True),
    ("2d", (2, 3, 7, 9), (3, 3), {}, 4, 1, False),
    ("2d_pad", (2, 3, 7, 9), (3, 3), dict(pad=(1, 1)), 4, 1, False),
    ("2d_stride2", (2, 5, 9, 7), (3, 3), dict(stride=(2, 2), pad=(1, 1)), 6, 1, False),
    ("2d_asym", (2, 4, 9, 7), (3, 2), dict(stride=(2, 1), dilate=(1, 2), pad=(0, 1)), 6, 2, False),
    ("2d_1x1", (3, 5, 6, 7), (1, 1), {}, 4, 1, False),
    ("2d_1x1_stride2", (3, 5, 7, 7), (1, 1), dict(stride=(2, 2)), 4, 1, True),
    ("2d_stem7x7", (2, 3, 15, 13), (7, 7), dict(stride=(2, 2), pad=(3, 3)), 8, 1, True),
    ("2d_depthwise", (2, 6, 9, 8), (3, 3), dict(pad=(1, 1)), 6, 6, True),
    ("2d_depthwise_stride2", (2, 6, 9, 8), (3, 3), dict(pad=(1, 1), stride=(2, 2)), 6, 6, False),
    ("2d_depth_multiplier", (2, 3, 7, 7), (3, 3), dict(pad=(1, 1)), 6, 3, False),
    ("2d_dilate2", (1, 2, 11, 10), (3, 3), dict(dilate=(2, 2), pad=(2, 1)), 3, 1, False),
    ("2d_cudnn_params", (2, 3, 7, 9), (3, 3), dict(workspace=64, cudnn_tune="fastest", cudnn_off=True,
                                                      layout="NCHW"), 4, 1, False),
    ("3d", (1, 2, 5, 6, 4), (2, 3, 3), dict(stride=(1, 2, 1), pad=(1, 0, 1)), 3, 1, False),
    ("3d_groups_dilate", (2, 4, 6, 5, 5), (3, 2, 2), dict(dilate=(1, 2, 1), pad=(1, 1, 0)), 4, 2, True),
]
for i, (name, shape, kernel, extra, nf, ng, no_bias) in enumerate(CONV):
    c = shape[1]
    arrays = [rand(shape, i), rand((nf, c // ng) + kernel, 100 + i)]
    if not no_bias:
        arrays.append(rand((nf,), 200 + i))
    for dtype in ("float32", "float64") if name in ("2d_asym", "3d", "1d_groups") else ("float32",):
        run(f"conv_{name}_{dtype}", lambda: forward_backward(
            nd.Convolution, arrays, dtype, kernel=kernel, num_filter=nf, num_group=ng,
            no_bias=no_bias, **extra))
run("conv_v1_2d", lambda: forward_backward(
    nd.Convolution_v1, [rand((2, 4, 7, 8), 1), rand((6, 2, 3, 3), 2), rand((6,), 3)],
    kernel=(3, 3), stride=(2, 1), pad=(1, 1), num_filter=6, num_group=2))

# ---- Deconvolution
def deconv_reference(x, w, b, h, kernel, num_filter, num_group=1, stride=None, dilate=None, pad=None,
                     adj=None, target_shape=None, **_):
    """A direct transposed convolution in float64 (MXNet's CPU kernels refuse some parameter
    sets): the output, then the gradients of x, w and b for head gradient h."""
    nd_ = len(kernel)
    stride, dilate = stride or (1,) * nd_, dilate or (1,) * nd_
    pad, adj = list(pad or (0,) * nd_), list(adj or (0,) * nd_)
    spatial = x.shape[2:]
    dk = [1 + (k - 1) * d for k, d in zip(kernel, dilate)]
    if target_shape:
        for a in range(nd_):
            total = stride[a] * (spatial[a] - 1) + dk[a] - target_shape[a]
            adj[a], pad[a] = total % 2, (total + 1) // 2
    full = [stride[a] * (spatial[a] - 1) + dk[a] + adj[a] for a in range(nd_)]
    out = [full[a] - 2 * pad[a] for a in range(nd_)]
    n, c = x.shape[:2]
    cg, fg = c // num_group, num_filter // num_group
    yf = np.zeros((n, num_filter) + tuple(full))
    hf = np.zeros_like(yf)
    crop = (slice(None), slice(None)) + tuple(slice(pad[a], pad[a] + out[a]) for a in range(nd_))
    hf[crop] = h
    dx, dw = np.zeros_like(x), np.zeros_like(w)
    for offs in np.ndindex(*kernel):
        sl = (slice(None), slice(None)) + tuple(
            slice(offs[a] * dilate[a], offs[a] * dilate[a] + stride[a] * (spatial[a] - 1) + 1, stride[a])
            for a in range(nd_))
        for g in range(num_group):
            xs, fs = slice(g * cg, (g + 1) * cg), slice(g * fg, (g + 1) * fg)
            wk = w[(xs, slice(None)) + offs]  # (cg, fg)
            part = yf[sl]
            part[:, fs] += np.einsum("nc...,cf->nf...", x[:, xs], wk)
            yf[sl] = part
            hs = hf[sl][:, fs]
            dx[:, xs] += np.einsum("nf...,cf->nc...", hs, wk)
            dw[(xs, slice(None)) + offs] += np.einsum("ncs,nfs->cf", x[:, xs].reshape(n, cg, -1), hs.reshape(n, fg, -1))
    y = yf[crop]
    if b is not None:
        y = y + b.reshape((1, -1) + (1,) * nd_)
    grads = [dx, dw] + ([h.sum(axis=(0,) + tuple(range(2, 2 + nd_)))] if b is not None else [])
    return {"shape": list(y.shape), "y": flat(y), "grads": [flat(g) for g in grads]}


DECONV = [
    ("2d", (2, 3, 5, 4), (3, 3), {}, 4, 1, True),
    ("2d_bias_stride_pad_adj", (2, 3, 5, 4), (3, 3), dict(stride=(2, 2), pad=(1, 1), adj=(1, 0)), 4, 1, False),
    ("2d_target", (2, 3, 5, 4), (4, 4), dict(stride=(2, 2), target_shape=(10, 9)), 2, 1, True),
    ("2d_groups_dilate", (2, 4, 5, 6), (3, 2), dict(dilate=(2, 1), stride=(1, 2)), 6, 2, False),
    ("1d", (2, 3, 7), (3,), dict(stride=(2,), pad=(1,)), 2, 1, False),
    ("3d", (1, 2, 3, 4, 3), (2, 2, 3), dict(stride=(2, 1, 2), pad=(0, 1, 1)), 3, 1, True),
]
for i, (name, shape, kernel, extra, nf, ng, no_bias) in enumerate(DECONV):
    c = shape[1]
    arrays = [rand(shape, 300 + i), rand((c, nf // ng) + kernel, 400 + i)]
    if not no_bias:
        arrays.append(rand((nf,), 500 + i))
    run(f"deconv_{name}", lambda: forward_backward(
        nd.Deconvolution, arrays, kernel=kernel, num_filter=nf, num_group=ng, no_bias=no_bias,
        **extra))
    if "ok" in results[f"deconv_{name}"]:
        shape_y = tuple(results[f"deconv_{name}"]["ok"]["shape"])
        results[f"deconv_{name}"]["reference"] = deconv_reference(
            arrays[0], arrays[1], None if no_bias else arrays[2], rand(shape_y, 99), kernel, nf, ng,
            **extra)

# ---- Pooling
X2 = rand((2, 3, 9, 8), 600)
POOL = []
for pool_type in ("max", "avg", "sum"):
    for conv in ("valid", "full"):
        POOL.append((f"2d_{pool_type}_{conv}", X2, dict(kernel=(3, 2), stride=(2, 2), pad=(1, 0),
                                                       pool_type=pool_type, pooling_convention=conv)))
for p in (1, 2, 3):
    POOL.append((f"2d_lp{p}", rand((2, 3, 7, 6), 601, 0.1, 1.0),
                 dict(kernel=(2, 3), stride=(1, 2), pool_type="lp", p_value=p)))
POOL += [
    ("2d_avg_exclude_pad", X2, dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="avg",
                                    count_include_pad=False)),
    ("2d_avg_exclude_pad_full", X2, dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="avg",
                                         count_include_pad=False, pooling_convention="full")),
    ("2d_global_max", X2, dict(global_pool=True, kernel=(1, 1))),
    ("2d_global_avg", X2, dict(global_pool=True, pool_type="avg")),
    ("2d_global_sum", X2, dict(global_pool=True, pool_type="sum", kernel=(2, 2), stride=(3, 3))),
    ("2d_max_default_stride", X2, dict(kernel=(2, 2))),
    ("2d_max_ties", np.floor(rand((2, 2, 7, 6), 602, 0, 3)), dict(kernel=(3, 3), stride=(1, 2))),
    ("2d_nhwc_max", rand((2, 7, 6, 3), 603), dict(kernel=(3, 2), stride=(2, 1), layout="NHWC")),
    ("2d_nhwc_avg", rand((2, 7, 6, 3), 604), dict(kernel=(3, 2), pad=(1, 1), pool_type="avg",
                                                  layout="NHWC")),
    ("1d_max", rand((2, 3, 11), 605), dict(kernel=(3,), stride=(2,), pad=(1,))),
    ("1d_avg_full", rand((2, 3, 10), 606), dict(kernel=(3,), stride=(2,), pool_type="avg",
                                                pooling_convention="full")),
    ("1d_max_ties", np.floor(rand((1, 2, 9), 607, 0, 2)), dict(kernel=(3,), stride=(1,))),
    ("1d_nwc_sum", rand((2, 9, 3), 608), dict(kernel=(2,), stride=(2,), pool_type="sum",
                                              layout="NWC")),
    ("3d_max", rand((1, 2, 5, 6, 5), 609), dict(kernel=(2, 3, 2), stride=(2, 2, 1), pad=(1, 1, 0))),
    ("3d_avg", rand((1, 2, 5, 6, 5), 610), dict(kernel=(2, 2, 2), stride=(2, 2, 2), pool_type="avg",
                                                pooling_convention="full")),
    ("3d_global_avg", rand((2, 2, 3, 4, 5), 611), dict(global_pool=True, pool_type="avg")),
    ("3d_max_ties", np.floor(rand((1, 1, 4, 4, 4), 612, 0, 2)), dict(kernel=(2, 2, 2))),
    # the unrolled 2- and 3-wide windows at strides 1 and 2: odd sizes, padding, ties, the 'full'
    # convention's clipped last window, and planes enough to split over threads
    ("2d_max_2x2_s2_odd", rand((2, 3, 9, 11), 613), dict(kernel=(2, 2), stride=(2, 2))),
    ("2d_max_2x2_s2_ties_full", np.floor(rand((2, 2, 7, 9), 614, 0, 2)),
     dict(kernel=(2, 2), stride=(2, 2), pooling_convention="full")),
    ("2d_max_3x3_s2_pad", rand((2, 3, 11, 13), 615), dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1))),
    ("2d_max_3x3_s2_ties_pad", np.floor(rand((2, 2, 9, 10), 616, -2, 1)),
     dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1))),
    ("2d_max_3x3_s2_full", rand((1, 2, 10, 12), 617), dict(kernel=(3, 3), stride=(2, 2),
                                                            pooling_convention="full")),
    ("2d_max_3x3_s1_pad", rand((2, 2, 8, 9), 618), dict(kernel=(3, 3), stride=(1, 1), pad=(1, 1))),
    ("2d_max_2x2_s1", np.floor(rand((2, 2, 6, 7), 619, 0, 2)), dict(kernel=(2, 2), stride=(1, 1))),
    ("2d_max_negative", rand((2, 2, 7, 7), 620, -5, -1), dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1))),
    ("2d_avg_3x3_s1_pad", rand((2, 3, 9, 10), 621), dict(kernel=(3, 3), pad=(1, 1), pool_type="avg")),
    ("2d_avg_3x3_s2_full_exclude", rand((2, 3, 10, 11), 622),
     dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="avg", count_include_pad=False,
          pooling_convention="full")),
    ("2d_sum_2x2_s2_full", rand((2, 3, 7, 9), 623), dict(kernel=(2, 2), stride=(2, 2), pool_type="sum",
                                                          pooling_convention="full")),
    ("2d_max_5x4_s3", rand((2, 3, 13, 12), 624), dict(kernel=(5, 4), stride=(3, 3), pad=(2, 1))),
    ("2d_max_3x3_s2_many_planes", rand((4, 8, 35, 33), 625), dict(kernel=(3, 3), stride=(2, 2),
                                                                   pad=(1, 1))),
    ("2d_avg_3x3_s1_many_planes", rand((4, 8, 35, 33), 626), dict(kernel=(3, 3), pad=(1, 1),
                                                                   pool_type="avg")),
    # whole-plane (global) pooling: planes of odd sizes below and above a vector's width, ties
    ("2d_global_max_ties", np.floor(rand((2, 3, 7, 7), 640, 0, 2)), dict(global_pool=True, kernel=(1, 1))),
    ("2d_global_avg_7x7_many_planes", rand((4, 64, 7, 7), 641), dict(global_pool=True, pool_type="avg")),
    ("2d_global_sum_5x9", rand((2, 3, 5, 9), 642), dict(global_pool=True, pool_type="sum")),
    ("2d_global_avg_3x2", rand((2, 3, 3, 2), 643), dict(global_pool=True, pool_type="avg")),
    # the column-at-once max routing and average spreading over rows wider than a vector
    ("2d_max_3x3_s2_wide_ties", np.floor(rand((2, 3, 21, 67), 644, 0, 3)),
     dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1))),
    ("2d_max_2x2_s1_wide_ties", np.floor(rand((1, 2, 9, 41), 645, 0, 2)), dict(kernel=(2, 2), stride=(1, 1))),
    ("2d_max_2x2_s2_wide_full", np.floor(rand((1, 2, 9, 51), 646, 0, 4)),
     dict(kernel=(2, 2), stride=(2, 2), pooling_convention="full")),
    ("2d_avg_2x2_s1_wide_exclude", rand((2, 2, 8, 37), 647),
     dict(kernel=(2, 2), stride=(1, 1), pad=(1, 1), pool_type="avg", count_include_pad=False)),
    ("1d_max_3_s2_wide", rand((2, 3, 50), 648), dict(kernel=(3,), stride=(2,), pad=(1,))),
    ("2d_sum_3x3_s2_wide_full", rand((2, 2, 11, 45), 649), dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1),
                                                               pool_type="sum", pooling_convention="full")),
]
for name, x, params in POOL:
    run(f"pool_{name}", lambda: forward_backward(nd.Pooling, [x], **params))
run("pool_2d_avg_f64", lambda: forward_backward(nd.Pooling, [X2], "float64", kernel=(3, 3),
                                                 pool_type="avg", pad=(1, 1)))
run("pool_2d_max_f16", lambda: forward_backward(nd.Pooling, [X2], "float16", kernel=(2, 2),
                                                 stride=(2, 2)))
run("pool_2d_max_3x3_s2_f64", lambda: forward_backward(nd.Pooling, [rand((2, 3, 11, 9), 627)],
                                                        "float64", kernel=(3, 3), stride=(2, 2),
                                                        pad=(1, 1)))
run("pool_2d_max_3x3_s2_f16", lambda: forward_backward(nd.Pooling, [rand((2, 3, 11, 9), 628)],
                                                        "float16", kernel=(3, 3), stride=(2, 2),
                                                        pad=(1, 1)))
for pool_type in ("max", "avg", "sum"):
    run(f"pool_v1_{pool_type}", lambda: forward_backward(
        nd.Pooling_v1, [X2], kernel=(3, 2), stride=(2, 1), pad=(1, 1), pool_type=pool_type))
run("pool_v1_full_global", lambda: [forward_backward(
    nd.Pooling_v1, [X2], kernel=(2, 2), stride=(2, 2), pool_type="avg",
    pooling_convention="full"), forward_backward(nd.Pooling_v1, [X2], global_pool=True)])

# ---- second order: with L = <op(x, w), hv> and dx = dL/dx recorded, z = <dx, r> is
# <hv, op(r, w)>, so dz/dhv = op(r, w) and dz/dw is op's first-order weight gradient at (r, hv)
def second_order(op, x, w, **params):
    x, w = nd.array(x), nd.array(w)
    y0 = op(x, w, **params)
    hv, r = nd.array(rand(y0.shape, 41)), nd.array(rand(x.shape, 42))
    for a in (x, w, hv):
        a.attach_grad()
    with ag.record():
        loss = (op(x, w, **params) * hv).sum()
        dx = ag.grad(loss, [x], create_graph=True)[0]
        z = (dx * r).sum()
    z.backward()
    got_hv, got_w = hv.grad.asnumpy(), w.grad.asnumpy()
    w2 = nd.array(w.asnumpy())
    w2.attach_grad()
    with ag.record():
        y = op(r, w2, **params)
    y.backward(hv)
    return {"hv_gap": float(np.abs(got_hv - y.asnumpy()).max()),
            "w_gap": float(np.abs(got_w - w2.grad.asnumpy()).max())}


run("second_order_conv", lambda: second_order(
    nd.Convolution, rand((2, 4, 7, 6), 43), rand((6, 2, 3, 2), 44), kernel=(3, 2), stride=(2, 1),
    pad=(1, 1), num_filter=6, num_group=2, no_bias=True))
run("second_order_deconv", lambda: second_order(
    nd.Deconvolution, rand((2, 3, 4, 5), 45), rand((3, 2, 3, 3), 46), kernel=(3, 3), stride=(2, 2),
    pad=(1, 1), adj=(1, 0), num_filter=2))
run("second_order_pool_avg", lambda: second_order(
    lambda x, w, **p: nd.Pooling(x, **p) * w, rand((2, 3, 7, 6), 47), rand((1,), 48),
    kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="avg"))

# ---- graph inference: argument names and the weights' shapes from the data's
def symbol_inference():
    d = mx.sym.var("data")
    c = mx.sym.Convolution(d, kernel=(3, 3), num_filter=4, num_group=2, name="c")
    dc = mx.sym.Deconvolution(c, kernel=(2, 2), stride=(2, 2), num_filter=3, name="dc")
    c3 = mx.sym.Convolution(mx.sym.var("v"), kernel=(2, 3, 1), num_filter=5, no_bias=True, name="c3")
    p = mx.sym.Pooling(dc, kernel=(2, 2), pool_type="avg", pooling_convention="full", name="p")
    out = {"args": p.list_arguments() + c3.list_arguments(), "outputs": p.list_outputs()}
    out["shapes"] = [list(map(list, s)) for s in p.infer_shape(data=(2, 6, 9, 9))]
    out["shapes3d"] = [list(map(list, s)) for s in c3.infer_shape(v=(1, 2, 4, 5, 6))]
    return out


run("symbol_inference", symbol_inference)

# ---- errors of bad parameters
x4 = nd.ones((2, 3, 5, 5))
w4 = nd.ones((4, 3, 3, 3))
BAD = {
    "conv_no_kernel": lambda: nd.Convolution(x4, w4, num_filter=4, no_bias=True),
    "conv_no_num_filter": lambda: nd.Convolution(x4, w4, kernel=(3, 3), no_bias=True),
    "conv_stride_dims": lambda: nd.Convolution(x4, w4, kernel=(3, 3), stride=(1,), num_filter=4, no_bias=True),
    "conv_pad_dims": lambda: nd.Convolution(x4, w4, kernel=(3, 3), pad=(1, 1, 1), num_filter=4, no_bias=True),
    "conv_kernel_too_big": lambda: nd.Convolution(x4, nd.ones((4, 3, 7, 7)), kernel=(7, 7), num_filter=4, no_bias=True),
    "conv_bad_weight": lambda: nd.Convolution(x4, nd.ones((4, 3, 2, 2)), kernel=(3, 3), num_filter=4, no_bias=True),
    "conv_bad_group": lambda: nd.Convolution(x4, w4, kernel=(3, 3), num_filter=4, num_group=2, no_bias=True),
    "conv_data_rank": lambda: nd.Convolution(nd.ones((2, 3, 5)), w4, kernel=(3, 3), num_filter=4, no_bias=True),
    "conv_4d_kernel": lambda: nd.Convolution(nd.ones((1, 1, 2, 2, 2, 2)), nd.ones((1, 1, 1, 1, 1, 1)),
                                             kernel=(1, 1, 1, 1), num_filter=1, no_bias=True),
    "conv_int32": lambda: nd.Convolution(x4.astype("int32"), w4.astype("int32"), kernel=(3, 3), num_filter=4, no_bias=True),
    "conv_nhwc": lambda: nd.Convolution(nd.ones((2, 5, 5, 3)), w4, kernel=(3, 3), num_filter=4, no_bias=True,
                                        layout="NHWC").asnumpy(),
    "conv_bad_cudnn_tune": lambda: nd.Convolution(x4, w4, kernel=(3, 3), num_filter=4, no_bias=True, cudnn_tune="fast"),
    "conv_v1_1d": lambda: nd.Convolution_v1(nd.ones((2, 3, 5)), nd.ones((4, 3, 3)), kernel=(3,), num_filter=4, no_bias=True),
    "deconv_bad_adj": lambda: nd.Deconvolution(x4, nd.ones((3, 4, 3, 3)), kernel=(3, 3), stride=(2, 2), adj=(2, 2), num_filter=4),
    "deconv_big_target": lambda: nd.Deconvolution(x4, nd.ones((3, 4, 3, 3)), kernel=(3, 3), stride=(2, 2),
                                                  target_shape=(20, 20), num_filter=4),
    "pool_lp_no_p": lambda: nd.Pooling(x4, kernel=(2, 2), pool_type="lp"),
    "pool_no_kernel": lambda: nd.Pooling(x4),
    "pool_kernel_too_big": lambda: nd.Pooling(x4, kernel=(7, 7)),
    "pool_kernel_rank": lambda: nd.Pooling(x4, kernel=(2,)),
    "pool_zero_stride": lambda: nd.Pooling(x4, kernel=(2, 2), stride=(0, 1)),
    "pool_bad_type": lambda: nd.Pooling(x4, kernel=(2, 2), pool_type="median"),
    "pool_same_2d": lambda: nd.Pooling(x4, kernel=(2, 2), pooling_convention="same"),
    "pool_6d": lambda: nd.Pooling(nd.ones((1, 1, 2, 2, 2, 2)), kernel=(1, 1, 1, 1)),
    "pool_int32": lambda: nd.Pooling(x4.astype("int32"), kernel=(2, 2)),
    "pool_v1_lp": lambda: nd.Pooling_v1(x4, kernel=(2, 2), pool_type="lp"),
    "pool_v1_count_include_pad": lambda: nd.Pooling_v1(x4, kernel=(2, 2), count_include_pad=False),
}
for name, fn in BAD.items():
    run("bad_" + name, lambda: flat(fn().asnumpy()))


# ---- Gluon: a small CNN with deferred initialisation, imperative, a few SGD steps
def gluon_training():
    from mxnet import gluon
    from mxnet.gluon import nn

    net = nn.Sequential()
    net.add(nn.Conv2D(4, 3, padding=1, activation="relu"),
            nn.MaxPool2D(2),
            nn.Conv2D(6, (3, 2), strides=2, groups=2),
            nn.AvgPool2D(2, strides=1, padding=1),
            nn.Conv2D(6, 1, use_bias=False),
            nn.GlobalAvgPool2D(),
            nn.Flatten(),
            nn.Dense(3))
    net.initialize(mx.init.Xavier())
    x = nd.array(rand((5, 2, 13, 11), 700))
    label = nd.array([0, 1, 2, 1, 0])
    net(x)  # deferred initialisation
    params = net.collect_params()
    shapes = {}
    for i, (name, p) in enumerate(sorted(params.items())):
        p.set_data(nd.array(rand(p.shape, 800 + i, -0.5, 0.5)))
        shapes[name] = list(p.shape)
    trainer = gluon.Trainer(params, "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    losses = []
    for _ in range(4):
        with ag.record():
            loss = loss_fn(net(x), label)
        loss.backward()
        trainer.step(x.shape[0])
        losses.append(float(loss.mean().asscalar()))
    return {"losses": losses, "shapes": shapes}


run("gluon_cnn_training", gluon_training)

json.dump(results, sys.stdout)
