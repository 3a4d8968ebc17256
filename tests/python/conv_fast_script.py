"""Convolution's fast paths through MXNet's Python package: 3x3 stride-1 layers with enough
channels for Winograd F(4x4, 3x3) (odd sizes, every padding, several tile blocks, Deconvolution
through the transposed product), the cases that fall back to im2col + GEMM (groups, dilation,
stride 2, float64, float16, padding past 2 for the data gradient), few-input-channel layers (the
7x7 stem, 3x3 stride 2 on 3 channels; with rows of 16 outputs and more, the direct AVX-512
forward), 1x1 layers over a batch and depthwise layers. Prints one JSON object (case
name -> {"ok": {"shape", "y", "grads"}} or {"error": message}); test_conv_fast.py runs it on both
libraries and compares.
"""
import json

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
    y.backward(nd.array(rand(y.shape, 99), dtype=dtype))
    return {"shape": list(y.shape), "y": flat(y.asnumpy()),
            "grads": [flat(x.grad.asnumpy()) for x in xs]}


# (name, data shape, kernel, extra params, num_filter, num_group, no_bias, dtypes)
CONV = [
    ("wino_pad1_odd", (2, 8, 9, 11), (3, 3), dict(pad=(1, 1)), 12, 1, False, ("float32", "float64")),
    ("wino_nopad", (3, 16, 7, 6), (3, 3), {}, 8, 1, True, ("float32",)),
    ("wino_pad2", (1, 9, 5, 5), (3, 3), dict(pad=(2, 2)), 10, 1, False, ("float32",)),
    ("wino_pad_3_1", (2, 8, 6, 7), (3, 3), dict(pad=(3, 1)), 8, 1, True, ("float32",)),
    ("wino_small_plane", (5, 24, 3, 2), (3, 3), dict(pad=(1, 1)), 20, 1, True, ("float32",)),
    ("wino_blocks", (4, 8, 40, 37), (3, 3), dict(pad=(1, 1)), 8, 1, True, ("float32",)),
    # channels off the products' 8-row and 16/48-column steps (a last partial micro-tile in
    # every product), batch 1, and a batch of several tile blocks with many channels
    ("wino_odd_channels", (2, 13, 10, 9), (3, 3), dict(pad=(1, 1)), 21, 1, True, ("float32",)),
    ("wino_batch1_wide", (1, 52, 9, 8), (3, 3), dict(pad=(1, 1)), 50, 1, False, ("float32",)),
    ("wino_many_blocks", (3, 20, 23, 17), (3, 3), dict(pad=(1, 1)), 70, 1, True, ("float32",)),
    ("3x3_groups", (2, 16, 9, 8), (3, 3), dict(pad=(1, 1)), 16, 2, False, ("float32",)),
    ("3x3_dilate", (2, 8, 11, 9), (3, 3), dict(pad=(2, 2), dilate=(2, 2)), 8, 1, True, ("float32",)),
    ("3x3_stride2", (2, 16, 11, 10), (3, 3), dict(pad=(1, 1), stride=(2, 2)), 12, 1, True, ("float32",)),
    ("3x3_s2_3ch", (3, 3, 17, 15), (3, 3), dict(pad=(1, 1), stride=(2, 2)), 8, 1, False, ("float32",)),
    ("stem_7x7", (2, 3, 23, 20), (7, 7), dict(pad=(3, 3), stride=(2, 2)), 16, 1, True, ("float32",)),
    ("5x5_1ch", (4, 1, 12, 13), (5, 5), {}, 6, 1, False, ("float32",)),
    ("1x1", (4, 16, 7, 9), (1, 1), {}, 24, 1, True, ("float32", "float64")),
    ("1x1_stride2", (4, 16, 9, 9), (1, 1), dict(stride=(2, 2)), 24, 1, True, ("float32",)),
    ("1x1_groups", (3, 16, 5, 6), (1, 1), {}, 8, 4, False, ("float32",)),
    # 1x1 layers whose products reach the AVX-512 GEMM: 14x14 planes (a 4-column edge tile after
    # four 48-column ones), odd channel counts (partial 8-row panels, partial 16-step packing
    # blocks), batch 1 (the GEMM's own threads), stride 2 (gathered columns), groups
    ("1x1_14x14", (3, 72, 14, 14), (1, 1), {}, 40, 1, True, ("float32",)),
    ("1x1_odd_ch", (2, 37, 13, 11), (1, 1), {}, 29, 1, False, ("float32", "float64")),
    ("1x1_batch1", (1, 64, 15, 17), (1, 1), {}, 48, 1, True, ("float32",)),
    ("1x1_s2_big", (3, 40, 28, 27), (1, 1), dict(stride=(2, 2)), 56, 1, True, ("float32",)),
    ("1x1_groups_big", (2, 48, 12, 12), (1, 1), {}, 64, 2, True, ("float32",)),
    ("1x1_1d", (3, 33, 150), (1,), {}, 21, 1, False, ("float32",)),
    # narrow products (8x8 outputs: 64 columns per image) through im2col
    ("5x5_narrow", (3, 20, 12, 12), (5, 5), {}, 50, 1, False, ("float32",)),
    ("3x3_dilate_narrow", (2, 24, 13, 12), (3, 3), dict(pad=(1, 1), dilate=(2, 2)), 19, 1, True, ("float32",)),
    # rows of 16 outputs and more: the direct AVX-512 forward (few input channels or stride 2;
    # output channels not a multiple of 8, a partial last vector)
    ("stem_7x7_wide", (2, 3, 45, 70), (7, 7), dict(pad=(3, 3), stride=(2, 2)), 20, 1, False, ("float32", "float64")),
    ("3x3_s2_wide", (2, 16, 20, 66), (3, 3), dict(pad=(1, 1), stride=(2, 2)), 12, 1, True, ("float32",)),
    ("3x3_s1_2_wide", (2, 4, 10, 50), (3, 3), dict(pad=(0, 1), stride=(1, 2)), 9, 1, True, ("float32",)),
    ("1x1_s2_wide", (2, 8, 9, 40), (1, 1), dict(stride=(2, 2)), 16, 1, True, ("float32",)),
    ("5x5_1ch_wide", (2, 1, 20, 40), (5, 5), dict(pad=(1, 2)), 9, 1, False, ("float32",)),
    ("3x3_dilate_3ch_wide", (2, 3, 20, 40), (3, 3), dict(pad=(2, 2), dilate=(2, 2)), 8, 1, True, ("float32",)),
    # the direct kernel's flat tiles: stride 2 on many channels (odd sizes, batch 1, no padding,
    # padding past the kernel, dilation, y stride only) and small images at stride 1 (LeNet's conv2)
    ("3x3_s2_many_b1", (1, 64, 29, 37), (3, 3), dict(pad=(1, 1), stride=(2, 2)), 24, 1, True, ("float32",)),
    ("3x3_s2_pad0_odd", (3, 20, 35, 39), (3, 3), dict(stride=(2, 2)), 16, 1, False, ("float32",)),
    ("3x3_s2_pad3", (2, 8, 21, 40), (3, 3), dict(pad=(3, 3), stride=(2, 2)), 9, 1, True, ("float32",)),
    ("3x3_s2_dilate", (2, 8, 30, 44), (3, 3), dict(pad=(2, 2), stride=(2, 2), dilate=(2, 2)), 8, 1, True, ("float32",)),
    ("3x3_s2_1", (2, 8, 21, 34), (3, 3), dict(pad=(1, 0), stride=(2, 1)), 10, 1, True, ("float32",)),
    ("5x5_small_img", (3, 20, 12, 12), (5, 5), {}, 50, 1, False, ("float32",)),
    ("5x5_small_pad_b1", (1, 20, 11, 13), (5, 5), dict(pad=(2, 1)), 17, 1, True, ("float32",)),
    # depthwise: the direct float32 kernels (rows shorter and longer than a 16-lane vector,
    # x and y strides, dilation, padding past the kernel, 1-D) and the generic loops (float64)
    ("dw_3x3", (2, 6, 9, 37), (3, 3), dict(pad=(1, 1)), 6, 6, False, ("float32", "float64")),
    ("dw_3x3_nopad", (3, 4, 7, 20), (3, 3), {}, 4, 4, True, ("float32",)),
    ("dw_5x5_stride_y2", (2, 5, 13, 18), (5, 5), dict(pad=(2, 1), stride=(2, 1)), 5, 5, True, ("float32",)),
    ("dw_3x3_dilate", (2, 4, 12, 19), (3, 3), dict(pad=(2, 2), dilate=(2, 2)), 4, 4, True, ("float32",)),
    ("dw_pad_wide", (1, 3, 5, 6), (3, 3), dict(pad=(3, 2)), 3, 3, True, ("float32",)),
    ("dw_1d", (2, 6, 33), (3,), dict(pad=(1,)), 6, 6, False, ("float32",)),
    ("dw_3x3_stride2", (2, 4, 12, 19), (3, 3), dict(pad=(1, 1), stride=(2, 2)), 4, 4, True, ("float32",)),
    # x stride 2 and 3: rows longer than a block, no padding, odd sizes, bias
    ("dw_3x3_s2_wide", (2, 8, 30, 57), (3, 3), dict(pad=(1, 1), stride=(2, 2)), 8, 8, False, ("float32",)),
    ("dw_3x3_s2_nopad_odd", (3, 5, 13, 23), (3, 3), dict(stride=(2, 2)), 5, 5, True, ("float32",)),
    ("dw_5x5_s3_2", (2, 4, 17, 29), (5, 5), dict(pad=(2, 2), stride=(3, 2)), 4, 4, False, ("float32",)),
]
for i, (name, shape, kernel, extra, nf, ng, no_bias, dtypes) in enumerate(CONV):
    arrays = [rand(shape, 10 + i), rand((nf, shape[1] // ng) + kernel, 100 + i)]
    if not no_bias:
        arrays.append(rand((nf,), 200 + i))
    for dtype in dtypes:
        run(f"conv_{name}_{dtype}", lambda: forward_backward(
            nd.Convolution, arrays, dtype, kernel=kernel, num_filter=nf, num_group=ng,
            no_bias=no_bias, **extra))

# Deconvolution's forward is the transposed product, its data gradient the forward one
run("deconv_wino_pad1_float32", lambda: forward_backward(
    nd.Deconvolution, [rand((2, 8, 7, 6), 300), rand((8, 12, 3, 3), 301)], kernel=(3, 3),
    pad=(1, 1), num_filter=12, no_bias=True))

run("deconv_dw_float32", lambda: forward_backward(
    nd.Deconvolution, [rand((2, 6, 8, 19), 302), rand((6, 1, 3, 3), 303)], kernel=(3, 3),
    pad=(1, 1), num_filter=6, num_group=6, no_bias=True))

# last: MXNet refuses it on CPU, and its error also reaches the next operation there
WINO = CONV[0]
run("conv_wino_pad1_odd_float16", lambda: forward_backward(
    nd.Convolution, [rand(WINO[1], 10), rand((12, 8, 3, 3), 100), rand((12,), 200)], "float16",
    kernel=(3, 3), pad=(1, 1), num_filter=12))
try:
    nd.waitall()
except mx.MXNetError:
    pass

print(json.dumps(results))
