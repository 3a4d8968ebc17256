//! Images: JPEG and PNG decoding (zune-jpeg, zune-png) into OpenCV's layout, and the pixel
//! kernels MXNet takes from OpenCV: `resize` (nearest, bilinear, bicubic, area and Lanczos with
//! OpenCV's pixel-centre mapping and its fixed-point arithmetic for 8-bit images),
//! `warp_affine`, the 8-bit HLS conversions and `copy_make_border`.
//!
//! Images are HWC, row-major, channels interleaved. Decoding gives 1 channel (`flag` 0) or 3
//! (`flag` 1, RGB, or BGR as OpenCV when `to_rgb` is false); an alpha channel is dropped, 16-bit
//! PNGs keep their high byte, as OpenCV's `imdecode` does. An image larger than
//! [`MAX_PIXELS`] is refused before anything is allocated for it.

use crate::error::{Error, Result};
use zune_core::bytestream::ZCursor;
use zune_core::colorspace::ColorSpace;
use zune_core::options::DecoderOptions;

/// The largest image decoded: 2^27 pixels (a 384 MiB RGB image), each side at most 65535.
pub const MAX_PIXELS: usize = 1 << 27;
/// The longest side decoded.
pub const MAX_SIDE: usize = 65535;

/// A decoded image: `h * w * c` bytes, HWC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    pub h: usize,
    pub w: usize,
    pub c: usize,
    pub data: Vec<u8>,
}

fn invalid(what: impl std::fmt::Display) -> Error {
    Error::invalid(format!("Decoding failed. Invalid image file: {what}"))
}

fn check_size(w: usize, h: usize) -> Result<()> {
    if w == 0 || h == 0 {
        return Err(invalid(format!("the image has no pixels ({w}x{h})")));
    }
    if w > MAX_SIDE || h > MAX_SIDE || w.saturating_mul(h) > MAX_PIXELS {
        return Err(invalid(format!(
            "a {w}x{h} image is larger than the {MAX_SIDE} pixels a side and {MAX_PIXELS} pixels \
             in all mxrt decodes"
        )));
    }
    Ok(())
}

fn options() -> DecoderOptions {
    DecoderOptions::default()
        .set_max_width(MAX_SIDE)
        .set_max_height(MAX_SIDE)
}

/// Which format `bytes` hold, from their signature.
pub fn is_jpeg(bytes: &[u8]) -> bool {
    bytes.starts_with(&[0xFF, 0xD8])
}
pub fn is_png(bytes: &[u8]) -> bool {
    bytes.starts_with(&[0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A])
}

/// Decodes a JPEG or PNG file's bytes: `flag` 0 gives one gray channel, anything else three
/// colour channels (RGB when `to_rgb`, else BGR).
pub fn decode(bytes: &[u8], flag: i64, to_rgb: bool) -> Result<Image> {
    // the decoders return errors for bad input; a panic in one is turned into an error too, so
    // a decoding thread of an iterator never goes down with it
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        decode_inner(bytes, flag, to_rgb)
    }))
    .unwrap_or_else(|_| Err(invalid("the decoder failed on this file")))
}

fn decode_inner(bytes: &[u8], flag: i64, to_rgb: bool) -> Result<Image> {
    let gray = flag == 0;
    let mut img = if is_jpeg(bytes) {
        decode_jpeg(bytes, gray)?
    } else if is_png(bytes) {
        decode_png(bytes, gray)?
    } else {
        let head: Vec<String> = bytes.iter().take(4).map(|b| format!("{b:02x}")).collect();
        return Err(invalid(format!(
            "{} bytes starting {} are neither a JPEG nor a PNG file",
            bytes.len(),
            head.join(" ")
        )));
    };
    if !gray && !to_rgb {
        for px in img.data.chunks_exact_mut(3) {
            px.swap(0, 2);
        }
    }
    Ok(img)
}

fn decode_jpeg(bytes: &[u8], gray: bool) -> Result<Image> {
    let space = if gray {
        ColorSpace::Luma
    } else {
        ColorSpace::RGB
    };
    let opts = options().jpeg_set_out_colorspace(space);
    let mut d = zune_jpeg::JpegDecoder::new_with_options(ZCursor::new(bytes), opts);
    d.decode_headers()
        .map_err(|e| invalid(format!("JPEG: {e:?}")))?;
    let info = d
        .info()
        .ok_or_else(|| invalid("JPEG without a frame header"))?;
    let (w, h) = (info.width as usize, info.height as usize);
    check_size(w, h)?;
    let data = d.decode().map_err(|e| invalid(format!("JPEG: {e:?}")))?;
    let c = if gray { 1 } else { 3 };
    let out_c = d
        .output_colorspace()
        .map(|s| s.num_components())
        .unwrap_or(c);
    if data.len() != w * h * out_c {
        return Err(invalid(format!(
            "JPEG: {} bytes decoded for a {w}x{h} image",
            data.len()
        )));
    }
    Ok(Image {
        h,
        w,
        c,
        data: convert(data, out_c, c, w * h),
    })
}

fn decode_png(bytes: &[u8], gray: bool) -> Result<Image> {
    let opts = options().png_set_strip_to_8bit(true);
    let mut d = zune_png::PngDecoder::new_with_options(ZCursor::new(bytes), opts);
    d.decode_headers()
        .map_err(|e| invalid(format!("PNG: {e:?}")))?;
    let (w, h) = d
        .dimensions()
        .ok_or_else(|| invalid("PNG without a header"))?;
    check_size(w, h)?;
    let space = d
        .colorspace()
        .ok_or_else(|| invalid("PNG without a colour type"))?;
    let raw = d.decode_raw().map_err(|e| invalid(format!("PNG: {e:?}")))?;
    let n = w * h;
    let in_c = space.num_components();
    // 16-bit samples that were not stripped: keep the high byte (OpenCV's png_set_strip_16)
    let raw = if raw.len() == n * in_c * 2 {
        raw.chunks_exact(2).map(|p| p[0]).collect()
    } else {
        raw
    };
    if raw.len() != n * in_c {
        return Err(invalid(format!(
            "PNG: {} bytes decoded for a {w}x{h} image of {in_c} channels",
            raw.len()
        )));
    }
    let c = if gray { 1 } else { 3 };
    Ok(Image {
        h,
        w,
        c,
        data: convert(raw, in_c, c, n),
    })
}

/// Converts `n` pixels of `from` interleaved channels (1 gray, 2 gray+alpha, 3 RGB, 4 RGBA) to
/// `to` channels (1 or 3): alpha dropped, gray replicated, colour to gray as libpng does for
/// OpenCV (`png_set_rgb_to_gray` with 0.299 and 0.587: 15-bit weights 9797, 19234 and the
/// remainder 3737, truncated).
fn convert(data: Vec<u8>, from: usize, to: usize, n: usize) -> Vec<u8> {
    match (from, to) {
        (1, 1) | (3, 3) => data,
        (2, 1) | (4, 3) => data
            .chunks_exact(from)
            .flat_map(|p| p[..to].to_vec())
            .collect(),
        (1, 3) | (2, 3) => data.chunks_exact(from).flat_map(|p| [p[0]; 3]).collect(),
        (3, 1) | (4, 1) => data
            .chunks_exact(from)
            .map(|p| {
                let v = 9797 * p[0] as u32 + 19234 * p[1] as u32 + 3737 * p[2] as u32;
                (v >> 15).min(255) as u8
            })
            .collect(),
        _ => {
            let mut v = data;
            v.truncate(n * to);
            v
        }
    }
}

/// OpenCV's interpolation codes.
pub const INTER_NEAREST: i64 = 0;
pub const INTER_LINEAR: i64 = 1;
pub const INTER_CUBIC: i64 = 2;
pub const INTER_AREA: i64 = 3;
pub const INTER_LANCZOS4: i64 = 4;

/// A pixel type the resize kernels work on.
pub trait Pixel: Copy + Default + Send + Sync + 'static {
    /// 8-bit images use OpenCV's fixed-point bilinear arithmetic.
    const FIXED: bool;
    fn to_f64(self) -> f64;
    fn from_f64(v: f64) -> Self;
}
impl Pixel for u8 {
    const FIXED: bool = true;
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(v: f64) -> Self {
        v.round_ties_even().clamp(0.0, 255.0) as u8
    }
}
impl Pixel for f32 {
    const FIXED: bool = false;
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
}
impl Pixel for f64 {
    const FIXED: bool = false;
    fn to_f64(self) -> f64 {
        self
    }
    fn from_f64(v: f64) -> Self {
        v
    }
}

/// For each output position along an axis of `src` samples resized to `dst`: the two source
/// positions and the weight of the second (OpenCV's `(d + 0.5) * scale - 0.5`, computed in
/// float, clamped at the edges with a zero weight).
fn linear_taps(src: usize, dst: usize) -> Vec<(usize, usize, f32)> {
    let scale = 1.0 / (dst as f64 / src as f64);
    (0..dst)
        .map(|d| {
            let f = ((d as f64 + 0.5) * scale - 0.5) as f32;
            let mut s = f.floor() as i64;
            let mut frac = f - s as f32;
            if s < 0 {
                s = 0;
                frac = 0.0;
            }
            if s >= src as i64 - 1 {
                s = src as i64 - 1;
                frac = 0.0;
            }
            let s = s as usize;
            (s, (s + 1).min(src - 1), frac)
        })
        .collect()
}

/// OpenCV's bicubic weights (Keys' kernel with A = -0.75) of the four samples around a position
/// `x` past the second one, in float as OpenCV computes them.
fn cubic_weights(x: f32) -> [f32; 4] {
    const A: f32 = -0.75;
    let c0 = ((A * (x + 1.0) - 5.0 * A) * (x + 1.0) + 8.0 * A) * (x + 1.0) - 4.0 * A;
    let c1 = ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0;
    let c2 = ((A + 2.0) * (1.0 - x) - (A + 3.0)) * (1.0 - x) * (1.0 - x) + 1.0;
    [c0, c1, c2, 1.0 - c0 - c1 - c2]
}

/// OpenCV's Lanczos weights (`interpolateLanczos4`) of the eight samples around a position `x`
/// past the fourth one: `sinc(t) * sinc(t / 4)` over `t = x + 3 - i`, normalised to sum 1.
fn lanczos_weights(x: f32) -> [f32; 8] {
    let mut w = [0f32; 8];
    if x < f32::EPSILON {
        w[3] = 1.0;
        return w;
    }
    const S45: f64 = std::f64::consts::FRAC_1_SQRT_2;
    const CS: [[f64; 2]; 8] = [
        [1.0, 0.0],
        [-S45, -S45],
        [0.0, 1.0],
        [S45, -S45],
        [-1.0, 0.0],
        [S45, S45],
        [0.0, -1.0],
        [-S45, S45],
    ];
    let y0 = -(x as f64 + 3.0) * std::f64::consts::PI * 0.25;
    let (s0, c0) = (y0.sin(), y0.cos());
    let mut sum = 0f32;
    for (i, wi) in w.iter_mut().enumerate() {
        let y = -(x as f64 + 3.0 - i as f64) * std::f64::consts::PI * 0.25;
        *wi = ((CS[i][0] * s0 + CS[i][1] * c0) / (y * y)) as f32;
        sum += *wi;
    }
    let inv = 1.0 / sum;
    w.iter_mut().for_each(|v| *v *= inv);
    w
}

/// The weights of an interpolation kernel of `n` taps (4: bicubic, 8: Lanczos) at `x`.
fn kernel_weights(n: usize, x: f32) -> Vec<f32> {
    if n == 4 {
        cubic_weights(x).to_vec()
    } else {
        lanczos_weights(x).to_vec()
    }
}

/// For each output position along an axis of `src` samples resized to `dst`: the `n` source
/// positions (replicated at the edges, as OpenCV's resize) and their kernel weights (`n` 4:
/// bicubic, 8: Lanczos).
fn kernel_taps(src: usize, dst: usize, n: usize) -> Vec<(Vec<usize>, Vec<f32>)> {
    let scale = 1.0 / (dst as f64 / src as f64);
    let last = src as i64 - 1;
    let first = 1 - (n as i64) / 2;
    (0..dst)
        .map(|d| {
            let f = ((d as f64 + 0.5) * scale - 0.5) as f32;
            let s = f.floor() as i64;
            let frac = f - s as f32;
            let at = (0..n as i64)
                .map(|k| (s + first + k).clamp(0, last) as usize)
                .collect();
            (at, kernel_weights(n, frac))
        })
        .collect()
}

/// OpenCV's taps of `INTER_AREA` when enlarging: bilinear, with the fraction of each output
/// cell that falls on the next source pixel as the weight.
fn area_up_taps(src: usize, dst: usize) -> Vec<(usize, usize, f32)> {
    let scale = 1.0 / (dst as f64 / src as f64);
    let inv = dst as f64 / src as f64;
    (0..dst)
        .map(|d| {
            let mut s = (d as f64 * scale).floor() as i64;
            let mut f = ((d + 1) as f64 - (s + 1) as f64 * inv) as f32;
            f = if f <= 0.0 { 0.0 } else { f - f.floor() };
            if s >= src as i64 - 1 {
                s = src as i64 - 1;
                f = 0.0;
            }
            let s = s as usize;
            (s, (s + 1).min(src - 1), f)
        })
        .collect()
}

/// OpenCV's `computeResizeAreaTab`: for each output position the source positions it covers
/// and the share of each (`(dst, src, weight)` in order).
fn area_tab(src: usize, dst: usize, scale: f64) -> Vec<(usize, usize, f32)> {
    let mut tab = Vec::with_capacity(src * 2);
    for d in 0..dst {
        let f1 = d as f64 * scale;
        let f2 = f1 + scale;
        let cell = scale.min(src as f64 - f1);
        let mut s2 = f2.floor() as i64;
        s2 = s2.min(src as i64 - 1);
        let s1 = (f1.ceil() as i64).min(s2);
        if s1 as f64 - f1 > 1e-3 {
            tab.push((d, (s1 - 1) as usize, ((s1 as f64 - f1) / cell) as f32));
        }
        for s in s1..s2 {
            tab.push((d, s as usize, (1.0 / cell) as f32));
        }
        if f2 - s2 as f64 > 1e-3 {
            tab.push((
                d,
                s2 as usize,
                ((f2 - s2 as f64).min(1.0).min(cell) / cell) as f32,
            ));
        }
    }
    tab
}

/// OpenCV's `INTER_AREA` shrink (`dh <= sh`, `dw <= sw`): whole-number factors average their
/// blocks, other factors weigh each source pixel by the part of it an output cell covers (in
/// single precision, as OpenCV).
#[allow(clippy::too_many_arguments)]
fn area_shrink<T: Pixel>(
    src: &[T],
    sh: usize,
    sw: usize,
    c: usize,
    dst: &mut [T],
    dh: usize,
    dw: usize,
) {
    let (sx, sy) = (sw as f64 / dw as f64, sh as f64 / dh as f64);
    if sw % dw == 0 && sh % dh == 0 {
        let (ix, iy) = (sw / dw, sh / dh);
        let scale = 1.0f32 / (ix * iy) as f32;
        for y in 0..dh {
            for x in 0..dw {
                for k in 0..c {
                    let mut sum = 0f32;
                    let mut isum = 0i64;
                    for yy in y * iy..(y + 1) * iy {
                        for xx in x * ix..(x + 1) * ix {
                            let v = src[(yy * sw + xx) * c + k];
                            if T::FIXED {
                                isum += v.to_f64() as i64;
                            } else {
                                sum += v.to_f64() as f32;
                            }
                        }
                    }
                    if T::FIXED {
                        sum = isum as f32;
                    }
                    dst[(y * dw + x) * c + k] = T::from_f64((sum * scale) as f64);
                }
            }
        }
        return;
    }
    let xtab = area_tab(sw, dw, sx);
    let ytab = area_tab(sh, dh, sy);
    let n = dw * c;
    let mut buf = vec![0f32; n];
    let mut sum = vec![0f32; n];
    let mut prev = ytab.first().map_or(0, |t| t.0);
    for &(dy, srow, beta) in &ytab {
        buf.iter_mut().for_each(|v| *v = 0.0);
        let row = &src[srow * sw * c..(srow + 1) * sw * c];
        for &(dx, sxx, alpha) in &xtab {
            for k in 0..c {
                buf[dx * c + k] += row[sxx * c + k].to_f64() as f32 * alpha;
            }
        }
        if dy != prev {
            let out = &mut dst[prev * n..(prev + 1) * n];
            for i in 0..n {
                out[i] = T::from_f64(sum[i] as f64);
                sum[i] = beta * buf[i];
            }
            prev = dy;
        } else {
            for i in 0..n {
                sum[i] += beta * buf[i];
            }
        }
    }
    let out = &mut dst[prev * n..(prev + 1) * n];
    for i in 0..n {
        out[i] = T::from_f64(sum[i] as f64);
    }
}

/// `round(v * 2048)` as a 16-bit coefficient (OpenCV's `saturate_cast<short>`).
fn coef(v: f32) -> i32 {
    (v * 2048.0).round_ties_even() as i32
}

/// Resizes an HWC image of `c` channels from `sh x sw` to `dh x dw` into `dst` with OpenCV's
/// `cv::resize` semantics for `interp` 0 (nearest), 1 (bilinear; an exact halving of both
/// sides averages 2x2 blocks, as OpenCV switches to INTER_AREA there), 2 (bicubic) and 4
/// (Lanczos: 8-bit images in OpenCV's 11-bit fixed point, within one step of OpenCV's
/// vectorised rounding) and 3 (area: block averages or coverage weights when shrinking,
/// area-weighted bilinear taps when enlarging).
#[allow(clippy::too_many_arguments)]
pub fn resize<T: Pixel>(
    src: &[T],
    sh: usize,
    sw: usize,
    c: usize,
    dst: &mut [T],
    dh: usize,
    dw: usize,
    interp: i64,
) -> Result<()> {
    if sh == 0 || sw == 0 || dh == 0 || dw == 0 {
        return Err(Error::invalid(format!(
            "resize: cannot resize a {sh}x{sw} image to {dh}x{dw}"
        )));
    }
    match interp {
        INTER_NEAREST => {
            let sx = 1.0 / (dw as f64 / sw as f64);
            let sy = 1.0 / (dh as f64 / sh as f64);
            let xs: Vec<usize> = (0..dw)
                .map(|x| ((x as f64 * sx).floor() as usize).min(sw - 1))
                .collect();
            for y in 0..dh {
                let yy = ((y as f64 * sy).floor() as usize).min(sh - 1);
                let row = &src[yy * sw * c..(yy + 1) * sw * c];
                let out = &mut dst[y * dw * c..(y + 1) * dw * c];
                for (x, &xx) in xs.iter().enumerate() {
                    out[x * c..(x + 1) * c].copy_from_slice(&row[xx * c..(xx + 1) * c]);
                }
            }
            Ok(())
        }
        INTER_LINEAR | INTER_AREA if sw == 2 * dw && sh == 2 * dh => {
            for y in 0..dh {
                for x in 0..dw {
                    for k in 0..c {
                        let at = |yy: usize, xx: usize| src[(yy * sw + xx) * c + k];
                        let (a, b) = (at(2 * y, 2 * x), at(2 * y, 2 * x + 1));
                        let (d, e) = (at(2 * y + 1, 2 * x), at(2 * y + 1, 2 * x + 1));
                        dst[(y * dw + x) * c + k] = if T::FIXED {
                            let s = a.to_f64() + b.to_f64() + d.to_f64() + e.to_f64();
                            T::from_f64(((s as i64 + 2) >> 2) as f64)
                        } else {
                            T::from_f64((a.to_f64() + b.to_f64() + d.to_f64() + e.to_f64()) * 0.25)
                        };
                    }
                }
            }
            Ok(())
        }
        INTER_AREA if dw <= sw && dh <= sh => {
            area_shrink(src, sh, sw, c, dst, dh, dw);
            Ok(())
        }
        INTER_LINEAR | INTER_AREA => {
            let (xt, yt) = if interp == INTER_AREA {
                (area_up_taps(sw, dw), area_up_taps(sh, dh))
            } else {
                (linear_taps(sw, dw), linear_taps(sh, dh))
            };
            if T::FIXED {
                // horizontal pass in 11-bit fixed point, vertical pass as OpenCV's SIMD code
                let hrow = |yy: usize| -> Vec<i32> {
                    let row = &src[yy * sw * c..(yy + 1) * sw * c];
                    let mut out = vec![0i32; dw * c];
                    for (x, &(s0, s1, f)) in xt.iter().enumerate() {
                        let a0 = coef(1.0 - f);
                        let a1 = 2048 - a0;
                        for k in 0..c {
                            out[x * c + k] = row[s0 * c + k].to_f64() as i32 * a0
                                + row[s1 * c + k].to_f64() as i32 * a1;
                        }
                    }
                    out
                };
                let mut cache: Option<(usize, Vec<i32>, usize, Vec<i32>)> = None;
                for (y, &(r0, r1, f)) in yt.iter().enumerate() {
                    let (h0, h1) = match cache.take() {
                        Some((a, ha, b, hb)) if a == r0 && b == r1 => (ha, hb),
                        Some((_, _, b, hb)) if b == r0 => (hb, hrow(r1)),
                        _ => (hrow(r0), hrow(r1)),
                    };
                    let b0 = coef(1.0 - f);
                    let b1 = 2048 - b0;
                    let out = &mut dst[y * dw * c..(y + 1) * dw * c];
                    for i in 0..dw * c {
                        let v = ((b0 * (h0[i] >> 4)) >> 16) + ((b1 * (h1[i] >> 4)) >> 16);
                        out[i] = T::from_f64(((v + 2) >> 2).clamp(0, 255) as f64);
                    }
                    cache = Some((r0, h0, r1, h1));
                }
            } else {
                let hrow = |yy: usize| -> Vec<f64> {
                    let row = &src[yy * sw * c..(yy + 1) * sw * c];
                    let mut out = vec![0f64; dw * c];
                    for (x, &(s0, s1, f)) in xt.iter().enumerate() {
                        let (a0, a1) = ((1.0 - f) as f64, f as f64);
                        for k in 0..c {
                            out[x * c + k] =
                                row[s0 * c + k].to_f64() * a0 + row[s1 * c + k].to_f64() * a1;
                        }
                    }
                    out
                };
                for (y, &(r0, r1, f)) in yt.iter().enumerate() {
                    let (h0, h1) = (hrow(r0), hrow(r1));
                    let (b0, b1) = ((1.0 - f) as f64, f as f64);
                    let out = &mut dst[y * dw * c..(y + 1) * dw * c];
                    for i in 0..dw * c {
                        out[i] = T::from_f64(h0[i] * b0 + h1[i] * b1);
                    }
                }
            }
            Ok(())
        }
        INTER_CUBIC | INTER_LANCZOS4 => {
            let n = if interp == INTER_CUBIC { 4 } else { 8 };
            let xt = kernel_taps(sw, dw, n);
            let yt = kernel_taps(sh, dh, n);
            // one horizontal pass per source row, in fixed point (8-bit) or f64
            let hrow = |yy: usize| -> Vec<f64> {
                let row = &src[yy * sw * c..(yy + 1) * sw * c];
                let mut out = vec![0f64; dw * c];
                for (x, (xs, ws)) in xt.iter().enumerate() {
                    for k in 0..c {
                        out[x * c + k] = if T::FIXED {
                            let mut acc = 0i64;
                            for j in 0..n {
                                acc += row[xs[j] * c + k].to_f64() as i64 * coef(ws[j]) as i64;
                            }
                            acc as f64
                        } else {
                            (0..n)
                                .map(|j| row[xs[j] * c + k].to_f64() * ws[j] as f64)
                                .sum()
                        };
                    }
                }
                out
            };
            let rows: Vec<Option<Vec<f64>>> = {
                let mut used = vec![false; sh];
                for (ys, _) in &yt {
                    for &r in ys {
                        used[r] = true;
                    }
                }
                used.iter()
                    .enumerate()
                    .map(|(r, &u)| u.then(|| hrow(r)))
                    .collect()
            };
            for (y, (ys, ws)) in yt.iter().enumerate() {
                let h: Vec<&Vec<f64>> = ys
                    .iter()
                    .map(|&r| rows[r].as_ref().expect("a row the taps use"))
                    .collect();
                let out = &mut dst[y * dw * c..(y + 1) * dw * c];
                if T::FIXED {
                    let b: Vec<i64> = ws.iter().map(|&w| coef(w) as i64).collect();
                    for i in 0..dw * c {
                        let mut acc = 1i64 << 21;
                        for j in 0..n {
                            acc += b[j] * h[j][i] as i64;
                        }
                        out[i] = T::from_f64((acc >> 22).clamp(0, 255) as f64);
                    }
                } else {
                    for i in 0..dw * c {
                        let v: f64 = (0..n).map(|j| h[j][i] * ws[j] as f64).sum();
                        out[i] = T::from_f64(v);
                    }
                }
            }
            Ok(())
        }
        other => Err(Error::not_supported(format!(
            "resize: interpolation {other} is not implemented by mxrt (0: nearest, 1: bilinear, \
             2: bicubic, 3: area and 4: Lanczos are)"
        ))),
    }
}

/// OpenCV's border types.
pub const BORDER_CONSTANT: i64 = 0;
/// OpenCV's `cv::warpAffine` of an 8-bit HWC image with a constant border of `fill`: `m` is the
/// forward 2x3 matrix (source to destination, row-major, single precision as MXNet builds it),
/// inverted in double precision; destination positions map to the source in OpenCV's fixed
/// point (10 fractional bits, rounded to 1/32 of a pixel for bilinear), and bilinear taps
/// use OpenCV's 15-bit integer weights. `interp` 0 is nearest, 2 bicubic and 4 Lanczos (4x4
/// and 8x8 taps weighted by OpenCV's 32x32 tables of 15-bit weights), anything else bilinear
/// (OpenCV warps `INTER_AREA` bilinearly).
pub fn warp_affine(src: &Image, m: [f32; 6], dh: usize, dw: usize, interp: i64, fill: u8) -> Image {
    let c = src.c;
    let mut inv = m.map(f64::from);
    let d = inv[0] * inv[4] - inv[1] * inv[3];
    let d = if d != 0.0 { 1.0 / d } else { 0.0 };
    let (a11, a22) = (inv[4] * d, inv[0] * d);
    inv[0] = a11;
    inv[1] *= -d;
    inv[3] *= -d;
    inv[4] = a22;
    let b1 = -inv[0] * inv[2] - inv[1] * inv[5];
    let b2 = -inv[3] * inv[2] - inv[4] * inv[5];
    inv[2] = b1;
    inv[5] = b2;
    // cvRound: to nearest, ties to even, saturated
    let round = |v: f64| v.round_ties_even().clamp(i32::MIN as f64, i32::MAX as f64) as i64;
    const AB_BITS: i64 = 10;
    const AB_SCALE: f64 = 1024.0;
    const INTER_BITS: i64 = 5;
    let nearest = interp == INTER_NEAREST;
    let round_delta = if nearest { 512 } else { 16 };
    let adelta: Vec<i64> = (0..dw)
        .map(|x| round(inv[0] * x as f64 * AB_SCALE))
        .collect();
    let bdelta: Vec<i64> = (0..dw)
        .map(|x| round(inv[3] * x as f64 * AB_SCALE))
        .collect();
    let (sw, sh) = (src.w as i64, src.h as i64);
    let mut data = vec![fill; dh * dw * c];
    let px = |x: i64, y: i64, k: usize| -> i32 {
        if (0..sw).contains(&x) && (0..sh).contains(&y) {
            src.data[((y * sw + x) as usize) * c + k] as i32
        } else {
            fill as i32
        }
    };
    let ksize = match interp {
        INTER_CUBIC => 4,
        INTER_LANCZOS4 => 8,
        _ => 0,
    };
    let wtab = if ksize > 0 {
        remap_tab(ksize)
    } else {
        Vec::new()
    };
    for y in 0..dh {
        let x0 = round((inv[1] * y as f64 + inv[2]) * AB_SCALE) + round_delta;
        let y0 = round((inv[4] * y as f64 + inv[5]) * AB_SCALE) + round_delta;
        for x in 0..dw {
            let out = &mut data[(y * dw + x) * c..(y * dw + x + 1) * c];
            if nearest {
                let sx = (x0 + adelta[x]) >> AB_BITS;
                let sy = (y0 + bdelta[x]) >> AB_BITS;
                if (0..sw).contains(&sx) && (0..sh).contains(&sy) {
                    let at = ((sy * sw + sx) as usize) * c;
                    out.copy_from_slice(&src.data[at..at + c]);
                }
                continue;
            }
            let xx = (x0 + adelta[x]) >> (AB_BITS - INTER_BITS);
            let yy = (y0 + bdelta[x]) >> (AB_BITS - INTER_BITS);
            let (sx, sy) = (xx >> INTER_BITS, yy >> INTER_BITS);
            if ksize > 0 {
                let n = ksize as i64;
                let (sx, sy) = (sx - (n / 2 - 1), sy - (n / 2 - 1));
                if sx >= sw || sx + n <= 0 || sy >= sh || sy + n <= 0 {
                    continue;
                }
                let w = &wtab[(((yy & 31) * 32 + (xx & 31)) as usize) * ksize * ksize..];
                for (k, o) in out.iter_mut().enumerate() {
                    let mut v = 0i32;
                    for i in 0..n {
                        for j in 0..n {
                            v += px(sx + j, sy + i, k) * w[(i * n + j) as usize] as i32;
                        }
                    }
                    *o = ((v + (1 << 14)) >> 15).clamp(0, 255) as u8;
                }
                continue;
            }
            if sx >= sw || sx + 1 < 0 || sy >= sh || sy + 1 < 0 {
                continue;
            }
            let (ax, ay) = ((xx & 31) as i32, (yy & 31) as i32);
            let w = [
                (32 - ax) * (32 - ay) * 32,
                ax * (32 - ay) * 32,
                (32 - ax) * ay * 32,
                ax * ay * 32,
            ];
            for (k, o) in out.iter_mut().enumerate() {
                let v = px(sx, sy, k) * w[0]
                    + px(sx + 1, sy, k) * w[1]
                    + px(sx, sy + 1, k) * w[2]
                    + px(sx + 1, sy + 1, k) * w[3];
                *o = ((v + (1 << 14)) >> 15).clamp(0, 255) as u8;
            }
        }
    }
    Image {
        h: dh,
        w: dw,
        c,
        data,
    }
}

/// OpenCV's `initInterTab2D` for fixed point: for each of the 32x32 fractional positions the
/// `ksize x ksize` weights (products of the 1-D kernel's, rounded to 15 bits), corrected to sum
/// to 1 << 15 on the largest (or smallest) of the four central weights.
fn remap_tab(ksize: usize) -> Vec<i16> {
    let one = 1i32 << 15;
    let tabs: Vec<Vec<f32>> = (0..32)
        .map(|i| kernel_weights(ksize, i as f32 * (1.0 / 32.0)))
        .collect();
    let mut out = Vec::with_capacity(32 * 32 * ksize * ksize);
    for i in 0..32 {
        for j in 0..32 {
            let mut it = vec![0i32; ksize * ksize];
            let mut isum = 0;
            for k1 in 0..ksize {
                let vy = tabs[i][k1];
                for k2 in 0..ksize {
                    let v = vy * tabs[j][k2];
                    let q = (v * one as f32).round_ties_even().clamp(-32768.0, 32767.0) as i32;
                    it[k1 * ksize + k2] = q;
                    isum += q;
                }
            }
            if isum != one {
                let diff = isum - one;
                let k = ksize / 2;
                let (mut mk, mut big) = ((k, k), (k, k));
                for k1 in k..k + 2 {
                    for k2 in k..k + 2 {
                        let v = it[k1 * ksize + k2];
                        if v < it[mk.0 * ksize + mk.1] {
                            mk = (k1, k2);
                        } else if v > it[big.0 * ksize + big.1] {
                            big = (k1, k2);
                        }
                    }
                }
                if diff < 0 {
                    it[big.0 * ksize + big.1] -= diff;
                } else {
                    it[mk.0 * ksize + mk.1] -= diff;
                }
            }
            out.extend(it.iter().map(|&v| v as i16));
        }
    }
    out
}

/// OpenCV's float RGB to HLS conversion of one pixel with channels in `[0, 1]`: hue in degrees
/// `[0, 360)`, lightness and saturation in `[0, 1]`. The one core behind the 8-bit conversion
/// below and `mx.nd.image.random_hue`'s float one (`operator/ops/image.rs`); each caller scales
/// its input its own way.
pub fn hls_from_rgb(r: f32, g: f32, b: f32) -> (f32, f32, f32) {
    let vmax = r.max(g).max(b);
    let vmin = r.min(g).min(b);
    let mut diff = vmax - vmin;
    let l = (vmax + vmin) * 0.5;
    let (mut h, mut s) = (0f32, 0f32);
    if diff > f32::EPSILON {
        s = if l < 0.5 {
            diff / (vmax + vmin)
        } else {
            diff / (2.0 - vmax - vmin)
        };
        diff = 60.0 / diff;
        h = if vmax == r {
            (g - b) * diff
        } else if vmax == g {
            (b - r) * diff + 120.0
        } else {
            (r - g) * diff + 240.0
        };
        if h < 0.0 {
            h += 360.0;
        }
    }
    (h, l, s)
}

/// OpenCV's float HLS to RGB conversion of one pixel: `h6` is the hue in sixths of a turn (any
/// value, wrapped into `[0, 6)`), lightness and saturation in `[0, 1]`; channels in `[0, 1]`.
/// The inverse of [`hls_from_rgb`], shared the same way.
pub fn rgb_from_hls(h6: f32, l: f32, s: f32) -> (f32, f32, f32) {
    if s == 0.0 {
        return (l, l, l);
    }
    const SECTOR: [[usize; 3]; 6] = [
        [1, 3, 0],
        [1, 0, 2],
        [3, 0, 1],
        [0, 2, 1],
        [0, 1, 3],
        [2, 1, 0],
    ];
    let p2 = if l <= 0.5 {
        l * (1.0 + s)
    } else {
        l + s - l * s
    };
    let p1 = 2.0 * l - p2;
    let mut h = h6;
    // A huge or infinite hue would never leave the loops below (h ± 6 == h): reduce it first.
    // Within a few turns the loops keep the exact rounding of the adds they always did.
    if !h.is_nan() && !(-12.0..12.0).contains(&h) {
        h = if h.is_finite() { h.rem_euclid(6.0) } else { 0.0 };
    }
    while h < 0.0 {
        h += 6.0;
    }
    while h >= 6.0 {
        h -= 6.0;
    }
    // h is in [0, 6) (or NaN, which casts to 0)
    let sector = (h as usize).min(5);
    h -= sector as f32;
    let tab = [p2, p1, p1 + (p2 - p1) * (1.0 - h), p1 + (p2 - p1) * h];
    let sd = SECTOR[sector];
    (tab[sd[2]], tab[sd[1]], tab[sd[0]])
}

/// OpenCV's 8-bit `BGR2HLS` of one pixel: hue in `[0, 180)` (degrees halved), lightness and
/// saturation in `[0, 255]`, through single-precision floats as OpenCV converts (channels
/// multiplied by `1/255`).
pub fn bgr_to_hls(p: [u8; 3]) -> [u8; 3] {
    let k = 1.0f32 / 255.0;
    let (h, l, s) = hls_from_rgb(p[2] as f32 * k, p[1] as f32 * k, p[0] as f32 * k);
    let sat = |v: f32| v.round_ties_even().clamp(0.0, 255.0) as u8;
    [sat(h * 0.5), sat(l * 255.0), sat(s * 255.0)]
}

/// OpenCV's 8-bit `HLS2BGR` of one pixel (hue in `[0, 180)`).
pub fn hls_to_bgr(p: [u8; 3]) -> [u8; 3] {
    let k = 1.0f32 / 255.0;
    let (r, g, b) = rgb_from_hls(p[0] as f32 * (6.0f32 / 180.0), p[1] as f32 * k, p[2] as f32 * k);
    let sat = |v: f32| (v * 255.0).round_ties_even().clamp(0.0, 255.0) as u8;
    [sat(b), sat(g), sat(r)]
}

/// MXNet's HSL augmenter on an 8-bit BGR image: to HLS, `(dh, dl, ds)` added to each pixel
/// (hue clamped to `[0, 180]`, the others to `[0, 255]`), back to BGR.
pub fn shift_hls(data: &mut [u8], dh: i32, dl: i32, ds: i32) {
    for p in data.chunks_exact_mut(3) {
        let hls = bgr_to_hls([p[0], p[1], p[2]]);
        let moved = [
            (hls[0] as i32 + dh).clamp(0, 180) as u8,
            (hls[1] as i32 + dl).clamp(0, 255) as u8,
            (hls[2] as i32 + ds).clamp(0, 255) as u8,
        ];
        p.copy_from_slice(&hls_to_bgr(moved));
    }
}

pub const BORDER_REPLICATE: i64 = 1;
pub const BORDER_REFLECT: i64 = 2;
pub const BORDER_WRAP: i64 = 3;
pub const BORDER_REFLECT_101: i64 = 4;

/// The source position of position `p` (possibly outside `[0, n)`) under border `kind`
/// (`None`: the constant).
pub fn border_index(p: i64, n: i64, kind: i64) -> Option<usize> {
    if (0..n).contains(&p) {
        return Some(p as usize);
    }
    if n == 0 || kind == BORDER_CONSTANT {
        return None;
    }
    let r = match kind {
        BORDER_REPLICATE => p.clamp(0, n - 1),
        BORDER_WRAP => p.rem_euclid(n),
        BORDER_REFLECT | BORDER_REFLECT_101 => {
            if n == 1 {
                0
            } else {
                let delta = i64::from(kind == BORDER_REFLECT_101);
                let mut q = p;
                while !(0..n).contains(&q) {
                    q = if q < 0 {
                        -q - 1 + delta
                    } else {
                        n - 1 - (q - n) - delta
                    };
                }
                q
            }
        }
        _ => return None,
    };
    Some(r as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_taps_follow_pixel_centres() {
        // 4 -> 2 is a halving: centres at 0.5 and 2.5
        let t = linear_taps(4, 2);
        assert_eq!((t[0].0, t[0].1), (0, 1));
        assert!((t[0].2 - 0.5).abs() < 1e-6);
        // upscaling clamps the first and last positions to the edge with zero weight
        let t = linear_taps(2, 4);
        assert_eq!((t[0].0, t[0].2), (0, 0.0));
        assert_eq!((t[3].0, t[3].2), (1, 0.0));
        assert!((t[1].2 - 0.25).abs() < 1e-6);
    }

    #[test]
    fn bilinear_of_a_constant_image_is_the_constant() {
        let src = vec![77u8; 5 * 7 * 3];
        let mut dst = vec![0u8; 3 * 11 * 3];
        resize(&src, 5, 7, 3, &mut dst, 3, 11, INTER_LINEAR).unwrap();
        assert!(dst.iter().all(|&v| v == 77));
    }

    #[test]
    fn lanczos_and_remap_weights_sum_to_one() {
        for i in 0..32 {
            let w = lanczos_weights(i as f32 / 32.0);
            assert!((w.iter().sum::<f32>() - 1.0).abs() < 1e-5, "{w:?}");
        }
        assert_eq!(lanczos_weights(0.0)[3], 1.0);
        for ksize in [4, 8] {
            let tab = remap_tab(ksize);
            for cell in tab.chunks_exact(ksize * ksize) {
                assert_eq!(cell.iter().map(|&v| v as i32).sum::<i32>(), 1 << 15);
            }
        }
    }

    #[test]
    fn huge_and_infinite_hues_end() {
        for h in [f32::INFINITY, f32::NEG_INFINITY, 1e30, -1e30, 12.5, -12.5] {
            let (r, g, b) = rgb_from_hls(h, 0.5, 0.5);
            assert!(r.is_finite() && g.is_finite() && b.is_finite(), "hue {h}");
        }
        let (a, b) = (rgb_from_hls(12.5, 0.4, 0.7), rgb_from_hls(0.5, 0.4, 0.7));
        assert!((a.0 - b.0).abs() < 1e-6 && (a.1 - b.1).abs() < 1e-6 && (a.2 - b.2).abs() < 1e-6);
        let _ = rgb_from_hls(f32::NAN, 0.5, 0.5);
    }

    #[test]
    fn hls_round_trips_grays_and_primaries() {
        for v in [0u8, 1, 77, 128, 254, 255] {
            assert_eq!(bgr_to_hls([v, v, v]), [0, v, 0]);
            assert_eq!(hls_to_bgr([0, v, 0]), [v, v, v]);
        }
        // pure red (BGR order): hue 0, lightness 128, full saturation
        assert_eq!(bgr_to_hls([0, 0, 255]), [0, 128, 255]);
        assert_eq!(bgr_to_hls([255, 0, 0]), [120, 128, 255]);
        // back to BGR: lightness 128 of 255 lifts the dark channels to 1, as in OpenCV
        assert_eq!(hls_to_bgr([0, 128, 255]), [1, 1, 255]);
        assert_eq!(hls_to_bgr([60, 128, 255]), [1, 255, 1]);
    }

    #[test]
    fn area_and_lanczos_keep_a_constant_image() {
        let src = vec![91u8; 9 * 13 * 3];
        for (interp, dh, dw) in [
            (INTER_AREA, 4, 5),
            (INTER_AREA, 3, 13),
            (INTER_AREA, 17, 20),
        ] {
            let mut dst = vec![0u8; dh * dw * 3];
            resize(&src, 9, 13, 3, &mut dst, dh, dw, interp).unwrap();
            assert!(dst.iter().all(|&v| v == 91), "{interp} {dh}x{dw}");
        }
        let mut dst = vec![0u8; 20 * 7 * 3];
        resize(&src, 9, 13, 3, &mut dst, 20, 7, INTER_LANCZOS4).unwrap();
        assert!(dst.iter().all(|&v| v.abs_diff(91) <= 1));
    }

    #[test]
    fn borders_follow_opencv() {
        // abcd with 2 positions on either side
        let idx = |k| (-2..6).map(|p| border_index(p, 4, k)).collect::<Vec<_>>();
        let s = |v: &[usize]| v.iter().map(|&i| Some(i)).collect::<Vec<_>>();
        assert_eq!(idx(BORDER_REPLICATE), s(&[0, 0, 0, 1, 2, 3, 3, 3]));
        assert_eq!(idx(BORDER_REFLECT), s(&[1, 0, 0, 1, 2, 3, 3, 2]));
        assert_eq!(idx(BORDER_REFLECT_101), s(&[2, 1, 0, 1, 2, 3, 2, 1]));
        assert_eq!(idx(BORDER_WRAP), s(&[2, 3, 0, 1, 2, 3, 0, 1]));
        assert_eq!(idx(BORDER_CONSTANT)[0], None);
    }

    #[test]
    fn garbage_is_an_error_naming_the_bytes() {
        let e = decode(b"not an image", 1, true).unwrap_err();
        assert!(e.message().contains("neither a JPEG nor a PNG"), "{e}");
        let e = decode(&[0xFF, 0xD8, 0xFF, 0xC0, 0, 0], 1, true).unwrap_err();
        assert!(e.message().contains("Decoding failed"), "{e}");
    }
}
