//! `Convolution`, `Convolution_v1` and `Deconvolution` (1-D, 2-D and 3-D, groups, stride,
//! dilation, padding; Deconvolution's `adj` and `target_shape`), on the im2col + GEMM kernels of
//! [`crate::operator::kernel::conv`].
//!
//! Both operators and all their gradients are three products between a convolution's input
//! side and its output side (`lower`, `raise`, `weight_grad`), offered as the internal ops
//! `_mxrt_conv_lower(big, w, like)`, `_mxrt_conv_raise(small, w, like)` and
//! `_mxrt_conv_wgrad(big, small, like)`: each takes the array whose shape its result has as a
//! "like" input, and the forward's geometry parameters. Each is bilinear, so its own gradient is
//! two of the others: every order of gradient is differentiable.

use super::nn::as_refs;
use super::{Entries, inputs};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::operator::def::{
    GradCtx, ParamList, PartialShape, ShapeRule, Signature, Val, param_flag,
};
use crate::operator::kernel::conv::{ConvElement, ConvGeom, lower, raise, weight_grad};
use crate::operator::op::{Call, Plan, TensorDesc};
use crate::operator::param;
use crate::operator::tensor::Tensor;

/// Which operator a parameter set belongs to.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Conv,
    ConvV1,
    Deconv,
    /// One of the `_mxrt_conv_*` products (no `num_filter`; `deconv` says whose geometry).
    Internal,
}

/// A convolution's parameters, spatial ones in three slots (1-D and 2-D ones right-aligned, the
/// leading slots a kernel of 1 without padding).
#[derive(Clone, Debug)]
struct ConvParams {
    nd: usize,
    kernel: [usize; 3],
    stride: [usize; 3],
    dilate: [usize; 3],
    pad: [usize; 3],
    adj: [usize; 3],
    /// Deconvolution's `target_shape` when any entry is set.
    target: Option<[usize; 3]>,
    num_filter: usize,
    groups: usize,
    no_bias: bool,
    /// For the internal ops: the geometry is a Deconvolution's.
    deconv: bool,
}

impl ConvParams {
    fn dilated(&self, a: usize) -> usize {
        1 + (self.kernel[a] - 1) * self.dilate[a]
    }
    /// The axes that exist (the last `nd` slots).
    fn axes(&self) -> std::ops::Range<usize> {
        3 - self.nd..3
    }
    fn kernel_dims(&self) -> Vec<i64> {
        self.axes().map(|a| self.kernel[a] as i64).collect()
    }
}

fn fmt_tuple(v: &[usize]) -> String {
    let s: Vec<String> = v.iter().map(|d| d.to_string()).collect();
    format!("({})", s.join(", "))
}

/// Parses the parameters through `get` (a raw value by key; `None` when absent).
fn parse(op: &str, kind: Kind, get: &dyn Fn(&str) -> Option<String>) -> Result<ConvParams> {
    let bad = |msg: String| Error::invalid(format!("operator {op}: {msg}"));
    let value = |key: &str| {
        get(key)
            .map(|v| v.trim().to_string())
            .filter(|v| v != "None")
    };
    let shape = |key: &str| -> Result<Option<Vec<usize>>> {
        match value(key) {
            None => Ok(None),
            Some(v) => match param::shape(&v) {
                Some(s) if s.iter().all(|&d| d >= 0) => {
                    Ok(Some(s.iter().map(|&d| d as usize).collect()))
                }
                _ => Err(bad(format!(
                    "parameter '{key}' must be a shape of non-negative integers, got '{v}'"
                ))),
            },
        }
    };
    let int = |key: &str, default: i64, min: i64| -> Result<i64> {
        match value(key) {
            None => Ok(default),
            Some(v) => match param::int(&v) {
                Some(i) if i >= min => Ok(i),
                _ => Err(bad(format!(
                    "parameter '{key}' must be an integer of at least {min}, got '{v}'"
                ))),
            },
        }
    };
    let boolean = |key: &str, default: bool| -> Result<bool> {
        match value(key) {
            None => Ok(default),
            Some(v) => param::boolean(&v)
                .ok_or_else(|| bad(format!("parameter '{key}' must be a boolean, got '{v}'"))),
        }
    };
    let kernel = shape("kernel")?.ok_or_else(|| {
        bad("required parameter 'kernel' (a shape: (w,), (h, w) or (d, h, w)) is missing".into())
    })?;
    let nd = kernel.len();
    if kind == Kind::ConvV1 && nd == 1 {
        return Err(bad(
            "1D convolution not supported (parameter 'kernel' has 1 dimension)".into(),
        ));
    }
    if kind == Kind::ConvV1 && nd == 3 {
        return Err(bad(
            "Volume convolution is not implmented in mshadow (parameter 'kernel' has 3 dimensions)"
                .into(),
        ));
    }
    if nd == 0 || nd > 3 {
        return Err(bad(format!(
            "{nd}D convolution not supported (parameter 'kernel' is {})",
            fmt_tuple(&kernel)
        )));
    }
    if kernel.contains(&0) {
        return Err(bad(format!(
            "incorrect kernel size: parameter 'kernel' is {}",
            fmt_tuple(&kernel)
        )));
    }
    let off = 3 - nd;
    let mut p = ConvParams {
        nd,
        kernel: [1; 3],
        stride: [1; 3],
        dilate: [1; 3],
        pad: [0; 3],
        adj: [0; 3],
        target: None,
        num_filter: 0,
        groups: 1,
        no_bias: false,
        deconv: kind == Kind::Deconv,
    };
    p.kernel[off..].copy_from_slice(&kernel);
    let what = |key: &str| match key {
        "stride" => "Stride",
        "dilate" => "Dilate",
        "pad" => "Padding",
        "adj" => "Adjustment",
        _ => "Target shape",
    };
    let deconv_keys = matches!(kind, Kind::Deconv | Kind::Internal);
    for key in ["stride", "dilate", "pad", "adj", "target_shape"] {
        if !deconv_keys && matches!(key, "adj" | "target_shape") {
            continue;
        }
        let Some(v) = shape(key)? else { continue };
        if v.is_empty() {
            continue;
        }
        if v.len() != nd {
            return Err(bad(format!(
                "{} must have the same number of dimensions with kernel_size, but kernel_size is set to {} while parameter '{key}' is {}",
                what(key),
                fmt_tuple(&kernel),
                fmt_tuple(&v)
            )));
        }
        if matches!(key, "stride" | "dilate") && v.contains(&0) {
            return Err(bad(format!(
                "incorrect {key} size: parameter '{key}' is {}",
                fmt_tuple(&v)
            )));
        }
        let slot = match key {
            "stride" => &mut p.stride,
            "dilate" => &mut p.dilate,
            "pad" => &mut p.pad,
            "adj" => &mut p.adj,
            _ => {
                if v.iter().any(|&d| d != 0) {
                    let mut t = [1; 3];
                    t[off..].copy_from_slice(&v);
                    p.target = Some(t);
                }
                continue;
            }
        };
        slot[off..].copy_from_slice(&v);
    }
    if kind == Kind::Internal {
        p.deconv = boolean("deconv", false)?;
    } else {
        p.num_filter = match value("num_filter") {
            None => {
                return Err(bad(
                    "required parameter 'num_filter' (an integer of at least 1) is missing".into(),
                ));
            }
            Some(_) => int("num_filter", 0, 1)? as usize,
        };
        int("workspace", 1024, 0)?;
        boolean("cudnn_off", false)?;
        if let Some(t) = value("cudnn_tune") {
            let t = t.trim_matches(|c| c == '\'' || c == '"');
            if !matches!(t, "off" | "limited_workspace" | "fastest") {
                return Err(bad(format!(
                    "parameter 'cudnn_tune' must be one of off, limited_workspace, fastest, got '{t}'"
                )));
            }
        }
        if let Some(l) = value("layout") {
            let l = l.trim_matches(|c| c == '\'' || c == '"').to_string();
            let native = ["NCW", "NCHW", "NCDHW"][nd - 1];
            if matches!(l.as_str(), "NHWC" | "NDHWC" | "NWC") {
                return Err(bad(format!(
                    "parameter 'layout' is {l}: MXNet's CPU kernels take only NCW, NCHW and NCDHW (channels-last layouts need a GPU)"
                )));
            }
            if l != native {
                return Err(bad(format!(
                    "parameter 'layout' must be {native} for a {nd}-D kernel, got '{l}'"
                )));
            }
        }
        p.no_bias = boolean("no_bias", kind == Kind::Deconv)?;
    }
    p.groups = int("num_group", 1, 1)? as usize;
    Ok(p)
}

fn parse_call(call: &Call<'_>, kind: Kind) -> Result<ConvParams> {
    let params = call.params;
    parse(call.name, kind, &|k| params.raw(k).map(str::to_string))
}

fn parse_list(p: &ParamList, kind: Kind) -> Result<ConvParams> {
    parse("", kind, &|k| {
        p.iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.trim_matches(|c| c == '\'' || c == '"').to_string())
    })
}

/// The floating-point-only check of the NN ops, with MXNet's message.
pub(crate) fn float_dtype(call: &Call<'_>, d: DType) -> Result<()> {
    if matches!(d, DType::F32 | DType::F64 | DType::F16) {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "operator {}: This operation only support floating point types, not {}",
            call.name,
            d.name()
        )))
    }
}

/// Checks the inputs' dtypes (one float dtype) and ranks (`nd + 2`).
fn check_inputs(
    call: &Call<'_>,
    p: &ConvParams,
    ins: &[TensorDesc],
    names: &[&str],
) -> Result<DType> {
    let dtype = ins[0].dtype;
    float_dtype(call, dtype)?;
    for (i, t) in ins.iter().enumerate() {
        if t.dtype != dtype {
            return Err(Error::invalid(format!(
                "operator {}: {} is {} but {} is {} (one dtype for all inputs)",
                call.name,
                names.get(i).copied().unwrap_or("input"),
                t.dtype.name(),
                names[0],
                dtype.name()
            )));
        }
    }
    let want = p.nd + 2;
    if ins[0].shape.len() != want {
        let axes = [
            "batch-num_filter-x",
            "batch-num_filter-y-x",
            "batch-num_filter-depth-y-x",
        ][p.nd - 1];
        return Err(Error::invalid(format!(
            "operator {}: Input data should be {want}D in {axes} ({} has shape {:?}, kernel {})",
            call.name,
            names[0],
            &ins[0].shape[..],
            fmt_tuple(
                &p.kernel_dims()
                    .iter()
                    .map(|&d| d as usize)
                    .collect::<Vec<_>>()
            )
        )));
    }
    Ok(dtype)
}

fn spatial(shape: &[i64], nd: usize) -> [usize; 3] {
    let mut s = [1; 3];
    for (i, &d) in shape[2..].iter().enumerate() {
        s[3 - nd + i] = d.max(0) as usize;
    }
    s
}

fn expect_shape(call: &Call<'_>, name: &str, got: &[i64], want: &[i64]) -> Result<()> {
    if got != want {
        return Err(Error::invalid(format!(
            "operator {}: Shape inconsistent, provided {name} shape {:?}, inferred {:?}",
            call.name, got, want
        )));
    }
    Ok(())
}

fn check_groups(call: &Call<'_>, p: &ConvParams, channels: usize) -> Result<()> {
    if !channels.is_multiple_of(p.groups) {
        return Err(Error::invalid(format!(
            "operator {}: input num_filter must divide group size ({channels} input channels, parameter 'num_group' is {})",
            call.name, p.groups
        )));
    }
    if !p.num_filter.is_multiple_of(p.groups) {
        return Err(Error::invalid(format!(
            "operator {}: output num_filter must divide group size (parameter 'num_filter' is {}, 'num_group' {})",
            call.name, p.num_filter, p.groups
        )));
    }
    Ok(())
}

/// Runs `f::<T>` for the float dtype `d`.
macro_rules! with_float {
    ($d:expr, $T:ident => $body:expr) => {
        match $d {
            DType::F64 => {
                type $T = f64;
                $body
            }
            DType::F16 => {
                type $T = half::f16;
                $body
            }
            _ => {
                type $T = f32;
                $body
            }
        }
    };
}

/// Adds `bias[c]` to every element of channel `c` of `y` (`batch × channels × sp`).
fn add_bias<T: ConvElement>(y: &mut [T], b: &[T], channels: usize, sp: usize) {
    for (i, plane) in y.chunks_mut(sp.max(1)).enumerate() {
        let v = b[i % channels];
        for e in plane {
            *e = *e + v;
        }
    }
}

/// `Convolution` / `Convolution_v1`: `y = conv(x, w) + b`.
fn convolution(call: &Call<'_>, kind: Kind) -> Result<Plan> {
    let p = parse_call(call, kind)?;
    let ins = inputs(call, if p.no_bias { 2 } else { 3 })?;
    let dtype = check_inputs(call, &p, ins, &["data", "weight", "bias"])?;
    let x = &ins[0].shape;
    let (n, c) = (x[0].max(0) as usize, x[1].max(0) as usize);
    check_groups(call, &p, c)?;
    let mut w_shape = vec![p.num_filter as i64, (c / p.groups) as i64];
    w_shape.extend(p.kernel_dims());
    expect_shape(call, "weight", &ins[1].shape, &w_shape)?;
    if !p.no_bias {
        expect_shape(call, "bias", &ins[2].shape, &[p.num_filter as i64])?;
    }
    let input = spatial(x, p.nd);
    let mut output = [1; 3];
    for a in p.axes() {
        let padded = input[a] + 2 * p.pad[a];
        if p.dilated(a) > padded {
            return Err(Error::invalid(format!(
                "operator {}: kernel size exceed input (dilated kernel {} on axis {} of data shape {:?} padded to {padded})",
                call.name,
                p.dilated(a),
                a + p.nd - 1,
                &x[..]
            )));
        }
        output[a] = (padded - p.dilated(a)) / p.stride[a] + 1;
    }
    let g = ConvGeom {
        batch: n,
        groups: p.groups,
        in_ch: c,
        out_ch: p.num_filter,
        input,
        output,
        kernel: p.kernel,
        stride: p.stride,
        dilate: p.dilate,
        pad: p.pad,
    };
    let mut out = vec![n as i64, p.num_filter as i64];
    out.extend(p.axes().map(|a| output[a] as i64));
    let (no_bias, sp) = (p.no_bias, output.iter().product::<usize>());
    Ok(Plan::new(vec![TensorDesc::new(&out, dtype)], move |k| {
        with_float!(dtype, T => {
            let y = k.outputs[0].slice_mut::<T>();
            lower(&g, k.inputs[0].slice::<T>(), k.inputs[1].slice::<T>(), y);
            if !no_bias {
                add_bias(y, k.inputs[2].slice::<T>(), g.out_ch, sp);
            }
        });
        Ok(())
    }))
}

/// Deconvolution's padding and adjustment for data of spatial sizes `input`: from
/// `target_shape` when it is set, else the parameters.
fn deconv_pad(
    call_name: &str,
    p: &ConvParams,
    input: [usize; 3],
) -> Result<([usize; 3], [usize; 3])> {
    let Some(target) = p.target else {
        return Ok((p.pad, p.adj));
    };
    let (mut pad, mut adj) = ([0; 3], [0; 3]);
    for a in p.axes() {
        let full = p.stride[a] * input[a].saturating_sub(1) + p.dilated(a);
        if full < target[a] {
            return Err(Error::invalid(format!(
                "operator {call_name}: too big target shape: parameter 'target_shape' asks for {} on axis {}, at most {full} is possible",
                target[a],
                a + p.nd - 1
            )));
        }
        let total = full - target[a];
        adj[a] = total % 2;
        pad[a] = total.div_ceil(2);
    }
    Ok((pad, adj))
}

/// `Deconvolution`: `y = convᵀ(x, w) + b`, the transposed convolution.
fn deconvolution(call: &Call<'_>) -> Result<Plan> {
    let p = parse_call(call, Kind::Deconv)?;
    let ins = inputs(call, if p.no_bias { 2 } else { 3 })?;
    let dtype = check_inputs(call, &p, ins, &["data", "weight", "bias"])?;
    let x = &ins[0].shape;
    let (n, c) = (x[0].max(0) as usize, x[1].max(0) as usize);
    check_groups(call, &p, c)?;
    let mut w_shape = vec![c as i64, (p.num_filter / p.groups) as i64];
    w_shape.extend(p.kernel_dims());
    expect_shape(call, "weight", &ins[1].shape, &w_shape)?;
    if !p.no_bias {
        expect_shape(call, "bias", &ins[2].shape, &[p.num_filter as i64])?;
    }
    let input = spatial(x, p.nd);
    let (pad, adj) = deconv_pad(call.name, &p, input)?;
    let mut output = [1; 3];
    for a in p.axes() {
        if adj[a] >= p.stride[a] {
            return Err(Error::invalid(format!(
                "operator {}: adj must be smaller than stride (parameter 'adj' is {} on axis {}, 'stride' {})",
                call.name,
                adj[a],
                a + p.nd - 1,
                p.stride[a]
            )));
        }
        let full = p.stride[a] * input[a].saturating_sub(1) + p.dilated(a) + adj[a];
        if input[a] == 0 || full <= 2 * pad[a] {
            return Err(Error::invalid(format!(
                "operator {}: the output would be empty on axis {} (data shape {:?}, parameter 'pad' {})",
                call.name,
                a + p.nd - 1,
                &x[..],
                pad[a]
            )));
        }
        output[a] = full - 2 * pad[a];
    }
    let g = ConvGeom {
        batch: n,
        groups: p.groups,
        in_ch: p.num_filter,
        out_ch: c,
        input: output,
        output: input,
        kernel: p.kernel,
        stride: p.stride,
        dilate: p.dilate,
        pad,
    };
    let mut out = vec![n as i64, p.num_filter as i64];
    out.extend(p.axes().map(|a| output[a] as i64));
    let (no_bias, sp) = (p.no_bias, output.iter().product::<usize>());
    Ok(Plan::new(vec![TensorDesc::new(&out, dtype)], move |k| {
        with_float!(dtype, T => {
            let y = k.outputs[0].slice_mut::<T>();
            raise(&g, k.inputs[0].slice::<T>(), k.inputs[1].slice::<T>(), y);
            if !no_bias {
                add_bias(y, k.inputs[2].slice::<T>(), g.in_ch, sp);
            }
        });
        Ok(())
    }))
}

/// Which product an internal op computes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Product {
    /// `_mxrt_conv_lower(big, w, like_small)`
    Lower,
    /// `_mxrt_conv_raise(small, w, like_big)`
    Raise,
    /// `_mxrt_conv_wgrad(big, small, like_w)`
    WeightGrad,
}

fn product(call: &Call<'_>, which: Product) -> Result<Plan> {
    let p = parse_call(call, Kind::Internal)?;
    let ins = inputs(call, 3)?;
    let (big, small, w, out) = match which {
        Product::Lower => (&ins[0], &ins[2], &ins[1], &ins[2]),
        Product::Raise => (&ins[2], &ins[0], &ins[1], &ins[2]),
        Product::WeightGrad => (&ins[0], &ins[1], &ins[2], &ins[2]),
    };
    let dtype = ins[0].dtype;
    float_dtype(call, dtype)?;
    if ins[..2].iter().any(|t| t.dtype != dtype) {
        return Err(Error::invalid(format!(
            "operator {}: inputs of different dtypes",
            call.name
        )));
    }
    let rank = p.nd + 2;
    if big.shape.len() != rank
        || small.shape.len() != rank
        || w.shape.len() != rank
        || big.shape[0] != small.shape[0]
    {
        return Err(Error::invalid(format!(
            "operator {}: shapes {:?}, {:?} and weight {:?} do not fit a {}-D convolution",
            call.name,
            &big.shape[..],
            &small.shape[..],
            &w.shape[..],
            p.nd
        )));
    }
    let (cb, cs) = (big.shape[1].max(0) as usize, small.shape[1].max(0) as usize);
    if cb % p.groups != 0 || cs % p.groups != 0 {
        return Err(Error::invalid(format!(
            "operator {}: {cb} and {cs} channels do not divide into {} groups",
            call.name, p.groups
        )));
    }
    let mut w_shape = vec![cs as i64, (cb / p.groups) as i64];
    w_shape.extend(p.kernel_dims());
    expect_shape(call, "weight", &w.shape, &w_shape)?;
    let (bs, ss) = (spatial(&big.shape, p.nd), spatial(&small.shape, p.nd));
    let pad = if p.deconv && p.target.is_some() {
        let mut pad = [0; 3];
        for a in p.axes() {
            let full = p.stride[a] * ss[a].saturating_sub(1) + p.dilated(a);
            pad[a] = full.saturating_sub(bs[a]).div_ceil(2);
        }
        pad
    } else {
        p.pad
    };
    let g = ConvGeom {
        batch: big.shape[0].max(0) as usize,
        groups: p.groups,
        in_ch: cb,
        out_ch: cs,
        input: bs,
        output: ss,
        kernel: p.kernel,
        stride: p.stride,
        dilate: p.dilate,
        pad,
    };
    Ok(Plan::new(
        vec![TensorDesc::new(&out.shape, dtype)],
        move |k| {
            let i: &[Tensor] = k.inputs;
            with_float!(dtype, T => {
                let o = k.outputs[0].slice_mut::<T>();
                match which {
                    Product::Lower => lower(&g, i[0].slice::<T>(), i[1].slice::<T>(), o),
                    Product::Raise => raise(&g, i[0].slice::<T>(), i[1].slice::<T>(), o),
                    Product::WeightGrad => weight_grad(&g, i[0].slice::<T>(), i[1].slice::<T>(), o),
                }
            });
            Ok(())
        },
    ))
}

/// The geometry parameters the products take from a forward.
fn geometry_params(g: &GradCtx<'_>, deconv: bool) -> Vec<(String, String)> {
    let mut keys = vec!["kernel", "stride", "dilate", "pad", "num_group"];
    if deconv {
        keys.extend(["adj", "target_shape"]);
    }
    let mut p: Vec<(String, String)> = g
        .params
        .iter()
        .filter(|(k, _)| keys.contains(&k.as_str()))
        .cloned()
        .collect();
    if deconv {
        p.push(("deconv".into(), "True".into()));
    }
    p
}

/// The bias's gradient: `dy` summed over every axis but the channels.
fn bias_grad(g: &mut GradCtx<'_>) -> Result<Option<Val>> {
    if g.inputs.len() < 3 || !g.needs(2) {
        return Ok(None);
    }
    let nd = g
        .param("kernel")
        .and_then(param::shape)
        .map_or(2, |k| k.len());
    let axes: Vec<String> = std::iter::once(0)
        .chain(2..nd + 2)
        .map(|a| a.to_string())
        .collect();
    let axes = format!("({})", axes.join(", "));
    Ok(Some(g.op("sum", &[g.dy(0)], &[("axis", &axes)])?))
}

/// Convolution: `dx = raise(dy, w)`, `dw = wgrad(x, dy)`, `db = Σ dy`.
fn convolution_grad(g: &mut GradCtx<'_>) -> Result<Vec<Option<Val>>> {
    let p = geometry_params(g, false);
    let p = as_refs(&p);
    let (x, w, dy) = (g.x(0), g.x(1), g.dy(0));
    let dx = if g.needs(0) {
        Some(g.op("_mxrt_conv_raise", &[dy, w, x], &p)?)
    } else {
        None
    };
    let dw = if g.needs(1) {
        Some(g.op("_mxrt_conv_wgrad", &[x, dy, w], &p)?)
    } else {
        None
    };
    let mut out = vec![dx, dw];
    if g.inputs.len() > 2 {
        out.push(bias_grad(g)?);
    }
    Ok(out)
}

/// Deconvolution (`y = raise(x, w)`): `dx = lower(dy, w)`, `dw = wgrad(dy, x)`, `db = Σ dy`.
fn deconvolution_grad(g: &mut GradCtx<'_>) -> Result<Vec<Option<Val>>> {
    let p = geometry_params(g, true);
    let p = as_refs(&p);
    let (x, w, dy) = (g.x(0), g.x(1), g.dy(0));
    let dx = if g.needs(0) {
        Some(g.op("_mxrt_conv_lower", &[dy, w, x], &p)?)
    } else {
        None
    };
    let dw = if g.needs(1) {
        Some(g.op("_mxrt_conv_wgrad", &[dy, x, w], &p)?)
    } else {
        None
    };
    let mut out = vec![dx, dw];
    if g.inputs.len() > 2 {
        out.push(bias_grad(g)?);
    }
    Ok(out)
}

/// The products' own gradients (each is bilinear; `go` is the gradient arriving at its output).
fn product_grad(g: &mut GradCtx<'_>, which: Product) -> Result<Vec<Option<Val>>> {
    let p = g.params.to_vec();
    let p = as_refs(&p);
    let go = g.dy(0);
    let (a, b) = (g.x(0), g.x(1));
    let (first, second) = match which {
        // lower(big, w): d big = raise(go, w), d w = wgrad(big, go)
        Product::Lower => (
            ("_mxrt_conv_raise", [go, b, a]),
            ("_mxrt_conv_wgrad", [a, go, b]),
        ),
        // raise(small, w): d small = lower(go, w), d w = wgrad(go, small)
        Product::Raise => (
            ("_mxrt_conv_lower", [go, b, a]),
            ("_mxrt_conv_wgrad", [go, a, b]),
        ),
        // wgrad(big, small): d big = raise(small, go), d small = lower(big, go)
        Product::WeightGrad => (
            ("_mxrt_conv_raise", [b, go, a]),
            ("_mxrt_conv_lower", [a, go, b]),
        ),
    };
    let da = if g.needs(0) {
        Some(g.op(first.0, &first.1, &p)?)
    } else {
        None
    };
    let db = if g.needs(1) {
        Some(g.op(second.0, &second.1, &p)?)
    } else {
        None
    };
    Ok(vec![da, db, None])
}

/// Weight and bias shapes in graph inference, from the data's shape and the parameters.
fn weight_shapes(
    p: &ParamList,
    ins: &[PartialShape],
    deconv: bool,
) -> Result<(Vec<PartialShape>, Vec<PartialShape>)> {
    let mut out: Vec<PartialShape> = vec![None; ins.len()];
    let Some(x) = ins.first().cloned().flatten().filter(|x| x.len() >= 2) else {
        return Ok((out, Vec::new()));
    };
    let cp = parse_list(p, if deconv { Kind::Deconv } else { Kind::Conv })?;
    let (c, f, grp) = (x[1], cp.num_filter as i64, cp.groups as i64);
    let mut w = if deconv {
        vec![c, f / grp]
    } else {
        vec![f, if c > 0 { c / grp } else { 0 }]
    };
    w.extend(cp.kernel_dims());
    if ins.len() > 1 {
        out[1] = Some(w);
    }
    if ins.len() > 2 {
        out[2] = Some(vec![f]);
    }
    Ok((out, Vec::new()))
}

/// `Convolution`'s weights from the data, and for 2-D kernels the data's batch size back
/// from a known output, with its height and width where the stride is 1 (MXNet's
/// ConvolutionShape does the same for 2-D kernels only).
fn convolution_shapes(
    p: &ParamList,
    ins: &[PartialShape],
    outs: &[PartialShape],
) -> Result<(Vec<PartialShape>, Vec<PartialShape>)> {
    let (mut for_ins, for_outs) = weight_shapes(p, ins, false)?;
    let data = ins.first().cloned().flatten();
    let out = outs.first().cloned().flatten();
    if let (Some(x), Some(y)) = (data, out)
        && x.len() == 4
        && y.len() == 4
    {
        let cp = parse_list(p, Kind::Conv)?;
        if cp.nd == 2 {
            let mut back = vec![y[0], 0, 0, 0];
            for (i, a) in cp.axes().enumerate() {
                if y[2 + i] > 0 && cp.stride[a] == 1 {
                    let d = y[2 + i] + cp.dilated(a) as i64 - 1 - 2 * cp.pad[a] as i64;
                    back[2 + i] = d.max(0);
                }
            }
            for_ins[0] = Some(back);
        }
    }
    Ok((for_ins, for_outs))
}

fn signature(p: &ParamList, no_bias_default: bool) -> Result<Signature> {
    Ok(if param_flag(p, "no_bias", no_bias_default)? {
        Signature::simple(&["data", "weight"])
    } else {
        Signature::simple(&["data", "weight", "bias"])
    })
}

pub(crate) fn register(t: &mut Entries) {
    t.def("Convolution", &|c: &Call<'_>| convolution(c, Kind::Conv))
        .grad(convolution_grad)
        .signature(|p| signature(p, false))
        .shape_rule(ShapeRule::Rule(convolution_shapes));
    t.def("Convolution_v1", &|c: &Call<'_>| {
        convolution(c, Kind::ConvV1)
    })
    .grad(convolution_grad)
    .signature(|p| signature(p, false))
    .shape_rule(ShapeRule::Rule(|p, ins, _| weight_shapes(p, ins, false)));
    t.def("Deconvolution", &deconvolution)
        .grad(deconvolution_grad)
        .signature(|p| signature(p, true))
        .shape_rule(ShapeRule::Rule(|p, ins, _| weight_shapes(p, ins, true)));
    t.def("_mxrt_conv_lower", &|c: &Call<'_>| {
        product(c, Product::Lower)
    })
    .grad(|g| product_grad(g, Product::Lower));
    t.def("_mxrt_conv_raise", &|c: &Call<'_>| {
        product(c, Product::Raise)
    })
    .grad(|g| product_grad(g, Product::Raise));
    t.def("_mxrt_conv_wgrad", &|c: &Call<'_>| {
        product(c, Product::WeightGrad)
    })
    .grad(|g| product_grad(g, Product::WeightGrad));
}
