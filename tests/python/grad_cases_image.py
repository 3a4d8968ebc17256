"""Gradient cases of the image operators. MXNet's gradient of every `_image_*` augmenter is a
copy of the output's gradient (flips and random factors included, so central differences do
not apply to those), `_image_crop` scatters it into the window, `_image_normalize` divides it
by `std`; `to_tensor` and a resize to another size fail in MXNet (the copy has the output's
shape). The OpenCV-backed ops (`_cv*`) have no gradient."""
import os

import numpy as np

from gradlib import grad, nd, nondiff, rand

HWC = rand(4, 6, 3, seed=40) * 100 + 120
CHW = rand(3, 4, 5, seed=41)

grad("image_to_tensor", ["_image_to_tensor"], [HWC])(lambda x: nd.image.to_tensor(x))
grad("image_resize_same_size", ["_image_resize"], [HWC])(lambda x: nd.image.resize(x, size=(6, 4)))
grad("image_resize_other_size", ["_image_resize"], [HWC])(lambda x: nd.image.resize(x, size=(3, 2)))
grad("image_normalize", ["_image_normalize"], [CHW])(
    lambda x: nd.image.normalize(x, mean=(0.1, 0.2, 0.3), std=(0.5, 2.0, 4.0)))
grad("image_normalize_4d", ["_image_normalize"], [rand(2, 1, 3, 2, seed=42)])(
    lambda x: nd.image.normalize(x, mean=0.5, std=0.25))
grad("image_crop", ["_image_crop"], [HWC])(lambda x: nd.image.crop(x, 1, 2, 3, 2))
grad("image_crop_4d", ["_image_crop"], [rand(2, 4, 6, 1, seed=43)])(lambda x: nd.image.crop(x, 0, 1, 6, 3))
# MXNet computes lighting in float32 for every dtype: no central differences in float64
grad("image_adjust_lighting", ["_image_adjust_lighting"], [HWC], numeric=False)(
    lambda x: nd.image.adjust_lighting(x, alpha=(0.1, 0.2, -0.3)))
grad("image_flips", ["_image_flip_left_right", "_image_flip_top_bottom"], [HWC], numeric=False)(
    lambda x: [nd.image.flip_left_right(x) * 2, nd.image.flip_top_bottom(x)])
grad("image_random_flips", ["_image_random_flip_left_right", "_image_random_flip_top_bottom"], [HWC],
     numeric=False)(
    lambda x: [nd.image.random_flip_left_right(x), nd.image.random_flip_top_bottom(x) * 3])
grad("image_random_enhance", ["_image_random_brightness", "_image_random_contrast",
                              "_image_random_saturation", "_image_random_hue"], [HWC], numeric=False)(
    lambda x: [nd.image.random_brightness(x, 0.5, 1.5), nd.image.random_contrast(x, 0.5, 1.5),
               nd.image.random_saturation(x, 0.5, 1.5), nd.image.random_hue(x, 0.0, 0.2)])
grad("image_random_jitter_lighting", ["_image_random_color_jitter", "_image_random_lighting"], [HWC],
     numeric=False)(
    lambda x: [nd.image.random_color_jitter(x, 0.1, 0.1, 0.1, 0.1), nd.image.random_lighting(x, 0.1)])
nondiff("cvimresize", ["_cvimresize"], [HWC])(lambda x: nd._internal._cvimresize(x, w=3, h=5))
nondiff("cvcopymakeborder", ["_cvcopyMakeBorder"], [HWC])(
    lambda x: nd._internal._cvcopyMakeBorder(x, top=1, bot=0, left=2, right=1, type=1))
PNG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "images", "rgb37x45.png")
nondiff("cvimdecode", ["_cvimdecode"], [HWC])(
    lambda x: nd._internal._cvimdecode(nd.array(np.fromfile(PNG, dtype=np.uint8), dtype="uint8")).astype("float32")
    * x[0:1, 0:1, 0:1])
