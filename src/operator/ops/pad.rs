//! `Pad`: pads the spatial axes of a 4-D or 5-D array with a constant, the edge values, or the
//! reflection of the inner values (numpy's `constant`, `edge` and `reflect` modes).

use super::{Entries, dims, inputs};
use crate::error::{Error, Result};
use crate::operator::kernel::Element;
use crate::operator::op::{Call, Plan, TensorDesc};
use crate::operator::param;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Constant,
    Edge,
    Reflect,
}

/// For each output position along one axis, the input position it copies (`None`: the constant).
fn source_index(mode: Mode, before: usize, n: usize, out_len: usize) -> Vec<Option<usize>> {
    (0..out_len)
        .map(|o| {
            let i = o as isize - before as isize;
            let last = n as isize - 1;
            match mode {
                Mode::Constant => (0..n as isize).contains(&i).then_some(i as usize),
                Mode::Edge => Some(i.clamp(0, last) as usize),
                Mode::Reflect => {
                    let r = if i < 0 {
                        -i
                    } else if i > last {
                        2 * last - i
                    } else {
                        i
                    };
                    Some(r as usize)
                }
            }
        })
        .collect()
}

/// Pad's plan for input `x`: the input and output dims, each axis's map from output to input
/// positions, and the constant.
struct Layout {
    in_dims: Vec<usize>,
    out_dims: Vec<usize>,
    out_shape: Vec<i64>,
    maps: Vec<Vec<Option<usize>>>,
    value: f64,
}

fn layout(call: &Call<'_>, x: &TensorDesc) -> Result<Layout> {
    let p = call.params;
    let mode = match p
        .required("mode", param::choice, "'constant', 'edge' or 'reflect'")?
        .as_str()
    {
        "constant" => Mode::Constant,
        "edge" => Mode::Edge,
        "reflect" => Mode::Reflect,
        other => {
            return Err(Error::invalid(format!(
                "operator {}: parameter 'mode' must be 'constant', 'edge' or 'reflect', got '{other}'",
                call.name
            )));
        }
    };
    let width = p.required("pad_width", param::shape, "a tuple of 2*ndim integers")?;
    let value = p.or("constant_value", param::float, "a number", 0.0)?;
    let fail = |m: String| Err(Error::invalid(format!("operator {}: {m}", call.name)));
    let rank = x.shape.len();
    if rank != 4 && rank != 5 {
        return fail(format!(
            "only 4-D or 5-D input is supported, got shape {:?}",
            &x.shape[..]
        ));
    }
    if width.len() != 2 * rank {
        return fail(format!(
            "pad_width has {} values, a {rank}-D input needs {}",
            width.len(),
            2 * rank
        ));
    }
    if width[..4].iter().any(|&w| w != 0) {
        return fail("padding on the first two axes must be zero".to_owned());
    }
    if width.iter().any(|&w| w < 0) {
        return fail(format!("pad_width {width:?} has a negative value"));
    }
    let in_dims = dims(&x.shape);
    if mode == Mode::Reflect {
        for a in 2..rank {
            if width[2 * a] as usize >= in_dims[a] || width[2 * a + 1] as usize >= in_dims[a] {
                return fail(format!(
                    "reflection padding must be smaller than the axis it pads (axis {a} has {})",
                    in_dims[a]
                ));
            }
        }
    }
    if mode == Mode::Edge
        && (2..rank).any(|a| in_dims[a] == 0 && width[2 * a] + width[2 * a + 1] > 0)
    {
        return fail("edge padding of an empty axis".to_owned());
    }
    let out_shape: Vec<i64> = (0..rank)
        .map(|a| x.shape[a] + width[2 * a] + width[2 * a + 1])
        .collect();
    let out_dims = dims(&out_shape);
    let maps: Vec<Vec<Option<usize>>> = (0..rank)
        .map(|a| source_index(mode, width[2 * a] as usize, in_dims[a], out_dims[a]))
        .collect();
    Ok(Layout { in_dims, out_dims, out_shape, maps, value })
}

fn pad(call: &Call<'_>) -> Result<Plan> {
    let x = &inputs(call, 1)?[0];
    let Layout { in_dims, out_dims, out_shape, maps, value } = layout(call, x)?;
    let dtype = x.dtype;
    Ok(Plan::new(
        vec![TensorDesc::new(&out_shape, dtype)],
        move |k| {
            crate::with_element!(dtype, T => {
                let (src, out) = (k.inputs[0].slice::<T>(), k.outputs[0].slice_mut::<T>());
                fill(src, &in_dims, out, &out_dims, &maps, T::from_f64(value));
            });
            Ok(())
        },
    ))
}

/// `_mxrt_Pad_grad(dy, x)` with Pad's parameters: zeros shaped like `x`, plus every element of
/// `dy` added to the input element it copied (the constant border's gradient is dropped; an
/// element that edge or reflection padding copied several times sums). Its own gradient is
/// `Pad` with a zero constant.
fn pad_grad(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    let (dy, x) = (&ins[0], &ins[1]);
    let Layout { in_dims, out_dims, out_shape, maps, .. } = layout(call, x)?;
    if dy.shape[..] != out_shape[..] {
        return Err(Error::invalid(format!(
            "operator {}: the gradient has shape {:?}, Pad's output {out_shape:?}",
            call.name,
            &dy.shape[..]
        )));
    }
    let dtype = dy.dtype;
    Ok(Plan::new(vec![TensorDesc::new(&x.shape, dtype)], move |k| {
        crate::with_element!(dtype, T => {
            let (g, out) = (k.inputs[0].slice::<T>(), k.outputs[0].slice_mut::<T>());
            let mut acc = vec![0f64; out.len()];
            unfill(g, &out_dims, &mut acc, &in_dims, &maps);
            for (o, a) in out.iter_mut().zip(acc) {
                *o = T::from_f64(a);
            }
        });
        Ok(())
    }))
}

/// The adjoint of [`fill`]: adds every element of `g` (shaped `out_dims`) to the input element
/// its position copied, in `acc` (shaped `in_dims`).
fn unfill<T: Element>(
    g: &[T],
    out_dims: &[usize],
    acc: &mut [f64],
    in_dims: &[usize],
    maps: &[Vec<Option<usize>>],
) {
    let rank = in_dims.len();
    let (row_in, row_out) = (in_dims[rank - 1], out_dims[rank - 1]);
    if row_out == 0 {
        return;
    }
    let last = &maps[rank - 1];
    let mut idx = vec![0usize; rank - 1];
    for row in g.chunks(row_out) {
        let mut base = Some(0usize);
        for a in 0..rank - 1 {
            base = match (base, maps[a][idx[a]]) {
                (Some(b), Some(i)) => Some(b * in_dims[a] + i),
                _ => None,
            };
        }
        if let Some(b) = base {
            let dst = &mut acc[b * row_in..(b + 1) * row_in];
            for (v, m) in row.iter().zip(last) {
                if let Some(i) = m {
                    dst[*i] += v.to_f64();
                }
            }
        }
        for a in (0..rank - 1).rev() {
            idx[a] += 1;
            if idx[a] < out_dims[a] {
                break;
            }
            idx[a] = 0;
        }
    }
}

/// Writes every output row (the last axis) from the input row its outer indices map to.
fn fill<T: Element>(
    src: &[T],
    in_dims: &[usize],
    out: &mut [T],
    out_dims: &[usize],
    maps: &[Vec<Option<usize>>],
    value: T,
) {
    let rank = in_dims.len();
    let (row_in, row_out) = (in_dims[rank - 1], out_dims[rank - 1]);
    if row_out == 0 {
        return;
    }
    let last = &maps[rank - 1];
    let mut idx = vec![0usize; rank - 1];
    for row in out.chunks_mut(row_out) {
        // The input row for these outer indices, if none of them falls in a constant border.
        let mut base = Some(0usize);
        for a in 0..rank - 1 {
            base = match (base, maps[a][idx[a]]) {
                (Some(b), Some(i)) => Some(b * in_dims[a] + i),
                _ => None,
            };
        }
        match base {
            Some(b) => {
                let src_row = &src[b * row_in..(b + 1) * row_in];
                for (o, m) in row.iter_mut().zip(last) {
                    *o = m.map_or(value, |i| src_row[i]);
                }
            }
            None => row.fill(value),
        }
        for a in (0..rank - 1).rev() {
            idx[a] += 1;
            if idx[a] < out_dims[a] {
                break;
            }
            idx[a] = 0;
        }
    }
}

pub(crate) fn register(t: &mut Entries) {
    t.push(("Pad", &pad)).grad(|g| {
        let p = super::shape::all_params(g);
        Ok(vec![Some(g.op("_mxrt_Pad_grad", &[g.dy(0), g.x(0)], &p)?)])
    });
    t.def("_mxrt_Pad_grad", &pad_grad).grad(|g| {
        let p = super::shape::some_params(g, &["mode", "pad_width"]);
        Ok(vec![Some(g.op("Pad", &[g.dy(0)], &p)?), None])
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_maps_follow_numpy_modes() {
        // numpy.pad([0, 1, 2], 2, mode) reads these positions.
        let c = source_index(Mode::Constant, 2, 3, 7);
        assert_eq!(c, vec![None, None, Some(0), Some(1), Some(2), None, None]);
        let e = source_index(Mode::Edge, 2, 3, 7);
        assert_eq!(e, [0, 0, 0, 1, 2, 2, 2].map(Some).to_vec());
        let r = source_index(Mode::Reflect, 2, 3, 7);
        assert_eq!(r, [2, 1, 0, 1, 2, 1, 0].map(Some).to_vec());
    }

    #[test]
    fn constant_border_rows_take_the_value() {
        // A 1x1x2x2 input padded by one on each spatial side.
        let src = [1.0f32, 2.0, 3.0, 4.0];
        let (ind, outd) = ([1, 1, 2, 2], [1, 1, 4, 4]);
        let maps: Vec<_> = (0..4)
            .map(|a| source_index(Mode::Constant, if a >= 2 { 1 } else { 0 }, ind[a], outd[a]))
            .collect();
        let mut out = [0.0f32; 16];
        fill(&src, &ind, &mut out, &outd, &maps, 9.0);
        #[rustfmt::skip]
        let want = [9.0, 9.0, 9.0, 9.0,
                    9.0, 1.0, 2.0, 9.0,
                    9.0, 3.0, 4.0, 9.0,
                    9.0, 9.0, 9.0, 9.0];
        assert_eq!(out, want);
    }

    #[test]
    fn the_gradient_is_the_adjoint_of_the_padding() {
        // <pad(x), g> == <x, unfill(g)> in every mode, for a 1x1x3x2 input.
        let (ind, outd) = ([1usize, 1, 3, 2], [1usize, 1, 6, 4]);
        let before = [0usize, 0, 2, 1];
        let x: Vec<f64> = (0..6).map(|i| i as f64 * 0.5 - 1.0).collect();
        let g: Vec<f64> = (0..24).map(|i| ((i * 7) % 11) as f64 - 4.0).collect();
        for mode in [Mode::Constant, Mode::Edge, Mode::Reflect] {
            let maps: Vec<_> =
                (0..4).map(|a| source_index(mode, before[a], ind[a], outd[a])).collect();
            let mut y = vec![0.0f64; 24];
            fill(&x, &ind, &mut y, &outd, &maps, 0.0);
            let mut dx = vec![0.0f64; 6];
            unfill(&g, &outd, &mut dx, &ind, &maps);
            let lhs: f64 = y.iter().zip(&g).map(|(a, b)| a * b).sum();
            let rhs: f64 = x.iter().zip(&dx).map(|(a, b)| a * b).sum();
            assert!((lhs - rhs).abs() < 1e-12, "{lhs} vs {rhs}");
        }
    }
}
