//! Sequence operators over padded batches: `SequenceMask`, `SequenceLast` and `SequenceReverse`.
//! The data is `T × N × ...` (`axis` 0) or `N × T × ...` (`axis` 1, not for SequenceReverse);
//! with `use_sequence_length` a second input gives each sequence's length (its values truncated
//! to integers, as MXNet's casts do), otherwise every sequence is `T` long.
//!
//! The gradients are the ops themselves where that is exact (masking with 0, reversing) and
//! `_mxrt_sequence_last_grad`, which scatters the gradient back to the picked steps.

use super::nn::{as_refs, passed};
use super::{Entries, inputs};
use crate::error::{Error, Result};
use crate::operator::def::{
    GradCtx, ParamList, PartialShape, ShapeRule, Signature, Val, param_flag, param_int,
};
use crate::operator::kernel::Element;
use crate::operator::op::{Call, Plan, TensorDesc};
use crate::operator::param;
use crate::operator::tensor::Tensor;

/// The data's sequence geometry.
#[derive(Clone, Copy, Debug)]
struct Seq {
    t: usize,
    n: usize,
    rest: usize,
    /// the time axis is 1 (batch first)
    batch_first: bool,
}

impl Seq {
    /// Offset of step `t` of sequence `b`.
    fn at(self, t: usize, b: usize) -> usize {
        if self.batch_first {
            (b * self.t + t) * self.rest
        } else {
            (t * self.n + b) * self.rest
        }
    }
}

struct SeqCall {
    seq: Seq,
    use_len: bool,
    axis: i64,
}

/// Parses the common parameters and checks the inputs of a sequence op.
fn seq_call(call: &Call<'_>, axis_one_ok: bool) -> Result<SeqCall> {
    let p = call.params;
    let use_len = p.or("use_sequence_length", param::boolean, "a boolean", false)?;
    let axis = p.or("axis", param::int, "an integer", 0)?;
    let ins = inputs(call, if use_len { 2 } else { 1 })?;
    if !(axis == 0 || (axis == 1 && axis_one_ok)) {
        return Err(Error::invalid(format!(
            "operator {}: axis must be {}, got {axis}",
            call.name,
            if axis_one_ok { "0 or 1" } else { "0" }
        )));
    }
    let d = &ins[0].shape;
    if d.len() < 2 {
        return Err(Error::invalid(format!(
            "operator {}: data must have at least 2 dimensions, got shape {:?}",
            call.name,
            &d[..]
        )));
    }
    let (t, n) = if axis == 0 {
        (d[0], d[1])
    } else {
        (d[1], d[0])
    };
    let seq = Seq {
        t: t.max(0) as usize,
        n: n.max(0) as usize,
        rest: d[2..].iter().map(|&v| v.max(0) as usize).product(),
        batch_first: axis == 1,
    };
    if use_len && ins[1].size() != seq.n {
        return Err(Error::invalid(format!(
            "operator {}: sequence_length has shape {:?}, expected ({},) for a batch of {}",
            call.name,
            &ins[1].shape[..],
            seq.n,
            seq.n
        )));
    }
    Ok(SeqCall { seq, use_len, axis })
}

/// Each sequence's length (truncated to an integer, at most `t`; `t` without lengths).
fn lengths(k: &[Tensor], seq: Seq, use_len: bool) -> Vec<usize> {
    if !use_len {
        return vec![seq.t; seq.n];
    }
    crate::with_element!(k[1].dtype, I => k[1].slice::<I>().iter().map(|v| {
        let v = v.to_f64();
        if v.is_nan() || v < 0.0 { 0 } else { (v as usize).min(seq.t) }
    }).collect())
}

fn sequence_mask(call: &Call<'_>) -> Result<Plan> {
    let c = seq_call(call, true)?;
    let value = call.params.or("value", param::float, "a number", 0.0)?;
    let x = call.inputs[0].clone();
    let (seq, use_len) = (c.seq, c.use_len);
    Ok(Plan::new(vec![x.clone()], move |k| {
        let lens = lengths(k.inputs, seq, use_len);
        crate::with_element!(x.dtype, T => {
            let src = k.inputs[0].slice::<T>();
            let dst = k.outputs[0].slice_mut::<T>();
            dst.copy_from_slice(src);
            let v = T::from_f64(value);
            for (b, &len) in lens.iter().enumerate() {
                for t in len..seq.t {
                    let o = seq.at(t, b);
                    dst[o..o + seq.rest].iter_mut().for_each(|e| *e = v);
                }
            }
        });
        Ok(())
    }))
}

fn sequence_reverse(call: &Call<'_>) -> Result<Plan> {
    let c = seq_call(call, false)?;
    let x = call.inputs[0].clone();
    let (seq, use_len) = (c.seq, c.use_len);
    Ok(Plan::new(vec![x.clone()], move |k| {
        let lens = lengths(k.inputs, seq, use_len);
        crate::with_element!(x.dtype, T => {
            let src = k.inputs[0].slice::<T>();
            let dst = k.outputs[0].slice_mut::<T>();
            dst.copy_from_slice(src);
            for (b, &len) in lens.iter().enumerate() {
                for t in 0..len {
                    let (i, o) = (seq.at(t, b), seq.at(len - 1 - t, b));
                    dst[o..o + seq.rest].copy_from_slice(&src[i..i + seq.rest]);
                }
            }
        });
        Ok(())
    }))
}

/// SequenceLast's output shape: the data's without the time axis.
fn last_shape(x: &TensorDesc, axis: i64) -> Vec<i64> {
    let mut s = x.shape.to_vec();
    s.remove(axis as usize);
    s
}

fn sequence_last(call: &Call<'_>) -> Result<Plan> {
    let c = seq_call(call, true)?;
    let x = call.inputs[0].clone();
    let (seq, use_len) = (c.seq, c.use_len);
    let out = TensorDesc::new(&last_shape(&x, c.axis), x.dtype);
    Ok(Plan::new(vec![out], move |k| {
        let lens = lengths(k.inputs, seq, use_len);
        crate::with_element!(x.dtype, T => {
            let src = k.inputs[0].slice::<T>();
            let dst = k.outputs[0].slice_mut::<T>();
            for (b, &len) in lens.iter().enumerate() {
                // a length of 0 picks step 0, as MXNet's index -1 wraps to nothing useful
                let i = seq.at(len.max(1) - 1, b);
                dst[b * seq.rest..(b + 1) * seq.rest].copy_from_slice(&src[i..i + seq.rest]);
            }
        });
        Ok(())
    }))
}

/// `_mxrt_sequence_last_grad(dy, data[, sequence_length])`: `dy` scattered to the steps
/// SequenceLast picked, zeros elsewhere.
fn sequence_last_backward(call: &Call<'_>) -> Result<Plan> {
    let dy = call.inputs.first().cloned();
    // the forward's checks on (data[, sequence_length])
    let rest: Vec<TensorDesc> = call.inputs.iter().skip(1).cloned().collect();
    let inner = Call {
        name: call.name,
        inputs: &rest,
        params: call.params,
        given_outputs: None,
        input_ctx: call.input_ctx,
        training: call.training,
        state: None,
        input_values: None,
    };
    let c = seq_call(&inner, true)?;
    let x = rest[0].clone();
    let dy = dy.expect("checked by seq_call");
    if dy.size() != x.size() / c.seq.t.max(1) || dy.dtype != x.dtype {
        return Err(Error::invalid(format!(
            "operator {}: gradient {:?} for data {:?}",
            call.name,
            &dy.shape[..],
            &x.shape[..]
        )));
    }
    let (seq, use_len) = (c.seq, c.use_len);
    Ok(Plan::new(vec![x.clone()], move |k| {
        let lens = lengths(&k.inputs[1..], seq, use_len);
        crate::with_element!(x.dtype, T => {
            let g = k.inputs[0].slice::<T>();
            let dst = k.outputs[0].slice_mut::<T>();
            dst.iter_mut().for_each(|e| *e = T::zero());
            for (b, &len) in lens.iter().enumerate() {
                let o = seq.at(len.max(1) - 1, b);
                dst[o..o + seq.rest].copy_from_slice(&g[b * seq.rest..(b + 1) * seq.rest]);
            }
        });
        Ok(())
    }))
}

const KEYS: &[&str] = &["use_sequence_length", "axis"];

fn grad_ins(g: &GradCtx<'_>, first: Val) -> Vec<Val> {
    let mut v = vec![first];
    if g.inputs.len() > 1 {
        v.push(g.x(1));
    }
    v
}

fn no_len_grad(g: &GradCtx<'_>, dx: Val) -> Vec<Option<Val>> {
    let mut v = vec![Some(dx)];
    if g.inputs.len() > 1 {
        v.push(None);
    }
    v
}

fn signature(p: &ParamList) -> Result<Signature> {
    Ok(if param_flag(p, "use_sequence_length", false)? {
        Signature::simple(&["data", "sequence_length"])
    } else {
        Signature::simple(&["data"])
    })
}

/// sequence_length has one value per sequence.
fn shapes(
    p: &ParamList,
    ins: &[PartialShape],
    _outs: &[PartialShape],
) -> Result<(Vec<PartialShape>, Vec<PartialShape>)> {
    let mut for_ins = vec![None; ins.len()];
    if ins.len() == 2
        && let Some(x) = &ins[0]
        && x.len() >= 2
    {
        let axis = param_int(p, "axis", 0)?;
        for_ins[1] = Some(vec![if axis == 1 { x[0] } else { x[1] }]);
    }
    Ok((for_ins, Vec::new()))
}

pub(crate) fn register(t: &mut Entries) {
    t.def("SequenceMask", &sequence_mask)
        .signature(signature)
        .shape_rule(ShapeRule::Rule(shapes))
        .grad(|g| {
            if g.inputs.len() == 1 {
                return Ok(vec![Some(g.dy(0))]);
            }
            let mut p = passed(g, KEYS);
            p.push(("value".into(), "0".into()));
            let dx = g.op("SequenceMask", &grad_ins(g, g.dy(0)), &as_refs(&p))?;
            Ok(no_len_grad(g, dx))
        });
    t.def("SequenceReverse", &sequence_reverse)
        .signature(signature)
        .shape_rule(ShapeRule::Rule(shapes))
        .grad(|g| {
            let p = passed(g, KEYS);
            let dx = g.op("SequenceReverse", &grad_ins(g, g.dy(0)), &as_refs(&p))?;
            Ok(no_len_grad(g, dx))
        });
    t.def("SequenceLast", &sequence_last)
        .signature(signature)
        .shape_rule(ShapeRule::Rule(shapes))
        .grad(|g| {
            let p = passed(g, KEYS);
            let mut ins = vec![g.dy(0), g.x(0)];
            if g.inputs.len() > 1 {
                ins.push(g.x(1));
            }
            let dx = g.op("_mxrt_sequence_last_grad", &ins, &as_refs(&p))?;
            Ok(no_len_grad(g, dx))
        });
    t.def("_mxrt_sequence_last_grad", &sequence_last_backward);
}
