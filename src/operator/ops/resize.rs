//! Resizing and cropping of `NCHW` images: `UpSampling` (nearest neighbour with one or more
//! inputs, concatenated or summed; bilinear as MXNet does it, a grouped transposed convolution
//! with a given kernel), `_contrib_BilinearResize2D` (every mode of MXNet 1.9.1) and the legacy
//! `Crop`.
//!
//! Nearest `UpSampling`, `BilinearResize2D` and `Crop` take their gradients from one internal op
//! each (`_mxrt_upsampling_grad`, `_mxrt_bilinear_resize_grad`, `_mxrt_crop_grad`), which takes
//! the forward's inputs as "like" inputs for the gradients' shapes; bilinear `UpSampling` takes
//! the transposed convolution's gradient ops of `conv.rs`.

use super::conv::float_dtype;
use super::nn::as_refs;
use super::{Entries, dims};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::operator::def::{GradCtx, ParamList, Signature, Val, param, param_int};
use crate::operator::kernel::Element;
use crate::operator::kernel::conv::{ConvGeom, raise};
use crate::operator::op::{Call, Plan, TensorDesc};
use crate::operator::param as p;

fn check_4d(call: &Call<'_>, t: &TensorDesc, what: &str) -> Result<[usize; 4]> {
    if t.shape.len() != 4 {
        return Err(Error::invalid(format!(
            "operator {}: {what} should be 4D in (batch, channel, y, x), got shape {:?}",
            call.name,
            &t.shape[..]
        )));
    }
    let d = dims(&t.shape);
    Ok([d[0], d[1], d[2], d[3]])
}

fn same_dtypes(call: &Call<'_>) -> Result<DType> {
    let dtype = call.inputs[0].dtype;
    for (i, t) in call.inputs.iter().enumerate() {
        if t.dtype != dtype {
            return Err(Error::invalid(format!(
                "operator {}: input {i} is {} but input 0 is {} (one dtype for all inputs)",
                call.name,
                t.dtype.name(),
                dtype.name()
            )));
        }
    }
    Ok(dtype)
}

// ---------------------------------------------------------------------------------------------
// UpSampling

struct UpParams {
    scale: usize,
    nearest: bool,
    sum: bool,
    num_args: usize,
    num_filter: usize,
}

fn up_params(call: &Call<'_>) -> Result<UpParams> {
    let ps = call.params;
    let scale = ps.required("scale", p::int, "an integer of at least 1")?;
    if scale < 1 {
        return Err(Error::invalid(format!(
            "operator {}: parameter 'scale' must be at least 1, got {scale}",
            call.name
        )));
    }
    let kind = ps.required("sample_type", p::choice, "nearest or bilinear")?;
    let nearest = match kind.as_str() {
        "nearest" => true,
        "bilinear" => false,
        _ => {
            return Err(Error::invalid(format!(
                "operator {}: Invalid Input: '{kind}', valid values are: {{'bilinear', 'nearest'}}",
                call.name
            )));
        }
    };
    let mode = ps.or(
        "multi_input_mode",
        p::choice,
        "concat or sum",
        "concat".into(),
    )?;
    if !matches!(mode.as_str(), "concat" | "sum") {
        return Err(Error::invalid(format!(
            "operator {}: Invalid Input: '{mode}', valid values are: {{'concat', 'sum'}}",
            call.name
        )));
    }
    let num_args = ps.required("num_args", p::int, "an integer of at least 1")?;
    if num_args < 1 {
        return Err(Error::invalid(format!(
            "operator {}: parameter 'num_args' must be at least 1, got {num_args}",
            call.name
        )));
    }
    let num_filter = ps.or("num_filter", p::int, "an integer", 0)?;
    ps.optional("workspace", p::int, "an integer")?;
    Ok(UpParams {
        scale: scale as usize,
        nearest,
        sum: mode == "sum",
        num_args: num_args as usize,
        num_filter: num_filter.max(0) as usize,
    })
}

/// Bilinear UpSampling's transposed-convolution geometry: kernel, stride and padding.
fn bilinear_geometry(scale: usize) -> (usize, usize, usize) {
    (2 * scale - scale % 2, scale, (scale - 1).div_ceil(2))
}

/// Each nearest input's scale (output height over its height) and channel offset.
fn nearest_layout(call: &Call<'_>, u: &UpParams) -> Result<(Vec<(usize, usize)>, [usize; 4])> {
    let first = check_4d(call, &call.inputs[0], "UpSamplingNearest: Input data")?;
    let (oh, ow) = (first[2] * u.scale, first[3] * u.scale);
    let mut layout = Vec::new();
    let mut channels = 0;
    for (i, t) in call.inputs.iter().enumerate() {
        let d = check_4d(call, t, "UpSamplingNearest: Input data")?;
        if d[0] != first[0] {
            return Err(Error::invalid(format!(
                "operator {}: input {i} has batch size {}, input 0 {}",
                call.name, d[0], first[0]
            )));
        }
        if d[2] == 0 || oh % d[2] != 0 || d[3] == 0 || ow % d[3] != 0 {
            return Err(Error::invalid(format!(
                "operator {}: UpSamplingNearest: input height of {} and width of {} do not divide output height of {oh} and width of {ow}",
                call.name, d[2], d[3]
            )));
        }
        let s = oh / d[2];
        if d[3] * s != ow {
            return Err(Error::invalid(format!(
                "operator {}: UpSamplingNearest: input {i} of {}x{} does not scale by {s} to {oh}x{ow}",
                call.name, d[2], d[3]
            )));
        }
        if u.sum {
            if i > 0 && d[1] != channels {
                return Err(Error::invalid(format!(
                    "operator {}: Number of channels must be the same when multi_input_mode==sum",
                    call.name
                )));
            }
            layout.push((s, 0));
            channels = d[1];
        } else {
            layout.push((s, channels));
            channels += d[1];
        }
    }
    Ok((layout, [first[0], channels, oh, ow]))
}

fn upsampling(call: &Call<'_>) -> Result<Plan> {
    let u = up_params(call)?;
    let dtype = same_dtypes(call)?;
    float_dtype(call, dtype)?;
    if !u.nearest {
        return upsampling_bilinear(call, &u, dtype);
    }
    if call.inputs.len() != u.num_args {
        return Err(Error::invalid(format!(
            "operator {}: {} inputs given, parameter 'num_args' is {}",
            call.name,
            call.inputs.len(),
            u.num_args
        )));
    }
    let (layout, out) = nearest_layout(call, &u)?;
    let shapes: Vec<[usize; 4]> = call
        .inputs
        .iter()
        .map(|t| check_4d(call, t, "data"))
        .collect::<Result<_>>()?;
    let sum = u.sum;
    let oshape: Vec<i64> = out.iter().map(|&d| d as i64).collect();
    Ok(Plan::new(vec![TensorDesc::new(&oshape, dtype)], move |k| {
        crate::with_element!(dtype, T => {
            let y = k.outputs[0].slice_mut::<T>();
            let mut acc = vec![0f64; if sum { y.len() } else { 0 }];
            let [n, oc, oh, ow] = out;
            for (i, (&(s, cbase), sh)) in layout.iter().zip(&shapes).enumerate() {
                let x = k.inputs[i].slice::<T>();
                let [_, c, h, w] = *sh;
                for b in 0..n {
                    for ch in 0..c {
                        let src = &x[(b * c + ch) * h * w..][..h * w];
                        let dst = ((b * oc + cbase + ch) * oh) * ow;
                        for yy in 0..oh {
                            for xx in 0..ow {
                                let v = src[(yy / s) * w + xx / s];
                                let o = dst + yy * ow + xx;
                                if sum {
                                    acc[o] += v.to_f64();
                                } else {
                                    y[o] = v;
                                }
                            }
                        }
                    }
                }
            }
            if sum {
                for (o, v) in y.iter_mut().zip(&acc) {
                    *o = T::from_f64(*v);
                }
            }
        });
        Ok(())
    }))
}

fn upsampling_bilinear(call: &Call<'_>, u: &UpParams, dtype: DType) -> Result<Plan> {
    if call.inputs.len() != 2 {
        return Err(Error::invalid(format!(
            "operator {}: Input:[data, weight] ({} inputs given)",
            call.name,
            call.inputs.len()
        )));
    }
    let x = check_4d(call, &call.inputs[0], "UpSamplingBilinear: Input data")?;
    let (kernel, stride, pad) = bilinear_geometry(u.scale);
    let want = [x[1] as i64, 1, kernel as i64, kernel as i64];
    if call.inputs[1].shape[..] != want {
        return Err(Error::invalid(format!(
            "operator {}: Shape inconsistent, Provided = {:?}, inferred shape={want:?} (weight)",
            call.name,
            &call.inputs[1].shape[..]
        )));
    }
    if u.num_filter != x[1] {
        return Err(Error::invalid(format!(
            "operator {}: bilinear upsampling needs parameter 'num_filter' equal to the data's {} channels, got {}",
            call.name, x[1], u.num_filter
        )));
    }
    let (oh, ow) = (x[2] * u.scale, x[3] * u.scale);
    let g = ConvGeom {
        batch: x[0],
        groups: x[1],
        in_ch: x[1],
        out_ch: x[1],
        input: [1, oh, ow],
        output: [1, x[2], x[3]],
        kernel: [1, kernel, kernel],
        stride: [1, stride, stride],
        dilate: [1; 3],
        pad: [0, pad, pad],
    };
    let out = [x[0] as i64, x[1] as i64, oh as i64, ow as i64];
    Ok(Plan::new(vec![TensorDesc::new(&out, dtype)], move |k| {
        match dtype {
            DType::F64 => raise(
                &g,
                k.inputs[0].slice::<f64>(),
                k.inputs[1].slice::<f64>(),
                k.outputs[0].slice_mut::<f64>(),
            ),
            DType::F16 => raise(
                &g,
                k.inputs[0].slice::<half::f16>(),
                k.inputs[1].slice::<half::f16>(),
                k.outputs[0].slice_mut::<half::f16>(),
            ),
            _ => raise(
                &g,
                k.inputs[0].slice::<f32>(),
                k.inputs[1].slice::<f32>(),
                k.outputs[0].slice_mut::<f32>(),
            ),
        }
        Ok(())
    }))
}

/// `_mxrt_upsampling_grad(dy, x0, ..., xk)`: each nearest input's gradient, the sums of `dy`
/// over the blocks its pixels were copied to.
fn upsampling_backward(call: &Call<'_>) -> Result<Plan> {
    let u = up_params(call)?;
    if call.inputs.len() < 2 {
        return Err(Error::invalid(format!(
            "operator {} takes the output gradient and the forward's inputs",
            call.name
        )));
    }
    let dtype = same_dtypes(call)?;
    let fwd: Vec<TensorDesc> = call.inputs[1..].to_vec();
    let sub = Call {
        inputs: &fwd,
        ..*call
    };
    let (layout, out) = nearest_layout(&sub, &u)?;
    let dy = check_4d(call, &call.inputs[0], "output gradient")?;
    if dy != out {
        return Err(Error::invalid(format!(
            "operator {}: output gradient of shape {:?}, the forward's output is {out:?}",
            call.name,
            &call.inputs[0].shape[..]
        )));
    }
    let shapes: Vec<[usize; 4]> = fwd
        .iter()
        .map(|t| check_4d(call, t, "data"))
        .collect::<Result<_>>()?;
    Ok(Plan::new(fwd.clone(), move |k| {
        crate::with_element!(dtype, T => {
            let g = k.inputs[0].slice::<T>();
            let [_, oc, oh, ow] = out;
            for (i, (&(s, cbase), sh)) in layout.iter().zip(&shapes).enumerate() {
                let dx = k.outputs[i].slice_mut::<T>();
                let [n, c, h, w] = *sh;
                for b in 0..n {
                    for ch in 0..c {
                        let src = ((b * oc + cbase + ch) * oh) * ow;
                        for yy in 0..h {
                            for xx in 0..w {
                                let mut acc = 0f64;
                                for a in 0..s {
                                    let row = src + (yy * s + a) * ow + xx * s;
                                    for v in &g[row..row + s] {
                                        acc += v.to_f64();
                                    }
                                }
                                dx[((b * c + ch) * h + yy) * w + xx] = T::from_f64(acc);
                            }
                        }
                    }
                }
            }
        });
        Ok(())
    }))
}

fn upsampling_grad(g: &mut GradCtx<'_>) -> Result<Vec<Option<Val>>> {
    if g.param("sample_type") == Some("bilinear") {
        let scale: usize = g
            .param("scale")
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(1);
        let (kernel, stride, pad) = bilinear_geometry(scale);
        let groups = g.param("num_filter").unwrap_or("1").to_string();
        let geo = [
            ("kernel".to_string(), format!("({kernel}, {kernel})")),
            ("stride".to_string(), format!("({stride}, {stride})")),
            ("pad".to_string(), format!("({pad}, {pad})")),
            ("num_group".to_string(), groups),
            ("deconv".to_string(), "True".to_string()),
        ];
        let geo = as_refs(&geo);
        let (x, w, dy) = (g.x(0), g.x(1), g.dy(0));
        let dx = if g.needs(0) {
            Some(g.op("_mxrt_conv_lower", &[dy, w, x], &geo)?)
        } else {
            None
        };
        let dw = if g.needs(1) {
            Some(g.op("_mxrt_conv_wgrad", &[dy, x, w], &geo)?)
        } else {
            None
        };
        return Ok(vec![dx, dw]);
    }
    let params = g.params.to_vec();
    let mut ins = vec![g.dy(0)];
    ins.extend_from_slice(g.inputs);
    let grads = g.ops("_mxrt_upsampling_grad", &ins, &as_refs(&params))?;
    Ok(grads.into_iter().map(Some).collect())
}

fn upsampling_signature(ps: &ParamList) -> Result<Signature> {
    if param(ps, "sample_type") == Some("bilinear") {
        return Ok(Signature::simple(&["data", "weight"]));
    }
    let n = param_int(ps, "num_args", 1)?.max(1);
    let names: Vec<String> = (0..n).map(|i| format!("arg{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    Ok(Signature::simple(&names))
}

// ---------------------------------------------------------------------------------------------
// BilinearResize2D

#[derive(Clone, Copy, PartialEq, Eq)]
enum ResizeMode {
    Size,
    OddScale,
    Like,
    ToEvenDown,
    ToEvenUp,
    ToOddDown,
    ToOddUp,
}

struct ResizeParams {
    mode: ResizeMode,
    height: i64,
    width: i64,
    scale_h: Option<f64>,
    scale_w: Option<f64>,
    align_corners: bool,
}

fn resize_params(call: &Call<'_>) -> Result<ResizeParams> {
    let ps = call.params;
    let height = ps.or("height", p::int, "an integer of at least 1", 1)?;
    let width = ps.or("width", p::int, "an integer of at least 1", 1)?;
    for (key, v) in [("height", height), ("width", width)] {
        if v < 1 {
            return Err(Error::invalid(format!(
                "operator {}: parameter '{key}' must be at least 1, got {v}",
                call.name
            )));
        }
    }
    let scale_h = ps.optional("scale_height", p::float, "a number")?;
    let scale_w = ps.optional("scale_width", p::float, "a number")?;
    let mode_s = ps.or("mode", p::choice, "a resize mode", "size".into())?;
    let mode = match mode_s.as_str() {
        "size" => ResizeMode::Size,
        "odd_scale" => ResizeMode::OddScale,
        "like" => ResizeMode::Like,
        "to_even_down" => ResizeMode::ToEvenDown,
        "to_even_up" => ResizeMode::ToEvenUp,
        "to_odd_down" => ResizeMode::ToOddDown,
        "to_odd_up" => ResizeMode::ToOddUp,
        _ => {
            return Err(Error::invalid(format!(
                "operator {}: Invalid Input: '{mode_s}', valid values are: {{'like', 'odd_scale', 'size', 'to_even_down', 'to_even_up', 'to_odd_down', 'to_odd_up'}}",
                call.name
            )));
        }
    };
    let align_corners = ps.or("align_corners", p::boolean, "a boolean", true)?;
    Ok(ResizeParams {
        mode,
        height,
        width,
        scale_h,
        scale_w,
        align_corners,
    })
}

/// The output height and width for data `x` (and `like`, in mode `like`).
fn resize_out(
    call: &Call<'_>,
    r: &ResizeParams,
    x: [usize; 4],
    like: Option<[usize; 4]>,
) -> Result<(usize, usize)> {
    let (h, w) = (x[2] as i64, x[3] as i64);
    let need = |v: Option<f64>, key: &str| {
        v.ok_or_else(|| {
            Error::invalid(format!(
                "operator {}: mode needs parameter '{key}'",
                call.name
            ))
        })
    };
    let (nh, nw) = match r.mode {
        ResizeMode::Size => match r.scale_h {
            // MXNet takes the width's scale whenever the height's is given
            Some(sh) => (
                (sh * h as f64) as i64,
                (need(r.scale_w, "scale_width")? * w as f64) as i64,
            ),
            None => (r.height, r.width),
        },
        ResizeMode::OddScale => {
            let (sh, sw) = (
                need(r.scale_h, "scale_height")?,
                need(r.scale_w, "scale_width")?,
            );
            let f = |d: i64, s: f64| {
                if d % 2 == 0 {
                    (d as f64 * s) as i64
                } else {
                    ((d - 1) as f64 * s) as i64 + 1
                }
            };
            (f(h, sh), f(w, sw))
        }
        ResizeMode::Like => {
            let l = like.expect("mode like has two inputs");
            (l[2] as i64, l[3] as i64)
        }
        ResizeMode::ToEvenDown => (h - h % 2, w - w % 2),
        ResizeMode::ToEvenUp => (h + h % 2, w + w % 2),
        ResizeMode::ToOddDown => (h - 1 + h % 2, w - 1 + w % 2),
        ResizeMode::ToOddUp => (h + 1 - h % 2, w + 1 - w % 2),
    };
    if nh < 1 || nw < 1 {
        return Err(Error::invalid(format!(
            "operator {}: the output would be {nh}x{nw} for data of {h}x{w}",
            call.name
        )));
    }
    Ok((nh as usize, nw as usize))
}

/// One output coordinate's source: the lower input index, its neighbour's offset (0 or 1) and
/// the neighbour's weight, computed in float32 as MXNet does.
fn source(inp: usize, out: usize, align: bool, dst: usize) -> (usize, usize, f32) {
    let scale = if out > 1 {
        if align {
            (inp as f32 - 1.0) / (out as f32 - 1.0)
        } else {
            inp as f32 / out as f32
        }
    } else {
        0.0
    };
    let r = if align {
        scale * dst as f32
    } else {
        let s = scale * (dst as f32 + 0.5) - 0.5;
        if s < 0.0 { 0.0 } else { s }
    };
    let i = r as usize;
    let step = usize::from(i + 1 < inp);
    (i, step, r - i as f32)
}

fn resize_inputs(
    call: &Call<'_>,
    r: &ResizeParams,
) -> Result<(usize, [usize; 4], Option<[usize; 4]>)> {
    let n = if r.mode == ResizeMode::Like { 2 } else { 1 };
    if call.inputs.len() < n {
        return Err(Error::invalid(format!(
            "operator {} takes {n} input(s), {} given",
            call.name,
            call.inputs.len()
        )));
    }
    let x = check_4d(call, &call.inputs[0], "data")?;
    let like = if n == 2 {
        Some(check_4d(call, &call.inputs[1], "like")?)
    } else {
        None
    };
    Ok((n, x, like))
}

fn bilinear_resize(call: &Call<'_>) -> Result<Plan> {
    let r = resize_params(call)?;
    let (n, x, like) = resize_inputs(call, &r)?;
    if call.inputs.len() != n {
        return Err(Error::invalid(format!(
            "operator {} takes {n} input(s), {} given",
            call.name,
            call.inputs.len()
        )));
    }
    let dtype = call.inputs[0].dtype;
    float_dtype(call, dtype)?;
    let (oh, ow) = resize_out(call, &r, x, like)?;
    let align = r.align_corners;
    let out = [x[0] as i64, x[1] as i64, oh as i64, ow as i64];
    Ok(Plan::new(vec![TensorDesc::new(&out, dtype)], move |k| {
        let (planes, h, w) = (x[0] * x[1], x[2], x[3]);
        crate::with_element!(dtype, T => {
            let src = k.inputs[0].slice::<T>();
            let y = k.outputs[0].slice_mut::<T>();
            for yy in 0..oh {
                let (h1, hp, hl) = if h == oh { (yy, 0, 0.0) } else { source(h, oh, align, yy) };
                for xx in 0..ow {
                    let (w1, wp, wl) = if w == ow { (xx, 0, 0.0) } else { source(w, ow, align, xx) };
                    let (h1l, w1l) = (hl as f64, wl as f64);
                    let (h0l, w0l) = (1.0 - h1l, 1.0 - w1l);
                    for pl in 0..planes {
                        let base = pl * h * w + h1 * w + w1;
                        let at = |o: usize| src[base + o].to_f64();
                        let v = h0l * (w0l * at(0) + w1l * at(wp))
                            + h1l * (w0l * at(hp * w) + w1l * at(hp * w + wp));
                        y[(pl * oh + yy) * ow + xx] = T::from_f64(v);
                    }
                }
            }
        });
        Ok(())
    }))
}

/// `_mxrt_bilinear_resize_grad(dy, x[, like])`: the data's gradient (and zeros for `like`).
fn bilinear_resize_backward(call: &Call<'_>) -> Result<Plan> {
    let r = resize_params(call)?;
    let fwd: Vec<TensorDesc> = call.inputs[1..].to_vec();
    let sub = Call {
        inputs: &fwd,
        ..*call
    };
    let (n, x, _) = resize_inputs(&sub, &r)?;
    if fwd.len() != n {
        return Err(Error::invalid(format!(
            "operator {} takes {} inputs, {} given",
            call.name,
            n + 1,
            call.inputs.len()
        )));
    }
    let dy = check_4d(call, &call.inputs[0], "output gradient")?;
    let dtype = call.inputs[0].dtype;
    let (oh, ow) = (dy[2], dy[3]);
    let align = r.align_corners;
    Ok(Plan::new(fwd.clone(), move |k| {
        let (planes, h, w) = (x[0] * x[1], x[2], x[3]);
        let mut acc = vec![0f64; planes * h * w];
        crate::with_element!(dtype, T => {
            let g = k.inputs[0].slice::<T>();
            for yy in 0..oh {
                let (h1, hp, hl) = if h == oh { (yy, 0, 0.0) } else { source(h, oh, align, yy) };
                for xx in 0..ow {
                    let (w1, wp, wl) = if w == ow { (xx, 0, 0.0) } else { source(w, ow, align, xx) };
                    let (h1l, w1l) = (hl as f64, wl as f64);
                    let (h0l, w0l) = (1.0 - h1l, 1.0 - w1l);
                    for pl in 0..planes {
                        let base = pl * h * w + h1 * w + w1;
                        let v = g[(pl * oh + yy) * ow + xx].to_f64();
                        acc[base] += h0l * w0l * v;
                        acc[base + wp] += h0l * w1l * v;
                        acc[base + hp * w] += h1l * w0l * v;
                        acc[base + hp * w + wp] += h1l * w1l * v;
                    }
                }
            }
            for (o, v) in k.outputs[0].slice_mut::<T>().iter_mut().zip(&acc) {
                *o = T::from_f64(*v);
            }
        });
        if k.outputs.len() > 1 {
            let d = k.outputs[1].dtype;
            crate::with_element!(d, T => k.outputs[1].slice_mut::<T>().fill(T::zero()));
        }
        Ok(())
    }))
}

fn bilinear_resize_grad(g: &mut GradCtx<'_>) -> Result<Vec<Option<Val>>> {
    let params = g.params.to_vec();
    let mut ins = vec![g.dy(0)];
    ins.extend_from_slice(g.inputs);
    let grads = g.ops("_mxrt_bilinear_resize_grad", &ins, &as_refs(&params))?;
    Ok(grads.into_iter().map(Some).collect())
}

fn resize_signature(ps: &ParamList) -> Result<Signature> {
    Ok(if param(ps, "mode") == Some("like") {
        Signature::simple(&["data", "like"])
    } else {
        Signature::simple(&["data"])
    })
}

// ---------------------------------------------------------------------------------------------
// Crop

/// The crop's output height and width and offset for data `x`.
fn crop_geometry(
    call: &Call<'_>,
    fwd: &[TensorDesc],
) -> Result<([usize; 4], usize, usize, usize, usize)> {
    let ps = call.params;
    let num_args = ps.required("num_args", p::int, "an integer in [1, 3]")?;
    if !(1..=3).contains(&num_args) {
        return Err(Error::invalid(format!(
            "operator {}: parameter 'num_args' must be in [1, 3], got {num_args}",
            call.name
        )));
    }
    let pair = |key: &str| -> Result<(i64, i64)> {
        match ps.optional(key, p::shape, "a shape (y, x)")? {
            None => Ok((0, 0)),
            Some(v) if v.len() == 2 => Ok((v[0], v[1])),
            Some(v) => Err(Error::invalid(format!(
                "operator {}: parameter '{key}' must have 2 entries, got {v:?}",
                call.name
            ))),
        }
    };
    let offset = pair("offset")?;
    let h_w = pair("h_w")?;
    let center = ps.or("center_crop", p::boolean, "a boolean", false)?;
    if fwd.len() != num_args as usize {
        return Err(Error::invalid(format!(
            "operator {}: {} inputs given, parameter 'num_args' is {num_args}",
            call.name,
            fwd.len()
        )));
    }
    let sub = Call {
        inputs: fwd,
        ..*call
    };
    let x = check_4d(&sub, &fwd[0], "Input data (batch-num_filter-y-x)")?;
    let (ch, cw) = if num_args == 1 {
        let (h, w) = h_w;
        if h < 1 || h > x[2] as i64 {
            return Err(Error::invalid(format!(
                "operator {}: the crop height(h_w[0]) should be in [1, {}], got {h}",
                call.name, x[2]
            )));
        }
        if w < 1 || w > x[3] as i64 {
            return Err(Error::invalid(format!(
                "operator {}: the crop width(h_w[1]) should be in [1, {}], got {w}",
                call.name, x[3]
            )));
        }
        (h as usize, w as usize)
    } else {
        let l = check_4d(&sub, &fwd[1], "crop_like")?;
        (l[2], l[3])
    };
    if ch > x[2] || cw > x[3] {
        return Err(Error::invalid(format!(
            "operator {}: data's height and width {}x{} are smaller than the crop's {ch}x{cw}",
            call.name, x[2], x[3]
        )));
    }
    let (oy, ox) = if center {
        ((x[2] - ch) / 2, (x[3] - cw) / 2)
    } else {
        let (oy, ox) = offset;
        if oy < 0 || oy as usize > x[2] - ch {
            return Err(Error::invalid(format!(
                "operator {}: offset[0] should be in [0, {}] (the residual space of height), got {oy}",
                call.name,
                x[2] - ch
            )));
        }
        if ox < 0 || ox as usize > x[3] - cw {
            return Err(Error::invalid(format!(
                "operator {}: offset[1] should be in [0, {}] (the residual space of width), got {ox}",
                call.name,
                x[3] - cw
            )));
        }
        (oy as usize, ox as usize)
    };
    Ok((x, ch, cw, oy, ox))
}

fn crop(call: &Call<'_>) -> Result<Plan> {
    let (x, ch, cw, oy, ox) = crop_geometry(call, call.inputs)?;
    let dtype = call.inputs[0].dtype;
    let out = [x[0] as i64, x[1] as i64, ch as i64, cw as i64];
    Ok(Plan::new(vec![TensorDesc::new(&out, dtype)], move |k| {
        crate::with_element!(dtype, T => {
            let src = k.inputs[0].slice::<T>();
            let y = k.outputs[0].slice_mut::<T>();
            let (h, w) = (x[2], x[3]);
            for pl in 0..x[0] * x[1] {
                for r in 0..ch {
                    let s = (pl * h + oy + r) * w + ox;
                    let d = (pl * ch + r) * cw;
                    y[d..d + cw].copy_from_slice(&src[s..s + cw]);
                }
            }
        });
        Ok(())
    }))
}

/// `_mxrt_crop_grad(dy, x[, crop_like])`: `dy` placed at the crop's offset in zeros (and zeros
/// for `crop_like`).
fn crop_backward(call: &Call<'_>) -> Result<Plan> {
    let fwd: Vec<TensorDesc> = call.inputs[1..].to_vec();
    let (x, ch, cw, oy, ox) = crop_geometry(call, &fwd)?;
    let dy = check_4d(call, &call.inputs[0], "output gradient")?;
    if dy != [x[0], x[1], ch, cw] {
        return Err(Error::invalid(format!(
            "operator {}: output gradient of shape {dy:?} for a crop to {ch}x{cw}",
            call.name
        )));
    }
    let dtype = call.inputs[0].dtype;
    Ok(Plan::new(fwd.clone(), move |k| {
        crate::with_element!(dtype, T => {
            let g = k.inputs[0].slice::<T>();
            let dx = k.outputs[0].slice_mut::<T>();
            dx.fill(T::zero());
            let (h, w) = (x[2], x[3]);
            for pl in 0..x[0] * x[1] {
                for r in 0..ch {
                    let d = (pl * h + oy + r) * w + ox;
                    let s = (pl * ch + r) * cw;
                    dx[d..d + cw].copy_from_slice(&g[s..s + cw]);
                }
            }
        });
        if k.outputs.len() > 1 {
            let d = k.outputs[1].dtype;
            crate::with_element!(d, T => k.outputs[1].slice_mut::<T>().fill(T::zero()));
        }
        Ok(())
    }))
}

fn crop_grad(g: &mut GradCtx<'_>) -> Result<Vec<Option<Val>>> {
    let params = g.params.to_vec();
    let mut ins = vec![g.dy(0)];
    ins.extend_from_slice(g.inputs);
    let grads = g.ops("_mxrt_crop_grad", &ins, &as_refs(&params))?;
    Ok(grads.into_iter().map(Some).collect())
}

fn crop_signature(ps: &ParamList) -> Result<Signature> {
    Ok(if param_int(ps, "num_args", 1)? >= 2 {
        Signature::simple(&["data", "crop_like"])
    } else {
        Signature::simple(&["data"])
    })
}

pub(crate) fn register(t: &mut Entries) {
    t.def("UpSampling", &upsampling)
        .grad(upsampling_grad)
        .signature(upsampling_signature);
    t.def("_mxrt_upsampling_grad", &upsampling_backward);
    t.def("_contrib_BilinearResize2D", &bilinear_resize)
        .grad(bilinear_resize_grad)
        .signature(resize_signature);
    t.def("_mxrt_bilinear_resize_grad", &bilinear_resize_backward);
    t.def("Crop", &crop)
        .grad(crop_grad)
        .signature(crop_signature);
    t.def("_mxrt_crop_grad", &crop_backward);
}
