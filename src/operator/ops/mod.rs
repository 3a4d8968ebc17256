//! The operators mxrt implements, by family. Each module's `register` adds its ops to the
//! kernel table under MXNet's op names (aliases resolve through the registry).

/// Runs `$body` with `$T` the float type of `$d` (f64 for float64, else f32): the kernels of the
/// ops that compute in f32 or f64 only (RNN, the attention products).
macro_rules! with_real {
    ($d:expr, $T:ident => $body:expr) => {
        match $d {
            $crate::dtype::DType::F64 => {
                type $T = f64;
                $body
            }
            _ => {
                type $T = f32;
                $body
            }
        }
    };
}

pub mod binary;
pub mod contrib;
pub mod conv;
pub mod creation;
pub mod embed;
pub mod grad;
pub mod im2col;
pub mod image;
pub mod index;
pub mod la;
pub mod lamb;
pub mod lars;
pub mod legacy;
pub mod linalg;
pub mod loss;
pub mod misc;
pub mod nn;
pub mod nn_misc;
pub mod norm;
pub mod optimizer;
pub mod pad;
pub mod pdf;
pub mod pool;
pub mod random;
pub mod reduce;
pub mod resize;
pub mod rnn;
pub mod sequence;
pub mod shape;
pub mod spatial;
pub mod storage;
pub mod transformer;
pub mod unary;

/// Every family's ops.
pub fn register_all(t: &mut Entries) {
    unary::register(t);
    binary::register(t);
    binary::register_extra(t);
    creation::register(t);
    reduce::register(t);
    shape::register(t);
    index::register(t);
    linalg::register(t);
    la::register(t);
    nn::register(t);
    conv::register(t);
    pool::register(t);
    embed::register(t);
    norm::register(t);
    loss::register(t);
    sequence::register(t);
    rnn::register(t);
    transformer::register(t);
    resize::register(t);
    nn_misc::register(t);
    pad::register(t);
    legacy::register(t);
    storage::register(t);
    optimizer::register(t);
    lamb::register(t);
    lars::register(t);
    random::register(t);
    grad::register(t);
    contrib::register(t);
    image::register(t);
    spatial::register(t);
    misc::register(t);
    im2col::register(t);
    pdf::register(t);
    super::custom::register(t);
}

pub use super::def::Entries;
use super::op::{Call, TensorDesc};
use crate::error::{Error, Result};

/// Checks the input count and returns the inputs.
pub fn inputs<'a>(call: &Call<'a>, n: usize) -> Result<&'a [TensorDesc]> {
    if call.inputs.len() != n {
        return Err(Error::invalid(format!(
            "operator {} takes {n} input(s), {} given",
            call.name,
            call.inputs.len()
        )));
    }
    Ok(call.inputs)
}

/// Checks that inputs `i` and `j` have one dtype (MXNet's legacy ops do not mix dtypes).
pub fn same_dtype(call: &Call<'_>, i: usize, j: usize) -> Result<()> {
    let (a, b) = (&call.inputs[i], &call.inputs[j]);
    if a.dtype != b.dtype {
        return Err(Error::invalid(format!(
            "operator {}: inputs {i} and {j} have different dtypes ({} and {})",
            call.name,
            a.dtype.name(),
            b.dtype.name()
        )));
    }
    Ok(())
}

/// A possibly negative axis of an `ndim`-dimensional array, checked.
pub fn axis(call: &Call<'_>, axis: i64, ndim: usize) -> Result<usize> {
    let n = ndim as i64;
    let a = if axis < 0 { axis + n } else { axis };
    if a < 0 || a >= n.max(1) || (n == 0 && a != 0) {
        return Err(Error::invalid(format!(
            "operator {}: axis {axis} is out of range for a {ndim}-dimensional array",
            call.name
        )));
    }
    Ok(a as usize)
}

/// Shape as `usize`s.
pub fn dims(shape: &[i64]) -> Vec<usize> {
    shape.iter().map(|&d| d.max(0) as usize).collect()
}

/// An error for an unsupported dtype.
pub fn bad_dtype(call: &Call<'_>, what: &str) -> Error {
    Error::invalid(format!(
        "operator {}: {what} (dtype {})",
        call.name,
        call.inputs
            .first()
            .map(|d| d.dtype.name())
            .unwrap_or("none")
    ))
}
