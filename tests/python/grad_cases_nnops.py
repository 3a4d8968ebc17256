"""Gradient cases of the embedding, normalisation-layer and output/loss operators (ops/embed.rs,
ops/norm.rs, ops/loss.rs) and the sequence operators (ops/sequence.rs). The output layers'
gradients are their losses' gradients, not derivatives of their forwards, so they are compared
with MXNet's only (numeric=False)."""
import numpy as np

from gradlib import grad, nd, nondiff, rand

IDX = np.array([[0, 4, 2], [6, 1, 4]], dtype=np.float64)
grad("embedding", ["Embedding"], [(IDX, False), rand(7, 3, seed=1)])(
    lambda i, w: nd.Embedding(i, w, input_dim=7, output_dim=3))
# MXNet has no dense-gradient backward for SparseEmbedding (test_gradients.BEYOND_MXNET)
grad("sparse_embedding", ["_contrib_SparseEmbedding"], [(IDX, False), rand(7, 3, seed=2)])(
    lambda i, w: nd.contrib.SparseEmbedding(i, w, input_dim=7, output_dim=3))

X = rand(2, 3, 4, seed=3)
grad("layernorm", ["LayerNorm"], [X, rand(4, lo=0.5, hi=1.5, seed=4), rand(4, seed=5)])(
    lambda x, g, b: nd.LayerNorm(x, g, b))
grad("layernorm_axis1", ["LayerNorm"], [X, rand(3, lo=0.5, hi=1.5, seed=6), rand(3, seed=7)])(
    lambda x, g, b: nd.LayerNorm(x, g, b, axis=1, eps=0.01))
X4 = rand(2, 4, 3, seed=8)
grad("instancenorm", ["InstanceNorm"], [X4, rand(4, lo=0.5, hi=1.5, seed=9), rand(4, seed=10)])(
    lambda x, g, b: nd.InstanceNorm(x, g, b))
grad("groupnorm", ["GroupNorm"], [X4, rand(2, lo=0.5, hi=1.5, seed=11), rand(2, seed=12)])(
    lambda x, g, b: nd.GroupNorm(x, g, b, num_groups=2))
grad("l2normalization", ["L2Normalization"], [X4])(
    lambda x: [nd.L2Normalization(x), nd.L2Normalization(x, mode="channel"),
               nd.L2Normalization(x, mode="spatial")])

D = rand(4, 3, seed=13) * 2
L = np.array([0, 2, 1, 2], dtype=np.float64)
grad("softmax_output", ["SoftmaxOutput"], [D, (L, False)], numeric=False)(
    lambda x, l: nd.SoftmaxOutput(x, l, grad_scale=0.7, normalization="batch"))
grad("softmax_activation", ["SoftmaxActivation"], [D])(lambda x: nd.SoftmaxActivation(x))
grad("softmax_activation_channel", ["SoftmaxActivation"], [rand(2, 3, 2, seed=14)])(
    lambda x: nd.SoftmaxActivation(x, mode="channel"))
# MXNet's backward of instance mode on more than 2 dimensions takes axis 1 (DIFFERS_FROM_MXNET)
grad("softmax_activation_instance_3d", ["SoftmaxActivation"], [rand(2, 3, 2, seed=15)])(
    lambda x: nd.SoftmaxActivation(x))
RL = rand(4, 3, lo=0, hi=1, seed=16)
grad("regression_outputs", ["LinearRegressionOutput", "LogisticRegressionOutput", "MAERegressionOutput"],
     [D, (RL, False)], numeric=False)(
    lambda x, l: [nd.LinearRegressionOutput(x, l), nd.LogisticRegressionOutput(x, l, grad_scale=2.0),
                  nd.MAERegressionOutput(x, l)])
grad("svm_output", ["SVMOutput"], [D, (L, False)], numeric=False)(
    lambda x, l: [nd.SVMOutput(x, l), nd.SVMOutput(x, l, use_linear=True)])
grad("makeloss", ["MakeLoss"], [D], numeric=False)(lambda x: nd.MakeLoss(x, normalization="valid"))
grad("softmax_cross_entropy", ["softmax_cross_entropy"], [D, (L, False)])(
    lambda x, l: nd.softmax_cross_entropy(x, l))
# away from the kinks at ±1/sigma² and where the hard sigmoid saturates
SM = np.array([[-2.3, -0.9, -0.3, 0.2], [0.5, 0.95, 1.6, 3.0]])
grad("smooth_l1", ["smooth_l1"], [SM])(lambda x: [nd.smooth_l1(x), nd.smooth_l1(x, scalar=2.0)])
grad("hard_sigmoid", ["hard_sigmoid"], [SM * 2])(lambda x: nd.hard_sigmoid(x, alpha=0.3, beta=0.4))

SQ = rand(4, 3, 2, seed=17)
SL = np.array([2, 4, 1], dtype=np.float64)
grad("sequence_mask", ["SequenceMask"], [SQ, (SL, False)])(
    lambda x, n: [nd.SequenceMask(x, n, use_sequence_length=True, value=0.5), nd.SequenceMask(x)])
grad("sequence_last", ["SequenceLast"], [SQ, (SL, False)])(
    lambda x, n: [nd.SequenceLast(x, n, use_sequence_length=True),
                  nd.SequenceLast(x, n, use_sequence_length=True, axis=1)])
grad("sequence_reverse", ["SequenceReverse"], [SQ, (SL, False)])(
    lambda x, n: [nd.SequenceReverse(x, n, use_sequence_length=True), nd.SequenceReverse(x)])

grad("div_sqrt_dim", ["_contrib_div_sqrt_dim"], [rand(2, 5, seed=18)])(lambda x: nd.contrib.div_sqrt_dim(x))
grad("moments", ["moments"], [rand(3, 4, seed=19)])(
    lambda x: list(nd.moments(x, axes=(1,))) + list(nd.moments(x, axes=(0,), keepdims=True)))
nondiff("arange_like", ["_contrib_arange_like"], [rand(2, 3, seed=20)])(
    lambda x: nd.contrib.arange_like(x) * x)
nondiff("batch_take", ["batch_take"], [rand(3, 4, seed=21)])(
    lambda x: nd.batch_take(x, nd.array([0, 3, 1], dtype="int32")))
grad("lrn", ["LRN"], [rand(2, 4, 2, 2, lo=-2, hi=2, seed=22)])(
    lambda x: [nd.LRN(x, nsize=3, alpha=0.05), nd.LRN(x, nsize=4, alpha=0.1, beta=0.6)])


# ---- the fused RNN (ops/rnn.rs): every mode, stacked and bidirectional, with the final states
def rnn_inputs(mode, layers, dirs, seed, T=3, N=2, C=3, H=2):
    g = {"rnn_relu": 1, "rnn_tanh": 1, "lstm": 4, "gru": 3}[mode] * H
    size = sum(dirs * g * ((C if l == 0 else dirs * H) + H + 2) for l in range(layers))
    ins = [rand(T, N, C, seed=seed), rand(size, lo=-0.6, hi=0.6, seed=seed + 1),
           rand(layers * dirs, N, H, seed=seed + 2)]
    if mode == "lstm":
        ins.append(rand(layers * dirs, N, H, seed=seed + 3))
    return ins


for mode, layers, bidir in [("lstm", 2, True), ("gru", 2, True), ("rnn_tanh", 1, True),
                            ("rnn_relu", 2, False), ("lstm", 1, False)]:
    grad(f"rnn_{mode}_l{layers}{'_bi' if bidir else ''}", ["RNN"],
         rnn_inputs(mode, layers, 2 if bidir else 1, seed=30 + layers))(
        lambda *xs, m=mode, l=layers, b=bidir: nd.RNN(
            *xs, state_size=2, num_layers=l, bidirectional=b, mode=m, state_outputs=True))
grad("rnn_gru_no_state_outputs", ["RNN"], rnn_inputs("gru", 1, 1, seed=36))(
    lambda *xs: nd.RNN(*xs, state_size=2, num_layers=1, mode="gru"))
# LSTM with a projection: MXNet's CPU kernels refuse its training (test_gradients.BEYOND_MXNET)
LP_SIZE = 2 * (4 * 3 * (2 + 2 + 2) + 2 * 3)
grad("rnn_lstmp_bi", ["RNN"], [rand(3, 2, 2, seed=50), rand(LP_SIZE, lo=-0.6, hi=0.6, seed=51),
                               rand(2, 2, 2, seed=52), rand(2, 2, 3, seed=53)])(
    lambda *xs: nd.RNN(*xs, state_size=3, projection_size=2, num_layers=1, bidirectional=True,
                       mode="lstm", state_outputs=True))
grad("rnn_param_concat", ["_rnn_param_concat"], [rand(6, seed=37), rand(2, 3, seed=38)])(
    lambda a, b: nd._internal._rnn_param_concat(a, b.reshape(-1), dim=0, num_args=2))

# ---- resizing and cropping (ops/resize.rs)
grad("upsampling_nearest", ["UpSampling"], [rand(1, 2, 2, 3, seed=40), rand(1, 1, 4, 6, seed=41)])(
    lambda a, b: [nd.UpSampling(a, scale=2, sample_type="nearest", num_args=1),
                  nd.UpSampling(a, b, scale=2, sample_type="nearest", num_args=2),
                  nd.UpSampling(a, a, scale=3, sample_type="nearest", num_args=2,
                                multi_input_mode="sum")])
grad("upsampling_bilinear", ["UpSampling"], [rand(1, 2, 2, 3, seed=42), rand(2, 1, 4, 4, seed=43)])(
    lambda x, w: nd.UpSampling(x, w, scale=2, sample_type="bilinear", num_filter=2, num_args=2))
grad("bilinear_resize", ["_contrib_BilinearResize2D"], [rand(1, 2, 3, 4, seed=44)])(
    lambda x: [nd.contrib.BilinearResize2D(x, height=5, width=3),
               nd.contrib.BilinearResize2D(x, height=4, width=7, align_corners=False),
               nd.contrib.BilinearResize2D(x, mode="to_odd_up")])
grad("crop", ["Crop"], [rand(1, 2, 5, 4, seed=45), (rand(1, 1, 3, 2, seed=46), False)])(
    lambda x, like: [nd.Crop(x, num_args=1, h_w=(2, 3), offset=(1, 1)),
                     nd.Crop(x, like, num_args=2, center_crop=True)])
