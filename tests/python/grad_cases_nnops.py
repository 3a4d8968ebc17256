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
