//! `ImageDetRecordIter`: object detection records (`mx.recordio.pack` headers whose labels are
//! `header_width, object_width, extra headers..., [id, xmin, ymin, xmax, ymax, extra...] x N`,
//! coordinates relative to the image) decoded, augmented as MXNet's default detection
//! augmenter does and normalised as its `ImageDetNormalizeIter`.
//!
//! The augmenter runs in MXNet's order: `resize` of the shorter edge, `rand_mirror_prob`
//! (boxes flipped), `rand_pad_prob` (a random canvas of up to `max_pad_scale` times the image
//! filled with `fill_value`, boxes projected into it), `rand_crop_prob` (MXNet's crop samplers:
//! scale, aspect ratio, overlap and coverage constraints, `max_crop_trials`, boxes whose centre
//! (or overlap, `crop_emit_mode`) leaves the crop dropped and the others clipped to it), and the
//! final resize (`resize_mode` force, shrink or fit). A label row is
//! `[channels, height, width, label length, label..., label_pad_value...]`, `label_pad_width + 4`
//! wide; `label_pad_width` 0 takes the widest label in the file. Labels come from the record
//! headers or, with `path_imglist`, from an image list by record id. After the first resize the
//! colour augmenters run as MXNet's: hue, saturation and illumination offsets (each up to its
//! `max_random_*`, applied with its `random_*_prob`) in OpenCV's 8-bit HLS, and a contrast
//! factor `1 + c`. `mean_img` is loaded or computed over the part as for `ImageRecordIter`;
//! `inter_method` takes OpenCV's five methods and MXNet's 9 and 10.

use super::image_rec::{c_number, cropped, int_in, inter_method, resized_with, unit};
use super::params::Params;
use crate::error::{Error, Result};
use crate::imgproc::{self as img, Image};
use rand_chacha::ChaCha8Rng;

/// One crop sampler's constraints.
#[derive(Clone, Debug)]
struct Sampler {
    min_scale: f32,
    max_scale: f32,
    min_ratio: f32,
    max_ratio: f32,
    min_overlap: f32,
    max_overlap: f32,
    min_sample_cov: f32,
    max_sample_cov: f32,
    min_object_cov: f32,
    max_object_cov: f32,
    trials: i64,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum ResizeMode {
    Force,
    Shrink,
    Fit,
}

/// The detection augmenter's and normaliser's settings.
#[derive(Clone, Debug)]
pub struct Det {
    /// `(c, h, w)`.
    pub shape: [usize; 3],
    /// `label_width` (-1: any).
    pub label_width: i64,
    /// The padded label width (without the 4 leading values), once known.
    pub pad_width: usize,
    pub pad_value: f32,
    resize: i64,
    interp: i64,
    fill: u8,
    mirror_prob: f32,
    pad_prob: f32,
    max_pad_scale: f32,
    crop_prob: f32,
    samplers: Vec<Sampler>,
    emit_overlap: Option<f32>,
    resize_mode: ResizeMode,
    /// `max_random_hue`, `max_random_saturation`, `max_random_illumination`.
    max_hsl: [i64; 3],
    /// `random_hue_prob`, `random_saturation_prob`, `random_illumination_prob`,
    /// `random_contrast_prob`.
    colour_prob: [f32; 4],
    max_contrast: f32,
    mean: [f32; 4],
    std: [f32; 4],
    scale: f32,
    /// The mean image (`mean_img`), CHW of `shape`, once loaded or computed.
    pub mean_img: Option<std::sync::Arc<Vec<f32>>>,
    /// Labels by record id (`path_imglist`).
    pub label_map: Option<std::sync::Arc<std::collections::HashMap<u64, Vec<f32>>>>,
}

/// A detection image list: per line an index, the labels (`label_width` of them, or with
/// `label_width` -1 every field but the last, the image path) as C's `atof` reads them.
fn read_imglist(path: &str, label_width: i64) -> Result<std::collections::HashMap<u64, Vec<f32>>> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::io(format!(
            "ImageDetRecordIter: cannot read path_imglist {path}: {e}"
        ))
    })?;
    let bad = |line: &str| Error::format(format!("Bad ImageList format: {path}: line {line:?}"));
    let mut map = std::collections::HashMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let idx = c_number(fields[0]).max(0.0) as u64;
        let labels: Vec<f32> = if label_width > 0 {
            let w = label_width as usize;
            if fields.len() < 1 + w {
                return Err(bad(line));
            }
            fields[1..1 + w]
                .iter()
                .map(|f| c_number(f) as f32)
                .collect()
        } else {
            if fields.len() < 2 {
                return Err(bad(line));
            }
            fields[1..fields.len() - 1]
                .iter()
                .map(|f| c_number(f) as f32)
                .collect()
        };
        map.insert(idx, labels);
    }
    Ok(map)
}

fn float(p: &Params, key: &str, default: f32) -> Result<f32> {
    match p.get(key) {
        None => Ok(default),
        Some(v) => v.parse::<f32>().map_err(|_| {
            Error::invalid(format!(
                "Invalid Parameter format for {key} expect float but value='{v}'"
            ))
        }),
    }
}

/// A tuple of floats as MXNet writes one: `(0.1, 0.3)`, `[0.1]` or `0.1`.
fn floats(p: &Params, key: &str, default: f32) -> Result<Vec<f32>> {
    let Some(v) = p.get(key) else {
        return Ok(vec![default]);
    };
    let inner = v.trim_matches(|c| c == '(' || c == ')' || c == '[' || c == ']');
    inner
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.trim_end_matches('L').parse::<f32>().map_err(|_| {
                Error::invalid(format!(
                    "Invalid Parameter format for {key} expect tuple of float but value='{v}'"
                ))
            })
        })
        .collect()
}

impl Det {
    pub fn new(p: &Params) -> Result<Det> {
        let shape = p.shape("data_shape", None)?;
        if shape.len() != 3 || (shape[0] != 1 && shape[0] != 3) {
            return Err(Error::invalid(format!(
                "Invalid output shape {shape:?} (ImageDetRecordIter: 3 dimensions, 1 or 3 \
                 channels)"
            )));
        }
        let interp = p.int("inter_method", Some(1))?;
        if !matches!(interp, 0..=4 | 9 | 10) {
            return Err(Error::invalid(format!(
                "invalid inter_method: valid value 0,1,2,3,9,10 (got {interp})"
            )));
        }
        let n = p.int("num_crop_sampler", Some(1))?;
        let tuple = |key: &str, default: f32| -> Result<Vec<f32>> {
            let v = floats(p, key, default)?;
            if n == 1 && v.len() != 1 || n > 1 && v.len() != 1 && v.len() != n as usize {
                return Err(Error::invalid(format!(
                    "{key}: # of parameters/crop_samplers mismatch ({} values for {n} samplers)",
                    v.len()
                )));
            }
            Ok(if v.len() == 1 && n > 1 {
                vec![v[0]; n as usize]
            } else {
                v
            })
        };
        let mut samplers = Vec::new();
        if n > 0 {
            let cols = [
                tuple("min_crop_scales", 0.0)?,
                tuple("max_crop_scales", 1.0)?,
                tuple("min_crop_aspect_ratios", 1.0)?,
                tuple("max_crop_aspect_ratios", 1.0)?,
                tuple("min_crop_overlaps", 0.0)?,
                tuple("max_crop_overlaps", 1.0)?,
                tuple("min_crop_sample_coverages", 0.0)?,
                tuple("max_crop_sample_coverages", 1.0)?,
                tuple("min_crop_object_coverages", 0.0)?,
                tuple("max_crop_object_coverages", 1.0)?,
                tuple("max_crop_trials", 25.0)?,
            ];
            for i in 0..n as usize {
                let s = Sampler {
                    min_scale: cols[0][i],
                    max_scale: cols[1][i],
                    min_ratio: cols[2][i],
                    max_ratio: cols[3][i],
                    min_overlap: cols[4][i],
                    max_overlap: cols[5][i],
                    min_sample_cov: cols[6][i],
                    max_sample_cov: cols[7][i],
                    min_object_cov: cols[8][i],
                    max_object_cov: cols[9][i],
                    trials: cols[10][i] as i64,
                };
                if !(s.min_scale >= 0.0
                    && s.max_scale <= 1.0
                    && s.max_scale > s.min_scale
                    && s.min_ratio >= 0.0
                    && s.max_ratio >= s.min_ratio
                    && s.max_overlap >= s.min_overlap
                    && s.max_sample_cov >= s.min_sample_cov
                    && s.max_object_cov >= s.min_object_cov)
                {
                    return Err(Error::invalid(format!(
                        "ImageDetRecordIter: crop sampler {i} needs 0 <= min_crop_scales < \
                         max_crop_scales <= 1 and each min no larger than its max ({s:?})"
                    )));
                }
                samplers.push(s);
            }
        }
        let emit_overlap = match p.get("crop_emit_mode") {
            None | Some("center") => None,
            Some("overlap") => Some(float(p, "emit_overlap_thresh", 0.3)?),
            Some(v) => {
                return Err(Error::invalid(format!(
                    "Invalid Input: '{v}', valid values are: {{'center', 'overlap'}} for \
                     parameter crop_emit_mode"
                )));
            }
        };
        if emit_overlap.is_some_and(|t| t < 0.0) {
            return Err(Error::invalid("emit_overlap_thresh must be >= 0"));
        }
        let resize_mode = match p.get("resize_mode") {
            None | Some("force") => ResizeMode::Force,
            Some("shrink") => ResizeMode::Shrink,
            Some("fit") => ResizeMode::Fit,
            Some(v) => {
                return Err(Error::invalid(format!(
                    "Invalid Input: '{v}', valid values are: {{'fit', 'force', 'shrink'}} for \
                     parameter resize_mode"
                )));
            }
        };
        let pad_width = p.int("label_pad_width", Some(0))?;
        let label_width = p.int("label_width", Some(-1))?;
        let imglist = p.string("path_imglist", Some(""))?;
        let label_map = if imglist.is_empty() {
            None
        } else {
            Some(std::sync::Arc::new(read_imglist(&imglist, label_width)?))
        };
        Ok(Det {
            label_map,
            shape: [shape[0] as usize, shape[1] as usize, shape[2] as usize],
            label_width,
            pad_width: pad_width.max(0) as usize,
            pad_value: float(p, "label_pad_value", -1.0)?,
            resize: p.int("resize", Some(-1))?,
            interp,
            fill: p.int("fill_value", Some(127))?.clamp(0, 255) as u8,
            mirror_prob: float(p, "rand_mirror_prob", 0.0)?,
            pad_prob: float(p, "rand_pad_prob", 0.0)?,
            max_pad_scale: float(p, "max_pad_scale", 1.0)?,
            crop_prob: float(p, "rand_crop_prob", 0.0)?,
            samplers,
            emit_overlap,
            resize_mode,
            max_hsl: [
                p.int("max_random_hue", Some(0))?,
                p.int("max_random_saturation", Some(0))?,
                p.int("max_random_illumination", Some(0))?,
            ],
            colour_prob: [
                float(p, "random_hue_prob", 0.0)?,
                float(p, "random_saturation_prob", 0.0)?,
                float(p, "random_illumination_prob", 0.0)?,
                float(p, "random_contrast_prob", 0.0)?,
            ],
            max_contrast: float(p, "max_random_contrast", 0.0)?,
            mean_img: None,
            mean: [
                float(p, "mean_r", 0.0)?,
                float(p, "mean_g", 0.0)?,
                float(p, "mean_b", 0.0)?,
                float(p, "mean_a", 0.0)?,
            ],
            std: [
                float(p, "std_r", 0.0)?,
                float(p, "std_g", 0.0)?,
                float(p, "std_b", 0.0)?,
                float(p, "std_a", 0.0)?,
            ],
            scale: float(p, "scale", 1.0)?,
        })
    }

    /// Checks one record's label count against `label_width`; the count.
    pub fn check_label_count(&self, n: usize) -> Result<usize> {
        if n == 0 {
            return Err(Error::invalid(
                "ImageDetRecordIter: Not enough label packed in img_list or rec file.",
            ));
        }
        if self.label_width > 0 && self.label_width as usize != n {
            return Err(Error::invalid(format!(
                "ImageDetRecordIter: rec file provide {n}-dimensional label but label_width is \
                 set to {}",
                self.label_width
            )));
        }
        Ok(n)
    }

    /// Settles the label width from the widest label found (`label_pad_width` 0 takes it).
    pub fn settle_pad_width(&mut self, widest: usize) -> Result<()> {
        if widest > self.pad_width {
            if self.pad_width > 0 {
                return Err(Error::invalid(format!(
                    "ImageDetRecordIOParser: label_pad_width: {} smaller than estimated width: \
                     {widest}",
                    self.pad_width
                )));
            }
            self.pad_width = widest;
        }
        Ok(())
    }
}

/// A box `x, y, w, h` in relative coordinates.
#[derive(Clone, Copy, Debug)]
struct Rect {
    x: f32,
    y: f32,
    w: f32,
    h: f32,
}

impl Rect {
    fn area(&self) -> f32 {
        self.w * self.h
    }
    /// OpenCV's `&`: the intersection, empty when the boxes do not overlap.
    fn and(&self, o: &Rect) -> Rect {
        let x1 = self.x.max(o.x);
        let y1 = self.y.max(o.y);
        let w = (self.x + self.w).min(o.x + o.w) - x1;
        let h = (self.y + self.h).min(o.y + o.h) - y1;
        if w <= 0.0 || h <= 0.0 {
            Rect {
                x: 0.0,
                y: 0.0,
                w: 0.0,
                h: 0.0,
            }
        } else {
            Rect { x: x1, y: y1, w, h }
        }
    }
    fn contains(&self, px: f32, py: f32) -> bool {
        self.x <= px && px < self.x + self.w && self.y <= py && py < self.y + self.h
    }
}

#[derive(Clone, Debug)]
struct Object {
    /// id, left, top, right, bottom, extra...
    v: Vec<f32>,
}

impl Object {
    fn rect(&self) -> Rect {
        Rect {
            x: self.v[1],
            y: self.v[2],
            w: self.v[3] - self.v[1],
            h: self.v[4] - self.v[2],
        }
    }
    fn project(&self, b: &Rect) -> Object {
        let mut v = self.v.clone();
        v[1] = ((v[1] - b.x) / b.w).max(0.0);
        v[2] = ((v[2] - b.y) / b.h).max(0.0);
        v[3] = ((v[3] - b.x) / b.w).min(1.0);
        v[4] = ((v[4] - b.y) / b.h).min(1.0);
        Object { v }
    }
}

/// A detection label: its header and the valid objects (right > left, bottom > top).
struct Label {
    header: Vec<f32>,
    objects: Vec<Object>,
}

impl Label {
    fn parse(raw: &[f32]) -> Result<Label> {
        let bad = |what: String| Err(Error::invalid(format!("ImageDetRecordIter: {what}")));
        if raw.len() < 7 {
            return bad(format!(
                "a detection label needs at least 7 values (2 header + 5 object), got {}",
                raw.len()
            ));
        }
        let hw = raw[0] as i64;
        let ow = raw[1] as i64;
        if hw < 2 || ow < 5 || hw as usize > raw.len() {
            return bad(format!(
                "header width {hw} (>= 2) and object width {ow} (>= 5) do not fit the label"
            ));
        }
        let (hw, ow) = (hw as usize, ow as usize);
        if (raw.len() - hw) % ow != 0 {
            return bad(format!(
                "{} label values after a header of {hw} are not whole objects of {ow}",
                raw.len() - hw
            ));
        }
        let objects = raw[hw..]
            .chunks_exact(ow)
            .filter(|o| o[3] > o[1] && o[4] > o[2])
            .map(|o| Object { v: o.to_vec() })
            .collect();
        Ok(Label {
            header: raw[..hw].to_vec(),
            objects,
        })
    }

    fn to_vec(&self) -> Vec<f32> {
        let mut out = self.header.clone();
        for o in &self.objects {
            out.extend_from_slice(&o.v);
        }
        out
    }

    fn try_crop(&mut self, b: &Rect, s: &Sampler, emit_overlap: Option<f32>) -> bool {
        if self.objects.is_empty() {
            return true;
        }
        let constrained = s.min_overlap > 0.0
            || s.max_overlap < 1.0
            || s.min_sample_cov > 0.0
            || s.max_sample_cov < 1.0
            || s.min_object_cov > 0.0
            || s.max_object_cov < 1.0;
        if constrained {
            let valid = self.objects.iter().any(|o| {
                let gt = o.rect();
                let inter = b.and(&gt).area();
                if s.min_overlap > 0.0 || s.max_overlap < 1.0 {
                    let iou = if inter <= 0.0 {
                        0.0
                    } else {
                        inter / (b.area() + gt.area() - inter)
                    };
                    if iou < s.min_overlap || iou > s.max_overlap {
                        return false;
                    }
                }
                if s.min_sample_cov > 0.0 || s.max_sample_cov < 1.0 {
                    let c = inter / b.area();
                    if c < s.min_sample_cov || c > s.max_sample_cov {
                        return false;
                    }
                }
                if s.min_object_cov > 0.0 || s.max_object_cov < 1.0 {
                    let c = inter / gt.area();
                    if c < s.min_object_cov || c > s.max_object_cov {
                        return false;
                    }
                }
                true
            });
            if !valid {
                return false;
            }
        }
        let kept: Vec<Object> = self
            .objects
            .iter()
            .filter(|o| match emit_overlap {
                None => b.contains((o.v[1] + o.v[3]) * 0.5, (o.v[2] + o.v[4]) * 0.5),
                Some(t) => {
                    let gt = o.rect();
                    b.and(&gt).area() / gt.area() > t
                }
            })
            .map(|o| o.project(b))
            .collect();
        if kept.is_empty() {
            return false;
        }
        self.objects = kept;
        true
    }
}

/// A uniform float in `[lo, hi)`.
fn uniform(r: &mut ChaCha8Rng, lo: f32, hi: f32) -> f32 {
    lo + (hi - lo) * unit(r)
}

fn crop_box(s: &Sampler, r: &mut ChaCha8Rng, img_ratio: f32) -> Rect {
    let scale = uniform(r, s.min_scale, s.max_scale) + 1e-12;
    let min_ratio = (s.min_ratio / img_ratio).max(scale * scale);
    let max_ratio = (s.max_ratio / img_ratio).min(1.0 / (scale * scale));
    let ratio = uniform(r, min_ratio, max_ratio).sqrt();
    let w = (scale * ratio).min(1.0);
    let h = (scale / ratio).min(1.0);
    let x = uniform(r, 0.0, 1.0 - w);
    let y = uniform(r, 0.0, 1.0 - h);
    Rect { x, y, w, h }
}

fn resize_to(src: Image, h: usize, w: usize, d: &Det, r: &mut ChaCha8Rng) -> Result<Image> {
    let m = inter_method(d.interp, src.w as f32, src.h as f32, w as f32, h as f32, r);
    resized_with(&src, h.max(1), w.max(1), m)
}

/// Runs the detection augmenter on a decoded image and its raw label; the image and the label
/// after augmentation.
fn augment(d: &Det, mut res: Image, raw: &[f32], r: &mut ChaCha8Rng) -> Result<(Image, Vec<f32>)> {
    if d.resize > 0 {
        let s = d.resize as usize;
        let (h, w) = if res.h > res.w {
            (s * res.h / res.w, s)
        } else {
            (s, s * res.w / res.h)
        };
        res = resize_to(res, h, w, d, r)?;
    }
    let mut label = Label::parse(raw)?;
    if d.colour_prob.iter().any(|&p| p > 0.0) {
        let mut off = [0i32; 3];
        for (o, &m) in off.iter_mut().zip(&d.max_hsl) {
            *o = (uniform(r, -1.0, 1.0) * m as f32) as i32;
        }
        let mut c = uniform(r, -1.0, 1.0) * d.max_contrast;
        for (o, &p) in off.iter_mut().zip(&d.colour_prob) {
            if unit(r) >= p {
                *o = 0;
            }
        }
        if unit(r) >= d.colour_prob[3] {
            c = 0.0;
        }
        let [h, s, l] = off;
        if h != 0 || s != 0 || l != 0 {
            if res.c != 3 {
                return Err(Error::invalid(
                    "ImageDetRecordIter: the hue, saturation and illumination augmenters need \
                     3-channel images",
                ));
            }
            img::shift_hls(&mut res.data, h, l, s);
        }
        if c.abs() > 1e-3 {
            let a = c + 1.0;
            res.data
                .iter_mut()
                .for_each(|v| *v = (*v as f32 * a).round_ties_even().clamp(0.0, 255.0) as u8);
        }
    }
    if d.mirror_prob > 0.0 && unit(r) < d.mirror_prob {
        for o in &mut label.objects {
            let (l, rt) = (o.v[1], o.v[3]);
            o.v[1] = 1.0 - rt;
            o.v[3] = 1.0 - l;
        }
        let c = res.c;
        for row in res.data.chunks_exact_mut(res.w * c) {
            let w = row.len() / c;
            for x in 0..w / 2 {
                for k in 0..c {
                    row.swap(x * c + k, (w - 1 - x) * c + k);
                }
            }
        }
    }
    if d.pad_prob > 0.0 && d.max_pad_scale > 1.0 && unit(r) < d.pad_prob {
        let scale = uniform(r, 1.0, d.max_pad_scale);
        if scale >= 1.05 {
            let x0 = uniform(r, 0.0, scale - 1.0);
            let y0 = uniform(r, 0.0, scale - 1.0);
            let b = Rect {
                x: -x0,
                y: -y0,
                w: scale,
                h: scale,
            };
            for o in &mut label.objects {
                *o = o.project(&b);
            }
            let left = (x0 * res.w as f32) as usize;
            let top = (y0 * res.h as f32) as usize;
            let right = ((scale - x0 - 1.0) * res.w as f32).max(0.0) as usize;
            let bot = ((scale - y0 - 1.0) * res.h as f32).max(0.0) as usize;
            let (h, w, c) = (res.h + top + bot, res.w + left + right, res.c);
            let mut data = vec![d.fill; h * w * c];
            for y in 0..res.h {
                let to = ((y + top) * w + left) * c;
                data[to..to + res.w * c]
                    .copy_from_slice(&res.data[y * res.w * c..(y + 1) * res.w * c]);
            }
            res = Image { h, w, c, data };
        }
    }
    if d.crop_prob > 0.0 && !d.samplers.is_empty() && unit(r) < d.crop_prob {
        let mut order: Vec<usize> = (0..d.samplers.len()).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, int_in(r, 0, i as i64) as usize);
        }
        'samplers: for i in order {
            let s = &d.samplers[i];
            for _ in 0..s.trials {
                let b = crop_box(s, r, res.w as f32 / res.h as f32);
                if label.try_crop(&b, s, d.emit_overlap) {
                    let left = (b.x * res.w as f32) as usize;
                    let top = (b.y * res.h as f32) as usize;
                    let w = ((b.w * res.w as f32) as usize).min(res.w - left.min(res.w));
                    let h = ((b.h * res.h as f32) as usize).min(res.h - top.min(res.h));
                    if w == 0 || h == 0 {
                        return Err(Error::invalid(
                            "ImageDetRecordIter: a crop box has no pixels",
                        ));
                    }
                    res = cropped(&res, left, top, w, h);
                    break 'samplers;
                }
            }
        }
    }
    let [_, dh, dw] = d.shape;
    match d.resize_mode {
        ResizeMode::Force => res = resize_to(res, dh, dw, d, r)?,
        ResizeMode::Shrink | ResizeMode::Fit => {
            let (h, w) = (dh as f32, dw as f32);
            if d.resize_mode == ResizeMode::Fit || res.h as f32 > h || res.w as f32 > w {
                let ratio = (h / res.h as f32).min(w / res.w as f32);
                let nh = (ratio * res.h as f32) as usize;
                let nw = (ratio * res.w as f32) as usize;
                res = resize_to(res, nh, nw, d, r)?;
            }
        }
    }
    Ok((res, label.to_vec()))
}

/// One record made into one instance: `data` (float32 CHW of `shape`, RGB, normalised) and
/// the label row.
pub fn instance(
    d: &Det,
    raw: &[f32],
    bytes: &[u8],
    r: &mut ChaCha8Rng,
    data: &mut [u8],
) -> Result<Vec<f32>> {
    let [c, dh, dw] = d.shape;
    let flag = if c == 1 { 0 } else { 1 };
    let im = img::decode(bytes, flag, false)
        .map_err(|e| Error::invalid(format!("ImageDetRecordIter: {}", e.message())))?;
    let (res, label) = augment(d, im, raw, r)?;
    if res.h > dh || res.w > dw {
        return Err(Error::invalid(format!(
            "ImageDetRecordIter: an augmented {}x{} image does not fit data_shape {dh}x{dw}",
            res.h, res.w
        )));
    }
    // MXNet normalises the whole data_shape canvas (zeros outside a smaller image): the
    // channel means when any is set, else the mean image, then std and scale
    let any_mean = d.mean.iter().any(|&m| m > 0.0);
    let mean_img = if any_mean {
        None
    } else {
        d.mean_img.as_deref()
    };
    for k in 0..c {
        let src_k = if c == 3 { 2 - k } else { k };
        let mean = if any_mean { d.mean[k] } else { 0.0 };
        let std = d.std[k];
        for y in 0..dh {
            for x in 0..dw {
                let px = if y < res.h && x < res.w {
                    res.data[(y * res.w + x) * c + src_k] as f32
                } else {
                    0.0
                };
                let at = (k * dh + y) * dw + x;
                let mut v = px - mean_img.map_or(mean, |m| m[at]);
                if std > 0.0 {
                    v /= std;
                }
                data[at * 4..at * 4 + 4].copy_from_slice(&(v * d.scale).to_le_bytes());
            }
        }
    }
    let mut row = vec![d.pad_value; d.pad_width + 4];
    row[0] = res.c as f32;
    row[1] = res.h as f32;
    row[2] = res.w as f32;
    row[3] = label.len() as f32;
    if label.len() > d.pad_width {
        return Err(Error::invalid(format!(
            "ImageDetRecordIter: a label of {} values is wider than label_pad_width {}",
            label.len(),
            d.pad_width
        )));
    }
    row[4..4 + label.len()].copy_from_slice(&label);
    Ok(row)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_parse_and_crop_as_mxnet() {
        let raw = [
            2.0, 5.0, 1.0, 0.1, 0.2, 0.5, 0.6, 2.0, 0.6, 0.6, 0.9, 0.9, 3.0, 0.5, 0.5, 0.4, 0.9,
        ];
        let mut l = Label::parse(&raw).unwrap();
        // the third object has right < left: dropped
        assert_eq!(l.objects.len(), 2);
        let s = Sampler {
            min_scale: 0.0,
            max_scale: 1.0,
            min_ratio: 1.0,
            max_ratio: 1.0,
            min_overlap: 0.0,
            max_overlap: 1.0,
            min_sample_cov: 0.0,
            max_sample_cov: 1.0,
            min_object_cov: 0.0,
            max_object_cov: 1.0,
            trials: 1,
        };
        let b = Rect {
            x: 0.0,
            y: 0.0,
            w: 0.5,
            h: 0.5,
        };
        assert!(l.try_crop(&b, &s, None));
        // only the first object's centre (0.3, 0.4) is inside; it is clipped to the crop
        assert_eq!(l.to_vec(), vec![2.0, 5.0, 1.0, 0.2, 0.4, 1.0, 1.0]);
        assert!(Label::parse(&[2.0, 5.0, 1.0]).is_err());
        assert!(Label::parse(&[2.0, 5.0, 1.0, 0.1, 0.2, 0.5, 0.6, 1.0]).is_err());
    }
}
