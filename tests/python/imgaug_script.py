"""ImageRecordIter's affine augmenter, mean image and image lists, and ImageDetRecordIter through
the unmodified mxnet package (test_image_aug.py runs it on libmxrt and on libmxnet.so and
compares).

  imgaug_script.py affine DIR   writes DIR/aff.rec (PNG records) and reads it with deterministic
                                and random affine settings; batches to DIR/affine.npz, facts to
                                stdout (JSON)
  imgaug_script.py lists DIR    mean_img (computed and saved, then loaded), path_imglist labels,
                                path_imgidx; arrays to DIR/lists.npz
  imgaug_script.py det DIR      ImageDetRecordIter on DIR/det.rec; arrays to DIR/det.npz
  imgaug_script.py colour DIR   the HSL augmenters (random_h/s/l; the detection iterator's hue,
                                saturation, illumination and contrast), inter_method 2, 3 and 4
                                in resizes and warps, and the detection iterator's mean image;
                                arrays to DIR/colour.npz, statistics of random draws to stdout
"""
import json
import os
import sys

import numpy as np
import mxnet as mx
from mxnet import recordio

from image_script import picture, png_bytes


def error_text(e):
    return " ".join(l for l in str(e).split("\n") if "Error" in l or "Check" in l)[:600] or str(e)[:600]


def write_rec(path, sizes, labels=None, idx=False):
    """PNG records of `picture`s of the given (h, w) sizes; labels default to the index."""
    if idx:
        w = recordio.MXIndexedRecordIO(path[:-4] + ".idx", path, "w")
    else:
        w = recordio.MXRecordIO(path, "w")
    for i, (h, wd) in enumerate(sizes):
        a = picture(h, wd, 30 + i)
        label = float(i) if labels is None else labels[i]
        rec = recordio.pack(recordio.IRHeader(0, label, i, 0), png_bytes(a))
        if idx:
            w.write_idx(i, rec)
        else:
            w.write(rec)
    w.close()


def first_epoch(it):
    return [(b.data[0].asnumpy(), b.label[0].asnumpy(), b.pad) for b in it]


def affine(d):
    rec = os.path.join(d, "aff.rec")
    sizes = [(24, 20), (20, 28), (17, 23), (30, 30), (21, 19), (26, 22)]
    write_rec(rec, sizes)
    out, facts = {}, {}
    common = dict(path_imgrec=rec, batch_size=3, preprocess_threads=2)
    runs = {
        "rot90": dict(data_shape=(3, 16, 16), rotate=90),
        "rot45_fill": dict(data_shape=(3, 18, 18), rotate=45, fill_value=7),
        "rot30_pad": dict(data_shape=(3, 22, 22), rotate=30, pad=3, fill_value=200),
        "rot_list": dict(data_shape=(3, 16, 16), rotate_list="135"),
        "shrink": dict(data_shape=(3, 12, 12), min_random_scale=0.7, max_random_scale=0.7),
        "grow": dict(data_shape=(3, 20, 20), min_random_scale=1.5, max_random_scale=1.5, rotate=10),
        "aspect": dict(data_shape=(3, 14, 14), min_aspect_ratio=0.75, max_aspect_ratio=0.75),
        "max_img": dict(data_shape=(3, 16, 16), max_img_size=18, rotate=20),
        "min_img": dict(data_shape=(3, 30, 30), min_img_size=32, rotate=5, resize=18),
        "area_method": dict(data_shape=(3, 16, 16), rotate=60, inter_method=3),
        "auto_method": dict(data_shape=(3, 12, 12), rotate=15, min_random_scale=0.6,
                            max_random_scale=0.6, inter_method=9),
        "gray": dict(data_shape=(1, 16, 16), rotate=70, fill_value=30),
        "uint8": dict(data_shape=(3, 16, 16), rotate=100, dtype="uint8"),
        "crop_after": dict(data_shape=(3, 12, 12), rotate=33, max_crop_size=15, min_crop_size=15),
    }
    for k, kw in runs.items():
        args = dict(common)
        args.update(kw)
        ep = first_epoch(mx.io.ImageRecordIter(**args))
        facts[k] = [(l.tolist(), p) for (_, l, p) in ep]
        for b, (data, _, _) in enumerate(ep):
            out[f"{k}_{b}"] = data
    # random settings: the share of fill pixels measures the angles, shears and scales drawn
    many = os.path.join(d, "many.rec")
    write_rec(many, [(24, 24)] * 64)
    # a 24x24 canvas (min_img_size) keeps what the warp leaves unfilled in view
    stats = {}
    for k, kw in {
        "angle": dict(max_rotate_angle=40),
        "shear": dict(max_shear_ratio=0.3),
        "scale": dict(min_random_scale=0.5, max_random_scale=1.0),
        "aspect": dict(max_aspect_ratio=0.4),
        "all": dict(max_rotate_angle=20, max_shear_ratio=0.1, min_random_scale=0.8,
                    max_random_scale=1.2, max_aspect_ratio=0.2),
    }.items():
        it = mx.io.ImageRecordIter(path_imgrec=many, data_shape=(3, 24, 24), batch_size=16,
                                   fill_value=0, seed=3, min_img_size=24, max_img_size=24, **kw)
        data = np.concatenate([x for (x, _, _) in first_epoch(it)])
        blank = (data.sum(axis=1) == 0).mean(axis=(1, 2))
        stats[k] = dict(shape=list(data.shape), fill_mean=float(blank.mean()),
                        fill_std=float(blank.std()), distinct=len({x.tobytes() for x in data}),
                        lo=float(data.min()), hi=float(data.max()))
    facts["random"] = stats
    errors = {}
    for k, kw in {"nearest": dict(rotate=30, inter_method=0), "bad_method": dict(inter_method=5, resize=20)}.items():
        try:
            it = mx.io.ImageRecordIter(path_imgrec=rec, data_shape=(3, 16, 16), batch_size=2, **kw)
            next(iter(it))
            errors[k] = None
        except Exception as e:  # noqa: BLE001
            errors[k] = error_text(e)
    facts["errors"] = errors
    np.savez(os.path.join(d, "affine.npz"), **out)
    return facts


def lists(d):
    rec = os.path.join(d, "l.rec")
    sizes = [(20, 18), (18, 22), (24, 20), (19, 19), (22, 21)]
    write_rec(rec, sizes, idx=True)
    out, facts = {}, {}
    common = dict(path_imgrec=rec, data_shape=(3, 16, 16), batch_size=2, preprocess_threads=2)
    # a mean image computed over the data (after scale) and saved, then loaded
    mean = os.path.join(d, "mean.nd")
    ep = first_epoch(mx.io.ImageRecordIter(mean_img=mean, scale=0.5, **common))
    out["mean_saved"] = mx.nd.load(mean)["mean_img"].asnumpy()
    for b, (data, _, _) in enumerate(ep):
        out[f"mean_computed_{b}"] = data
    ep = first_epoch(mx.io.ImageRecordIter(mean_img=mean, scale=0.5, **common))
    for b, (data, _, _) in enumerate(ep):
        out[f"mean_loaded_{b}"] = data
    # a mean image written by the package
    own = os.path.join(d, "own.nd")
    m = np.arange(3 * 16 * 16, dtype=np.float32).reshape(3, 16, 16) % 97
    mx.nd.save(own, {"mean_img": mx.nd.array(m)})
    ep = first_epoch(mx.io.ImageRecordIter(mean_img=own, std_r=2, std_g=3, std_b=4, **common))
    for b, (data, _, _) in enumerate(ep):
        out[f"mean_own_{b}"] = data
    ep = first_epoch(mx.io.ImageRecordInt8Iter(mean_img=own, **common))
    for b, (data, _, _) in enumerate(ep):
        out[f"mean_int8_{b}"] = data
    # labels from an image list, by record id
    lst = os.path.join(d, "l.lst")
    with open(lst, "w") as f:
        for i in range(len(sizes)):
            f.write(f"{i}\t{i * 1.5 + 0.25}\t{-i}\timg{i}.png\n")
    ep = first_epoch(mx.io.ImageRecordIter(path_imglist=lst, label_width=2, **common))
    facts["imglist"] = [(l.tolist(), p) for (_, l, p) in ep]
    # path_imgidx with shuffle: each epoch a permutation of the records
    it = mx.io.ImageRecordIter(path_imgidx=rec[:-4] + ".idx", shuffle=True, seed=4, **common)
    facts["idx_shuffle"] = [sorted(sum((l.tolist() for (_, l, p) in first_epoch(it)), []))
                            for _ in range(1)]
    np.savez(os.path.join(d, "lists.npz"), **out)
    return facts


def det_label(objects, header=(), object_width=5):
    lab = [2 + len(header), object_width] + list(header)
    for o in objects:
        lab += list(o) + [0.5] * (object_width - 5)
    return np.array(lab, dtype=np.float32)


def box_picture(h, w, boxes):
    """A dark picture with each box (relative coordinates) painted in a colour of its own."""
    a = np.full((h, w, 3), 10, dtype=np.uint8)
    for i, (_, l, t, r, b) in enumerate(boxes):
        a[int(t * h):int(b * h), int(l * w):int(r * w)] = (200, 60 + 60 * i, 30 + 50 * i)
    return a


def det(d):
    rec = os.path.join(d, "det.rec")
    w = recordio.MXRecordIO(rec, "w")
    objs = [[(1, 0.1, 0.2, 0.6, 0.7)],
            [(0, 0.05, 0.1, 0.5, 0.55), (2, 0.55, 0.5, 0.95, 0.95)],
            [(3, 0.2, 0.2, 0.8, 0.9), (1, 0.5, 0.5, 0.4, 0.9)],  # the second is empty: dropped
            [(1, 0.3, 0.1, 0.9, 0.6)],
            [(2, 0.1, 0.1, 0.9, 0.9)],
            [(0, 0.0, 0.5, 0.5, 1.0), (1, 0.5, 0.0, 1.0, 0.5)]]
    sizes = [(40, 40), (36, 44), (48, 40), (40, 50), (42, 42), (44, 38)]
    for i, (o, (h, wd)) in enumerate(zip(objs, sizes)):
        label = det_label(o, header=(7.0,) if i % 2 else (), object_width=6 if i % 3 == 0 else 5)
        if i % 3 == 0:
            label = det_label(o, header=(7.0,) if i % 2 else (), object_width=6)
        w.write(recordio.pack(recordio.IRHeader(0, label, i, 0), png_bytes(box_picture(h, wd, o))))
    w.close()
    # one object width per file keeps MXNet's own checks quiet: write a second file of width 5
    rec5 = os.path.join(d, "det5.rec")
    w = recordio.MXRecordIO(rec5, "w")
    for i, (o, (h, wd)) in enumerate(zip(objs, sizes)):
        w.write(recordio.pack(recordio.IRHeader(0, det_label(o), i, 0), png_bytes(box_picture(h, wd, o))))
    w.close()
    out, facts = {}, {}
    common = dict(path_imgrec=rec, data_shape=(3, 32, 32), batch_size=4, preprocess_threads=2)
    runs = {
        "plain": dict(),
        "resize": dict(resize=36, data_shape=(3, 24, 24)),
        "pad_width": dict(label_pad_width=30, label_pad_value=-2),
        "norm": dict(mean_r=100, mean_g=90, mean_b=80, std_r=50, std_g=40, std_b=30, scale=0.5),
        "gray": dict(data_shape=(1, 20, 20)),
        "mirror": dict(rand_mirror_prob=1.0),
        "no_pad": dict(rand_pad_prob=1.0, max_pad_scale=1.04),
        "nearest": dict(inter_method=0, data_shape=(3, 28, 20)),
        "no_round": dict(round_batch=False),
        "fit": dict(resize_mode="fit"),
        "shrink": dict(resize_mode="shrink", data_shape=(3, 40, 40)),
    }
    for k, kw in runs.items():
        args = dict(common)
        args.update(kw)
        ep = first_epoch(mx.io.ImageDetRecordIter(**args))
        facts[k] = [(l.tolist(), p) for (_, l, p) in ep]
        for b, (data, _, _) in enumerate(ep):
            out[f"{k}_{b}"] = data[:2] if k == "no_round" and b == 1 else data
    # labels from an image list by record id: any width (-1) or a fixed one
    lst = os.path.join(d, "det.lst")
    with open(lst, "w") as f:
        for i, o in enumerate(objs):
            lab = det_label(o[:1], header=(float(i),))
            f.write("\t".join([str(i)] + [f"{v:g}" for v in lab] + [f"img{i}.png"]) + "\n")
    ep = first_epoch(mx.io.ImageDetRecordIter(path_imglist=lst, **common))
    facts["imglist"] = [(l.tolist(), p) for (_, l, p) in ep]
    lst8 = os.path.join(d, "det8.lst")
    with open(lst8, "w") as f:
        for i, o in enumerate(objs):
            lab = det_label(o[:1], header=(float(i),))
            f.write("\t".join([str(i)] + [f"{v:g}" for v in lab] + [f"img{i}.png"]) + "\n")
    ep = first_epoch(mx.io.ImageDetRecordIter(path_imglist=lst8, label_width=8, **common))
    facts["imglist_width"] = [(l.tolist(), p) for (_, l, p) in ep]
    # random crops and pads: boxes stay inside [0, 1] and keep their colour
    rand = {}
    for k, kw in {
        "crop": dict(rand_crop_prob=0.5, min_crop_scales=0.3, max_crop_scales=1.0,
                     min_crop_aspect_ratios=0.5, max_crop_aspect_ratios=2.0),
        "crop_overlap": dict(rand_crop_prob=1.0, num_crop_sampler=2, min_crop_scales=(0.3, 0.5),
                             max_crop_scales=(0.9, 1.0), min_crop_overlaps=(0.3, 0.5),
                             max_crop_trials=(20, 30), crop_emit_mode="overlap",
                             emit_overlap_thresh=0.4),
        "pad": dict(rand_pad_prob=0.5, max_pad_scale=3.0, fill_value=0),
        "all": dict(rand_crop_prob=0.7, rand_pad_prob=0.5, max_pad_scale=2.0, rand_mirror_prob=0.5,
                    min_crop_scales=0.5),
    }.items():
        it = mx.io.ImageDetRecordIter(path_imgrec=rec5, data_shape=(3, 32, 32), batch_size=6,
                                      preprocess_threads=1, seed=2, **kw)
        changed, total, bad_boxes, colour_ok, colour_all, n_boxes = 0, 0, 0, 0, 0, []
        for _ in range(25):
            for b in it:
                data, label = b.data[0].asnumpy(), b.label[0].asnumpy()
                for i in range(data.shape[0]):
                    n = int(label[i, 3])
                    raw = label[i, 4:4 + n]
                    boxes = raw[2:].reshape(-1, 5)
                    n_boxes.append(len(boxes))
                    total += 1
                    for (_, l, t, r, bt) in boxes:
                        if not (0 <= l < r <= 1 and 0 <= t < bt <= 1):
                            bad_boxes += 1
                        cy, cx = int((t + bt) / 2 * 32), int((l + r) / 2 * 32)
                        colour_all += 1
                        colour_ok += int(data[i, 0, min(cy, 31), min(cx, 31)] > 150)
            it.reset()
        rand[k] = dict(bad_boxes=bad_boxes, colour_ok=colour_ok, colour_all=colour_all,
                       mean_boxes=float(np.mean(n_boxes)), total=total)
    # how often each augmenter fires: the label rows that differ from the unaugmented ones
    plain = mx.io.ImageDetRecordIter(path_imgrec=rec5, data_shape=(3, 32, 32), batch_size=6)
    base = next(iter(plain)).label[0].asnumpy()
    for k, kw in {"p_crop": dict(rand_crop_prob=0.3, min_crop_scales=0.5),
                  "p_pad": dict(rand_pad_prob=0.6, max_pad_scale=2.0),
                  "p_mirror": dict(rand_mirror_prob=0.25)}.items():
        it = mx.io.ImageDetRecordIter(path_imgrec=rec5, data_shape=(3, 32, 32), batch_size=6,
                                      seed=1, **kw)
        hits, n = 0, 0
        for _ in range(40):
            lab = next(iter(it)).label[0].asnumpy()
            hits += int((np.abs(lab - base).max(axis=1) > 1e-6).sum())
            n += lab.shape[0]
            it.reset()
        rand[k] = hits / n
    facts["random"] = rand
    errors = {}
    for k, kw in {"pad_too_small": dict(label_pad_width=5),
                  "label_width": dict(label_width=3),
                  "bad_scales": dict(min_crop_scales=0.8, max_crop_scales=0.5, rand_crop_prob=1)}.items():
        try:
            it = mx.io.ImageDetRecordIter(path_imgrec=rec5, data_shape=(3, 16, 16), batch_size=2, **kw)
            next(iter(it))
            errors[k] = None
        except Exception as e:  # noqa: BLE001
            errors[k] = error_text(e)
    facts["errors"] = errors
    np.savez(os.path.join(d, "det.npz"), **out)
    return facts


def per_image_change(base, data):
    """Per image: the mean pixel change from `base` and the mean absolute change."""
    diff = data.astype(np.float64) - base.astype(np.float64)
    return diff.mean(axis=(1, 2, 3)), np.abs(diff).mean(axis=(1, 2, 3))


def summary(values):
    v = np.asarray(values, dtype=np.float64)
    return dict(mean=float(v.mean()), std=float(v.std()), n=int(v.size),
                zero=float((np.abs(v) < 1e-6).mean()))


def colour(d):
    rec = os.path.join(d, "col.rec")
    # sizes with whole-number shrink factors (area's block average) and others
    sizes = [(24, 20), (20, 28), (17, 23), (32, 32), (21, 19), (26, 22)]
    write_rec(rec, sizes)
    out, facts = {}, {}
    common = dict(path_imgrec=rec, batch_size=3, preprocess_threads=2)
    runs = {
        # random_h/s/l of 1 draw offsets of 0: the HLS round trip alone
        "hls_round_trip": dict(data_shape=(3, 16, 16), random_h=1, random_s=1, random_l=1),
        "cubic_resize": dict(data_shape=(3, 16, 16), resize=18, inter_method=2),
        "cubic_grow": dict(data_shape=(3, 30, 30), inter_method=2),
        "lanczos_resize": dict(data_shape=(3, 16, 16), resize=18, inter_method=4),
        "lanczos_grow": dict(data_shape=(3, 30, 30), inter_method=4),
        "area_shrink": dict(data_shape=(3, 12, 12), resize=13, inter_method=3),
        "area_quarter": dict(data_shape=(3, 8, 8), resize=8, inter_method=3),
        "area_grow": dict(data_shape=(3, 30, 30), inter_method=3),
        "auto_grow": dict(data_shape=(3, 30, 30), inter_method=9),
        "cubic_affine": dict(data_shape=(3, 16, 16), rotate=30, inter_method=2),
        "lanczos_affine": dict(data_shape=(3, 16, 16), rotate=50, fill_value=40, inter_method=4),
        "lanczos_scale": dict(data_shape=(3, 14, 14), min_random_scale=0.8, max_random_scale=0.8,
                              inter_method=4),
        "cubic_crop": dict(data_shape=(3, 12, 12), max_crop_size=15, min_crop_size=15,
                           inter_method=2),
    }
    for k, kw in runs.items():
        args = dict(common)
        args.update(kw)
        ep = first_epoch(mx.io.ImageRecordIter(**args))
        facts[k] = [(l.tolist(), p) for (_, l, p) in ep]
        for b, (data, _, _) in enumerate(ep):
            out[f"{k}_{b}"] = data
    # random HSL offsets on 64 images: per image the mean and mean absolute change
    many = os.path.join(d, "many.rec")
    write_rec(many, [(20, 20)] * 64)
    shape = dict(path_imgrec=many, data_shape=(3, 20, 20), batch_size=16, seed=5)
    base = np.concatenate([x for (x, _, _) in first_epoch(mx.io.ImageRecordIter(**shape))])
    stats = {}
    for k, kw in {"l": dict(random_l=60), "s": dict(random_s=80), "h": dict(random_h=40)}.items():
        data = np.concatenate([x for (x, _, _) in first_epoch(mx.io.ImageRecordIter(**shape, **kw))])
        mean, mad = per_image_change(base, data)
        stats[k] = dict(mean=summary(mean), mad=summary(mad))
    # the detection iterator's colour augmenters
    many_det = os.path.join(d, "many_det.rec")
    w = recordio.MXRecordIO(many_det, "w")
    for i in range(64):
        lab = det_label([(1, 0.1, 0.2, 0.6, 0.7)])
        w.write(recordio.pack(recordio.IRHeader(0, lab, i, 0), png_bytes(picture(20, 20, 30 + i))))
    w.close()
    dshape = dict(path_imgrec=many_det, data_shape=(3, 20, 20), batch_size=16, seed=5)
    dbase = np.concatenate([b.data[0].asnumpy() for b in mx.io.ImageDetRecordIter(**dshape)])
    for k, kw in {
        "det_illumination": dict(max_random_illumination=50, random_illumination_prob=1.0),
        "det_saturation": dict(max_random_saturation=80, random_saturation_prob=1.0),
        "det_hue_half": dict(max_random_hue=30, random_hue_prob=0.5),
        "det_contrast": dict(max_random_contrast=0.4, random_contrast_prob=1.0),
    }.items():
        data = np.concatenate([b.data[0].asnumpy()
                               for b in mx.io.ImageDetRecordIter(**dshape, **kw)])
        mean, mad = per_image_change(dbase, data)
        ratio = data.mean(axis=(1, 2, 3)) / dbase.mean(axis=(1, 2, 3))
        stats[k] = dict(mean=summary(mean), mad=summary(mad), ratio=summary(ratio))
    facts["random"] = stats
    # the detection iterator's mean image: computed and saved, then loaded; and gray with HSL
    det = os.path.join(d, "det.rec")
    w = recordio.MXRecordIO(det, "w")
    for i, (h, wd) in enumerate(sizes):
        lab = det_label([(1, 0.1, 0.2, 0.6, 0.7)])
        w.write(recordio.pack(recordio.IRHeader(0, lab, i, 0), png_bytes(picture(h, wd, 50 + i))))
    w.close()
    mean = os.path.join(d, "det_mean.nd")
    dcommon = dict(path_imgrec=det, data_shape=(3, 16, 16), batch_size=3, preprocess_threads=2)
    ep = first_epoch(mx.io.ImageDetRecordIter(mean_img=mean, scale=0.5, **dcommon))
    out["det_mean_saved"] = mx.nd.load(mean)["mean_img"].asnumpy()
    for b, (data, _, _) in enumerate(ep):
        out[f"det_mean_computed_{b}"] = data
    ep = first_epoch(mx.io.ImageDetRecordIter(mean_img=mean, std_r=2, std_g=3, std_b=4,
                                              **dcommon))
    for b, (data, _, _) in enumerate(ep):
        out[f"det_mean_loaded_{b}"] = data
    for k, kw in {"det_cubic": dict(inter_method=2), "det_lanczos": dict(inter_method=4),
                  "det_area": dict(inter_method=3, data_shape=(3, 10, 10))}.items():
        args = dict(dcommon)
        args.update(kw)
        for b, (data, _, _) in enumerate(first_epoch(mx.io.ImageDetRecordIter(**args))):
            out[f"{k}_{b}"] = data
    np.savez(os.path.join(d, "colour.npz"), **out)
    return facts


if __name__ == "__main__":
    mode, d = sys.argv[1], sys.argv[2]
    print(json.dumps({"affine": affine, "lists": lists, "det": det, "colour": colour}[mode](d)))
