//! `ImageRecordIter` (and its `uint8` and `int8` forms): images packed in a RecordIO file
//! (`mx.recordio.pack` headers), decoded, augmented and laid out as NCHW batches.
//!
//! The source reads the records of its part of the file (`num_parts`, `part_index`: byte
//! ranges aligned to record starts, as dmlc's splitter cuts them) in chunks of `batch_size`
//! records, shuffles a chunk when `shuffle` is set (with `path_imgidx`: the whole part, every
//! epoch), and decodes and augments a chunk's images on `preprocess_threads` threads. The
//! batching rules (`round_batch`, pads, the next epoch continuing after a wrap) are
//! [`BatchLoader`](super::batch::BatchLoader)'s. Augmentation follows MXNet's default augmenter
//! in its order: `resize` of the shorter edge, `pad`, `random_resized_crop` or a square crop of
//! `min_crop_size..max_crop_size`, otherwise a centre (or `rand_crop` random) crop of
//! `data_shape` after enlarging a smaller image; then brightness, contrast and saturation,
//! `pca_noise`, the mirror, and `(pixel - mean) * scale / std` (random contrast and
//! illumination included). The affine augmenter (`max_rotate_angle`, `rotate`, `rotate_list`,
//! `max_shear_ratio`, `min/max_random_scale`, `max_aspect_ratio`, `min/max_img_size`) warps
//! after the resize and before `pad`, as OpenCV's `warpAffine` with a constant border of
//! `fill_value`. `mean_img` is loaded (an MXNet NDArray file) or computed over the part and
//! saved; `path_imglist` gives labels by record id. `ImageDetRecordIter` shares this source
//! with its own augmenter and label rows ([`image_det`](super::image_det)). `random_h`,
//! `random_s` and `random_l` shift hue, saturation and lightness in OpenCV's 8-bit HLS after the
//! colour jitter; `inter_method` takes OpenCV's five methods (nearest, bilinear, bicubic, area,
//! Lanczos) and MXNet's 9 and 10, in resizes and in the affine warp.

use super::batch::{BatchLoader, DenseSource};
use super::params::Params;
use super::recordio::{self, RecordReader};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::imgproc::{self as img, Image};
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};

/// The augmentation and layout settings of one iterator.
#[derive(Clone, Debug)]
struct Aug {
    /// `(c, h, w)`.
    shape: [usize; 3],
    dtype: DType,
    label_width: usize,
    resize: i64,
    interp: i64,
    /// Whether the affine augmenter runs (any of its settings away from its default).
    affine: bool,
    max_rotate_angle: i64,
    rotate: i64,
    rotate_list: Vec<i64>,
    max_shear: f32,
    min_scale: f32,
    max_scale: f32,
    max_img: f32,
    min_img: f32,
    pad: usize,
    fill_value: u8,
    rand_crop: bool,
    random_resized_crop: bool,
    min_area: f32,
    max_area: f32,
    min_ratio: f32,
    max_ratio: f32,
    min_crop: i64,
    max_crop: i64,
    brightness: f32,
    contrast: f32,
    saturation: f32,
    pca_noise: f32,
    /// `random_h`, `random_s`, `random_l`: the HSL augmenter's ranges.
    random_hls: [i64; 3],
    mirror: bool,
    rand_mirror: bool,
    mean: [f32; 4],
    std: [f32; 4],
    scale: f32,
    max_random_contrast: f32,
    max_random_illumination: f32,
    /// The mean image (`mean_img`), CHW, once loaded or computed.
    mean_img: Option<std::sync::Arc<Vec<f32>>>,
    /// Labels by record id (`path_imglist`).
    label_map: Option<std::sync::Arc<std::collections::HashMap<u64, Vec<f32>>>>,
}

impl Aug {
    /// Whether the augmenter only crops (centred or at random) and mirrors: then an image at
    /// least `data_shape` large is laid out straight from the decoder's RGB pixels, a window
    /// of them, with no copy or channel swap in between.
    fn crop_only(&self) -> bool {
        self.resize <= 0
            && !self.affine
            && self.pad == 0
            && !self.random_resized_crop
            && self.max_crop == -1
            && self.min_crop == -1
            && self.brightness <= 0.0
            && self.contrast <= 0.0
            && self.saturation <= 0.0
            && self.random_hls.iter().all(|&v| v == 0)
            && self.pca_noise <= 0.0
    }

    fn new(p: &Params, dtype: DType) -> Result<Aug> {
        let shape = p.shape("data_shape", None)?;
        if shape.len() != 3 {
            return Err(Error::invalid(format!(
                "data_shape must have 3 dimensions (channels, height, width), got {shape:?}"
            )));
        }
        if shape[0] != 1 && shape[0] != 3 {
            return Err(Error::invalid(format!(
                "Invalid output shape {shape:?} (mxrt decodes 1 or 3 channels)"
            )));
        }
        let f = |k: &str, d: f64| -> Result<f32> { Ok(float(p, k, d)? as f32) };
        let random_resized_crop = p.bool("random_resized_crop", false)?;
        let max_aspect = f("max_aspect_ratio", 0.0)?;
        let (min_ratio, max_ratio) = match p.get("min_aspect_ratio") {
            Some(v) if v != "None" => (
                v.parse::<f32>().map_err(|_| {
                    Error::invalid(format!(
                        "Invalid Parameter format for min_aspect_ratio expect float but value='{v}'"
                    ))
                })?,
                max_aspect,
            ),
            _ => (1.0 - max_aspect, 1.0 + max_aspect),
        };
        let (min_scale, max_scale) = (f("min_random_scale", 1.0)?, f("max_random_scale", 1.0)?);
        let max_rotate_angle = p.int("max_rotate_angle", Some(0))?;
        let rotate = p.int("rotate", Some(-1))?;
        let rotate_list = p.get("rotate_list").map(rotate_list).unwrap_or_default();
        let max_shear = f("max_shear_ratio", 0.0)?;
        let (max_img, min_img) = (f("max_img_size", 1e10)?, f("min_img_size", 0.0)?);
        let affine = max_rotate_angle > 0
            || max_shear > 0.0
            || rotate > 0
            || !rotate_list.is_empty()
            || max_scale != 1.0
            || min_scale != 1.0
            || (!random_resized_crop && (min_ratio != 1.0 || max_ratio != 1.0))
            || max_img != 1e10
            || min_img != 0.0;
        let rand_crop = p.bool("rand_crop", false)?;
        let (min_crop, max_crop) = (
            p.int("min_crop_size", Some(-1))?,
            p.int("max_crop_size", Some(-1))?,
        );
        if random_resized_crop
            && (min_scale != 1.0
                || max_scale != 1.0
                || min_crop != -1
                || max_crop != -1
                || rand_crop)
        {
            return Err(Error::invalid(format!(
                "Setting random_resized_crop to true conflicts with min_random_scale, \
                 max_random_scale, min_crop_size, max_crop_size, and rand_crop."
            )));
        }
        let interp = p.int("inter_method", Some(1))?;
        if !matches!(interp, 0..=4 | 9 | 10) {
            return Err(Error::invalid(format!(
                "invalid inter_method: valid value 0,1,2,3,9,10 (got {interp})"
            )));
        }
        if affine && interp == img::INTER_NEAREST {
            return Err(Error::invalid(
                "invalid inter_method: valid value 0,1,2,3,9,10 (the affine augmenters take \
                 1, 2, 3, 4, 9 or 10)",
            ));
        }
        let fill = p.int("fill_value", Some(255))?;
        let pad = p.int("pad", Some(0))?;
        let label_width = p.int_at_least("label_width", Some(1), 1)? as usize;
        Ok(Aug {
            shape: [shape[0] as usize, shape[1] as usize, shape[2] as usize],
            dtype,
            label_width,
            resize: p.int("resize", Some(-1))?,
            interp,
            affine,
            max_rotate_angle,
            rotate,
            rotate_list,
            max_shear,
            min_scale,
            max_scale,
            max_img,
            min_img,
            pad: pad.max(0) as usize,
            fill_value: fill.clamp(0, 255) as u8,
            rand_crop,
            random_resized_crop,
            min_area: f("min_random_area", 1.0)?,
            max_area: f("max_random_area", 1.0)?,
            min_ratio,
            max_ratio,
            min_crop,
            max_crop,
            brightness: f("brightness", 0.0)?,
            contrast: f("contrast", 0.0)?,
            saturation: f("saturation", 0.0)?,
            pca_noise: f("pca_noise", 0.0)?,
            random_hls: [
                p.int("random_h", Some(0))?,
                p.int("random_s", Some(0))?,
                p.int("random_l", Some(0))?,
            ],
            mirror: p.bool("mirror", false)?,
            rand_mirror: p.bool("rand_mirror", false)?,
            mean: [
                f("mean_r", 0.0)?,
                f("mean_g", 0.0)?,
                f("mean_b", 0.0)?,
                f("mean_a", 0.0)?,
            ],
            std: [
                f("std_r", 1.0)?,
                f("std_g", 1.0)?,
                f("std_b", 1.0)?,
                f("std_a", 1.0)?,
            ],
            scale: f("scale", 1.0)?,
            max_random_contrast: f("max_random_contrast", 0.0)?,
            max_random_illumination: f("max_random_illumination", 0.0)?,
            mean_img: None,
            label_map: None,
        })
    }
}

fn float(p: &Params, key: &str, default: f64) -> Result<f64> {
    match p.get(key) {
        None => Ok(default),
        Some(v) => v.parse::<f64>().map_err(|_| {
            Error::invalid(format!(
                "Invalid Parameter format for {key} expect float but value='{v}'"
            ))
        }),
    }
}

/// `rotate_list` as MXNet reads it: comma-separated pieces, each through C's `atoi`.
fn rotate_list(v: &str) -> Vec<i64> {
    if v.is_empty() {
        return Vec::new();
    }
    v.split(',')
        .map(|piece| {
            let t = piece.trim_start();
            let (neg, digits) = match t.as_bytes().first() {
                Some(b'-') => (true, &t[1..]),
                Some(b'+') => (false, &t[1..]),
                _ => (false, t),
            };
            let n: i64 = digits
                .bytes()
                .take_while(u8::is_ascii_digit)
                .fold(0i64, |acc, d| {
                    acc.saturating_mul(10).saturating_add((d - b'0') as i64)
                });
            if neg { -n } else { n }
        })
        .collect()
}

/// MXNet's `GetInterMethod`: 9 picks bicubic to enlarge, area to shrink and bilinear
/// otherwise; 10 a uniform choice of 0..=4.
pub(super) fn inter_method(m: i64, ow: f32, oh: f32, nw: f32, nh: f32, r: &mut ChaCha8Rng) -> i64 {
    match m {
        9 if nw > ow && nh > oh => 2,
        9 if nw < ow && nh < oh => 3,
        9 => 1,
        10 => int_in(r, 0, 4),
        m => m,
    }
}

/// A resize with the method MXNet's augmenter resolves.
fn resized_by(src: &Image, h: usize, w: usize, a: &Aug, r: &mut ChaCha8Rng) -> Result<Image> {
    let m = inter_method(a.interp, src.w as f32, src.h as f32, w as f32, h as f32, r);
    resized_with(src, h, w, m)
}

/// A resize with a resolved method (OpenCV's 0 nearest, 1 bilinear, 2 bicubic, 3 area, 4
/// Lanczos).
pub(super) fn resized_with(src: &Image, h: usize, w: usize, m: i64) -> Result<Image> {
    resized(src, h, w, m)
}

/// MXNet's affine augmenter: shear, rotation, scale and aspect ratio in one matrix, warped
/// into `scale * size` clamped to `[min_img_size, max_img_size]` with a constant border.
fn affine(a: &Aug, res: &Image, r: &mut ChaCha8Rng) -> Result<Image> {
    let s = unit(r) * a.max_shear * 2.0 - a.max_shear;
    let mut angle = int_in(r, -a.max_rotate_angle, a.max_rotate_angle);
    if a.rotate > 0 {
        angle = a.rotate;
    }
    if !a.rotate_list.is_empty() {
        angle = a.rotate_list[int_in(r, 0, a.rotate_list.len() as i64 - 1) as usize];
    }
    let rad = angle as f64 / 180.0 * std::f64::consts::PI;
    let (ca, sb) = (rad.cos() as f32, rad.sin() as f32);
    let (mut scale, mut ratio) = (1.0f32, 1.0f32);
    if !a.random_resized_crop {
        scale = unit(r) * (a.max_scale - a.min_scale) + a.min_scale;
        ratio = unit(r) * (a.max_ratio - a.min_ratio) + a.min_ratio;
    }
    let hs = 2.0 * scale / (1.0 + ratio);
    let ws = ratio * hs;
    let (cols, rows) = (res.w as f32, res.h as f32);
    let nw = a.min_img.max(a.max_img.min(scale * cols));
    let nh = a.min_img.max(a.max_img.min(scale * rows));
    let m00 = hs * ca - s * sb * ws;
    let m10 = -sb * ws;
    let m01 = hs * sb + s * ca * ws;
    let m11 = ca * ws;
    let cw = m00 * cols + m01 * rows;
    let ch = m10 * cols + m11 * rows;
    let m = [m00, m01, (nw - cw) / 2.0, m10, m11, (nh - ch) / 2.0];
    let method = inter_method(a.interp, cols, rows, nw, nh, r);
    // cv::Size truncates the float sizes
    let (w, h) = (nw as i64, nh as i64);
    if w <= 0 || h <= 0 || w as usize > img::MAX_SIDE || h as usize > img::MAX_SIDE {
        return Err(Error::invalid(format!(
            "ImageRecordIter: the affine augmenter's output size {w}x{h} is out of range"
        )));
    }
    Ok(img::warp_affine(
        res,
        m,
        h as usize,
        w as usize,
        method,
        a.fill_value,
    ))
}

/// A uniform float in `[0, 1)`.
pub(super) fn unit(r: &mut ChaCha8Rng) -> f32 {
    (r.next_u32() >> 8) as f32 / (1u32 << 24) as f32
}
/// A uniform integer in `[lo, hi]`.
pub(super) fn int_in(r: &mut ChaCha8Rng, lo: i64, hi: i64) -> i64 {
    if hi <= lo {
        return lo;
    }
    lo + (r.next_u64() % (hi - lo + 1) as u64) as i64
}
fn normal(r: &mut ChaCha8Rng) -> f32 {
    let u1 = 1.0 - unit(r) as f64;
    let u2 = unit(r) as f64;
    ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
}

fn resized(src: &Image, h: usize, w: usize, interp: i64) -> Result<Image> {
    let mut data = vec![0u8; h * w * src.c];
    img::resize(&src.data, src.h, src.w, src.c, &mut data, h, w, interp)?;
    Ok(Image {
        h,
        w,
        c: src.c,
        data,
    })
}

pub(super) fn cropped(src: &Image, x: usize, y: usize, w: usize, h: usize) -> Image {
    let c = src.c;
    let mut data = Vec::with_capacity(h * w * c);
    for row in y..y + h {
        let at = (row * src.w + x) * c;
        data.extend_from_slice(&src.data[at..at + w * c]);
    }
    Image { h, w, c, data }
}

/// OpenCV's `saturate_cast<uchar>` of a float.
fn sat_u8(v: f32) -> u8 {
    v.round_ties_even().clamp(0.0, 255.0) as u8
}

/// OpenCV's 8-bit RGB-to-gray (applied, as MXNet does, to BGR data).
fn gray_of(im: &Image) -> Vec<u8> {
    im.data
        .chunks_exact(3)
        .map(|p| {
            ((p[0] as u32 * 4899 + p[1] as u32 * 9617 + p[2] as u32 * 1868 + (1 << 13)) >> 14) as u8
        })
        .collect()
}

/// Runs the default augmenter on a decoded (BGR or gray) image.
fn augment(a: &Aug, mut res: Image, r: &mut ChaCha8Rng) -> Result<Image> {
    let [_, dh, dw] = a.shape;
    if a.resize > 0 {
        let s = a.resize as usize;
        let (h, w) = if res.h > res.w {
            (s * res.h / res.w, s)
        } else {
            (s, s * res.w / res.h)
        };
        res = resized_by(&res, h.max(1), w.max(1), a, r)?;
    }
    if a.affine {
        res = affine(a, &res, r)?;
    }
    if a.pad > 0 {
        let p = a.pad;
        let (h, w, c) = (res.h + 2 * p, res.w + 2 * p, res.c);
        let mut data = vec![a.fill_value; h * w * c];
        for y in 0..res.h {
            let to = ((y + p) * w + p) * c;
            data[to..to + res.w * c].copy_from_slice(&res.data[y * res.w * c..(y + 1) * res.w * c]);
        }
        res = Image { h, w, c, data };
    }
    let mut done = false;
    if a.random_resized_crop {
        if a.max_area != 1.0 || a.min_area != 1.0 || a.max_ratio != 1.0 || a.min_ratio != 1.0 {
            if !(a.min_ratio > 0.0 && a.min_area <= a.max_area && a.min_ratio <= a.max_ratio) {
                return Err(Error::invalid(
                    "ImageRecordIter: random_resized_crop needs 0 < min_aspect_ratio <= \
                     max_aspect_ratio and min_random_area <= max_random_area",
                ));
            }
            let area = (res.h * res.w) as f32;
            for _ in 0..10 {
                let ra = a.min_area + (a.max_area - a.min_area) * unit(r);
                let ratio = a.min_ratio + (a.max_ratio - a.min_ratio) * unit(r);
                let target = area * ra;
                let mut ya = (target / ratio).sqrt().round() as usize;
                let mut xa = (target * ratio).sqrt().round() as usize;
                if unit(r) > 0.5 {
                    std::mem::swap(&mut ya, &mut xa);
                }
                if ya >= 1 && xa >= 1 && ya <= res.h && xa <= res.w {
                    let y = int_in(r, 0, (res.h - ya) as i64) as usize;
                    let x = int_in(r, 0, (res.w - xa) as i64) as usize;
                    let m = inter_method(a.interp, xa as f32, ya as f32, dw as f32, dh as f32, r);
                    res = resized_with(&cropped(&res, x, y, xa, ya), dh, dw, m)?;
                    done = true;
                    break;
                }
            }
        }
    } else if a.max_crop != -1 || a.min_crop != -1 {
        if !(res.w as i64 >= a.max_crop && res.h as i64 >= a.max_crop && a.max_crop >= a.min_crop)
            || a.min_crop < 1
        {
            return Err(Error::invalid(
                "ImageRecordIter: input image size smaller than max_crop_size",
            ));
        }
        let size = int_in(r, a.min_crop, a.max_crop) as usize;
        let (mut y, mut x) = (res.h - size, res.w - size);
        if a.rand_crop {
            y = int_in(r, 0, y as i64) as usize;
            x = int_in(r, 0, x as i64) as usize;
        } else {
            y /= 2;
            x /= 2;
        }
        let (sz, (fw, fh)) = (size as f32, (dw as f32, dh as f32));
        let m = inter_method(a.interp, sz, sz, fw, fh, r);
        res = resized_with(&cropped(&res, x, y, size, size), dh, dw, m)?;
        done = true;
    }
    if !done {
        let m = inter_method(
            a.interp,
            res.w as f32,
            res.h as f32,
            dw as f32,
            dh as f32,
            r,
        );
        if res.h < dh {
            let cols = (dh as f32 / res.h as f32 * res.w as f32) as usize;
            res = resized_with(&res, dh, cols.max(1), m)?;
        }
        if res.w < dw {
            let rows = (dw as f32 / res.w as f32 * res.h as f32) as usize;
            res = resized_with(&res, rows.max(1), dw, m)?;
        }
        if res.h < dh || res.w < dw {
            return Err(Error::invalid(
                "ImageRecordIter: input image size smaller than input shape",
            ));
        }
        let (mut y, mut x) = (res.h - dh, res.w - dw);
        if a.rand_crop {
            y = int_in(r, 0, y as i64) as usize;
            x = int_in(r, 0, x as i64) as usize;
        } else {
            y /= 2;
            x /= 2;
        }
        if (x, y, dw, dh) != (0, 0, res.w, res.h) {
            res = cropped(&res, x, y, dw, dh);
        }
    }
    if a.brightness > 0.0 || a.contrast > 0.0 || a.saturation > 0.0 {
        let ab = 1.0 + (unit(r) * 2.0 - 1.0) * a.brightness;
        let ac = 1.0 + (unit(r) * 2.0 - 1.0) * a.contrast;
        let asat = 1.0 + (unit(r) * 2.0 - 1.0) * a.saturation;
        let mut order = [0usize, 1, 2];
        for i in (1..3).rev() {
            order.swap(i, int_in(r, 0, i as i64) as usize);
        }
        for step in order {
            match step {
                0 => res
                    .data
                    .iter_mut()
                    .for_each(|v| *v = sat_u8(*v as f32 * ab)),
                1 if res.c == 3 => {
                    let g = gray_of(&res);
                    let mean = g.iter().map(|&v| v as f64).sum::<f64>() / g.len().max(1) as f64;
                    let beta = (1.0 - ac) * mean as f32;
                    res.data
                        .iter_mut()
                        .for_each(|v| *v = sat_u8(*v as f32 * ac + beta));
                }
                2 if res.c == 3 => {
                    let g = gray_of(&res);
                    for (p, &gv) in res.data.chunks_exact_mut(3).zip(&g) {
                        for v in p {
                            *v = sat_u8(*v as f32 * asat + gv as f32 * (1.0 - asat));
                        }
                    }
                }
                _ => {}
            }
        }
    }
    if a.random_hls.iter().any(|&v| v != 0) {
        // (1 + 4) uniforms over 5: a rough bell over [0, 1) that keeps extreme offsets rare
        let mut off = [0i32; 3];
        for (o, &range) in off.iter_mut().zip(&a.random_hls) {
            let x = (unit(r) + 4.0 * unit(r)) / 5.0;
            *o = (x * range as f32 * 2.0 - range as f32) as i32;
        }
        if res.c != 3 {
            return Err(Error::invalid(
                "ImageRecordIter: random_h, random_s and random_l need 3-channel images",
            ));
        }
        // drawn as hue, saturation, lightness; HLS pixels take them as hue, lightness, saturation
        let [h, s, l] = off;
        img::shift_hls(&mut res.data, h, l, s);
    }
    if a.pca_noise > 0.0 && res.c == 3 {
        const EIG: [[f32; 3]; 3] = [
            [55.46 * -0.5675, 4.794 * 0.7192, 1.148 * 0.4009],
            [55.46 * -0.5808, 4.794 * -0.0045, 1.148 * -0.8140],
            [55.46 * -0.5836, 4.794 * -0.6948, 1.148 * 0.4203],
        ];
        let al = [
            normal(r) * a.pca_noise,
            normal(r) * a.pca_noise,
            normal(r) * a.pca_noise,
        ];
        let mix = |e: &[f32; 3]| e[0] * al[0] + e[1] * al[1] + e[2] * al[2];
        // the image is BGR
        let pca = [mix(&EIG[2]), mix(&EIG[1]), mix(&EIG[0])];
        for p in res.data.chunks_exact_mut(3) {
            for k in 0..3 {
                p[k] = ((p[k] as f32 + pca[k]) as i32).clamp(0, 255) as u8;
            }
        }
    }
    Ok(res)
}

/// A window of an interleaved 8-bit image: rows of `stride` pixels, `c` channels each, in BGR
/// order (`rgb` false, the augmenters' order) or RGB.
struct View<'a> {
    data: &'a [u8],
    stride: usize,
    x: usize,
    y: usize,
    h: usize,
    w: usize,
    c: usize,
    rgb: bool,
}

impl<'a> View<'a> {
    fn whole(im: &'a Image) -> View<'a> {
        View {
            data: &im.data,
            stride: im.w,
            x: 0,
            y: 0,
            h: im.h,
            w: im.w,
            c: im.c,
            rgb: false,
        }
    }

    /// Row `y` of the window: `w * c` bytes.
    fn row(&self, y: usize) -> &'a [u8] {
        let at = ((self.y + y) * self.stride + self.x) * self.c;
        &self.data[at..at + self.w * self.c]
    }
}

/// Writes an augmented image into one instance's bytes (CHW in the output dtype, channels
/// from BGR to RGB, mirrored and normalised as MXNet's `ProcessImage`).
fn lay_out(a: &Aug, v: &View, r: &mut ChaCha8Rng, out: &mut [u8]) {
    let mirrored = (a.rand_mirror && unit(r) < 0.5) || a.mirror;
    let (mut mult, mut bias) = ([0f32; 4], [0f32; 4]);
    if a.dtype == DType::F32 {
        let cs = (unit(r) * a.max_random_contrast * 2.0 - a.max_random_contrast + 1.0) * a.scale;
        let is = (unit(r) * a.max_random_illumination * 2.0 - a.max_random_illumination) * a.scale;
        for k in 0..4 {
            mult[k] = cs / a.std[k];
            bias[k] = is / a.std[k];
        }
    }
    let (c, h, w) = (v.c, v.h, v.w);
    let plane = h * w;
    // the source channel of output channel k (the output is RGB)
    let src_of = |k: usize| if c == 3 && !v.rgb { 2 - k } else { k };
    if a.dtype == DType::F32 && a.mean_img.is_none() && c == 3 {
        let ch = [src_of(0), src_of(1), src_of(2)];
        let mean = [a.mean[0], a.mean[1], a.mean[2]];
        let (mult, bias) = ([mult[0], mult[1], mult[2]], [bias[0], bias[1], bias[2]]);
        let (p0, rest) = out[..3 * plane * 4].split_at_mut(plane * 4);
        let (p1, p2) = rest.split_at_mut(plane * 4);
        for y in 0..h {
            let o = y * w * 4..(y + 1) * w * 4;
            let planes = [&mut p0[o.clone()], &mut p1[o.clone()], &mut p2[o]];
            rgb_row_f32(v.row(y), ch, mean, mult, bias, mirrored, planes);
        }
        return;
    }
    let col = |x: usize| if mirrored { w - 1 - x } else { x };
    for k in 0..c {
        let src_k = src_of(k);
        let mean_int = a.mean[k].round() as i32;
        let mean_plane = a.mean_img.as_ref().map(|m| &m[k * plane..(k + 1) * plane]);
        for y in 0..h {
            let row = v.row(y);
            let px = row.iter().skip(src_k).step_by(c);
            let base = k * plane + y * w;
            match a.dtype {
                DType::U8 => {
                    let o = &mut out[base..base + w];
                    for (x, &v) in px.enumerate() {
                        o[col(x)] = v;
                    }
                }
                DType::I8 => {
                    let o = &mut out[base..base + w];
                    for (x, &v) in px.enumerate() {
                        let m = match mean_plane {
                            Some(mp) => mp[y * w + x].round() as i32,
                            None => mean_int,
                        };
                        o[col(x)] = ((v as i32 - m).clamp(-128, 127) as i8) as u8;
                    }
                }
                _ => {
                    let o = &mut out[base * 4..(base + w) * 4];
                    let (m, mu, b) = (a.mean[k], mult[k], bias[k]);
                    for (x, &v) in px.enumerate() {
                        let m = mean_plane.map_or(m, |mp| mp[y * w + x]);
                        let f = (v as f32 - m) * mu + b;
                        let at = col(x) * 4;
                        o[at..at + 4].copy_from_slice(&f.to_le_bytes());
                    }
                }
            }
        }
    }
}

/// One row of a 3-channel image into its three float32 output rows (little-endian bytes):
/// `out[k][x] = (src[x][ch[k]] - mean[k]) * mult[k] + bias[k]`, the row reversed when
/// `mirrored`. Compiled for AVX-512 where the CPU has it.
fn rgb_row_f32(
    src: &[u8],
    ch: [usize; 3],
    mean: [f32; 3],
    mult: [f32; 3],
    bias: [f32; 3],
    mirrored: bool,
    out: [&mut [u8]; 3],
) {
    let w = src.len() / 3;
    assert!(out.iter().all(|o| o.len() == w * 4) && ch.iter().all(|&k| k < 3));
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
    {
        // SAFETY: the CPU has AVX-512F and BW (checked just above); the lengths were checked.
        return unsafe { rgb_row_f32_avx512(src, ch, mean, mult, bias, mirrored, out) };
    }
    rgb_row_f32_generic(src, ch, mean, mult, bias, mirrored, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
fn rgb_row_f32_avx512(
    src: &[u8],
    ch: [usize; 3],
    mean: [f32; 3],
    mult: [f32; 3],
    bias: [f32; 3],
    mirrored: bool,
    out: [&mut [u8]; 3],
) {
    rgb_row_f32_generic(src, ch, mean, mult, bias, mirrored, out)
}

#[inline(always)]
fn rgb_row_f32_generic(
    src: &[u8],
    ch: [usize; 3],
    mean: [f32; 3],
    mult: [f32; 3],
    bias: [f32; 3],
    mirrored: bool,
    out: [&mut [u8]; 3],
) {
    let w = src.len() / 3;
    let [o0, o1, o2] = out;
    // deinterleave the row first (one pass over the bytes), so each output row is a plain
    // contiguous loop the compiler vectorises
    let mut planes = [[0u8; 256]; 3];
    let mut x0 = 0;
    while x0 < w {
        let n = (w - x0).min(256);
        let [q0, q1, q2] = &mut planes;
        for (((p, d0), d1), d2) in src[x0 * 3..(x0 + n) * 3]
            .chunks_exact(3)
            .zip(&mut q0[..n])
            .zip(&mut q1[..n])
            .zip(&mut q2[..n])
        {
            (*d0, *d1, *d2) = (p[0], p[1], p[2]);
        }
        for (k, o) in [&mut *o0, &mut *o1, &mut *o2].into_iter().enumerate() {
            let (plane, m, mu, b) = (&planes[ch[k]][..n], mean[k], mult[k], bias[k]);
            if mirrored {
                // source x0 + x goes to output w - 1 - (x0 + x)
                let end = (w - x0) * 4;
                let o = &mut o[end - n * 4..end];
                for (d, &v) in o.chunks_exact_mut(4).rev().zip(plane) {
                    d.copy_from_slice(&((v as f32 - m) * mu + b).to_le_bytes());
                }
            } else {
                let o = &mut o[x0 * 4..(x0 + n) * 4];
                for (d, &v) in o.chunks_exact_mut(4).zip(plane) {
                    d.copy_from_slice(&((v as f32 - m) * mu + b).to_le_bytes());
                }
            }
        }
        x0 += n;
    }
}

/// A record's label(s) and image bytes (`mx.recordio.pack`'s header: flag, label, id, id2;
/// `flag` > 0 labels follow).
fn unpack(rec: &[u8], label_width: usize) -> Result<(Vec<f32>, &[u8])> {
    if rec.len() < 24 {
        return Err(Error::format(format!(
            "ImageRecordIter: a record of {} bytes is shorter than its 24-byte header",
            rec.len()
        )));
    }
    let flag = u32::from_le_bytes(rec[0..4].try_into().expect("4 bytes")) as usize;
    let label = f32::from_le_bytes(rec[4..8].try_into().expect("4 bytes"));
    if flag == 0 {
        if label_width != 1 {
            return Err(Error::invalid(
                "ImageRecordIter: label_width must be 1 unless an imglist is provided or the rec \
                 file is packed with multi dimensional label",
            ));
        }
        return Ok((vec![label], &rec[24..]));
    }
    if flag != label_width {
        return Err(Error::invalid(format!(
            "ImageRecordIter: rec file provide {flag}-dimensional label but label_width is set \
             to {label_width}"
        )));
    }
    let end = 24 + 4 * flag;
    if rec.len() < end {
        return Err(Error::format(format!(
            "ImageRecordIter: a record of {} bytes is too short for its {flag} labels",
            rec.len()
        )));
    }
    let labels = rec[24..end]
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
        .collect();
    Ok((labels, &rec[end..]))
}

/// A record's id (the header's first image id) and its image bytes, past any header labels.
fn image_bytes(rec: &[u8]) -> Result<(u64, &[u8])> {
    if rec.len() < 24 {
        return Err(Error::format(format!(
            "ImageRecordIter: a record of {} bytes is shorter than its 24-byte header",
            rec.len()
        )));
    }
    let flag = u32::from_le_bytes(rec[0..4].try_into().expect("4 bytes")) as usize;
    let id = u64::from_le_bytes(rec[8..16].try_into().expect("8 bytes"));
    let end = 24usize.saturating_add(flag.saturating_mul(4));
    if rec.len() < end {
        return Err(Error::format(format!(
            "ImageRecordIter: a record of {} bytes is too short for its {flag} labels",
            rec.len()
        )));
    }
    Ok((id, &rec[end..]))
}

/// An image list (`.lst`): per line an index, then `label_width` labels (MXNet reads them with
/// `atol`/`atof` after whitespace; what follows, the image path, is ignored).
fn read_imglist(
    path: &str,
    label_width: usize,
) -> Result<std::collections::HashMap<u64, Vec<f32>>> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::io(format!(
            "ImageRecordIter: cannot read path_imglist {path}: {e}"
        ))
    })?;
    let mut map = std::collections::HashMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut fields = line.split_whitespace();
        let idx = fields.next().map(c_number).unwrap_or(0.0);
        let mut labels = Vec::with_capacity(label_width);
        for _ in 0..label_width {
            let v = fields.next().ok_or_else(|| {
                Error::format(format!("Bad ImageList format: {path}: line {line:?}"))
            })?;
            labels.push(c_number(v) as f32);
        }
        map.insert(idx.max(0.0) as u64, labels);
    }
    Ok(map)
}

/// The number at the start of `s` as C's `atof` reads it (0 when there is none).
pub(super) fn c_number(s: &str) -> f64 {
    let end = s
        .char_indices()
        .take_while(|&(i, ch)| {
            ch.is_ascii_digit() || ch == '.' || ((ch == '-' || ch == '+') && i == 0) || ch == 'e'
        })
        .map(|(i, ch)| i + ch.len_utf8())
        .last()
        .unwrap_or(0);
    (1..=end)
        .rev()
        .find_map(|k| s[..k].parse::<f64>().ok())
        .unwrap_or(0.0)
}

/// One record made into one instance: data bytes and labels.
fn instance(a: &Aug, rec: &[u8], r: &mut ChaCha8Rng, data: &mut [u8]) -> Result<Vec<f32>> {
    let (labels, bytes) = match &a.label_map {
        None => unpack(rec, a.label_width)?,
        Some(map) => {
            let (id, bytes) = image_bytes(rec)?;
            let labels = map.get(&id).cloned().ok_or_else(|| {
                Error::invalid(format!(
                    "ImageRecordIter: fail to find imagelabel for id {id}"
                ))
            })?;
            (labels, bytes)
        }
    };
    let flag = if a.shape[0] == 1 { 0 } else { 1 };
    let crop_only = a.crop_only();
    let mut im = img::decode(bytes, flag, crop_only)
        .map_err(|e| Error::invalid(format!("ImageRecordIter: {}", e.message())))?;
    let [_, dh, dw] = a.shape;
    if crop_only {
        if im.h >= dh && im.w >= dw {
            // `augment`'s draws, in its order: the method (drawn even though no resize uses
            // it), then the window
            let (ow, oh) = (im.w as f32, im.h as f32);
            inter_method(a.interp, ow, oh, dw as f32, dh as f32, r);
            let (mut y, mut x) = (im.h - dh, im.w - dw);
            if a.rand_crop {
                y = int_in(r, 0, y as i64) as usize;
                x = int_in(r, 0, x as i64) as usize;
            } else {
                y /= 2;
                x /= 2;
            }
            let v = View {
                data: &im.data,
                stride: im.w,
                x,
                y,
                h: dh,
                w: dw,
                c: im.c,
                rgb: true,
            };
            lay_out(a, &v, r, data);
            return Ok(labels);
        }
        // smaller than the shape: the general path, in its BGR order
        if im.c == 3 {
            im.data.chunks_exact_mut(3).for_each(|p| p.swap(0, 2));
        }
    }
    let res = augment(a, im, r)?;
    lay_out(a, &View::whole(&res), r, data);
    Ok(labels)
}

/// The records of one part of a .rec file, in chunks of `batch_size`, decoded in parallel.
pub struct ImageRecordSource {
    aug: Aug,
    reader: RecordReader,
    /// The part's byte range.
    begin: u64,
    end: u64,
    /// With `path_imgidx` and `shuffle`: the part's record offsets, shuffled every epoch.
    offsets: Option<Vec<u64>>,
    at: usize,
    shuffle: bool,
    chunk: usize,
    threads: usize,
    seed: u64,
    seed_aug: Option<u64>,
    epoch: u64,
    /// Records read this epoch.
    serial: u64,
    data_shape: Vec<i64>,
    label_shape: Vec<i64>,
    unit: usize,
    /// `ImageDetRecordIter`'s augmenter, labels and normaliser.
    det: Option<std::sync::Arc<super::image_det::Det>>,
    /// Prepared instances not yet handed out, in order: `ready_labels.len()` instances of
    /// `unit` bytes in `ready_data` (kept across chunks), the next one `ready_at`. A batch
    /// whose slots a whole chunk fills is decoded straight into the batch instead.
    ready_data: Vec<u8>,
    ready_labels: Vec<Vec<f32>>,
    ready_at: usize,
    /// The `preprocess_threads` decoding threads (more than one), alive as long as the
    /// iterator; `None`: the prefetch thread decodes.
    pool: Option<rayon::ThreadPool>,
}

/// dmlc's split of `len` bytes into `n` parts: part `k` starts at `k * step`, `step` rounded up
/// to 4 bytes.
fn part_range(len: u64, n: u64, k: u64) -> (u64, u64) {
    let step = len.div_ceil(n).div_ceil(4) * 4;
    ((step * k).min(len), (step * (k + 1)).min(len))
}

/// The first record start at or after `from` (`len` if none).
fn record_start_from(path: &str, from: u64, len: u64) -> Result<u64> {
    use std::io::{Read, Seek, SeekFrom};
    if from == 0 || from >= len {
        return Ok(from.min(len));
    }
    let mut f =
        std::fs::File::open(path).map_err(|e| Error::io(format!("cannot open {path}: {e}")))?;
    let mut pos = from;
    let mut buf = vec![0u8; 1 << 16];
    while pos < len {
        f.seek(SeekFrom::Start(pos))
            .map_err(|e| Error::io(format!("{path}: {e}")))?;
        let n = f
            .read(&mut buf)
            .map_err(|e| Error::io(format!("{path}: {e}")))?;
        if n < 8 {
            break;
        }
        if let Some(&s) = recordio::find_record_starts(&buf[..n]).first() {
            return Ok(pos + s as u64);
        }
        pos += (n as u64 - 4) / 4 * 4;
    }
    Ok(len)
}

impl ImageRecordSource {
    pub fn new(p: &Params, dtype: DType, batch_size: usize) -> Result<Self> {
        Self::with_det(p, dtype, batch_size, None)
    }

    fn with_det(
        p: &Params,
        dtype: DType,
        batch_size: usize,
        det: Option<super::image_det::Det>,
    ) -> Result<Self> {
        let aug = match det {
            // the detection iterator's own label_width (-1: any) and augmenter settings
            Some(_) => Aug::new(
                &p.without(&["label_width", "inter_method", "fill_value"]),
                dtype,
            )?,
            None => Aug::new(p, dtype)?,
        };
        let path = p.string("path_imgrec", Some(""))?;
        if path.is_empty() {
            return Err(Error::invalid(format!("path_imgrec is required")));
        }
        let reader = RecordReader::open(&path)?;
        let len = std::fs::metadata(&path)
            .map_err(|e| Error::io(format!("{path}: {e}")))?
            .len();
        let num_parts = p.int("num_parts", Some(1))?;
        let part_index = p.int("part_index", Some(0))?;
        if num_parts < 1 || part_index < 0 || part_index >= num_parts {
            return Err(Error::invalid(format!(
                "part_index {part_index} must be in [0, num_parts) with num_parts \
                 {num_parts} >= 1"
            )));
        }
        let (b, e) = part_range(len, num_parts as u64, part_index as u64);
        let begin = record_start_from(&path, b, len)?;
        let end = record_start_from(&path, e, len)?;
        let shuffle = p.bool("shuffle", false)?;
        let idx = p.string("path_imgidx", Some(""))?;
        let offsets = if shuffle && !idx.is_empty() {
            let text = std::fs::read_to_string(&idx)
                .map_err(|e| Error::io(format!("cannot read {idx}: {e}")))?;
            let mut v = Vec::new();
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                let off = line
                    .split('\t')
                    .nth(1)
                    .and_then(|s| s.trim().parse::<u64>().ok())
                    .ok_or_else(|| Error::format(format!("bad line in {idx}: {line:?}")))?;
                if (begin..end).contains(&off) {
                    v.push(off);
                }
            }
            v.sort_unstable();
            Some(v)
        } else {
            None
        };
        let threads = p.int_at_least("preprocess_threads", Some(4), 1)? as usize;
        let seed = p.int("seed", Some(0))? as u64;
        let seed_aug = match p.get("seed_aug") {
            None | Some("None") => None,
            Some(_) => Some(p.int("seed_aug", None)? as u64),
        };
        let mut aug = aug;
        let imglist = p.string("path_imglist", Some(""))?;
        if !imglist.is_empty() && det.is_none() {
            aug.label_map = Some(std::sync::Arc::new(read_imglist(
                &imglist,
                aug.label_width,
            )?));
        }
        let [c, h, w] = aug.shape;
        let unit = c * h * w * dtype.size();
        let label_shape = vec![aug.label_width as i64];
        let mut s = ImageRecordSource {
            aug,
            reader,
            begin,
            end,
            offsets,
            at: 0,
            shuffle,
            chunk: batch_size.max(1),
            threads,
            seed,
            seed_aug,
            epoch: 0,
            serial: 0,
            data_shape: vec![c as i64, h as i64, w as i64],
            label_shape,
            unit,
            det: None,
            ready_data: Vec::new(),
            ready_labels: Vec::new(),
            ready_at: 0,
            pool: None,
        };
        if let Some(mut det) = det {
            // MXNet reads the part once to find the widest label (or takes the image list's)
            s.reader.seek(s.begin)?;
            let mut widest = 0;
            if let Some(map) = &det.label_map {
                widest = map.values().map(Vec::len).max().unwrap_or(0);
            }
            while det.label_map.is_none()
                && let Some((_, rec)) = s.next_record()?
            {
                let flag = if rec.len() >= 4 {
                    u32::from_le_bytes(rec[0..4].try_into().expect("4 bytes")) as usize
                } else {
                    0
                };
                widest = widest.max(det.check_label_count(flag)?);
            }
            det.settle_pad_width(widest)?;
            s.label_shape = vec![det.pad_width as i64 + 4];
            s.det = Some(std::sync::Arc::new(det));
        }
        s.start_epoch()?;
        let mean_img = p.string("mean_img", Some(""))?;
        if !mean_img.is_empty() && dtype != DType::U8 {
            let m = std::sync::Arc::new(s.mean_image(&mean_img)?);
            match &mut s.det {
                Some(det) => std::sync::Arc::make_mut(det).mean_img = Some(m),
                None => s.aug.mean_img = Some(m),
            }
            s.start_epoch()?;
        }
        Ok(s)
    }

    /// The mean image of `path`: loaded when the file exists (an MXNet NDArray list of one
    /// float32 `(c, h, w)` array), else the mean of the part's augmented float32 instances
    /// (normalised by `mean_*`, `std_*` and `scale` as MXNet computes it), saved there.
    fn mean_image(&mut self, path: &str) -> Result<Vec<f32>> {
        use crate::ndarray::format::{self, NpShape, RecordRef};
        let [c, h, w] = self.aug.shape;
        let shape = [c as i64, h as i64, w as i64];
        if let Ok(bytes) = std::fs::read(path) {
            let (recs, _) = format::read_list(&bytes, NpShape::Off)
                .map_err(|e| e.context(format_args!("mean_img {path}")))?;
            if recs.len() != 1 {
                return Err(Error::invalid(format!(
                    "Invalid mean image file format: {path} holds {} arrays, not 1",
                    recs.len()
                )));
            }
            let r = &recs[0];
            if r.dtype != DType::F32 || r.shape.as_deref() != Some(&shape[..]) {
                return Err(Error::invalid(format!(
                    "mean_img {path}: a {} array of shape {:?}, not float32 {shape:?} as \
                     data_shape",
                    r.dtype.name(),
                    r.shape
                )));
            }
            return Ok(r
                .data
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
                .collect());
        }
        // computed on float32 instances whatever the output type
        let dtype = std::mem::replace(&mut self.aug.dtype, DType::F32);
        let unit = std::mem::replace(&mut self.unit, c * h * w * 4);
        let mut sum = vec![0f32; c * h * w];
        let mut n = 0usize;
        let computed = loop {
            if self.ready_at == self.ready_labels.len() {
                if let Err(e) = self.fill() {
                    break Err(e);
                }
            }
            if self.ready_at == self.ready_labels.len() {
                break Ok(());
            }
            let d = &self.ready_data[self.ready_at * self.unit..(self.ready_at + 1) * self.unit];
            self.ready_at += 1;
            for (acc, b) in sum.iter_mut().zip(d.chunks_exact(4)) {
                *acc += f32::from_le_bytes(b.try_into().expect("4 bytes"));
            }
            n += 1;
        };
        self.aug.dtype = dtype;
        self.unit = unit;
        computed?;
        let inv = 1.0f32 / n as f32;
        sum.iter_mut().for_each(|v| *v *= inv);
        let bytes: Vec<u8> = sum.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut out = Vec::new();
        format::write_list(
            &mut out,
            &[RecordRef::dense(&shape, DType::F32, &bytes)],
            &["mean_img"],
            NpShape::Off,
        )?;
        std::fs::write(path, out)
            .map_err(|e| Error::io(format!("cannot write mean_img {path}: {e}")))?;
        Ok(sum)
    }

    fn start_epoch(&mut self) -> Result<()> {
        self.ready_labels.clear();
        self.ready_at = 0;
        self.serial = 0;
        self.at = 0;
        self.reader.seek(self.begin)?;
        if let Some(offs) = &mut self.offsets {
            let mut r = ChaCha8Rng::seed_from_u64(self.seed ^ (self.epoch << 32) ^ 0x5eed);
            for i in (1..offs.len()).rev() {
                offs.swap(i, int_in(&mut r, 0, i as i64) as usize);
            }
        }
        self.epoch += 1;
        Ok(())
    }

    /// The next record's byte offset and bytes, or `None` at the end of the part.
    fn next_record(&mut self) -> Result<Option<(u64, Vec<u8>)>> {
        if let Some(offs) = &self.offsets {
            let Some(&off) = offs.get(self.at) else {
                return Ok(None);
            };
            self.at += 1;
            self.reader.seek(off)?;
            return Ok(self.reader.next_record()?.map(|r| (off, r.to_vec())));
        }
        let at = self.reader.tell();
        if at >= self.end {
            return Ok(None);
        }
        Ok(self.reader.next_record()?.map(|r| (at, r.to_vec())))
    }

    /// Reads up to `max` records (shuffled when MXNet shuffles chunks); the index of the
    /// first in the epoch.
    fn read_records(&mut self, max: usize) -> Result<(Vec<(u64, Vec<u8>)>, u64)> {
        let mut recs = Vec::with_capacity(max);
        while recs.len() < max {
            match self.next_record()? {
                Some(r) => recs.push(r),
                None => break,
            }
        }
        if self.shuffles_chunks() && !recs.is_empty() {
            // MXNet shuffles the instances of each chunk it reads
            let mut r = ChaCha8Rng::seed_from_u64(self.seed ^ (self.epoch << 40) ^ self.serial);
            for i in (1..recs.len()).rev() {
                recs.swap(i, int_in(&mut r, 0, i as i64) as usize);
            }
        }
        let first = self.serial;
        self.serial += recs.len() as u64;
        Ok((recs, first))
    }

    fn shuffles_chunks(&self) -> bool {
        self.shuffle && self.offsets.is_none()
    }

    /// Reads, decodes and augments the next chunk of records into `ready_data`.
    fn fill(&mut self) -> Result<()> {
        let (recs, first) = self.read_records(self.chunk)?;
        let mut data = std::mem::take(&mut self.ready_data);
        data.resize(recs.len() * self.unit, 0);
        let mut labels = std::mem::take(&mut self.ready_labels);
        labels.clear();
        labels.resize_with(recs.len(), Vec::new);
        let r = self.decode(&recs, first, &mut data, &mut labels);
        self.ready_data = data;
        self.ready_labels = labels;
        self.ready_at = 0;
        if r.is_err() {
            self.ready_labels.clear();
        }
        r
    }

    /// Decodes and augments `recs` (the first being instance `first` of the epoch) into
    /// `data` (`unit` bytes each) and `labels`, on the decoding threads.
    fn decode(
        &mut self,
        recs: &[(u64, Vec<u8>)],
        first: u64,
        data: &mut [u8],
        labels: &mut [Vec<f32>],
    ) -> Result<()> {
        if recs.is_empty() {
            return Ok(());
        }
        let threads = self.threads.min(recs.len()).max(1);
        if self.threads > 1 && self.pool.is_none() {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(self.threads)
                .thread_name(|k| format!("mxrt-imgdec-{k}"))
                .build()
                .map_err(|e| Error::internal(format!("cannot start the decoding threads: {e}")))?;
            self.pool = Some(pool);
        }
        let (aug, unit, det, path) = (
            &self.aug,
            self.unit,
            self.det.as_deref(),
            self.reader.path(),
        );
        let (seed, seed_aug, epoch) = (self.seed, self.seed_aug, self.epoch);
        let rng_for = |i: usize| -> ChaCha8Rng {
            let idx = first + i as u64;
            match seed_aug {
                Some(s) => ChaCha8Rng::seed_from_u64(s.wrapping_add(idx)),
                None => ChaCha8Rng::seed_from_u64(
                    seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (epoch << 48) ^ idx,
                ),
            }
        };
        let work = |i: usize, (at, rec): &(u64, Vec<u8>), data: &mut [u8]| -> Result<Vec<f32>> {
            let mut r = rng_for(i);
            (|| -> Result<Vec<f32>> {
                Ok(match det {
                    None => instance(aug, rec, &mut r, data)?,
                    Some(det) if det.label_map.is_some() => {
                        let (id, bytes) = image_bytes(rec)?;
                        let map = det.label_map.as_ref().expect("checked");
                        let labels = map.get(&id).ok_or_else(|| {
                            Error::invalid(format!(
                                "ImageDetRecordIter: fail to find imagelabel for id {id}"
                            ))
                        })?;
                        super::image_det::instance(det, labels, bytes, &mut r, data)?
                    }
                    Some(det) => {
                        let flag = det.check_label_count(if rec.len() >= 4 {
                            u32::from_le_bytes(rec[0..4].try_into().expect("4 bytes")) as usize
                        } else {
                            0
                        })?;
                        let (labels, bytes) = unpack(rec, flag)?;
                        super::image_det::instance(det, &labels, bytes, &mut r, data)?
                    }
                })
            })()
            // the error names the file and the record (its byte offset in the file)
            .map_err(|e| {
                Error::new(
                    e.kind(),
                    format!("{} ({path}, the record at byte {at})", e.message()),
                )
            })
        };
        // each thread a contiguous run of records; the first error in record order wins
        let per = recs.len().div_ceil(threads);
        let run = |t: usize, recs: &[(u64, Vec<u8>)], data: &mut [u8], labels: &mut [Vec<f32>]| {
            for (j, ((rec, d), l)) in recs
                .iter()
                .zip(data.chunks_exact_mut(unit))
                .zip(labels.iter_mut())
                .enumerate()
            {
                *l = work(t * per + j, rec, d)?;
            }
            Ok(())
        };
        match (&self.pool, threads) {
            (Some(pool), 2..) => {
                let mut results: Vec<Result<()>> = (0..threads).map(|_| Ok(())).collect();
                pool.scope(|s| {
                    for (t, (((res, recs), data), labels)) in results
                        .iter_mut()
                        .zip(recs.chunks(per))
                        .zip(data.chunks_mut(per * unit))
                        .zip(labels.chunks_mut(per))
                        .enumerate()
                    {
                        let run = &run;
                        s.spawn(move |_| *res = run(t, recs, data, labels));
                    }
                });
                results.into_iter().collect()
            }
            _ => run(0, recs, data, labels),
        }
    }
}

/// An instance's labels into its label slot (float32 bytes; slots past the labels untouched).
fn write_labels(slot: &mut [u8], labels: &[f32]) {
    for (o, v) in slot.chunks_exact_mut(4).zip(labels) {
        o.copy_from_slice(&v.to_le_bytes());
    }
}

impl DenseSource for ImageRecordSource {
    fn dtype(&self) -> DType {
        self.aug.dtype
    }
    fn label_dtype(&self) -> DType {
        DType::F32
    }
    fn data_shape(&self) -> &[i64] {
        &self.data_shape
    }
    fn label_shape(&self) -> &[i64] {
        &self.label_shape
    }
    fn next_into(&mut self, data: &mut [u8], label: &mut [u8]) -> Result<Option<u64>> {
        if self.ready_at == self.ready_labels.len() {
            self.fill()?;
        }
        if self.ready_at == self.ready_labels.len() {
            return Ok(None);
        }
        let k = self.ready_at;
        self.ready_at += 1;
        data.copy_from_slice(&self.ready_data[k * self.unit..(k + 1) * self.unit]);
        write_labels(label, &self.ready_labels[k]);
        // MXNet's image iterators leave the batch index at zero
        Ok(Some(0))
    }

    fn next_many(&mut self, data: &mut [u8], label: &mut [u8], index: &mut [u64]) -> Result<usize> {
        let n = index.len();
        let lu = label.len() / n.max(1);
        let mut done = 0;
        while done < n {
            if self.ready_at < self.ready_labels.len() {
                let (d, l) = (&mut data[done * self.unit..], &mut label[done * lu..]);
                self.next_into(&mut d[..self.unit], &mut l[..lu])?;
                index[done] = 0;
                done += 1;
                continue;
            }
            let want = n - done;
            if want < self.chunk && self.shuffles_chunks() {
                // a chunk shuffled whole: through the ready buffer
                self.fill()?;
                if self.ready_labels.is_empty() {
                    break;
                }
                continue;
            }
            // straight into the batch's slots
            let (recs, first) = self.read_records(want.min(self.chunk))?;
            if recs.is_empty() {
                break;
            }
            let m = recs.len();
            let mut labels = vec![Vec::new(); m];
            self.decode(
                &recs,
                first,
                &mut data[done * self.unit..(done + m) * self.unit],
                &mut labels,
            )?;
            for (k, l) in labels.iter().enumerate() {
                write_labels(&mut label[(done + k) * lu..(done + k + 1) * lu], l);
            }
            index[done..done + m].fill(0);
            done += m;
        }
        Ok(done)
    }

    fn rewind(&mut self) -> Result<()> {
        self.start_epoch()
    }
}

/// The names MXNet registers for the image record iterators, with the data dtype each gives by
/// default.
pub const NAMES: [&str; 7] = [
    "ImageDetRecordIter",
    "ImageRecordIter",
    "ImageRecordIter_v1",
    "ImageRecordUInt8Iter",
    "ImageRecordUInt8Iter_v1",
    "ImageRecordInt8Iter",
    "ImageRecordInt8Iter_v1",
];

/// The iterator MXNet registers as `name`.
pub fn loader(p: &Params, name: &str) -> Result<BatchLoader<ImageRecordSource>> {
    if name == "ImageDetRecordIter" {
        let batch_size = p.int_at_least("batch_size", None, 1)? as usize;
        let round_batch = p.bool("round_batch", true)?;
        let det = super::image_det::Det::new(p)?;
        let src = ImageRecordSource::with_det(p, DType::F32, batch_size, Some(det))?;
        return BatchLoader::new(src, batch_size, round_batch);
    }
    let dtype = match name {
        "ImageRecordUInt8Iter" | "ImageRecordUInt8Iter_v1" => DType::U8,
        "ImageRecordInt8Iter" | "ImageRecordInt8Iter_v1" => DType::I8,
        _ => match p.dtype("dtype")? {
            None | Some(DType::F32) => DType::F32,
            Some(DType::U8) => DType::U8,
            Some(DType::I8) => DType::I8,
            Some(d) => {
                return Err(Error::invalid(format!(
                    "unknown dtype {} for ImageRecordIter2 (float32, uint8 or int8)",
                    d.name()
                )));
            }
        },
    };
    let batch_size = p.int_at_least("batch_size", None, 1)? as usize;
    let round_batch = p.bool("round_batch", true)?;
    let src = ImageRecordSource::new(p, dtype, batch_size)?;
    BatchLoader::new(src, batch_size, round_batch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_cover_the_file_on_aligned_boundaries() {
        assert_eq!(part_range(100, 1, 0), (0, 100));
        assert_eq!(part_range(100, 3, 0), (0, 36));
        assert_eq!(part_range(100, 3, 2), (72, 100));
    }

    #[test]
    fn headers_give_scalar_and_vector_labels() {
        let mut rec = vec![0u8; 24];
        rec[4..8].copy_from_slice(&2.5f32.to_le_bytes());
        rec.extend_from_slice(b"img");
        let (l, b) = unpack(&rec, 1).unwrap();
        assert_eq!((l, b), (vec![2.5], &b"img"[..]));
        assert!(unpack(&rec, 2).is_err());
        let mut rec = vec![0u8; 24];
        rec[0..4].copy_from_slice(&2u32.to_le_bytes());
        rec.extend_from_slice(&1f32.to_le_bytes());
        rec.extend_from_slice(&3f32.to_le_bytes());
        let (l, _) = unpack(&rec, 2).unwrap();
        assert_eq!(l, vec![1.0, 3.0]);
        assert!(unpack(&rec[..10], 1).is_err());
    }
}
