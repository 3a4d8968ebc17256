//! mxrt's device kernels: `kernels/kernels.cu`, compiled to the committed `kernels/kernels.ptx`
//! (`make ptx`), embedded in the library and loaded into a device's context on its first
//! launch. Kernels are 1-D grid-stride loops, launched by name on the calling thread's stream.

use super::stream::{self, Finish, finish_now};
use crate::dtype::DType;
use crate::error::{Error, Result};
use cudarc::driver::{DriverError, result, sys};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::{CString, c_void};

/// The PTX text, NUL-terminated as `cuModuleLoadData` reads it.
static PTX: &str = concat!(include_str!("kernels/kernels.ptx"), "\0");

/// Threads per block of every launch, and the most blocks a launch uses (the loops stride).
const BLOCK: u32 = 256;
const MAX_GRID: u64 = 4096;

/// A device's loaded module and the functions looked up in it.
struct Module {
    module: sys::CUmodule,
    functions: HashMap<&'static str, sys::CUfunction>,
}

// SAFETY: module and function handles are plain driver handles, usable from any thread that has
// their context bound (every use below runs inside `stream::run`, which binds it).
unsafe impl Send for Module {}

/// Loaded modules by device. Modules live as long as the process (contexts are never destroyed).
static MODULES: Mutex<Vec<(i32, Module)>> = Mutex::new(Vec::new());

/// The function `name` on gpu(`dev`), loading the module first if needed. The device's context
/// must be bound to the calling thread.
fn function(dev: i32, name: &'static str) -> std::result::Result<sys::CUfunction, DriverError> {
    let mut modules = MODULES.lock();
    let idx = match modules.iter().position(|(d, _)| *d == dev) {
        Some(i) => i,
        None => {
            // SAFETY: `PTX` is NUL-terminated text that lives for the whole process.
            let module = unsafe { result::module::load_data(PTX.as_ptr().cast()) }?;
            modules.push((
                dev,
                Module {
                    module,
                    functions: HashMap::new(),
                },
            ));
            modules.len() - 1
        }
    };
    let m = &mut modules[idx].1;
    if let Some(&f) = m.functions.get(name) {
        return Ok(f);
    }
    let cname = CString::new(name).expect("kernel names have no NUL");
    // SAFETY: `m.module` is a live module of the bound context.
    let f = unsafe { result::module::get_function(m.module, cname) }?;
    m.functions.insert(name, f);
    Ok(f)
}

/// Queues kernel `name` over `n` elements on `stream` of gpu(`dev`).
///
/// # Safety
/// `params` must match the kernel's parameters, and the memory they point to must stay valid
/// until the stream has run the kernel.
unsafe fn launch(
    dev: i32,
    stream: sys::CUstream,
    name: &'static str,
    n: u64,
    params: &mut [*mut c_void],
) -> std::result::Result<(), DriverError> {
    let f = function(dev, name)?;
    let grid = n.div_ceil(u64::from(BLOCK)).clamp(1, MAX_GRID) as u32;
    // SAFETY: the caller's contract; the launch copies the parameter values.
    unsafe { result::launch_kernel(f, (grid, 1, 1), (BLOCK, 1, 1), 0, stream, params) }
}

/// The elementwise two-operand kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
}

/// The kernel of `op` for `dtype` (`mxrt_<op>_<dtype>`), if there is one.
fn binary_kernel(op: BinaryOp, dtype: DType) -> Option<&'static str> {
    macro_rules! names {
        ($($d:ident $s:literal),*) => {
            match (op, dtype) {
                $((BinaryOp::Add, DType::$d) => concat!("mxrt_add_", $s),
                  (BinaryOp::Sub, DType::$d) => concat!("mxrt_sub_", $s),
                  (BinaryOp::Mul, DType::$d) => concat!("mxrt_mul_", $s),)*
                _ => return None,
            }
        };
    }
    Some(names!(F32 "f32", F64 "f64", F16 "f16", I32 "i32", I64 "i64", I8 "i8", U8 "u8"))
}

fn add_kernel(dtype: DType) -> Option<&'static str> {
    binary_kernel(BinaryOp::Add, dtype)
}

/// Whether there are GPU kernels for `dtype` ([`sum`] and [`binary`] have the same dtypes).
pub fn can_sum(dtype: DType) -> bool {
    add_kernel(dtype).is_some()
}

/// `out = a op b` over `n` elements of `dtype` on gpu(`dev`), finishing as `finish` says.
///
/// # Safety
/// As [`sum`] with the inputs `a` and `b`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn binary(
    dev: i32,
    op: BinaryOp,
    dtype: DType,
    out: u64,
    a: u64,
    b: u64,
    n: usize,
    finish: Finish,
) -> Result<()> {
    let Some(name) = binary_kernel(op, dtype) else {
        let e = Error::not_supported(format!(
            "there is no GPU kernel for {op:?} on {} arrays yet",
            dtype.name()
        ));
        return finish_now(Err(e), finish);
    };
    if n == 0 {
        return finish_now(Ok(()), finish);
    }
    let n64 = n as u64;
    // SAFETY: `mxrt_<op>_*` takes (out, a, b, n); the arrays are the caller's, live until the
    // kernel has finished.
    let work = move |st| unsafe { launch_on(dev, st, name, &[out, a, b], n64) };
    stream::run_finish(dev, "an elementwise kernel", work, finish)
}

/// How a float16 sum of several arrays rounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rounding {
    /// After every addition, as adding the arrays one by one does (the operators).
    EachAdd,
    /// Once, of the float32 total (the KVStore's reductions). Other dtypes are unaffected.
    Once,
}

/// `out = inputs[0] + inputs[1] + ...` over `n` elements of `dtype` on gpu(`dev`), added in that
/// order; when `out` is one of the inputs the sum starts from it and adds the others in order
/// (as the CPU kernel does). Finishes as `finish` says.
///
/// # Safety
/// Every address must be `n` elements of `dtype` on gpu(`dev`), live until the sum has
/// finished; nothing else may use `out` meanwhile or write the inputs.
pub unsafe fn sum(
    dev: i32,
    dtype: DType,
    out: u64,
    inputs: &[u64],
    n: usize,
    rounding: Rounding,
    finish: Finish,
) -> Result<()> {
    let Some(name) = add_kernel(dtype) else {
        let e = Error::not_supported(format!(
            "there is no GPU kernel adding {} arrays yet",
            dtype.name()
        ));
        return finish_now(Err(e), finish);
    };
    if n == 0 || inputs.is_empty() {
        return finish_now(Ok(()), finish);
    }
    let start = inputs.iter().position(|&a| a == out);
    if dtype == DType::F16 && rounding == Rounding::Once && inputs.len() > 2 {
        // SAFETY: the caller's contract.
        return unsafe { sum_f16_rounded_once(dev, out, inputs, start, n, finish) };
    }
    let n64 = n as u64;
    let inputs = inputs.to_vec();
    let work = move |st| {
        let mut acc = match start {
            Some(_) => out,
            None if inputs.len() == 1 => {
                // SAFETY: both ranges are `n` elements on `dev` (the caller's contract).
                return unsafe { result::memcpy_dtod_async(out, inputs[0], n * dtype.size(), st) };
            }
            None => inputs[0],
        };
        for (i, &x) in inputs.iter().enumerate() {
            if i == start.unwrap_or(0) {
                continue;
            }
            // SAFETY: `mxrt_add_*` takes (out, a, b, n); the arrays are the caller's, live until
            // `run` returns after the stream is done.
            unsafe { launch_on(dev, st, name, &[out, acc, x], n64) }?;
            acc = out;
        }
        Ok(())
    };
    stream::run_finish(dev, "adding arrays", work, finish)
}

/// Queues a kernel whose parameters are device pointers followed by the element count (at most
/// three pointers: `(out, a, b, n)` or `(out, in, n)`).
///
/// # Safety
/// As [`launch`]: the pointers are live device memory of the kernel's extent.
unsafe fn launch_on(
    dev: i32,
    st: sys::CUstream,
    name: &'static str,
    pointers: &[u64],
    n: u64,
) -> std::result::Result<(), DriverError> {
    let mut values = [0u64; 4];
    values[..pointers.len()].copy_from_slice(pointers);
    values[pointers.len()] = n;
    let mut params: [*mut c_void; 4] = std::array::from_fn(|i| (&mut values[i] as *mut u64).cast());
    // SAFETY: the caller's contract; the values live until the launch has copied them.
    unsafe { launch(dev, st, name, n, &mut params[..=pointers.len()]) }
}

/// A float16 sum accumulated in float32 scratch memory on the device and rounded once.
///
/// # Safety
/// As [`sum`].
unsafe fn sum_f16_rounded_once(
    dev: i32,
    out: u64,
    inputs: &[u64],
    start: Option<usize>,
    n: usize,
    finish: Finish,
) -> Result<()> {
    let scratch = match super::storage().alloc(crate::context::Context::gpu(dev), n * 4)
    {
        Ok(s) => s,
        Err(e) => return finish_now(Err(e.context("scratch memory for a float16 sum")), finish),
    };
    let acc = scratch.as_ptr() as usize as u64;
    // the scratch memory lives until the device is done with it
    let finish = match finish {
        Finish::Here => Finish::Here,
        Finish::Then(done) => Finish::Then(Box::new(move |r| {
            drop(scratch);
            done(r)
        })),
    };
    let first = start.unwrap_or(0);
    let n64 = n as u64;
    let inputs = inputs.to_vec();
    let work = move |st| {
        // SAFETY (all launches): `acc` is `n` floats of scratch memory held until `run` returns;
        // the inputs and `out` are `n` halves on `dev` (the caller's contract).
        unsafe {
            launch_on(dev, st, "mxrt_widen_f16", &[acc, inputs[first]], n64)?;
            for (i, &x) in inputs.iter().enumerate() {
                if i != first {
                    launch_on(dev, st, "mxrt_acc_f16", &[acc, x], n64)?;
                }
            }
            launch_on(dev, st, "mxrt_narrow_f16", &[out, acc], n64)
        }
    };
    stream::run_finish(dev, "adding float16 arrays", work, finish)
}

/// Sets `n` elements of `pattern.len()` bytes (1, 2, 4 or 8) at `out` on gpu(`dev`) to
/// `pattern`, finishing as `finish` says.
///
/// # Safety
/// `out` must be `n * pattern.len()` bytes on gpu(`dev`) that nothing else uses until the fill
/// has finished.
pub unsafe fn fill(dev: i32, out: u64, pattern: &[u8], n: usize, finish: Finish) -> Result<()> {
    let (name, mut value) = match pattern.len() {
        1 => ("mxrt_fill_b8", u64::from(pattern[0])),
        2 => (
            "mxrt_fill_b16",
            u64::from(u16::from_ne_bytes([pattern[0], pattern[1]])),
        ),
        4 => (
            "mxrt_fill_b32",
            u64::from(u32::from_ne_bytes(pattern.try_into().expect("4"))),
        ),
        8 => (
            "mxrt_fill_b64",
            u64::from_ne_bytes(pattern.try_into().expect("8")),
        ),
        w => {
            let e = Error::invalid(format!("no fill kernel for {w}-byte elements"));
            return finish_now(Err(e), finish);
        }
    };
    if n == 0 {
        return finish_now(Ok(()), finish);
    }
    let (mut o, mut len) = (out, n as u64);
    let work = move |st| {
        // the value parameter is read with the kernel's width from the start of `value`, which
        // on a little-endian host holds the low bytes
        let mut params = [
            (&mut o as *mut u64).cast::<c_void>(),
            (&mut value as *mut u64).cast(),
            (&mut len as *mut u64).cast(),
        ];
        // SAFETY: `mxrt_fill_b*` takes (out, value, n); `out` is the caller's live range.
        unsafe { launch(dev, st, name, len, &mut params) }
    };
    stream::run_finish(dev, "filling an array", work, finish)
}
