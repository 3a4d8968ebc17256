#!/usr/bin/env python3
"""Write the JPEG and PNG files under tests/fixtures/images/ that the image tests and the image
iterator benchmark decode. Needs Pillow (not a dependency of the tests: the outputs are
committed):  PYTHONPATH=<dir with PIL> .venv-mxnet/bin/python scripts/make-image-fixtures.py

Each image is a smooth gradient with a few hard edges and some noise, so that decoders'
differences (IDCT, chroma upsampling) show up without dominating."""
import os

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(os.path.dirname(HERE), "tests", "fixtures", "images")


def picture(h, w, seed):
    r = np.random.RandomState(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    img = np.stack([
        255 * x / max(w - 1, 1),
        255 * y / max(h - 1, 1),
        127.5 + 127.5 * np.sin((x + 2 * y) / (5.0 + seed)),
    ], axis=-1)
    for _ in range(3):  # rectangles with hard edges
        y0, x0 = r.randint(0, h // 2), r.randint(0, w // 2)
        img[y0:y0 + h // 3, x0:x0 + w // 3] = r.randint(0, 256, size=3)
    img += r.normal(0, 6, size=img.shape)
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def main():
    os.makedirs(OUT, exist_ok=True)
    for i in range(8):
        Image.fromarray(picture(96, 96, i)).save(os.path.join(OUT, f"rgb96_{i}.jpg"), quality=90)
    Image.fromarray(picture(224, 224, 11)).save(os.path.join(OUT, "rgb224.jpg"), quality=90)
    Image.fromarray(picture(61, 83, 12)).save(os.path.join(OUT, "rgb61x83_444.jpg"), quality=95,
                                              subsampling=0)
    Image.fromarray(picture(50, 70, 13)[:, :, 0]).save(os.path.join(OUT, "gray50x70.jpg"), quality=90)
    Image.fromarray(picture(37, 45, 14)).save(os.path.join(OUT, "rgb37x45.png"))
    Image.fromarray(picture(30, 20, 15)[:, :, 1]).save(os.path.join(OUT, "gray30x20.png"))
    rgba = np.concatenate([picture(21, 19, 16), picture(21, 19, 17)[:, :, :1]], axis=-1)
    Image.fromarray(rgba, "RGBA").save(os.path.join(OUT, "rgba21x19.png"))
    Image.fromarray(picture(40, 40, 18)).save(os.path.join(OUT, "progressive40.jpg"), quality=85,
                                              progressive=True)


if __name__ == "__main__":
    main()
