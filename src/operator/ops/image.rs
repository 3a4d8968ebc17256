//! Image operators: OpenCV-backed ones in MXNet (`_cvimdecode`, `_cvimread`, `_cvimresize`,
//! `_cvcopyMakeBorder`) and the `_image_*` family (`mx.nd.image`, Gluon's vision transforms).
//!
//! `_cvimdecode` and `_cvimread` are NDArray functions in MXNet: their output's shape comes from
//! the image's bytes, so they run on the calling thread ([`ndarray_function`]) instead of
//! planning a kernel, and cannot appear in a symbolic graph. The augmenters follow MXNet's
//! kernels: arithmetic in float, results saturated to 0..255 for `uint8` and truncated for other
//! integer types, and MXNet's gradients (the `_copy` of the output gradient for the
//! augmenters, a scatter for `_image_crop`, a division by `std` for `_image_normalize`).

use super::{Entries, bad_dtype, inputs};
use crate::context::Context;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::imgproc as img;
use crate::ndarray::NDArray;
use crate::operator::imperative::Invoke;
use crate::operator::kernel::Element;
use crate::operator::op::{Call, KernelArgs, Plan, TensorDesc};
use crate::operator::param::{self, Params};
use crate::resource::{RandomGenerator, ResourceRequest};

fn fail<T>(call: &Call<'_>, msg: impl std::fmt::Display) -> Result<T> {
    Err(Error::invalid(format!("operator {}: {msg}", call.name)))
}

/// An op that runs on the calling thread instead of planning an engine kernel.
pub type NdFunction = fn(&Invoke<'_>) -> Result<Vec<NDArray>>;

/// The NDArray functions of this family, by op name.
pub fn ndarray_function(op: &str) -> Option<NdFunction> {
    match op {
        "_cvimdecode" => Some(imdecode),
        "_cvimread" => Some(imread),
        _ => None,
    }
}

fn decode_params(p: &Params<'_>, name: &str) -> Result<(i64, bool)> {
    let flag = p.or("flag", param::int, "an integer", 1)?;
    if flag < 0 {
        return Err(Error::invalid(format!(
            "operator {name}: value {flag} for Parameter flag should be greater equal to 0"
        )));
    }
    let to_rgb = p.or("to_rgb", param::boolean, "a boolean", true)?;
    Ok((flag, to_rgb))
}

/// The decoded image as a new `uint8` array, or copied into the caller's `out=`.
fn image_output(call: &Invoke<'_>, image: img::Image) -> Result<Vec<NDArray>> {
    let shape = [image.h as i64, image.w as i64, image.c as i64];
    match &call.outputs {
        Some(outs) => {
            let o = outs.first().ok_or_else(|| {
                Error::invalid(format!("operator {}: no output given", call.called_as))
            })?;
            if o.shape() != shape || o.dtype() != DType::U8 {
                return Err(Error::invalid(format!(
                    "operator {}: the output has shape {:?} and dtype {}, the image needs {:?} \
                     uint8",
                    call.called_as,
                    o.shape(),
                    o.dtype().name(),
                    shape
                )));
            }
            o.sync_copy_from_bytes(&image.data)?;
            Ok(outs.clone())
        }
        None => {
            let a = NDArray::new(&shape, Context::cpu(0), DType::U8, false)?;
            a.sync_copy_from_bytes(&image.data)?;
            Ok(vec![a])
        }
    }
}

fn imdecode(call: &Invoke<'_>) -> Result<Vec<NDArray>> {
    let name = call.called_as;
    let p = Params::new(name, call.params.clone())?;
    let (flag, to_rgb) = decode_params(&p, name)?;
    p.finish()?;
    if call.inputs.len() != 1 {
        return Err(Error::invalid(format!(
            "operator {name} takes 1 input(s), {} given",
            call.inputs.len()
        )));
    }
    let buf = &call.inputs[0];
    match buf.ctx() {
        Some(c) if c.is_host() => {}
        _ => {
            return Err(Error::invalid(format!(
                "operator {name}: Only supports cpu input"
            )));
        }
    }
    if buf.dtype() != DType::U8 {
        return Err(Error::invalid(format!(
            "operator {name}: Input needs to be uint8 buffer (got {})",
            buf.dtype().name()
        )));
    }
    if buf.size() == 0 {
        return Err(Error::invalid(format!(
            "operator {name}: Input cannot be an empty buffer"
        )));
    }
    let bytes = buf.to_bytes()?;
    let image = img::decode(&bytes, flag, to_rgb)
        .map_err(|e| Error::invalid(format!("operator {name}: {}", e.message())))?;
    image_output(call, image)
}

fn imread(call: &Invoke<'_>) -> Result<Vec<NDArray>> {
    let name = call.called_as;
    let p = Params::new(name, call.params.clone())?;
    let filename = p
        .raw("filename")
        .map(|s| s.trim().to_owned())
        .ok_or_else(|| {
            Error::invalid(format!(
                "operator {name}: Required parameter filename is not presented"
            ))
        })?;
    let (flag, to_rgb) = decode_params(&p, name)?;
    p.finish()?;
    let bytes = std::fs::read(&filename).map_err(|e| {
        Error::io(format!(
            "operator {name}: Imread: '{filename}' couldn't open file: {e}"
        ))
    })?;
    let image = img::decode(&bytes, flag, to_rgb)
        .map_err(|e| Error::invalid(format!("operator {name}: '{filename}': {}", e.message())))?;
    image_output(call, image)
}

/// The plan of an NDArray function reached through a graph: refused.
fn ndarray_only(call: &Call<'_>) -> Result<Plan> {
    fail(
        call,
        "reads its input's bytes and runs only on NDArrays, not in a symbolic graph",
    )
}

/// Dims of an image `(h, w, c)` or a batch `(n, h, w, c)`: `(n, h, w, c)`.
fn nhwc(call: &Call<'_>, x: &TensorDesc, batch: bool) -> Result<(usize, usize, usize, usize)> {
    let s: Vec<usize> = x.shape.iter().map(|&d| d.max(0) as usize).collect();
    match s.len() {
        3 => Ok((1, s[0], s[1], s[2])),
        4 if batch => Ok((s[0], s[1], s[2], s[3])),
        _ => fail(
            call,
            format!(
                "Input image must have shape (height, width, channels){}, but got {:?}",
                if batch {
                    ", or (N, height, width, channels)"
                } else {
                    ""
                },
                &x.shape[..]
            ),
        ),
    }
}

/// MXNet's `ImageShape`: a 3-D image of 1 or 3 channels.
fn image_shape(call: &Call<'_>, x: &TensorDesc) -> Result<(usize, usize, usize)> {
    let (_, h, w, c) = nhwc(call, x, false)?;
    if c != 1 && c != 3 {
        return fail(
            call,
            format!(
                "The last dimension of input image must be the channel dimension with either 1 \
                 or 3 elements, but got input with shape {:?}",
                &x.shape[..]
            ),
        );
    }
    Ok((h, w, c))
}

/// Resizes every image of the batch in `src` (dtype `dtype`) into `dst`.
#[allow(clippy::too_many_arguments)]
fn resize_batch(
    name: &str,
    dtype: DType,
    k: &mut KernelArgs<'_>,
    n: usize,
    (sh, sw, c): (usize, usize, usize),
    (dh, dw): (usize, usize),
    interp: i64,
) -> Result<()> {
    let (si, di) = (sh * sw * c, dh * dw * c);
    macro_rules! go {
        ($T:ty) => {{
            let src = k.inputs[0].slice::<$T>();
            let dst = k.outputs[0].slice_mut::<$T>();
            for b in 0..n {
                img::resize(
                    &src[b * si..(b + 1) * si],
                    sh,
                    sw,
                    c,
                    &mut dst[b * di..(b + 1) * di],
                    dh,
                    dw,
                    interp,
                )?;
            }
        }};
    }
    match dtype {
        DType::U8 => go!(u8),
        DType::F32 => go!(f32),
        DType::F64 => go!(f64),
        d => {
            return Err(Error::invalid(format!(
                "operator {name}: resize supports uint8, float32 and float64 images, not {}",
                d.name()
            )));
        }
    }
    Ok(())
}

fn check_resize_dtype(call: &Call<'_>, d: DType) -> Result<()> {
    match d {
        DType::U8 | DType::F32 | DType::F64 => Ok(()),
        DType::F16 => fail(call, "opencv image mat doesn't support fp16"),
        _ => fail(
            call,
            format!(
                "resize supports uint8, float32 and float64 images, not {}",
                d.name()
            ),
        ),
    }
}

fn cv_resize(call: &Call<'_>) -> Result<Plan> {
    let x = &inputs(call, 1)?[0];
    let p = call.params;
    let w = p.required("w", param::int, "an integer")?;
    let h = p.required("h", param::int, "an integer")?;
    let interp = p.or("interp", param::int, "an integer", img::INTER_LINEAR)?;
    if w < 1 || h < 1 {
        return fail(call, format!("w={w} and h={h} must be at least 1"));
    }
    if x.shape.len() != 3 {
        return fail(
            call,
            format!("the input must be (h, w, c), got {:?}", &x.shape[..]),
        );
    }
    check_resize_dtype(call, x.dtype)?;
    if !(img::INTER_NEAREST..=img::INTER_LANCZOS4).contains(&interp) {
        return Err(Error::not_supported(format!(
            "operator {}: interpolation {interp} is not implemented by mxrt (0: nearest, 1: bilinear, \
             2: bicubic, 3: area and 4: Lanczos are)",
            call.name
        )));
    }
    let (_, sh, sw, c) = nhwc(call, x, false)?;
    if sh == 0 || sw == 0 {
        return fail(call, "cannot resize an empty image");
    }
    let dtype = x.dtype;
    let name = call.name.to_owned();
    let (h, w) = (h as usize, w as usize);
    Ok(Plan::new(
        vec![TensorDesc::new(&[h as i64, w as i64, c as i64], dtype)],
        move |k| resize_batch(&name, dtype, k, 1, (sh, sw, c), (h, w), interp),
    ))
}

fn copy_make_border(call: &Call<'_>) -> Result<Plan> {
    let x = &inputs(call, 1)?[0];
    let p = call.params;
    let mut m = [0i64; 4];
    for (i, key) in ["top", "bot", "left", "right"].iter().enumerate() {
        m[i] = p.required(key, param::int, "an integer")?;
        if m[i] < 0 {
            return fail(call, format!("{key}={} must not be negative", m[i]));
        }
    }
    let kind = p.or("type", param::int, "an integer", img::BORDER_CONSTANT)?;
    let value = p.or("value", param::float, "a number", 0.0)?;
    let values = p.or("values", param::floats, "a tuple of numbers", Vec::new())?;
    if !(0..=4).contains(&kind) {
        return fail(call, format!("unknown border type {kind} (0 to 4)"));
    }
    if x.shape.len() != 3 {
        return fail(
            call,
            format!("the input must be (h, w, c), got {:?}", &x.shape[..]),
        );
    }
    if x.dtype == DType::F16 {
        return fail(call, "imresize doesn't support fp16");
    }
    let (_, h, w, c) = nhwc(call, x, false)?;
    if kind != img::BORDER_CONSTANT && (h == 0 || w == 0) {
        return fail(call, "a border other than constant needs a non-empty image");
    }
    let color: Vec<f64> = (0..c)
        .map(|k| {
            if values.is_empty() {
                if k < 3 { value } else { 0.0 }
            } else {
                values.get(k).copied().unwrap_or(0.0)
            }
        })
        .collect();
    let (oh, ow) = (h + (m[0] + m[1]) as usize, w + (m[2] + m[3]) as usize);
    let dtype = x.dtype;
    let (top, left) = (m[0], m[2]);
    Ok(Plan::new(
        vec![TensorDesc::new(&[oh as i64, ow as i64, c as i64], dtype)],
        move |k| {
            crate::with_element!(dtype, T => {
                let cvals: Vec<T> = color.iter().map(|&v| saturate_round::<T>(v)).collect();
                let src = k.inputs[0].slice::<T>();
                let out = k.outputs[0].slice_mut::<T>();
                let xs: Vec<Option<usize>> =
                    (0..ow).map(|x| img::border_index(x as i64 - left, w as i64, kind)).collect();
                for y in 0..oh {
                    let sy = img::border_index(y as i64 - top, h as i64, kind);
                    for (x, sx) in xs.iter().enumerate() {
                        let o = &mut out[(y * ow + x) * c..(y * ow + x + 1) * c];
                        match (sy, sx) {
                            (Some(sy), Some(sx)) => o.copy_from_slice(
                                &src[(sy * w + sx) * c..(sy * w + sx + 1) * c],
                            ),
                            _ => o.copy_from_slice(&cvals),
                        }
                    }
                }
            });
            Ok(())
        },
    ))
}

/// OpenCV's `saturate_cast` of a double: rounded to nearest (ties to even) and clamped for
/// integer types.
fn saturate_round<T: Element>(v: f64) -> T {
    let probe = T::from_f64(0.5);
    if probe.to_f64() == 0.5 {
        T::from_f64(v)
    } else {
        T::from_f32(v.round_ties_even() as f32)
    }
}

fn to_tensor(call: &Call<'_>) -> Result<Plan> {
    let x = &inputs(call, 1)?[0];
    let (n, h, w, c) = nhwc(call, x, true)?;
    let out: Vec<i64> = if x.shape.len() == 3 {
        vec![c as i64, h as i64, w as i64]
    } else {
        vec![n as i64, c as i64, h as i64, w as i64]
    };
    let dtype = x.dtype;
    Ok(Plan::new(
        vec![TensorDesc::new(&out, DType::F32)],
        move |k| {
            crate::with_element!(dtype, T => {
                let src = k.inputs[0].slice::<T>();
                let dst = k.outputs[0].slice_mut::<f32>();
                let len = h * w;
                for b in 0..n {
                    let (s, d) = (&src[b * len * c..], &mut dst[b * len * c..(b + 1) * len * c]);
                    for ch in 0..c {
                        for i in 0..len {
                            d[ch * len + i] = s[i * c + ch].to_f32() / 255.0;
                        }
                    }
                }
            });
            Ok(())
        },
    ))
}

/// `_image_normalize`'s channel count and per-channel (mean, std), MXNet's checks.
fn normalize_params(call: &Call<'_>, x: &TensorDesc) -> Result<(usize, usize, [f32; 3], [f32; 3])> {
    let p = call.params;
    let mean = p.or("mean", param::floats, "a tuple of numbers", vec![0.0; 4])?;
    let std = p.or("std", param::floats, "a tuple of numbers", vec![1.0; 4])?;
    let s = &x.shape;
    let (c, outer) = match s.len() {
        3 => (s[0] as usize, 1usize),
        4 => (s[1] as usize, s[0] as usize),
        _ => {
            return fail(
                call,
                format!(
                    "Input tensor must have shape (channels, height, width), or (N, channels, \
                     height, width), but got {:?}",
                    &s[..]
                ),
            );
        }
    };
    if c != 1 && c != 3 {
        return fail(
            call,
            format!(
                "The channel dimension of input tensor must have either 1 or 3 elements, but \
                 got input with shape {:?}",
                &s[..]
            ),
        );
    }
    for (what, v) in [("mean", &mean), ("std", &std)] {
        if v.len() != 1 && v.len() != c {
            return fail(
                call,
                format!(
                    "Invalid {what} for input with shape {:?}. {what} must have either 1 or {c} \
                     elements, but got {v:?}",
                    &s[..]
                ),
            );
        }
    }
    let three = |v: &[f64]| -> [f32; 3] {
        if v.len() == 1 {
            [v[0] as f32; 3]
        } else {
            [
                v[0] as f32,
                v.get(1).copied().unwrap_or(0.0) as f32,
                v.get(2).copied().unwrap_or(0.0) as f32,
            ]
        }
    };
    Ok((c, outer, three(&mean), three(&std)))
}

fn normalize(call: &Call<'_>) -> Result<Plan> {
    let x = &inputs(call, 1)?[0];
    let (c, outer, mean, std) = normalize_params(call, x)?;
    let dtype = x.dtype;
    let wide = dtype == DType::F64;
    let len = if c * outer == 0 {
        0
    } else {
        x.size() / (c * outer)
    };
    Ok(Plan::new(
        vec![TensorDesc::new(&x.shape, dtype)],
        move |k| {
            crate::with_element!(dtype, T => {
                let src = k.inputs[0].slice::<T>();
                let dst = k.outputs[0].slice_mut::<T>();
                for (i, (o, v)) in dst.iter_mut().zip(src).enumerate() {
                    let ch = (i / len.max(1)) % c;
                    // float arithmetic, double for double arrays (MXNet's `DType - float`)
                    *o = if wide {
                        T::from_f64((v.to_f64() - mean[ch] as f64) / std[ch] as f64)
                    } else {
                        T::from_f32((v.to_f32() - mean[ch]) / std[ch])
                    };
                }
            });
            Ok(())
        },
    ))
}

/// `_mxrt_image_normalize_grad(dy)` with `_image_normalize`'s parameters: `dy / std` per
/// channel (linear, so its own gradient is itself).
fn normalize_grad(call: &Call<'_>) -> Result<Plan> {
    let dy = &inputs(call, 1)?[0];
    let (c, outer, _, std) = normalize_params(call, dy)?;
    let dtype = dy.dtype;
    let wide = dtype == DType::F64;
    let len = if c * outer == 0 {
        0
    } else {
        dy.size() / (c * outer)
    };
    Ok(Plan::new(
        vec![TensorDesc::new(&dy.shape, dtype)],
        move |k| {
            crate::with_element!(dtype, T => {
                let src = k.inputs[0].slice::<T>();
                let dst = k.outputs[0].slice_mut::<T>();
                for (i, (o, v)) in dst.iter_mut().zip(src).enumerate() {
                    let ch = (i / len.max(1)) % c;
                    *o = if wide {
                        T::from_f64(v.to_f64() / std[ch] as f64)
                    } else {
                        T::from_f32(v.to_f32() / std[ch])
                    };
                }
            });
            Ok(())
        },
    ))
}

/// `_image_resize`'s output height and width for an `h x w` image (MXNet's
/// `GetHeightAndWidth`).
fn resize_size(call: &Call<'_>, h: usize, w: usize) -> Result<(usize, usize, i64)> {
    let p = call.params;
    let size = p.or("size", param::shape, "a tuple of integers", Vec::new())?;
    let keep = p.or("keep_ratio", param::boolean, "a boolean", false)?;
    let interp = p.or("interp", param::int, "an integer", img::INTER_LINEAR)?;
    let out = match size.len() {
        1 => {
            if size[0] <= 0 {
                return fail(
                    call,
                    format!("Input size should be greater than 0, but got {}", size[0]),
                );
            }
            let s = size[0] as usize;
            if !keep {
                (s, s)
            } else if h == 0 || w == 0 {
                return fail(call, "cannot keep the ratio of an empty image");
            } else if h > w {
                (h * s / w, s)
            } else {
                (s, w * s / h)
            }
        }
        2 => {
            if size[0] <= 0 || size[1] <= 0 {
                return fail(
                    call,
                    format!("Input width and height should be greater than 0, but got {size:?}"),
                );
            }
            (size[1] as usize, size[0] as usize)
        }
        n => {
            return fail(
                call,
                format!("Input size dimension must be 1 or 2, but got {n}"),
            );
        }
    };
    Ok((out.0, out.1, interp))
}

fn image_resize(call: &Call<'_>) -> Result<Plan> {
    let x = &inputs(call, 1)?[0];
    if x.shape.len() != 3 && x.shape.len() != 4 {
        return fail(
            call,
            format!(
                "Input image dimension should be 3 or 4 but got {}",
                x.shape.len()
            ),
        );
    }
    let (n, h, w, c) = nhwc(call, x, true)?;
    let (dh, dw, interp) = resize_size(call, h, w)?;
    check_resize_dtype(call, x.dtype)?;
    if !(img::INTER_NEAREST..=img::INTER_LANCZOS4).contains(&interp) {
        return Err(Error::not_supported(format!(
            "operator {}: interpolation {interp} is not implemented by mxrt (0: nearest, 1: bilinear, \
             2: bicubic, 3: area and 4: Lanczos are)",
            call.name
        )));
    }
    if n * h * w * c > 0 && (h == 0 || w == 0) {
        return fail(call, "cannot resize an empty image");
    }
    let mut out: Vec<i64> = vec![dh as i64, dw as i64, c as i64];
    if x.shape.len() == 4 {
        out.insert(0, n as i64);
    }
    let dtype = x.dtype;
    let name = call.name.to_owned();
    Ok(Plan::new(vec![TensorDesc::new(&out, dtype)], move |k| {
        if n * h * w * c == 0 {
            return Ok(());
        }
        resize_batch(&name, dtype, k, n, (h, w, c), (dh, dw), interp)
    }))
}

/// `_image_crop`'s window `(x, y, width, height)` checked against an `h x w` image of `c`
/// channels.
fn crop_window(call: &Call<'_>, x: &TensorDesc) -> Result<(usize, usize, usize, usize)> {
    let nd = x.shape.len();
    if nd != 3 && nd != 4 {
        return fail(
            call,
            format!("Image Crop expects inputs of 3D (h, w, c) or 4D (n, h, w, c). But got {nd}"),
        );
    }
    let c = x.shape[nd - 1];
    if c != 1 && c != 3 {
        return fail(
            call,
            format!("Expect channel of the input image is 1 or 3, but got{c}"),
        );
    }
    let p = call.params;
    let cx = p.required("x", param::int, "an integer")?;
    let cy = p.required("y", param::int, "an integer")?;
    let width = p.required("width", param::int, "an integer")?;
    let height = p.required("height", param::int, "an integer")?;
    if height <= 0 || width <= 0 {
        return fail(call, "Input height and width must be greater than 0");
    }
    if cx < 0 || cy < 0 {
        return fail(call, format!("x={cx} and y={cy} must not be negative"));
    }
    if cx + width > x.shape[nd - 2] {
        return fail(call, " x + width should not be greater than input width");
    }
    if cy + height > x.shape[nd - 3] {
        return fail(call, " y + height should not be greater than input height");
    }
    Ok((cx as usize, cy as usize, width as usize, height as usize))
}

/// Copies window rows between a full image batch and a cropped one (`scatter`: from the crop
/// into the full images).
#[allow(clippy::too_many_arguments)]
fn crop_copy<T: Copy>(
    full: &mut [T],
    crop: &mut [T],
    (n, h, w, c): (usize, usize, usize, usize),
    (cx, cy, cw, ch): (usize, usize, usize, usize),
    scatter: bool,
) {
    for b in 0..n {
        for y in 0..ch {
            let f0 = ((b * h + cy + y) * w + cx) * c;
            let c0 = ((b * ch + y) * cw) * c;
            let (f, k) = (&mut full[f0..f0 + cw * c], &mut crop[c0..c0 + cw * c]);
            if scatter {
                f.copy_from_slice(k);
            } else {
                k.copy_from_slice(f);
            }
        }
    }
}

fn crop(call: &Call<'_>) -> Result<Plan> {
    let x = &inputs(call, 1)?[0];
    let win = crop_window(call, x)?;
    let dims = nhwc(call, x, true)?;
    let mut out: Vec<i64> = x.shape.to_vec();
    let nd = out.len();
    out[nd - 3] = win.3 as i64;
    out[nd - 2] = win.2 as i64;
    let dtype = x.dtype;
    Ok(Plan::new(vec![TensorDesc::new(&out, dtype)], move |k| {
        crate::with_element!(dtype, T => {
            let mut full = k.inputs[0].slice::<T>().to_vec();
            crop_copy(&mut full, k.outputs[0].slice_mut::<T>(), dims, win, false);
        });
        Ok(())
    }))
}

/// `_mxrt_image_crop_grad(dy, x)`: zeros shaped like `x` with `dy` in the crop window.
fn crop_grad(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    let (dy, x) = (&ins[0], &ins[1]);
    let win = crop_window(call, x)?;
    let dims = nhwc(call, x, true)?;
    let dtype = dy.dtype;
    Ok(Plan::new(
        vec![TensorDesc::new(&x.shape, dtype)],
        move |k| {
            crate::with_element!(dtype, T => {
                let mut g = k.inputs[0].slice::<T>().to_vec();
                let out = k.outputs[0].slice_mut::<T>();
                out.fill(T::zero());
                crop_copy(out, &mut g, dims, win, true);
            });
            Ok(())
        },
    ))
}

/// `_mxrt_image_grad_copy(dy, x)`: MXNet's `_copy` gradient of the image ops, which fails when
/// the output's shape is not the input's (`to_tensor`, a resize to another size).
fn grad_copy(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    let (dy, x) = (&ins[0], &ins[1]);
    if dy.shape != x.shape {
        return fail(
            call,
            format!(
                "Incompatible attr: the gradient ({:?}) cannot be copied to an input of shape \
                 {:?} (MXNet's gradient of this image op is a copy of the output's gradient)",
                &dy.shape[..],
                &x.shape[..]
            ),
        );
    }
    let dtype = dy.dtype;
    Ok(Plan::new(
        vec![TensorDesc::new(&dy.shape, dtype)],
        move |k| {
            let n = k.outputs[0].nbytes();
            let src = k.inputs[0].byte_ptr();
            let dst = k.outputs[0].byte_ptr();
            // SAFETY: both tensors hold `n` bytes (same shape and dtype) and the runner stages
            // outputs that overlap inputs, so the ranges are distinct.
            unsafe { std::ptr::copy_nonoverlapping(src, dst, n) };
            Ok(())
        },
    ))
}

/// MXNet's `saturate_cast` of a float result: clamped to 0..255 for `uint8`, a plain
/// conversion (truncating for integers) otherwise.
fn sat<T: Element>(v: f32) -> T {
    T::from_f32(v)
}

/// A same-shape augmenter of 3-D images: `f(pixels, channels, generator)` on the output,
/// which starts as a copy of the input.
type Augment = fn(&mut [f32], usize, Option<&mut RandomGenerator>, &Call2) -> Result<()>;

/// The parameters an augmenter kernel reads.
#[derive(Clone, Debug, Default)]
struct Call2 {
    a: f32,
    b: f32,
    c: f32,
    d: f32,
    /// The image is stored as `uint8` between the steps of a jitter.
    u8_steps: bool,
    alpha: Vec<f32>,
}

fn augment(call: &Call<'_>, random: bool, params: Call2, f: Augment) -> Result<Plan> {
    let x = &inputs(call, 1)?[0];
    let (_, _, c) = image_shape(call, x)?;
    let dtype = x.dtype;
    if dtype == DType::Bool {
        return Err(bad_dtype(call, "image ops do not take booleans"));
    }
    let plan = Plan::new(vec![TensorDesc::new(&x.shape, dtype)], move |k| {
        let mut rng = match k.resource {
            Some(r) if random => Some(r.random()?),
            _ => None,
        };
        crate::with_element!(dtype, T => {
            let mut px: Vec<f32> = k.inputs[0].slice::<T>().iter().map(|v| v.to_f32()).collect();
            f(&mut px, c, rng.as_deref_mut(), &params)?;
            for (o, v) in k.outputs[0].slice_mut::<T>().iter_mut().zip(px) {
                *o = sat::<T>(v);
            }
        });
        Ok(())
    });
    Ok(if random {
        plan.with_resource(ResourceRequest::Random)
    } else {
        plan
    })
}

fn uniform(g: &mut RandomGenerator, lo: f32, hi: f32) -> f32 {
    lo + (hi - lo) * g.next_unit() as f32
}

fn generator<'a>(g: Option<&'a mut RandomGenerator>) -> Result<&'a mut RandomGenerator> {
    g.ok_or_else(|| Error::invalid("random image op without its generator"))
}

fn flip_op(call: &Call<'_>, rows: bool, random: bool) -> Result<Plan> {
    let x = &inputs(call, 1)?[0];
    let (h, w, c) = image_shape(call, x)?;
    let dtype = x.dtype;
    let plan = Plan::new(vec![TensorDesc::new(&x.shape, dtype)], move |k| {
        let doit = match k.resource {
            Some(r) if random => r.random()?.next_unit() >= 0.5,
            _ => true,
        };
        crate::with_element!(dtype, T => {
            let src = k.inputs[0].slice::<T>();
            let dst = k.outputs[0].slice_mut::<T>();
            if !doit {
                dst.copy_from_slice(src);
            } else {
                for y in 0..h {
                    for xx in 0..w {
                        let (sy, sx) = if rows { (h - 1 - y, xx) } else { (y, w - 1 - xx) };
                        dst[(y * w + xx) * c..(y * w + xx + 1) * c]
                            .copy_from_slice(&src[(sy * w + sx) * c..(sy * w + sx + 1) * c]);
                    }
                }
            }
        });
        Ok(())
    });
    Ok(if random {
        plan.with_resource(ResourceRequest::Random)
    } else {
        plan
    })
}

fn brightness(px: &mut [f32], alpha: f32) {
    for v in px {
        *v *= alpha;
    }
}

const GRAY: [f32; 3] = [0.299, 0.587, 0.114];

fn contrast(px: &mut [f32], c: usize, alpha: f32) {
    let len = px.len() / c.max(1);
    let mut sum = 0f32;
    if c > 1 {
        for l in 0..len {
            for (k, w) in GRAY.iter().enumerate() {
                sum += px[l * 3 + k] * w;
            }
        }
    } else {
        for v in px.iter() {
            sum += v;
        }
    }
    let mean = sum / len.max(1) as f32;
    let beta = (1.0 - alpha) * mean;
    for v in px {
        *v = *v * alpha + beta;
    }
}

/// MXNet's saturation: the gray value it blends with is the blue channel's share only (its
/// loop assigns instead of accumulating), reproduced for equal results.
fn saturation(px: &mut [f32], c: usize, alpha: f32) {
    if c == 1 {
        return;
    }
    for p in px.chunks_exact_mut(3) {
        let gray = p[2] * GRAY[2] * (1.0 - alpha);
        for v in p {
            *v = gray + *v * alpha;
        }
    }
}

/// RGB in `[0, 255]` (divided by 255) to hue in degrees, lightness and saturation in `[0, 1]`.
fn rgb_to_hls(r: f32, g: f32, b: f32) -> (f32, f32, f32) {
    crate::imgproc::hls_from_rgb(r / 255.0, g / 255.0, b / 255.0)
}

/// The inverse of [`rgb_to_hls`]: hue in degrees (any value), channels back in `[0, 255]`.
fn hls_to_rgb(h: f32, l: f32, s: f32) -> (f32, f32, f32) {
    let (r, g, b) = crate::imgproc::rgb_from_hls(h / 60.0, l, s);
    (r * 255.0, g * 255.0, b * 255.0)
}

fn hue(px: &mut [f32], c: usize, alpha: f32) {
    if c == 1 {
        return;
    }
    for p in px.chunks_exact_mut(3) {
        let (h, l, s) = rgb_to_hls(p[0], p[1], p[2]);
        let (r, g, b) = hls_to_rgb(h + alpha * 360.0, l, s);
        p[0] = r;
        p[1] = g;
        p[2] = b;
    }
}

/// AlexNet's PCA lighting: adds the eigenvector mix for `alpha` to every pixel.
fn lighting(px: &mut [f32], c: usize, alpha: [f32; 3]) {
    if c == 1 {
        return;
    }
    const EIG: [[f32; 3]; 3] = [
        [55.46 * -0.5675, 4.794 * 0.7192, 1.148 * 0.4009],
        [55.46 * -0.5808, 4.794 * -0.0045, 1.148 * -0.8140],
        [55.46 * -0.5836, 4.794 * -0.6948, 1.148 * 0.4203],
    ];
    let pca: Vec<f32> = EIG
        .iter()
        .map(|e| e[0] * alpha[0] + e[1] * alpha[1] + e[2] * alpha[2])
        .collect();
    for p in px.chunks_exact_mut(3) {
        for k in 0..3 {
            p[k] += pca[k];
        }
    }
}

fn enhance_params(call: &Call<'_>) -> Result<Call2> {
    let p = call.params;
    let lo = p.required("min_factor", param::float, "a number")?;
    let hi = p.required("max_factor", param::float, "a number")?;
    if lo < 0.0 || hi < 0.0 {
        return fail(call, "min_factor and max_factor must be at least 0");
    }
    if lo > hi {
        return fail(
            call,
            format!("min_factor {lo} is larger than max_factor {hi}"),
        );
    }
    Ok(Call2 {
        a: lo as f32,
        b: hi as f32,
        ..Default::default()
    })
}

fn random_brightness(call: &Call<'_>) -> Result<Plan> {
    augment(call, true, enhance_params(call)?, |px, _, g, p| {
        brightness(px, uniform(generator(g)?, p.a, p.b));
        Ok(())
    })
}
fn random_contrast(call: &Call<'_>) -> Result<Plan> {
    augment(call, true, enhance_params(call)?, |px, c, g, p| {
        contrast(px, c, uniform(generator(g)?, p.a, p.b));
        Ok(())
    })
}
fn random_saturation(call: &Call<'_>) -> Result<Plan> {
    augment(call, true, enhance_params(call)?, |px, c, g, p| {
        saturation(px, c, uniform(generator(g)?, p.a, p.b));
        Ok(())
    })
}
fn random_hue(call: &Call<'_>) -> Result<Plan> {
    augment(call, true, enhance_params(call)?, |px, c, g, p| {
        hue(px, c, uniform(generator(g)?, p.a, p.b));
        Ok(())
    })
}

fn random_color_jitter(call: &Call<'_>) -> Result<Plan> {
    let p = call.params;
    let mut v = [0f32; 4];
    for (i, key) in ["brightness", "contrast", "saturation", "hue"]
        .iter()
        .enumerate()
    {
        v[i] = p.required(key, param::float, "a number")? as f32;
    }
    let is_u8 = inputs(call, 1)?[0].dtype == DType::U8;
    let params = Call2 {
        a: v[0],
        b: v[1],
        c: v[2],
        d: v[3],
        u8_steps: is_u8,
        alpha: vec![],
    };
    augment(call, true, params, |px, c, g, p| {
        let g = generator(g)?;
        let (hue_amt, u8_steps) = (p.d, p.u8_steps);
        let mut order = [0usize, 1, 2, 3];
        for i in (1..4).rev() {
            let j = (g.next_u32() as usize) % (i + 1);
            order.swap(i, j);
        }
        for step in order {
            let applied = match step {
                0 if p.a > 0.0 => {
                    brightness(px, 1.0 + uniform(g, -p.a, p.a));
                    true
                }
                1 if p.b > 0.0 => {
                    contrast(px, c, 1.0 + uniform(g, -p.b, p.b));
                    true
                }
                2 if p.c > 0.0 => {
                    saturation(px, c, 1.0 + uniform(g, -p.c, p.c));
                    true
                }
                3 if hue_amt > 0.0 => {
                    hue(px, c, uniform(g, -hue_amt, hue_amt));
                    true
                }
                _ => false,
            };
            // MXNet stores every step in the output: uint8 saturates and truncates in between
            if applied && u8_steps {
                for v in px.iter_mut() {
                    *v = v.clamp(0.0, 255.0).trunc();
                }
            }
        }
        Ok(())
    })
}

fn adjust_lighting(call: &Call<'_>) -> Result<Plan> {
    let alpha = call
        .params
        .required("alpha", param::floats, "a tuple of numbers")?;
    if alpha.len() < 3 {
        return fail(
            call,
            format!("alpha needs 3 values (R, G, B), got {alpha:?}"),
        );
    }
    let params = Call2 {
        alpha: alpha.iter().map(|&a| a as f32).collect(),
        ..Default::default()
    };
    augment(call, false, params, |px, c, _, p| {
        lighting(px, c, [p.alpha[0], p.alpha[1], p.alpha[2]]);
        Ok(())
    })
}

fn random_lighting(call: &Call<'_>) -> Result<Plan> {
    let std = call
        .params
        .or("alpha_std", param::float, "a number", 0.05)? as f32;
    augment(
        call,
        true,
        Call2 {
            a: std,
            ..Default::default()
        },
        |px, c, g, p| {
            let g = generator(g)?;
            let mut a = [0f32; 3];
            for v in &mut a {
                let r = (-2.0 * (1.0 - g.next_unit()).ln()).sqrt();
                *v = p.a * (r * (std::f64::consts::TAU * g.next_unit()).cos()) as f32;
            }
            lighting(px, c, a);
            Ok(())
        },
    )
}

/// MXNet's gradient of the augmenters: the output's gradient, copied.
fn copy_grad(
    g: &mut crate::operator::def::GradCtx<'_>,
) -> Result<Vec<Option<crate::operator::def::Val>>> {
    Ok(vec![Some(g.op(
        "_mxrt_image_grad_copy",
        &[g.dy(0), g.x(0)],
        &[],
    )?)])
}

pub(crate) fn register(t: &mut Entries) {
    t.def("_cvimdecode", &ndarray_only);
    t.def("_cvimread", &ndarray_only);
    t.def("_cvimresize", &cv_resize);
    t.def("_cvcopyMakeBorder", &copy_make_border);
    t.def("_image_to_tensor", &to_tensor).grad(copy_grad);
    t.def("_image_resize", &image_resize).grad(copy_grad);
    t.def("_image_normalize", &normalize).grad(|g| {
        let p = super::shape::some_params(g, &["mean", "std"]);
        Ok(vec![Some(g.op(
            "_mxrt_image_normalize_grad",
            &[g.dy(0)],
            &p,
        )?)])
    });
    t.def("_mxrt_image_normalize_grad", &normalize_grad)
        .grad(|g| {
            let p = super::shape::some_params(g, &["mean", "std"]);
            Ok(vec![Some(g.op(
                "_mxrt_image_normalize_grad",
                &[g.dy(0)],
                &p,
            )?)])
        });
    t.def("_image_crop", &crop).grad(|g| {
        let p = super::shape::all_params(g);
        Ok(vec![Some(g.op(
            "_mxrt_image_crop_grad",
            &[g.dy(0), g.x(0)],
            &p,
        )?)])
    });
    t.def("_mxrt_image_crop_grad", &crop_grad).grad(|g| {
        let p = super::shape::all_params(g);
        Ok(vec![Some(g.op("_image_crop", &[g.dy(0)], &p)?), None])
    });
    t.def("_mxrt_image_grad_copy", &grad_copy)
        .grad(|g| Ok(vec![Some(g.op("_copy", &[g.dy(0)], &[])?), None]));
    t.def("_image_flip_left_right", &|c: &Call<'_>| {
        flip_op(c, false, false)
    })
    .grad(copy_grad);
    t.def("_image_flip_top_bottom", &|c: &Call<'_>| {
        flip_op(c, true, false)
    })
    .grad(copy_grad);
    t.def("_image_random_flip_left_right", &|c: &Call<'_>| {
        flip_op(c, false, true)
    })
    .grad(copy_grad);
    t.def("_image_random_flip_top_bottom", &|c: &Call<'_>| {
        flip_op(c, true, true)
    })
    .grad(copy_grad);
    t.def("_image_random_brightness", &random_brightness)
        .grad(copy_grad);
    t.def("_image_random_contrast", &random_contrast)
        .grad(copy_grad);
    t.def("_image_random_saturation", &random_saturation)
        .grad(copy_grad);
    t.def("_image_random_hue", &random_hue).grad(copy_grad);
    t.def("_image_random_color_jitter", &random_color_jitter)
        .grad(copy_grad);
    t.def("_image_adjust_lighting", &adjust_lighting)
        .grad(copy_grad);
    t.def("_image_random_lighting", &random_lighting)
        .grad(copy_grad);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hls_round_trips() {
        for &(r, g, b) in &[
            (10.0, 200.0, 30.0),
            (255.0, 0.0, 0.0),
            (90.0, 90.0, 90.0),
            (3.0, 40.0, 250.0),
        ] {
            let (h, l, s) = rgb_to_hls(r, g, b);
            let (r2, g2, b2) = hls_to_rgb(h, l, s);
            assert!((r - r2).abs() < 1e-3 && (g - g2).abs() < 1e-3 && (b - b2).abs() < 1e-3);
        }
    }
}
