"""Forward outputs and gradients of the neural-network layer, loss and sequence operators
(embeddings, normalisation layers, output layers, sequence ops), run through the unmodified mxnet
package; prints one JSON object for test_nn_ops.py to compare across libraries.

- `cases`: name -> {"out": [...], "grads": [[...] or None, ...]} or {"error": message}; every
  case records its op under autograd, backpropagates fixed pseudo-random head gradients and
  reads the inputs' gradients.
- `errors`: name -> the message of an invoke with a bad parameter (None if it did not fail).
- `gluon`: the losses of a small Gluon model (Embedding, LayerNorm, Dense,
  SoftmaxCrossEntropyLoss) trained a few steps.
- `sparse_grad`: the storage type and values of Embedding's weight gradient with sparse_grad.
"""
import json

import numpy as np
import mxnet as mx

nd = mx.nd
ag = mx.autograd
cases = {}
errors = {}


def rand(*shape, lo=-1.0, hi=1.0, seed=0):
    return np.random.RandomState(seed + 13 * len(shape) + sum(shape)).uniform(lo, hi, size=shape)


def flat(a):
    return a.asnumpy().astype(np.float64).ravel().tolist()


def case(name, fn, inputs, needs=None, dtype="float32", train=True):
    """`inputs`: numpy arrays; `needs`: which get a gradient (default: every one; none at all:
    the forward alone, for ops MXNet does not differentiate)."""
    try:
        xs = [nd.array(v, dtype=dtype if v.dtype.kind == "f" else v.dtype) for v in inputs]
        if needs is not None and not any(needs):
            cases[name] = {"out": [flat(o) for o in (lambda r: r if isinstance(r, list) else [r])(fn(*xs))],
                           "grads": []}
            return
        needs = needs if needs is not None else [True] * len(xs)
        for x, n in zip(xs, needs):
            if n:
                x.attach_grad()
        with ag.record(train_mode=train):
            out = fn(*xs)
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        heads = [nd.array(np.random.RandomState(50 + i).uniform(0.5, 1.5, size=o.shape), dtype=o.dtype)
                 for i, o in enumerate(outs)]
        ag.backward(outs, heads, train_mode=train)
        cases[name] = {"out": [flat(o) for o in outs],
                       "grads": [flat(x.grad) if n else None for x, n in zip(xs, needs)]}
    except Exception as e:  # noqa: BLE001 - the outcome is what is compared
        cases[name] = {"error": str(e).strip().splitlines()[0][:300]}


def error(name, fn):
    try:
        fn().wait_to_read()
        errors[name] = None
    except Exception as e:  # noqa: BLE001
        errors[name] = str(e)[:600]


# --- Embedding ------------------------------------------------------------------------------
IDX = np.array([[0, 4, 2, 6], [1, 1, 3, -2], [5, 0, 0, 2]], dtype=np.float32)
for (vocab, dim) in [(7, 5), (3, 1), (11, 8)]:
    W = rand(vocab, dim, seed=vocab)
    case(f"embedding_{vocab}x{dim}", lambda i, w, v=vocab, d=dim: nd.Embedding(i, w, input_dim=v, output_dim=d),
         [IDX, W], needs=[False, True])
case("embedding_f64", lambda i, w: nd.Embedding(i, w, input_dim=7, output_dim=5), [IDX, rand(7, 5, seed=2)],
     needs=[False, True], dtype="float64")
case("embedding_int_indices", lambda i, w: nd.Embedding(i, w, input_dim=7, output_dim=3),
     [IDX.astype(np.int32), rand(7, 3, seed=3)], needs=[False, True])
case("embedding_1d", lambda i, w: nd.Embedding(i, w, input_dim=7, output_dim=3),
     [np.array([3, 3, 1, 0, 6], dtype=np.float32), rand(7, 3, seed=4)], needs=[False, True])
# many repeated indices into a larger table (rows picked 0, 1 or many times; clipped indices)
case("embedding_repeats_60x16", lambda i, w: nd.Embedding(i, w, input_dim=60, output_dim=16),
     [np.random.RandomState(5).randint(-3, 70, size=(9, 13)).astype(np.float32), rand(60, 16, seed=5)],
     needs=[False, True])

# --- normalisation layers ---------------------------------------------------------------------
X3 = rand(3, 4, 5, seed=10)
X4 = rand(2, 6, 3, 5, seed=11)
for axis, ch in [(-1, 5), (1, 4), (0, 3)]:
    case(f"layernorm_axis{axis}", lambda x, g, b, a=axis: nd.LayerNorm(x, g, b, axis=a),
         [X3, rand(ch, lo=0.5, hi=1.5, seed=12), rand(ch, seed=13)])
case("layernorm_eps_mean_var", lambda x, g, b: nd.LayerNorm(x, g, b, eps=0.1, output_mean_var=True),
     [X3, rand(5, lo=0.5, hi=1.5, seed=14), rand(5, seed=15)])
case("layernorm_f64", lambda x, g, b: nd.LayerNorm(x, g, b), [rand(7, 9, seed=16), rand(9, seed=17), rand(9, seed=18)],
     dtype="float64")
case("layernorm_2d_odd", lambda x, g, b: nd.LayerNorm(x, g, b), [rand(13, 31, seed=19), rand(31, seed=20), rand(31, seed=21)])
case("instancenorm", lambda x, g, b: nd.InstanceNorm(x, g, b), [X4, rand(6, lo=0.5, hi=1.5, seed=22), rand(6, seed=23)])
case("instancenorm_eps_3d", lambda x, g, b: nd.InstanceNorm(x, g, b, eps=0.01),
     [rand(3, 2, 7, seed=24), rand(2, seed=25), rand(2, seed=26)])
for groups in [1, 2, 3, 6]:
    case(f"groupnorm_{groups}", lambda x, g, b, n=groups: nd.GroupNorm(x, g, b, num_groups=n),
         [X4, rand(groups, lo=0.5, hi=1.5, seed=27), rand(groups, seed=28)])
case("groupnorm_mean_var", lambda x, g, b: nd.GroupNorm(x, g, b, num_groups=3, eps=0.01, output_mean_var=True),
     [X4, rand(3, lo=0.5, hi=1.5, seed=29), rand(3, seed=30)])
for mode in ["instance", "channel", "spatial"]:
    case(f"l2norm_{mode}", lambda x, m=mode: nd.L2Normalization(x, mode=m), [X4])
case("l2norm_2d_eps", lambda x: nd.L2Normalization(x, eps=0.5), [rand(5, 3, seed=31)])
# BatchNorm over channels large enough to be split over threads, batch statistics and global ones
for name, kw in [("batchnorm_train_large", {}), ("batchnorm_global_large", {"use_global_stats": True})]:
    case(name, lambda x, g, b, m, v, kw=kw: nd.BatchNorm(x, g, b, m, v, fix_gamma=False, **kw),
         [rand(4, 8, 33, 35, seed=32), rand(8, lo=0.5, hi=1.5, seed=33), rand(8, seed=34), rand(8, seed=35),
          rand(8, lo=0.5, hi=2.0, seed=36)], needs=[True, True, True, False, False])

# --- output layers and losses ---------------------------------------------------------------
D2 = rand(5, 4, seed=40) * 3
L5 = np.array([0, 3, 1, 1, 2], dtype=np.float32)
L5_IGN = np.array([0, 3, -1, 1, -1], dtype=np.float32)
case("softmax_output", lambda x, l: nd.SoftmaxOutput(x, l), [D2, L5], needs=[True, False])
case("softmax_output_scale_batch", lambda x, l: nd.SoftmaxOutput(x, l, grad_scale=0.5, normalization="batch"),
     [D2, L5], needs=[True, False])
case("softmax_output_ignore_valid", lambda x, l: nd.SoftmaxOutput(x, l, use_ignore=True, ignore_label=-1,
                                                                normalization="valid"),
     [D2, L5_IGN], needs=[True, False])
case("softmax_output_smooth", lambda x, l: nd.SoftmaxOutput(x, l, smooth_alpha=0.2), [D2, L5], needs=[True, False])
case("softmax_output_smooth_ignore", lambda x, l: nd.SoftmaxOutput(x, l, smooth_alpha=0.1, use_ignore=True),
     [D2, L5_IGN], needs=[True, False])
D4 = rand(2, 3, 4, 5, seed=41) * 2
LM = np.random.RandomState(42).randint(0, 3, size=(2, 4, 5)).astype(np.float32)
LM[0, 1, 2] = 1 - 2  # an ignored label
for norm in ["null", "batch", "valid"]:
    case(f"softmax_output_multi_{norm}", lambda x, l, n=norm: nd.SoftmaxOutput(
        x, l, multi_output=True, use_ignore=True, normalization=n), [D4, LM], needs=[True, False])
case("softmax_output_preserve_shape", lambda x, l: nd.SoftmaxOutput(x, l, preserve_shape=True),
     [rand(2, 3, 4, seed=43), np.random.RandomState(44).randint(0, 4, size=(2, 3)).astype(np.float32)],
     needs=[True, False])
case("softmax_output_3d", lambda x, l: nd.SoftmaxOutput(x, l, normalization="batch"),
     [rand(3, 2, 3, seed=45), np.array([[0, 5], [2, 1], [3, 3.0]])], needs=[True, False])
case("softmax_output_prob_label", lambda x, l: nd.SoftmaxOutput(x, l), [D2, rand(5, 4, lo=0, hi=1, seed=46)],
     needs=[True, False])
case("softmax_output_out_grad", lambda x, l: nd.SoftmaxOutput(x, l, out_grad=True), [D2, L5], needs=[True, False])
case("softmax_alias", lambda x, l: nd.Softmax(x, l), [D2, L5], needs=[True, False])
# instance mode on 2-D data: on more dimensions MXNet's backward takes the channel axis (the
# gradient case softmax_activation_instance_3d checks mxrt's against central differences)
case("softmax_activation_instance", lambda x: nd.SoftmaxActivation(x), [rand(3, 7, seed=47)])
case("softmax_activation_channel", lambda x: nd.SoftmaxActivation(x, mode="channel"), [rand(2, 3, 2, 2, seed=48)])
R = rand(4, 3, seed=49)
RL = rand(4, 3, lo=0, hi=1, seed=50)
for op in ["LinearRegressionOutput", "LogisticRegressionOutput", "MAERegressionOutput"]:
    case(op, lambda x, l, op=op: getattr(nd, op)(x, l), [R, RL], needs=[True, False])
    case(op + "_scale", lambda x, l, op=op: getattr(nd, op)(x, l, grad_scale=2.5), [R, RL], needs=[True, False])
case("LinearRegressionOutput_flat_label", lambda x, l: nd.LinearRegressionOutput(x, l),
     [rand(5, 1, seed=51), rand(5, seed=52)], needs=[True, False])
SV = rand(5, 4, seed=53) * 2
case("svm_l2", lambda x, l: nd.SVMOutput(x, l), [SV, L5], needs=[True, False])
case("svm_l1", lambda x, l: nd.SVMOutput(x, l, use_linear=True, margin=0.5), [SV, L5], needs=[True, False])
case("svm_reg", lambda x, l: nd.SVMOutput(x, l, regularization_coefficient=0.3, margin=2.0), [SV, L5],
     needs=[True, False])
for norm in ["null", "batch", "valid"]:
    case(f"makeloss_{norm}", lambda x, n=norm: nd.MakeLoss(x, normalization=n, grad_scale=1.5, valid_thresh=0.2),
         [rand(4, 3, seed=54)])
case("softmax_cross_entropy", lambda x, l: nd.softmax_cross_entropy(x, l), [D2, L5], needs=[True, False])
# the softmax family over rows wider than a vector (odd widths, a large range of logits), along
# the last axis (contiguous rows) and along a middle one (strided lines)
W = rand(6, 37, lo=-30, hi=30, seed=58)
W3 = rand(3, 19, 4, lo=-8, hi=8, seed=59)
LW = np.array([0, 36, 5, 17, 2, 30], dtype=np.float32)
LW_IGN = np.array([0, -1, 5, 17, -1, 30], dtype=np.float32)
case("softmax_wide", lambda x: nd.softmax(x), [W])
case("log_softmax_wide", lambda x: nd.log_softmax(x), [W])
case("softmin_wide_temperature", lambda x: nd.softmin(x, temperature=3.0), [W])
case("log_softmax_wide_temperature", lambda x: nd.log_softmax(x, temperature=0.5), [W])
case("softmax_wide_axis1", lambda x: nd.softmax(x, axis=1), [W3])
case("log_softmax_wide_axis1", lambda x: nd.log_softmax(x, axis=1), [W3])
case("softmax_output_wide", lambda x, l: nd.SoftmaxOutput(x, l, grad_scale=0.7), [W, LW], needs=[True, False])
case("softmax_output_wide_ignore_batch", lambda x, l: nd.SoftmaxOutput(
    x, l, use_ignore=True, ignore_label=-1, normalization="batch"), [W, LW_IGN], needs=[True, False])
case("softmax_output_wide_out_grad_valid", lambda x, l: nd.SoftmaxOutput(
    x, l, use_ignore=True, ignore_label=-1, normalization="valid", out_grad=True), [W, LW_IGN], needs=[True, False])
# (logits within ±4: MXNet's float32 loss clips the probabilities that underflow further out)
case("softmax_cross_entropy_wide", lambda x, l: nd.softmax_cross_entropy(x, l),
     [rand(6, 37, lo=-4, hi=4, seed=60), LW], needs=[True, False])
case("smooth_l1", lambda x: nd.smooth_l1(x, scalar=1.5), [rand(4, 5, lo=-2, hi=2, seed=55)])
case("smooth_l1_default", lambda x: nd.smooth_l1(x), [rand(4, 5, lo=-2, hi=2, seed=56)])
case("hard_sigmoid", lambda x: nd.hard_sigmoid(x), [rand(4, 5, lo=-4, hi=4, seed=57)])
case("hard_sigmoid_params", lambda x: nd.hard_sigmoid(x, alpha=0.3, beta=0.2), [rand(4, 5, lo=-4, hi=4, seed=58)])
case("stop_gradient", lambda x: nd.stop_gradient(x) * x, [rand(3, 4, seed=59)])

# --- sequence operators ----------------------------------------------------------------------
SQ = rand(5, 3, 2, seed=62)
SQB = rand(3, 5, 2, seed=63)
LEN = np.array([2, 5, 3.7], dtype=np.float32)
case("sequence_mask_plain", lambda x: nd.SequenceMask(x), [SQ])
case("sequence_mask", lambda x, n: nd.SequenceMask(x, n, use_sequence_length=True, value=-2.5), [SQ, LEN],
     needs=[True, False])
case("sequence_mask_axis1", lambda x, n: nd.SequenceMask(x, n, use_sequence_length=True, axis=1), [SQB, LEN],
     needs=[True, False])
case("sequence_mask_2d", lambda x, n: nd.SequenceMask(x, n, use_sequence_length=True, value=1.0),
     [rand(5, 3, seed=64), LEN], needs=[True, False])
# MXNet 1.9.1 crashes (segfault) differentiating SequenceLast without sequence_length: its
# forward is compared here, its gradient checked on libmxrt alone (last_step_gradient below)
case("sequence_last_plain", lambda x: nd.SequenceLast(x), [SQ], needs=[False])
case("sequence_last_plain_axis1", lambda x: nd.SequenceLast(x, axis=1), [SQB], needs=[False])
case("sequence_last", lambda x, n: nd.SequenceLast(x, n, use_sequence_length=True), [SQ, LEN], needs=[True, False])
case("sequence_last_axis1", lambda x, n: nd.SequenceLast(x, n, use_sequence_length=True, axis=1), [SQB, LEN],
     needs=[True, False])
case("sequence_reverse_plain", lambda x: nd.SequenceReverse(x), [SQ])
case("sequence_reverse", lambda x, n: nd.SequenceReverse(x, n, use_sequence_length=True), [SQ, LEN],
     needs=[True, False])
case("sequence_reverse_4d", lambda x, n: nd.SequenceReverse(x, n, use_sequence_length=True),
     [rand(4, 3, 2, 3, seed=65), np.array([1, 4, 2], dtype=np.float32)], needs=[True, False])

for nsize, extra in [(3, {}), (5, dict(alpha=0.01, beta=0.5, knorm=1.0)), (1, {}), (4, dict(alpha=0.1))]:
    case(f"lrn_{nsize}", lambda x, n=nsize, e=extra: nd.LRN(x, nsize=n, **e), [rand(2, 6, 3, 2, lo=-3, hi=3, seed=73)])

# --- attention and statistics building blocks --------------------------------------------------
case("div_sqrt_dim", lambda x: nd.contrib.div_sqrt_dim(x), [rand(2, 3, 7, seed=66)])
case("moments_all", lambda x: list(nd.moments(x, axes=(0, 1, 2))), [rand(3, 4, 2, seed=67)])
case("moments_axes", lambda x: list(nd.moments(x, axes=(0, 2))), [rand(3, 4, 2, seed=68)])
case("moments_keepdims", lambda x: list(nd.moments(x, axes=(1,), keepdims=True)), [rand(3, 4, 2, seed=69)])
case("arange_like", lambda x: nd.contrib.arange_like(x, start=1.5, step=0.5, repeat=2), [rand(3, 4, seed=70)],
     needs=[False])
case("arange_like_axis", lambda x: nd.contrib.arange_like(x, axis=-1), [rand(3, 4, seed=71)], needs=[False])
case("batch_take", lambda a, i: nd.batch_take(a, i),
     [rand(4, 3, seed=72), np.array([0, 2, 5, -1], dtype=np.int32)], needs=[False, False])

# --- bad parameters ---------------------------------------------------------------------------
E = nd.array(IDX)
error("embedding_weight_shape", lambda: nd.Embedding(E, nd.ones((6, 5)), input_dim=7, output_dim=5))
error("embedding_input_dim", lambda: nd.Embedding(E, nd.ones((7, 5)), input_dim=-1, output_dim=5))
error("layernorm_axis", lambda: nd.LayerNorm(nd.ones((2, 3)), nd.ones(3), nd.ones(3), axis=2))
error("layernorm_gamma", lambda: nd.LayerNorm(nd.ones((2, 3)), nd.ones(2), nd.ones(3)))
error("groupnorm_num_groups", lambda: nd.GroupNorm(nd.ones((2, 6, 3)), nd.ones(4), nd.ones(4), num_groups=4))
error("l2norm_mode", lambda: nd.L2Normalization(nd.ones((2, 3, 4)), mode="pixel"))
error("softmax_output_normalization", lambda: nd.SoftmaxOutput(nd.ones((2, 3)), nd.ones(2), normalization="all"))
error("sequence_reverse_axis", lambda: nd.SequenceReverse(nd.ones((2, 3)), axis=1))
error("sequence_mask_length", lambda: nd.SequenceMask(nd.ones((4, 3)), nd.ones(2), use_sequence_length=True))
error("moments_axes", lambda: nd.moments(nd.ones((2, 3)))[0])
error("makeloss_normalization", lambda: nd.MakeLoss(nd.ones((2, 3)), normalization="sum"))


# --- Embedding's sparse gradient -------------------------------------------------------------
def sparse_grad():
    out = {}
    for name, op in [("Embedding", lambda i, w: nd.Embedding(i, w, input_dim=9, output_dim=4, sparse_grad=True)),
                     ("SparseEmbedding", lambda i, w: nd.contrib.SparseEmbedding(i, w, input_dim=9, output_dim=4))]:
        w = nd.array(rand(9, 4, seed=60))
        w.attach_grad(stype="row_sparse")
        with ag.record():
            y = op(nd.array([[1, 5], [5, 7]]), w)
        y.backward(nd.array(rand(2, 2, 4, lo=0.5, hi=1.5, seed=61)))
        g = w.grad
        out[name] = {"out": flat(y), "stype": g.stype, "indices": g.indices.asnumpy().tolist(),
                     "dense": flat(g.tostype("default"))}
    return out


def last_step_gradient():
    """SequenceLast's gradient without sequence_length (libmxrt only): the head gradient at the
    last step, zeros elsewhere."""
    import os
    if not os.environ.get("MXNET_LIBRARY_PATH"):
        return None
    out = []
    for axis, data in [(0, SQ), (1, SQB)]:
        x = nd.array(data)
        x.attach_grad()
        with ag.record():
            y = nd.SequenceLast(x, axis=axis)
        head = rand(*y.shape, lo=0.5, hi=1.5, seed=74)
        y.backward(nd.array(head))
        want = np.zeros(data.shape)
        if axis == 0:
            want[-1] = head
        else:
            want[:, -1] = head
        out.append(bool(np.allclose(x.grad.asnumpy(), want, rtol=1e-6)))
    return out


# --- graph inference: argument names and shapes from the data's ------------------------------
def inferred():
    sym = mx.sym
    d = sym.var("data")
    nets = {
        "embedding": (sym.Embedding(d, input_dim=11, output_dim=4, name="emb"), (3, 5)),
        "layernorm": (sym.LayerNorm(d, name="ln"), (2, 3, 7)),
        "layernorm_axis": (sym.LayerNorm(d, axis=1, output_mean_var=True, name="ln"), (2, 3, 7)),
        "instancenorm": (sym.InstanceNorm(d, name="in"), (2, 3, 7)),
        "groupnorm": (sym.GroupNorm(d, num_groups=3, name="gn"), (2, 6, 7)),
        "l2norm": (sym.L2Normalization(d, mode="channel", name="l2"), (2, 3, 4)),
        "softmax_output": (sym.SoftmaxOutput(d, name="softmax"), (4, 10)),
        "softmax_output_multi": (sym.SoftmaxOutput(d, multi_output=True, name="softmax"), (4, 10, 3)),
        "softmax_output_preserve": (sym.SoftmaxOutput(d, preserve_shape=True, name="softmax"), (4, 5, 3)),
        "linear_regression": (sym.LinearRegressionOutput(d, name="lro"), (4, 2)),
        "svm": (sym.SVMOutput(d, name="svm"), (4, 3)),
        "sequence_mask": (sym.SequenceMask(d, use_sequence_length=True, name="sm"), (5, 3, 2)),
        "sequence_last_axis1": (sym.SequenceLast(d, use_sequence_length=True, axis=1, name="sl"), (5, 3, 2)),
        "lrn": (sym.LRN(d, nsize=3, name="lrn"), (2, 4, 3, 3)),
        "moments": (sym.moments(d, axes=(1,), name="mo"), (2, 4, 3)),
    }
    out = {}
    for name, (net, shape) in nets.items():
        try:
            args, outs, aux = net.infer_shape(data=shape)
            out[name] = {"arguments": net.list_arguments(), "outputs": net.list_outputs(),
                         "arg_shapes": [list(a) for a in args], "out_shapes": [list(o) for o in outs]}
        except Exception as e:  # noqa: BLE001
            out[name] = {"error": str(e).strip().splitlines()[-1][:300]}
    return out


# --- a small Gluon model ----------------------------------------------------------------------
def gluon_steps():
    from mxnet import gluon
    mx.random.seed(7)
    np.random.seed(7)

    class Net(gluon.nn.Block):
        def __init__(self):
            super().__init__()
            with self.name_scope():
                self.emb = gluon.nn.Embedding(23, 12)
                self.norm = gluon.nn.LayerNorm()
                self.out = gluon.nn.Dense(5, flatten=True)

        def forward(self, x):
            return self.out(self.norm(self.emb(x)))

    net = Net()
    net.initialize(mx.init.Xavier())
    r = np.random.RandomState(8)
    data = nd.array(r.randint(0, 23, size=(6, 7)))
    label = nd.array(r.randint(0, 5, size=(6,)))
    net(data)  # deferred initialisation: the shapes come from shape inference
    # the same initial weights on both libraries
    for i, (_, p) in enumerate(sorted(net.collect_params().items())):
        p.set_data(nd.array(rand(*p.shape, lo=-0.3, hi=0.3, seed=70 + i)))
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 0.05})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    losses = []
    for _ in range(5):
        with ag.record():
            loss = loss_fn(net(data), label)
        loss.backward()
        trainer.step(data.shape[0])
        losses.append(float(loss.mean().asscalar()))
    return losses


print(json.dumps({"cases": cases, "errors": errors, "sparse_grad": sparse_grad(), "gluon": gluon_steps(),
                  "last_step_gradient": last_step_gradient(), "inferred": inferred()}))
