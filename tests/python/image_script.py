"""Image decoding, image operators and ImageRecordIter through the unmodified mxnet package
(test_image.py runs it on libmxrt and on libmxnet.so and compares).

  image_script.py ops DIR     decodes the fixture images and runs the deterministic image
                              operators and Gluon transforms; arrays go to DIR/ops.npz, errors
                              and facts to stdout (JSON)
  image_script.py random DIR  the random augmenters: facts about their outputs (ranges, how
                              often a flip happens) to stdout
  image_script.py iter DIR    writes DIR/png.rec and DIR/jpg.rec and reads them with
                              ImageRecordIter; batches go to DIR/iter.npz, facts to stdout
"""
import json
import os
import struct
import sys
import zlib

import numpy as np
import mxnet as mx
from mxnet import nd, recordio
from mxnet.gluon.data.vision import transforms

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "fixtures", "images")


def png_bytes(a):
    """A PNG file of the uint8 array `a` (HxW, HxWx3 or HxWx4), written here with zlib."""
    a = np.ascontiguousarray(a, dtype=np.uint8)
    h, w = a.shape[:2]
    c = 1 if a.ndim == 2 else a.shape[2]
    kind = {1: 0, 3: 2, 4: 6}[c]
    raw = b"".join(b"\x00" + a[y].tobytes() for y in range(h))

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, kind, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def fixture(name):
    with open(os.path.join(FIXTURES, name), "rb") as f:
        return f.read()


def buf(b):
    return nd.array(np.frombuffer(b, dtype=np.uint8), dtype="uint8")


def picture(h, w, seed, c=3):
    r = np.random.RandomState(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = (x * 255 // max(w - 1, 1) + y * 3) % 256
    img = np.stack([base, (base * 3 + 17) % 256, r.randint(0, 256, size=(h, w))], axis=-1)
    return img[:, :, :c].astype(np.uint8)


def error_of(fn):
    try:
        fn().wait_to_read()
        return None
    except Exception as e:  # noqa: BLE001
        return " ".join(l for l in str(e).split("\n") if "Error" in l or "Check" in l)[:600] or str(e)[:600]


def ops(d):
    out, facts = {}, {}
    for name in sorted(os.listdir(FIXTURES)):
        b = buf(fixture(name))
        for flag in (0, 1):
            for rgb in (0, 1):
                out[f"dec_{name}_{flag}_{rgb}"] = nd.image.imdecode(b, flag=flag, to_rgb=rgb).asnumpy() \
                    if hasattr(nd.image, "imdecode") else mx.image.imdecode(fixture(name), flag=flag,
                                                                            to_rgb=rgb).asnumpy()
    img = mx.image.imdecode(png_bytes(picture(37, 45, 1)))
    out["png_generated"] = img.asnumpy()
    out["imread"] = nd._internal._cvimread(filename=os.path.join(FIXTURES, "rgb37x45.png")).asnumpy()
    # resize: up, down, halving, odd factors; uint8 and float32
    for (w, h) in [(64, 80), (20, 17), (22, 18), (45, 37), (7, 90), (1, 1)]:
        out[f"imresize_{w}_{h}"] = mx.image.imresize(img, w, h).asnumpy()
        out[f"imresize_nn_{w}_{h}"] = mx.image.imresize(img, w, h, interp=0).asnumpy()
        out[f"imresize_f32_{w}_{h}"] = mx.image.imresize(img.astype("float32"), w, h).asnumpy()
        # OpenCV's area (3) and Lanczos (4) methods
        out[f"imresize_area_{w}_{h}"] = mx.image.imresize(img, w, h, interp=3).asnumpy()
        out[f"imresize_lanczos_{w}_{h}"] = mx.image.imresize(img, w, h, interp=4).asnumpy()
    out["resize_short"] = mx.image.resize_short(img, 30, interp=1).asnumpy()
    out["center_crop"] = mx.image.center_crop(img, (20, 16), interp=1)[0].asnumpy()
    out["fixed_crop"] = mx.image.fixed_crop(img, 3, 4, 20, 22, size=(16, 16), interp=1).asnumpy()
    for t in range(5):
        out[f"border_{t}"] = nd._internal._cvcopyMakeBorder(img, top=2, bot=3, left=4, right=1, type=t,
                                                          values=(10, 20, 30)).asnumpy()
    out["border_value"] = nd._internal._cvcopyMakeBorder(img.astype("float32"), top=1, bot=1, left=2,
                                                       right=2, value=7.5).asnumpy()
    x = img.astype("float32")
    even = mx.image.imdecode(png_bytes(picture(12, 16, 2)))
    out["to_tensor"] = nd.image.to_tensor(img).asnumpy()
    out["to_tensor4"] = nd.image.to_tensor(nd.stack(img, img)).asnumpy()
    t = nd.image.to_tensor(img)
    out["normalize"] = nd.image.normalize(t, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)).asnumpy()
    out["normalize_1"] = nd.image.normalize(nd.stack(t, t), mean=0.5, std=0.25).asnumpy()
    out["image_resize"] = nd.image.resize(img, size=(20, 30)).asnumpy()
    out["image_resize_keep"] = nd.image.resize(img, size=25, keep_ratio=True).asnumpy()
    out["image_resize_4d"] = nd.image.resize(nd.stack(img, img), size=(16, 16)).asnumpy()
    out["image_crop"] = nd.image.crop(img, 3, 5, 10, 12).asnumpy()
    out["image_crop4"] = nd.image.crop(nd.stack(x, x), 0, 1, 44, 2).asnumpy()
    out["flip_lr"] = nd.image.flip_left_right(even).asnumpy()
    out["flip_tb"] = nd.image.flip_top_bottom(even).asnumpy()
    out["lighting"] = nd.image.adjust_lighting(x, alpha=(0.1, -0.2, 0.3)).asnumpy()
    out["lighting_u8"] = nd.image.adjust_lighting(img, alpha=(1.0, -2.0, 0.5)).asnumpy()
    for k, v in [("brightness", nd.image.random_brightness), ("contrast", nd.image.random_contrast),
                 ("saturation", nd.image.random_saturation)]:
        out[f"{k}_fixed"] = v(img, min_factor=0.6, max_factor=0.6).asnumpy()
        out[f"{k}_fixed_f32"] = v(x, min_factor=1.3, max_factor=1.3).asnumpy()
    out["hue_fixed"] = nd.image.random_hue(img, min_factor=0.1, max_factor=0.1).asnumpy()
    out["hue_fixed_f32"] = nd.image.random_hue(x, min_factor=0.3, max_factor=0.3).asnumpy()
    # Gluon transforms
    out["T_totensor"] = transforms.ToTensor()(img).asnumpy()
    out["T_normalize"] = transforms.Normalize((0.4, 0.5, 0.6), (0.2, 0.3, 0.4))(transforms.ToTensor()(img)).asnumpy()
    out["T_resize"] = transforms.Resize((24, 20))(img).asnumpy()
    out["T_resize_keep"] = transforms.Resize(30, keep_ratio=True)(img).asnumpy()
    out["T_centercrop"] = transforms.CenterCrop(20)(img).asnumpy()
    out["T_compose"] = transforms.Compose([transforms.Resize(40), transforms.CenterCrop(32),
                                           transforms.ToTensor(),
                                           transforms.Normalize(0.5, 0.2)])(img).asnumpy()
    np.savez(os.path.join(d, "ops.npz"), **out)
    # errors
    facts["err_garbage"] = error_of(lambda: mx.image.imdecode(b"this is not an image at all"))
    facts["err_truncated"] = error_of(lambda: mx.image.imdecode(fixture("rgb224.jpg")[:40]))
    facts["err_empty"] = error_of(lambda: nd._internal._cvimdecode(nd.zeros((0,), dtype="uint8")))
    facts["err_float"] = error_of(lambda: nd._internal._cvimdecode(nd.zeros((5,))))
    facts["err_flag"] = error_of(lambda: nd._internal._cvimdecode(buf(fixture("rgb37x45.png")), flag=-1))
    facts["err_crop"] = error_of(lambda: nd.image.crop(img, 40, 0, 10, 10))
    facts["err_normalize"] = error_of(lambda: nd.image.normalize(t, mean=(1, 2)))
    facts["err_tensor"] = error_of(lambda: nd.image.to_tensor(nd.zeros((3, 3))))
    facts["odd_flip_mid"] = nd.image.flip_left_right(img).asnumpy()[:, 22].tolist() == \
        img.asnumpy()[:, 22].tolist()
    return facts


def random(d):
    mx.random.seed(3)
    img = mx.image.imdecode(png_bytes(picture(16, 20, 4)))
    x = img.astype("float32")
    a = x.asnumpy()
    facts = {}
    flips = [nd.image.random_flip_left_right(img).asnumpy() for _ in range(200)]
    facts["lr_flipped"] = sum(bool((f == a[:, ::-1]).all()) for f in flips)
    facts["lr_kept"] = sum(bool((f == a).all()) for f in flips)
    flips = [nd.image.random_flip_top_bottom(x).asnumpy() for _ in range(200)]
    facts["tb_flipped"] = sum(bool((f == a[::-1]).all()) for f in flips)
    facts["tb_kept"] = sum(bool((f == a).all()) for f in flips)
    ratios = [float((nd.image.random_brightness(x, 0.5, 1.5).asnumpy() / np.maximum(a, 1))[a > 0].mean())
              for _ in range(50)]
    facts["brightness_range"] = [min(ratios), max(ratios)]
    outs = [nd.image.random_contrast(x, 0.2, 0.4).asnumpy() for _ in range(20)]
    # contrast keeps the gray mean and scales the deviations by alpha in [0.2, 0.4]
    gm = (a * [0.299, 0.587, 0.114]).sum(-1).mean()
    alphas = [float(((o - gm) / np.where(a - gm == 0, 1, a - gm))[np.abs(a - gm) > 5].mean()) for o in outs]
    facts["contrast_range"] = [min(alphas), max(alphas)]
    facts["saturation_shape"] = list(nd.image.random_saturation(img, 0.0, 2.0).shape)
    h = nd.image.random_hue(x, 0.0, 0.5).asnumpy()
    facts["hue_keeps_lightness"] = bool(np.abs((h.max(-1) + h.min(-1)) - (a.max(-1) + a.min(-1))).max() < 1e-2)
    jit = [nd.image.random_color_jitter(img, 0.3, 0.3, 0.3, 0.1).asnumpy() for _ in range(10)]
    facts["jitter_dtype"] = str(jit[0].dtype)
    facts["jitter_differs"] = len({j.tobytes() for j in jit})
    li = [nd.image.random_lighting(x, alpha_std=0.1).asnumpy() - a for _ in range(30)]
    # every pixel moves by one per-channel offset
    facts["lighting_uniform_offset"] = bool(all(np.abs(l - l[0, 0]).max() < 1e-3 for l in li))
    facts["lighting_spread"] = float(np.std([l[0, 0, 0] for l in li]))
    rrc = transforms.RandomResizedCrop(12)
    facts["rrc_shapes"] = sorted({tuple(rrc(img).shape) for _ in range(10)})
    rcj = transforms.RandomColorJitter(0.2, 0.2, 0.2, 0.1)
    facts["rcj_shape"] = list(rcj(img).shape)
    return facts


def write_recs(d):
    """png.rec: 11 PNG images of different sizes (labels 0..10, one with a 2-label header in
    multi.rec); jpg.rec: the JPEG fixtures."""
    w = recordio.MXRecordIO(os.path.join(d, "png.rec"), "w")
    for i in range(11):
        a = picture(24 + 3 * i, 40 - 2 * i, 10 + i)
        w.write(recordio.pack(recordio.IRHeader(0, float(i), i, 0), png_bytes(a)))
    w.close()
    w = recordio.MXRecordIO(os.path.join(d, "multi.rec"), "w")
    for i in range(5):
        w.write(recordio.pack(recordio.IRHeader(0, [float(i), 10.0 + i], i, 0), png_bytes(picture(20, 20, i))))
    w.close()
    w = recordio.MXRecordIO(os.path.join(d, "jpg.rec"), "w")
    names = [n for n in sorted(os.listdir(FIXTURES)) if n.startswith("rgb96")]
    for i, n in enumerate(names):
        w.write(recordio.pack(recordio.IRHeader(0, float(i), i, 0), fixture(n)))
    w.close()


def epochs(it, n=2):
    got = []
    for _ in range(n):
        ep = []
        for b in it:
            ep.append((b.data[0].asnumpy(), b.label[0].asnumpy(), b.pad))
        got.append(ep)
        it.reset()
    return got


def iterate(d):
    write_recs(d)
    out, facts = {}, {}
    png = os.path.join(d, "png.rec")
    common = dict(path_imgrec=png, batch_size=4, preprocess_threads=2)
    runs = {
        "plain": dict(data_shape=(3, 24, 20)),
        "resize_mean": dict(data_shape=(3, 16, 16), resize=20, mean_r=120, mean_g=110.5, mean_b=100,
                            std_r=50, std_g=60, std_b=70, scale=0.5),
        "mirror": dict(data_shape=(3, 20, 18), mirror=True),
        # the crop-only path with one decoding thread, batches that cut chunks and epochs apart
        "mirror_mean_t1": dict(data_shape=(3, 20, 18), mirror=True, preprocess_threads=1,
                               mean_r=10, mean_g=20.5, mean_b=30, batch_size=3),
        "gray": dict(data_shape=(1, 20, 20)),
        "pad": dict(data_shape=(3, 30, 30), pad=4, fill_value=9),
        "grow": dict(data_shape=(3, 48, 48)),
        "crop_size": dict(data_shape=(3, 12, 12), max_crop_size=18, min_crop_size=18),
        "no_round": dict(data_shape=(3, 16, 16), round_batch=False),
        "part1": dict(data_shape=(3, 16, 16), num_parts=2, part_index=1, batch_size=3),
        "part0": dict(data_shape=(3, 16, 16), num_parts=2, part_index=0, batch_size=3),
    }
    for k, kw in runs.items():
        args = dict(common)
        args.update(kw)
        it = mx.io.ImageRecordIter(**args)
        eps = epochs(it)
        facts[k] = [[(l.tolist(), p) for (_, l, p) in ep] for ep in eps]
        for e, ep in enumerate(eps):
            for b, (data, _, p) in enumerate(ep):
                # the short last batch without round_batch: 3 records (MXNet's pad says 0)
                out[f"{k}_{e}_{b}"] = data[:3] if k == "no_round" and b == 2 else data
    it = mx.io.ImageRecordUInt8Iter(path_imgrec=png, data_shape=(3, 16, 16), batch_size=5)
    b = next(iter(it))
    out["uint8"] = b.data[0].asnumpy()
    facts["uint8_dtype"] = str(b.data[0].dtype)
    it = mx.io.ImageRecordInt8Iter(path_imgrec=png, data_shape=(3, 16, 16), batch_size=5, mean_r=128,
                                   mean_g=127.6, mean_b=3)
    b = next(iter(it))
    out["int8"] = b.data[0].asnumpy()
    facts["int8_dtype"] = str(b.data[0].dtype)
    it = mx.io.ImageRecordIter(path_imgrec=os.path.join(d, "multi.rec"), data_shape=(3, 20, 20),
                               batch_size=5, label_width=2)
    b = next(iter(it))
    facts["multi_label"] = b.label[0].asnumpy().tolist()
    jpg = os.path.join(d, "jpg.rec")
    it = mx.io.ImageRecordIter(path_imgrec=jpg, data_shape=(3, 64, 64), batch_size=4, resize=72)
    for i, b in enumerate(it):
        out[f"jpg_{i}"] = b.data[0].asnumpy()
    # JPEG records cropped (centred) and mirrored straight from the decoder's pixels, on one
    # and on three decoding threads, batches of 3 over 8 records (wrapping)
    for t in (1, 3):
        it = mx.io.ImageRecordIter(path_imgrec=jpg, data_shape=(3, 64, 64), batch_size=3, mirror=True,
                                   mean_r=100, mean_g=110, mean_b=120, preprocess_threads=t)
        for e, ep in enumerate(epochs(it)):
            for i, (data, label, pad) in enumerate(ep):
                out[f"jpg_crop_t{t}_{e}_{i}"] = data
                facts[f"jpg_crop_t{t}_{e}_{i}"] = [label.tolist(), pad]
    # random augmenters: shapes, label sets, ranges
    it = mx.io.ImageRecordIter(path_imgrec=png, data_shape=(3, 16, 16), batch_size=4, shuffle=True,
                               rand_crop=True, rand_mirror=True, seed=5, preprocess_threads=3)
    eps = epochs(it)
    facts["shuffled_batches"] = [[sorted(l.tolist()) for (_, l, _) in ep] for ep in eps]
    facts["shuffled_ranges"] = [float(min(x.min() for ep in eps for (x, _, _) in ep)),
                                float(max(x.max() for ep in eps for (x, _, _) in ep))]
    it = mx.io.ImageRecordIter(path_imgrec=png, data_shape=(3, 16, 16), batch_size=4, random_resized_crop=True,
                               min_random_area=0.3, max_random_area=1.0, max_aspect_ratio=1.33,
                               min_aspect_ratio=0.75, brightness=0.3, contrast=0.3, saturation=0.3,
                               pca_noise=0.1)
    b = next(iter(it))
    facts["augmented_shape"] = list(b.data[0].shape)
    facts["augmented_range"] = [float(b.data[0].min().asscalar()), float(b.data[0].max().asscalar())]
    errors = {}
    for k, kw in {"label_width": dict(label_width=3), "missing": dict(path_imgrec=os.path.join(d, "nope.rec")),
                  "shape": dict(data_shape=(2, 3))}.items():
        args = dict(path_imgrec=png, data_shape=(3, 16, 16), batch_size=4)
        args.update(kw)
        try:
            it = mx.io.ImageRecordIter(**args)
            next(iter(it))
            errors[k] = None
        except Exception as e:  # noqa: BLE001
            errors[k] = " ".join(l for l in str(e).split("\n") if "Error" in l or "Check" in l)[:600] \
                or str(e)[:600]
    facts["errors"] = errors
    np.savez(os.path.join(d, "iter.npz"), **out)
    return facts


if __name__ == "__main__":
    mode, d = sys.argv[1], sys.argv[2]
    print(json.dumps({"ops": ops, "random": random, "iter": iterate}[mode](d)))
