//! `Pooling` and `Pooling_v1` (max, avg, sum, lp; global pooling; the valid, full and same
//! conventions; 1-D, 2-D and 3-D windows; channels-first and channels-last layouts), on the
//! kernels of [`crate::operator::kernel::pool`]. The gradient is `_mxrt_pool_grad(dy, x, y)`.

use super::nn::as_refs;
use super::{Entries, inputs};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::operator::def::{GradCtx, Val};
use crate::operator::kernel::pool::{PoolGeom, PoolKind, backward, forward};
use crate::operator::op::{Call, Plan, TensorDesc};
use crate::operator::param;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Convention {
    Valid,
    Full,
    Same,
}

/// The geometry of a pooling of data `x` and its output shape.
fn geometry(call: &Call<'_>, x: &TensorDesc, v1: bool) -> Result<(PoolGeom, Vec<i64>)> {
    let p = call.params;
    let name = call.name;
    let bad = |msg: String| Error::invalid(format!("operator {name}: {msg}"));
    let kernel = p.or("kernel", param::shape, "a shape", Vec::new())?;
    let types = if v1 {
        "max, avg or sum"
    } else {
        "max, avg, sum or lp"
    };
    let kind = match p
        .or("pool_type", param::choice, types, "max".into())?
        .as_str()
    {
        "max" => PoolKind::Max,
        "avg" => PoolKind::Avg,
        "sum" => PoolKind::Sum,
        "lp" if !v1 => PoolKind::Lp(0),
        other => {
            return Err(bad(format!(
                "parameter 'pool_type' must be {types}, got '{other}'"
            )));
        }
    };
    let global = p.or("global_pool", param::boolean, "a boolean", false)?;
    let convention = match p
        .or(
            "pooling_convention",
            param::choice,
            "valid, full or same",
            "valid".into(),
        )?
        .as_str()
    {
        "valid" => Convention::Valid,
        "full" => Convention::Full,
        "same" if !v1 => Convention::Same,
        other => {
            return Err(bad(format!(
                "parameter 'pooling_convention' must be {}, got '{other}'",
                if v1 {
                    "valid or full"
                } else {
                    "valid, full or same"
                }
            )));
        }
    };
    let stride = p.or("stride", param::shape, "a shape", Vec::new())?;
    let pad = p.or("pad", param::shape, "a shape", Vec::new())?;
    let (mut p_value, mut include_pad, mut layout) = (None, true, None);
    if !v1 {
        p.or("cudnn_off", param::boolean, "a boolean", false)?;
        p_value = p.optional("p_value", param::int, "an integer")?;
        include_pad = p.or("count_include_pad", param::boolean, "a boolean", true)?;
        layout = p.optional("layout", param::choice, "a layout")?;
    }
    if let PoolKind::Lp(_) = kind {
        let Some(q) = p_value else {
            return Err(bad("parameter 'p_value' is required for lp pooling".into()));
        };
        if !(1..=3).contains(&q) {
            return Err(bad(format!(
                "parameter 'p_value' is {q}: lp pooling takes p = 1, 2 or 3"
            )));
        }
    }
    let kind = match kind {
        PoolKind::Lp(_) => PoolKind::Lp(p_value.unwrap_or(1) as u32),
        k => k,
    };
    let rank = x.shape.len();
    if !(3..=5).contains(&rank) || (v1 && rank == 3) {
        return Err(bad(format!(
            "Input data should be {} (batch, channel, y, x) Or 5D in (batch, channel, d, y, x); data has shape {:?}",
            if v1 {
                "4D in"
            } else {
                "3D in (batch, channel, x) Or 4D in"
            },
            &x.shape[..]
        )));
    }
    let nd = rank - 2;
    let channels_last = match layout.as_deref() {
        None => false,
        Some(l) => {
            let (first, last) = [("NCW", "NWC"), ("NCHW", "NHWC"), ("NCDHW", "NDHWC")][nd - 1];
            if l == first {
                false
            } else if l == last {
                true
            } else {
                return Err(bad(format!(
                    "parameter 'layout' is {l}, but {nd}-D pooling takes {first} or {last}"
                )));
            }
        }
    };
    if !global {
        if kernel.is_empty() {
            return Err(bad(
                "required parameter 'kernel' is missing (0D pooling not supported)".into(),
            ));
        }
        if kernel.len() != nd {
            return Err(bad(format!(
                "parameter 'kernel' has {} dimensions but data of shape {:?} has {nd} spatial ones",
                kernel.len(),
                &x.shape[..]
            )));
        }
    }
    for (key, v) in [("kernel", &kernel), ("stride", &stride)] {
        if v.iter().any(|&d| d <= 0) && !(global && key == "kernel") {
            return Err(bad(format!(
                "value {v:?} for parameter '{key}' is invalid, the shape must be positive in all dimensions"
            )));
        }
    }
    let ktuple = if global { nd } else { kernel.len() };
    for (key, v) in [("stride", &stride), ("pad", &pad)] {
        if !v.is_empty() && v.len() != ktuple && !global {
            return Err(bad(format!(
                "parameter '{key}' {v:?} must have as many dimensions as 'kernel' {kernel:?}"
            )));
        }
    }
    if pad.iter().any(|&d| d < 0) {
        return Err(bad(format!("parameter 'pad' {pad:?} must not be negative")));
    }
    if convention == Convention::Same && (nd != 1 || pad.iter().any(|&d| d != 0)) {
        return Err(bad(format!(
            "pooling_convention 'same' supports 1-D data without 'pad' only (data shape {:?})",
            &x.shape[..]
        )));
    }
    let dims: Vec<usize> = x.shape.iter().map(|&d| d.max(0) as usize).collect();
    let (batch, channels, sp) = if channels_last {
        (dims[0], dims[rank - 1], &dims[1..rank - 1])
    } else {
        (dims[0], dims[1], &dims[2..])
    };
    let off = 3 - nd;
    let mut g = PoolGeom {
        batch,
        channels,
        input: [1; 3],
        output: [1; 3],
        kernel: [1; 3],
        stride: [1; 3],
        pad: [0; 3],
        channels_last,
        kind,
        count_include_pad: include_pad,
        v1,
    };
    for i in 0..nd {
        let a = off + i;
        g.input[a] = sp[i];
        if global {
            g.kernel[a] = sp[i];
            g.output[a] = 1;
            continue;
        }
        g.kernel[a] = kernel[i] as usize;
        g.stride[a] = stride.get(i).map_or(1, |&s| s as usize);
        g.pad[a] = pad.get(i).map_or(0, |&s| s as usize);
        let padded = sp[i] + 2 * g.pad[a];
        if convention != Convention::Same && g.kernel[a] > padded {
            return Err(bad(format!(
                "kernel size ({}) exceeds input ({} padded to {padded})",
                g.kernel[a], sp[i]
            )));
        }
        g.output[a] = match convention {
            Convention::Valid => 1 + (padded - g.kernel[a]) / g.stride[a],
            Convention::Full => 1 + (padded - g.kernel[a]).div_ceil(g.stride[a]),
            Convention::Same => padded.div_ceil(g.stride[a]),
        };
    }
    let mut out = x.shape.to_vec();
    for i in 0..nd {
        out[if channels_last { 1 + i } else { 2 + i }] = g.output[off + i] as i64;
    }
    Ok((g, out))
}

fn float_only(call: &Call<'_>, d: DType) -> Result<()> {
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

fn pooling(call: &Call<'_>, v1: bool) -> Result<Plan> {
    let x = inputs(call, 1)?[0].clone();
    float_only(call, x.dtype)?;
    let (g, out) = geometry(call, &x, v1)?;
    let dtype = x.dtype;
    Ok(Plan::new(vec![TensorDesc::new(&out, dtype)], move |k| {
        crate::with_element!(dtype, T => {
            forward(&g, k.inputs[0].slice::<T>(), k.outputs[0].slice_mut::<T>());
        });
        Ok(())
    }))
}

/// `_mxrt_pool_grad(dy, x, y)` with the forward's parameters (and `v1` for Pooling_v1).
fn pooling_backward(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 3)?;
    let v1 = call.params.or("v1", param::boolean, "a boolean", false)?;
    float_only(call, ins[1].dtype)?;
    let (g, out) = geometry(call, &ins[1], v1)?;
    if ins[0].shape[..] != out[..]
        || ins[2].shape[..] != out[..]
        || ins.iter().any(|t| t.dtype != ins[1].dtype)
    {
        return Err(Error::invalid(format!(
            "operator {}: gradient {:?} and output {:?} do not fit the pooling of data {:?}",
            call.name,
            &ins[0].shape[..],
            &ins[2].shape[..],
            &ins[1].shape[..]
        )));
    }
    let dtype = ins[1].dtype;
    Ok(Plan::new(vec![ins[1].clone()], move |k| {
        crate::with_element!(dtype, T => {
            let i = k.inputs;
            backward(&g, i[0].slice::<T>(), i[1].slice::<T>(), i[2].slice::<T>(), k.outputs[0].slice_mut::<T>());
        });
        Ok(())
    }))
}

fn pooling_grad(g: &mut GradCtx<'_>) -> Result<Vec<Option<Val>>> {
    let mut p = g.params.to_vec();
    if g.name == "Pooling_v1" {
        p.push(("v1".into(), "True".into()));
    }
    let dx = g.op("_mxrt_pool_grad", &[g.dy(0), g.x(0), g.y(0)], &as_refs(&p))?;
    Ok(vec![Some(dx)])
}

/// The pooling gradient's own: for sum and average pooling it is linear in `dy` alone, its
/// adjoint the forward pooling; max and lp pooling's are not differentiated further.
fn pooling_backward_grad(g: &mut GradCtx<'_>) -> Result<Vec<Option<Val>>> {
    let kind = g.param_set("pool_type").unwrap_or("max");
    if !matches!(kind, "avg" | "sum") {
        return Err(Error::not_supported(format!(
            "the gradient of {kind} pooling's gradient is not implemented (operator _mxrt_pool_grad is not differentiable for pool_type={kind})"
        )));
    }
    let p: Vec<(String, String)> = g
        .params
        .iter()
        .filter(|(k, _)| k != "v1")
        .cloned()
        .collect();
    let op = if g.flag("v1", false) {
        "Pooling_v1"
    } else {
        "Pooling"
    };
    let ddy = g.op(op, &[g.dy(0)], &as_refs(&p))?;
    Ok(vec![Some(ddy), None, None])
}

pub(crate) fn register(t: &mut Entries) {
    t.def("Pooling", &|c: &Call<'_>| pooling(c, false))
        .grad(pooling_grad);
    t.def("Pooling_v1", &|c: &Call<'_>| pooling(c, true))
        .grad(pooling_grad);
    t.def("_mxrt_pool_grad", &pooling_backward)
        .grad(pooling_backward_grad);
}
