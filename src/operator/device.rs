//! Running an op's [`GpuKernel`] on GPU arrays: as one engine op on the device, like every other
//! use of the arrays, with the work done by the driver on the worker's stream.

use super::op::GpuKernel;
use crate::engine::{Engine, PushArgs};
use crate::error::{Error, Result};
use crate::gpu::{self, Endpoint};
use crate::ndarray::NDArray;
use crate::util::SendPtr;

/// Runs `kernel` with `inputs` into `outputs` (already shaped and typed by the plan).
pub(super) fn run(kernel: GpuKernel, inputs: &[NDArray], outputs: &[NDArray]) -> Result<()> {
    match kernel {
        GpuKernel::Copy => outputs[0].copy_from(&inputs[0], 0, crate::engine::FnProperty::Normal),
        GpuKernel::Fill(value) => outputs.iter().try_for_each(|o| fill(o, value)),
    }
}

/// The bytes of `n` elements of `out`'s dtype equal to `value`, or `None` when they are all 0.
fn fill_pattern(out: &NDArray, value: f64) -> Option<Vec<u8>> {
    let n = out.size();
    crate::with_element!(out.dtype(), T => {
        let v = <T as crate::operator::kernel::Element>::from_f64(value);
        // SAFETY: `T` is a plain number type; viewing one value as its bytes is sound.
        let one = unsafe {
            std::slice::from_raw_parts((&v as *const T).cast::<u8>(), std::mem::size_of::<T>())
        };
        if one.iter().all(|&b| b == 0) {
            None
        } else {
            Some(one.repeat(n))
        }
    })
}

/// Sets every element of `out` to `value`: a device memset for zero bytes, otherwise the
/// value's bytes copied from the host.
fn fill(out: &NDArray, value: f64) -> Result<()> {
    let (Some(ctx), Some(var)) = (out.ctx(), out.var()) else {
        return Err(Error::invalid("cannot fill a none array"));
    };
    let n = out.nbytes();
    if n == 0 {
        return Ok(());
    }
    let pattern = fill_pattern(out, value);
    let dst = SendPtr(out.data_ptr()?);
    let keep = out.clone();
    let writes = [var.clone()];
    let args = PushArgs::new(ctx).writes(&writes).name("fill");
    Engine::global()?.push_fn(args, move |_| {
        let _ = &keep;
        let to = Endpoint::of(ctx, dst.get());
        // SAFETY: the op holds write access to `keep`'s `n` bytes at `dst`; the pattern buffer
        // has `n` bytes and lives until the copy has completed.
        let done = unsafe {
            match &pattern {
                None => gpu::fill_bytes(to, 0, n),
                Some(bytes) => gpu::copy(to, Endpoint::Host(bytes.as_ptr().cast_mut()), n),
            }
        };
        done.map_err(|e| e.message().to_string())
    })
}
