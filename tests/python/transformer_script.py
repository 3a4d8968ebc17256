"""The contrib operators of transformer models through MXNet's Python package: the four
interleaved multi-head attention products (several shapes and head counts; outputs and autograd
gradients), `boolean_mask` (dynamic output shape, gradient), `index_copy` (both gradients),
`index_array` (with and without axes) and `arange_like`; bad shapes' errors. Each product is also
compared with the reshape/transpose/batch_dot recipe MXNet's documentation gives for it. Prints
one JSON object (case name -> {"ok": ...} or {"error": message}); test_transformer_ops.py runs it
on both libraries and compares.
"""
import json

import numpy as np
import mxnet as mx

from case_runner import flat, rand, results, run

nd = mx.nd
ag = mx.autograd


def grads_of(fn, arrays, seed=50):
    """Forward and the gradients of every input for a fixed head gradient."""
    xs = [nd.array(a, dtype="float32") for a in arrays]
    for x in xs:
        x.attach_grad()
    with ag.record():
        y = fn(*xs)
    y.backward(nd.array(rand(y.shape, seed, 0.5, 1.5), dtype="float32"))
    out = {"y": flat(y.asnumpy()), "shape": list(y.shape)}
    for i, x in enumerate(xs):
        out["d%d" % i] = flat(x.grad.asnumpy())
    return out


def recipe_selfatt_qk(qkv, heads):
    tmp = nd.reshape(qkv, shape=(0, 0, heads, 3, -1))
    q = nd.transpose(tmp[:, :, :, 0, :], axes=(1, 2, 0, 3))
    q = nd.reshape(q, shape=(-1, 0, 0), reverse=True)
    q = nd.contrib.div_sqrt_dim(q)
    k = nd.transpose(tmp[:, :, :, 1, :], axes=(1, 2, 0, 3))
    k = nd.reshape(k, shape=(-1, 0, 0), reverse=True)
    return nd.batch_dot(q, k, transpose_b=True)


def recipe_valatt(proj, att, heads, slots, slot):
    tmp = nd.reshape(proj, shape=(0, 0, heads, slots, -1))
    v = nd.transpose(tmp[:, :, :, slot, :], axes=(1, 2, 0, 3))
    v = nd.reshape(v, shape=(-1, 0, 0), reverse=True)
    out = nd.batch_dot(att, v)
    out = nd.reshape(out, shape=(-1, heads, 0, 0), reverse=True)
    # (batch, heads, seq, dim) -> (seq, batch, heads * dim), the fused op's layout
    out = nd.transpose(out, axes=(2, 0, 1, 3))
    return nd.reshape(out, shape=(0, 0, -1))


def recipe_encdec_qk(q, kv, heads):
    q = nd.reshape(q, shape=(0, 0, heads, -1))
    q = nd.transpose(q, axes=(1, 2, 0, 3))
    q = nd.reshape(q, shape=(-1, 0, 0), reverse=True)
    q = nd.contrib.div_sqrt_dim(q)
    tmp = nd.reshape(kv, shape=(0, 0, heads, 2, -1))
    k = nd.transpose(tmp[:, :, :, 0, :], axes=(1, 2, 0, 3))
    k = nd.reshape(k, shape=(-1, 0, 0), reverse=True)
    return nd.batch_dot(q, k, transpose_b=True)


# (seq, batch, heads, head_dim) for self-attention; (q_seq, kv_seq, batch, heads, head_dim)
SELF_SHAPES = [(3, 2, 1, 4), (5, 3, 2, 3), (4, 1, 4, 2), (7, 2, 3, 8)]
ENCDEC_SHAPES = [(3, 5, 2, 1, 4), (4, 2, 3, 2, 3), (6, 6, 1, 4, 2)]


def self_cases():
    for i, (L, B, H, D) in enumerate(SELF_SHAPES):
        qkv = rand((L, B, 3 * H * D), 10 + i)
        att = rand((B * H, L, L), 20 + i)
        tag = "%dx%dx%dh%d" % (L, B, H, D)
        run("selfatt_qk_" + tag, lambda qkv=qkv, H=H: grads_of(
            lambda x: nd.contrib.interleaved_matmul_selfatt_qk(x, heads=H), [qkv]))
        run("selfatt_valatt_" + tag, lambda qkv=qkv, att=att, H=H: grads_of(
            lambda x, a: nd.contrib.interleaved_matmul_selfatt_valatt(x, a, heads=H), [qkv, att]))
        run("selfatt_qk_recipe_" + tag, lambda qkv=qkv, H=H: grads_of(
            lambda x: recipe_selfatt_qk(x, H), [qkv]))
        run("selfatt_valatt_recipe_" + tag, lambda qkv=qkv, att=att, H=H: grads_of(
            lambda x, a: recipe_valatt(x, a, H, 3, 2), [qkv, att]))


def encdec_cases():
    for i, (Lq, Lk, B, H, D) in enumerate(ENCDEC_SHAPES):
        q = rand((Lq, B, H * D), 30 + i)
        kv = rand((Lk, B, 2 * H * D), 40 + i)
        att = rand((B * H, Lq, Lk), 50 + i)
        tag = "%dx%dx%dx%dh%d" % (Lq, Lk, B, H, D)
        run("encdec_qk_" + tag, lambda q=q, kv=kv, H=H: grads_of(
            lambda a, b: nd.contrib.interleaved_matmul_encdec_qk(a, b, heads=H), [q, kv]))
        run("encdec_valatt_" + tag, lambda kv=kv, att=att, H=H: grads_of(
            lambda a, b: nd.contrib.interleaved_matmul_encdec_valatt(a, b, heads=H), [kv, att]))
        run("encdec_qk_recipe_" + tag, lambda q=q, kv=kv, H=H: grads_of(
            lambda a, b: recipe_encdec_qk(a, b, H), [q, kv]))
        run("encdec_valatt_recipe_" + tag, lambda kv=kv, att=att, H=H: grads_of(
            lambda a, b: recipe_valatt(a, b, H, 2, 1), [kv, att]))


def attention_block():
    """A whole self-attention layer as GluonNLP builds it: qk, masked softmax, valatt."""
    L, B, H, D = 6, 2, 2, 4
    qkv = nd.array(rand((L, B, 3 * H * D), 60))
    w = nd.array(rand((3 * H * D, 3 * H * D), 61, -0.3, 0.3))
    w.attach_grad()
    with ag.record():
        proj = nd.dot(qkv, w)
        scores = nd.contrib.interleaved_matmul_selfatt_qk(proj, heads=H)
        att = nd.softmax(scores, axis=-1)
        out = nd.contrib.interleaved_matmul_selfatt_valatt(proj, att, heads=H)
        loss = (out * out).sum()
    loss.backward()
    return {"loss": float(loss.asscalar()), "dw": flat(w.grad.asnumpy())}


def boolean_mask_cases():
    data = rand((5, 3), 70)
    for name, idx in [("some", [0, 1, 0, 1, 1]), ("none", [0, 0, 0, 0, 0]),
                      ("all", [1, 1, 1, 1, 1])]:
        run("boolean_mask_" + name, lambda idx=idx: grads_of(
            lambda x: nd.contrib.boolean_mask(x, nd.array(idx)), [data]))
    run("boolean_mask_3d_int_index", lambda: grads_of(
        lambda x: nd.contrib.boolean_mask(x, nd.array([2, 0, -1, 0], dtype="int32")),
        [rand((4, 2, 3), 71)]))
    run("boolean_mask_int_data", lambda: flat(nd.contrib.boolean_mask(
        nd.arange(12, dtype="int64").reshape((4, 3)), nd.array([1, 0, 1, 1])).asnumpy()))

    def hybridized():
        class Net(mx.gluon.HybridBlock):
            def hybrid_forward(self, F, x, m):
                return F.contrib.boolean_mask(x, m) * 2
        net = Net()
        net.hybridize()
        x = nd.array(rand((4, 3), 72))
        return [flat(net(x, nd.array(m)).asnumpy()) for m in ([1, 0, 1, 1], [0, 1, 0, 0])]
    run("boolean_mask_hybridized", hybridized)
    run("boolean_mask_axis1", lambda: flat(nd.contrib.boolean_mask(
        nd.array(data), nd.array([1, 0, 1]), axis=1).asnumpy()))
    run("boolean_mask_index_length", lambda: flat(nd.contrib.boolean_mask(
        nd.array(data), nd.array([1, 0, 1])).asnumpy()))


def index_copy_cases():
    old = rand((5, 3), 80)
    new = rand((2, 3), 81)
    run("index_copy", lambda: grads_of(
        lambda o, n: nd.contrib.index_copy(o, nd.array([3, 0], dtype="int64"), n), [old, new]))
    run("index_copy_float_index", lambda: grads_of(
        lambda o, n: nd.contrib.index_copy(o, nd.array([1, 4]), n), [old, new]))
    run("index_copy_3d", lambda: grads_of(
        lambda o, n: nd.contrib.index_copy(o, nd.array([2, 0, 1]), n),
        [rand((4, 2, 2), 82), rand((3, 2, 2), 83)]))
    run("index_copy_bad_shape", lambda: flat(nd.contrib.index_copy(
        nd.array(old), nd.array([0, 1]), nd.array(rand((2, 4), 84))).asnumpy()))


def index_array_cases():
    x = nd.zeros((2, 3, 4))
    run("index_array", lambda: {"v": flat(nd.contrib.index_array(x).asnumpy()),
                                "dtype": str(nd.contrib.index_array(x).dtype)})
    run("index_array_axes", lambda: flat(nd.contrib.index_array(x, axes=(2, 0)).asnumpy()))
    run("index_array_neg_axes", lambda: flat(nd.contrib.index_array(x, axes=(-1,)).asnumpy()))
    run("index_array_1d", lambda: flat(nd.contrib.index_array(nd.zeros((5,))).asnumpy()))

    def grad():
        a = nd.array(rand((2, 3), 85))
        a.attach_grad()
        with ag.record():
            y = (nd.contrib.index_array(a).astype("float32") * a.expand_dims(-1)).sum()
        y.backward()
        return flat(a.grad.asnumpy())
    run("index_array_grad", grad)


def arange_like_cases():
    x = nd.zeros((2, 3, 4))
    run("arange_like", lambda: flat(nd.contrib.arange_like(x).asnumpy()))
    run("arange_like_axis", lambda: flat(nd.contrib.arange_like(x, axis=1).asnumpy()))
    run("arange_like_neg_axis", lambda: flat(nd.contrib.arange_like(x, axis=-1, start=2.5,
                                                                    step=0.5).asnumpy()))
    run("arange_like_repeat", lambda: flat(nd.contrib.arange_like(x, start=1, step=2,
                                                                  repeat=3).asnumpy()))


def error_cases():
    run("err_selfatt_qk_rank", lambda: flat(nd.contrib.interleaved_matmul_selfatt_qk(
        nd.zeros((3, 12)), heads=2).asnumpy()))
    run("err_selfatt_valatt_seq", lambda: flat(nd.contrib.interleaved_matmul_selfatt_valatt(
        nd.zeros((3, 2, 12)), nd.zeros((4, 4, 4)), heads=2).asnumpy()))
    run("err_selfatt_valatt_mult3", lambda: flat(nd.contrib.interleaved_matmul_selfatt_valatt(
        nd.zeros((3, 2, 10)), nd.zeros((4, 3, 3)), heads=2).asnumpy()))
    run("err_encdec_qk_width", lambda: flat(nd.contrib.interleaved_matmul_encdec_qk(
        nd.zeros((3, 2, 4)), nd.zeros((5, 2, 6)), heads=2).asnumpy()))
    run("err_encdec_qk_batch", lambda: flat(nd.contrib.interleaved_matmul_encdec_qk(
        nd.zeros((3, 2, 4)), nd.zeros((5, 3, 8)), heads=2).asnumpy()))
    run("err_encdec_valatt_len", lambda: flat(nd.contrib.interleaved_matmul_encdec_valatt(
        nd.zeros((5, 2, 8)), nd.zeros((4, 3, 4)), heads=2).asnumpy()))
    run("err_encdec_valatt_heads", lambda: flat(nd.contrib.interleaved_matmul_encdec_valatt(
        nd.zeros((5, 2, 8)), nd.zeros((6, 3, 5)), heads=2).asnumpy()))
    run("err_selfatt_qk_float16", lambda: flat(nd.contrib.interleaved_matmul_selfatt_qk(
        nd.zeros((3, 2, 12), dtype="float16"), heads=2).asnumpy()))


self_cases()
encdec_cases()
run("attention_block", attention_block)
boolean_mask_cases()
index_copy_cases()
index_array_cases()
arange_like_cases()
error_cases()
print(json.dumps(results))
