//! Storage ops: `cast_storage` (what `NDArray.tostype` runs) and `_sparse_retain`. Their kernels
//! are dense; the invoke layer gives them dense copies of sparse inputs and stores their results
//! in the outputs' storage (see `operator::stype`), so a cast is a copy whose output has the
//! requested storage.

use crate::ndarray::format::StorageType;
use crate::operator::stype::{self, StorageRule};
use super::{Entries, inputs};
use crate::error::{Error, Result};
use crate::operator::op::{Call, Plan};
use crate::operator::kernel::Element;
use crate::operator::param;

fn cast_storage(call: &Call<'_>) -> Result<Plan> {
    let x = &inputs(call, 1)?[0];
    let stype = call
        .params
        .required("stype", param::choice, "'default', 'row_sparse' or 'csr'")?;
    match stype.as_str() {
        "default" => {}
        "row_sparse" if !x.shape.is_empty() => {}
        "csr" if x.shape.len() == 2 => {}
        "row_sparse" | "csr" => {
            return Err(Error::invalid(format!(
                "operator {}: a {stype} array cannot have shape {:?} ({})",
                call.name,
                &x.shape[..],
                if stype == "csr" { "csr is 2-dimensional" } else { "row_sparse needs a dimension" }
            )));
        }
        other => {
            return Err(Error::invalid(format!(
                "operator {}: parameter 'stype' must be 'default', 'row_sparse' or 'csr', got '{other}'",
                call.name
            )));
        }
    }
    Ok(super::shape::copy_plan(x, x.shape.to_vec()))
}

/// `_sparse_retain(data, indices)`: the rows of `data` listed in `indices`, the others zero
/// (stored as row_sparse: the listed rows that hold values).
fn sparse_retain(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    let (x, idx) = (ins[0].clone(), &ins[1]);
    if x.shape.is_empty() || idx.shape.len() != 1 {
        return Err(Error::invalid(format!(
            "operator {}: data needs a dimension and indices must be 1-dimensional",
            call.name
        )));
    }
    let (dtype, itype) = (x.dtype, idx.dtype);
    let rows = x.shape[0].max(0) as usize;
    let width = x.size() / rows.max(1) * dtype.size();
    Ok(Plan::new(vec![x], move |k| {
        let ids: Vec<f64> = crate::with_element!(itype, I => k.inputs[1].slice::<I>().iter().map(|v| v.to_f64()).collect());
        let (src, dst) = (k.inputs[0].byte_ptr(), k.outputs[0].byte_ptr());
        let total = k.outputs[0].nbytes();
        if total == 0 {
            return Ok(());
        }
        // SAFETY: the output is exclusive to this op (staged if it overlapped the input) and
        // holds `total` bytes; the input holds as many.
        let out = unsafe { std::slice::from_raw_parts_mut(dst, total) };
        // SAFETY: as above.
        let inp = unsafe { std::slice::from_raw_parts(src.cast_const(), total) };
        out.fill(0);
        for v in ids {
            let r = v as i64;
            if r < 0 || r as usize >= rows {
                return Err(Error::invalid(format!("row id {r} out of range 0..{rows}")));
            }
            let r = r as usize;
            out[r * width..(r + 1) * width].copy_from_slice(&inp[r * width..(r + 1) * width]);
        }
        Ok(())
    }))
}

pub(crate) fn register(t: &mut Entries) {
    t.push(("cast_storage", &cast_storage)).stype(StorageRule::Custom(|p, _| {
        match stype::param(p, "stype").map(|s| s.trim_matches('\'')) {
            Some("row_sparse") => StorageType::RowSparse,
            Some("csr") => StorageType::Csr,
            _ => StorageType::Default,
        }
    }))
    .grad(|g| Ok(vec![Some(g.op("_copy", &[g.dy(0)], &[])?)]));
    // the retained rows' gradients (the op is its own gradient); the row ids get none
    t.push(("_sparse_retain", &sparse_retain))
        .stype(StorageRule::Custom(|_, _| StorageType::RowSparse))
        .grad(|g| Ok(vec![Some(g.op("_sparse_retain", &[g.dy(0), g.x(1)], &[])?), None]));
}
