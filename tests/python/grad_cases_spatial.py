"""Gradient cases of the spatial sampling, region and CTC operators (ops/spatial.rs)."""
import numpy as np

from gradlib import grad, nd, rand

# no sampling point on an exact pixel row or column (a one-sided derivative there)
THETA = np.array([[0.9, 0.1, 0.05, -0.15, 1.1, -0.13], [1.05, -0.1, 0.1, 0.05, 0.85, 0.02]])

grad("grid_generator_affine", ["GridGenerator"], [THETA])(
    lambda t: nd.GridGenerator(t, transform_type="affine", target_shape=(3, 4)))
grad("grid_generator_warp", ["GridGenerator"], [rand(2, 2, 3, 4, seed=41)])(
    lambda f: nd.GridGenerator(f, transform_type="warp"))
grad("bilinear_sampler", ["BilinearSampler"], [rand(2, 2, 4, 5, seed=42), rand(2, 2, 3, 3, seed=43) * 1.1])(
    lambda x, g: nd.BilinearSampler(x, g))
grad("spatial_transformer", ["SpatialTransformer"], [rand(2, 2, 5, 4, seed=44), THETA])(
    lambda x, t: nd.SpatialTransformer(x, t, target_shape=(3, 3), transform_type="affine",
                                       sampler_type="bilinear"))

_ROIS = np.array([[0, 0.2, 0.4, 3.6, 2.7], [1, 1.1, 0.3, 4.4, 4.2], [0, 2.0, 1.0, 2.5, 3.5]])
_DISTINCT = np.random.RandomState(45).permutation(2 * 2 * 5 * 5).reshape(2, 2, 5, 5) / 100.0
grad("roi_pooling", ["ROIPooling"], [_DISTINCT, (_ROIS, False)])(
    lambda x, r: nd.ROIPooling(x, r, pooled_size=(2, 2), spatial_scale=1.0))
grad("roi_align", ["_contrib_ROIAlign"], [rand(2, 2, 5, 5, seed=46), (_ROIS, False)])(
    lambda x, r: nd.contrib.ROIAlign(x, r, pooled_size=(2, 2), spatial_scale=1.0, sample_ratio=2))
grad("correlation", ["Correlation"], [rand(1, 2, 5, 5, seed=47), rand(1, 2, 5, 5, seed=48)])(
    lambda a, b: nd.Correlation(a, b, kernel_size=3, max_displacement=1, pad_size=1))
grad("correlation_subtract", ["Correlation"], [rand(1, 2, 4, 4, seed=49), rand(1, 2, 4, 4, seed=50)])(
    lambda a, b: nd.Correlation(a, b, kernel_size=1, max_displacement=1, pad_size=1, is_multiply=False))
grad("ctc_loss", ["CTCLoss"], [rand(5, 2, 4, seed=51) * 2, (np.array([[1, 2], [3, 0]]), False)])(
    lambda x, l: nd.CTCLoss(x, l))
