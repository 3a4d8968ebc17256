//! MXNet's legacy NDArray functions that the Python package still reaches:
//! `fill_element_0index` and `_onehot_encode` (`mx.nd.onehot_encode`).

use super::{Entries, dims, inputs, same_dtype};
use crate::error::{Error, Result};
use crate::operator::kernel::Element;
use crate::operator::op::{Call, Plan, TensorDesc};

fn matrix(call: &Call<'_>, x: &TensorDesc, what: &str) -> Result<(usize, usize)> {
    match dims(&x.shape)[..] {
        [r, c] => Ok((r, c)),
        _ => Err(Error::invalid(format!(
            "operator {}: {what} must be 2-dimensional, got shape {:?}",
            call.name,
            &x.shape[..]
        ))),
    }
}

fn vector_of(call: &Call<'_>, x: &TensorDesc, rows: usize, what: &str) -> Result<()> {
    if x.shape.len() != 1 || x.shape[0] as usize != rows {
        return Err(Error::invalid(format!(
            "operator {}: {what} must be 1-dimensional with {rows} elements, got shape {:?}",
            call.name,
            &x.shape[..]
        )));
    }
    Ok(())
}

/// `fill_element_0index(lhs, mhs, rhs)`: a copy of matrix `lhs` with `out[i, rhs[i]] = mhs[i]`.
fn fill_element_0index(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 3)?;
    let (rows, cols) = matrix(call, &ins[0], "lhs")?;
    vector_of(call, &ins[1], rows, "mhs")?;
    vector_of(call, &ins[2], rows, "rhs")?;
    same_dtype(call, 0, 1)?;
    same_dtype(call, 0, 2)?;
    let dtype = ins[0].dtype;
    let name = call.name.to_owned();
    Ok(Plan::new(vec![ins[0].clone()], move |k| {
        crate::with_element!(dtype, T => {
            let (lhs, vals, idx) = (k.inputs[0].slice::<T>(), k.inputs[1].slice::<T>(), k.inputs[2].slice::<T>());
            let out = k.outputs[0].slice_mut::<T>();
            out.copy_from_slice(lhs);
            for r in 0..rows {
                let v = idx[r].to_f64();
                if !(v >= 0.0 && (v as usize) < cols) {
                    return Err(Error::invalid(format!(
                        "operator {name}: index {v} in row {r} is out of range for rows of {cols}"
                    )));
                }
                out[r * cols + v as usize] = vals[r];
            }
        });
        Ok(())
    }))
}

/// `_onehot_encode(indices, proto)`: a matrix shaped like `proto` with a one at
/// `[i, indices[i]]` and zeros elsewhere. The Python package passes `out` as `proto`.
fn onehot_encode(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    let (rows, cols) = matrix(call, &ins[1], "the output")?;
    vector_of(call, &ins[0], rows, "indices")?;
    let (itype, otype) = (ins[0].dtype, ins[1].dtype);
    // Indices are checked in the kernel, where their values are known.
    let name = call.name.to_owned();
    Ok(Plan::new(vec![ins[1].clone()], move |k| {
        let ids: Vec<f64> = crate::with_element!(itype, I => k.inputs[0].slice::<I>().iter().map(|v| v.to_f64()).collect());
        crate::with_element!(otype, T => {
            let out = k.outputs[0].slice_mut::<T>();
            out.fill(T::zero());
            for (r, &v) in ids.iter().enumerate() {
                if !(v >= 0.0 && (v as usize) < cols) {
                    return Err(Error::invalid(format!(
                        "operator {name}: index {v} in row {r} is out of range for rows of {cols}"
                    )));
                }
                out[r * cols + v as usize] = T::one();
            }
        });
        Ok(())
    }))
}

pub(crate) fn register(t: &mut Entries) {
    t.push(("fill_element_0index", &fill_element_0index));
    t.push(("_onehot_encode", &onehot_encode));
}
