//! `cast_storage` (what `NDArray.tostype` runs). mxrt arrays are dense, so a cast to `default`
//! is a copy and a cast to `row_sparse` or `csr` is an error naming the missing storage.

use super::{Entries, inputs};
use crate::error::{Error, Result};
use crate::operator::op::{Call, Plan};
use crate::operator::param;

fn cast_storage(call: &Call<'_>) -> Result<Plan> {
    let x = &inputs(call, 1)?[0];
    let stype = call
        .params
        .required("stype", param::choice, "'default', 'row_sparse' or 'csr'")?;
    match stype.as_str() {
        "default" => Ok(super::shape::copy_plan(x, x.shape.to_vec())),
        "row_sparse" | "csr" => Err(Error::invalid(format!(
            "operator {}: sparse storage ({stype}) is not supported by this mxrt build",
            call.name
        ))),
        other => Err(Error::invalid(format!(
            "operator {}: parameter 'stype' must be 'default', 'row_sparse' or 'csr', got '{other}'",
            call.name
        ))),
    }
}

pub(crate) fn register(t: &mut Entries) {
    t.push(("cast_storage", &cast_storage));
}
