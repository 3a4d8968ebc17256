//! mxrt's device kernels: `kernels/kernels.cu`, compiled to the committed `kernels/kernels.ptx`
//! (`make ptx`), embedded in the library and loaded into a device's context on its first
//! launch. Kernels are 1-D grid-stride loops, launched by name on the calling thread's stream.

use super::stream;
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

fn add_kernel(dtype: DType) -> Option<&'static str> {
    Some(match dtype {
        DType::F32 => "mxrt_add_f32",
        DType::F64 => "mxrt_add_f64",
        DType::F16 => "mxrt_add_f16",
        DType::I32 => "mxrt_add_i32",
        DType::I64 => "mxrt_add_i64",
        DType::I8 => "mxrt_add_i8",
        DType::U8 => "mxrt_add_u8",
        _ => return None,
    })
}

/// Whether [`sum`] has a kernel for `dtype`.
pub fn can_sum(dtype: DType) -> bool {
    add_kernel(dtype).is_some()
}

/// `out = inputs[0] + inputs[1] + ...` over `n` elements of `dtype` on gpu(`dev`), added in that
/// order; when `out` is one of the inputs the sum starts from it and adds the others in order
/// (as the CPU kernel does). Returns when the device is done.
///
/// # Safety
/// Every address must be `n` elements of `dtype` on gpu(`dev`), live during the call; nothing
/// else may use `out` meanwhile or write the inputs.
pub unsafe fn sum(dev: i32, dtype: DType, out: u64, inputs: &[u64], n: usize) -> Result<()> {
    let Some(name) = add_kernel(dtype) else {
        return Err(Error::not_supported(format!(
            "there is no GPU kernel adding {} arrays yet",
            dtype.name()
        )));
    };
    if n == 0 || inputs.is_empty() {
        return Ok(());
    }
    let first = inputs.iter().position(|&a| a == out);
    let n64 = n as u64;
    stream::run(dev, "adding arrays", |st| {
        let mut acc = match first {
            Some(_) => out,
            None if inputs.len() == 1 => {
                // SAFETY: both ranges are `n` elements on `dev` (the caller's contract).
                return unsafe {
                    result::memcpy_dtod_async(out, inputs[0], n * dtype.size(), st)
                };
            }
            None => inputs[0],
        };
        let start = first.unwrap_or(0);
        for (i, &x) in inputs.iter().enumerate() {
            if i == start {
                continue;
            }
            let (mut o, mut a, mut b, mut len) = (out, acc, x, n64);
            let mut params = [
                (&mut o as *mut u64).cast::<c_void>(),
                (&mut a as *mut u64).cast(),
                (&mut b as *mut u64).cast(),
                (&mut len as *mut u64).cast(),
            ];
            // SAFETY: `mxrt_add_*` takes (out, a, b, n) as three device pointers and a u64; the
            // arrays are the caller's, live until `run` returns after the stream is done.
            unsafe { launch(dev, st, name, n64, &mut params) }?;
            acc = out;
        }
        Ok(())
    })
}

/// Sets `n` elements of `pattern.len()` bytes (1, 2, 4 or 8) at `out` on gpu(`dev`) to
/// `pattern`. Returns when the device is done.
///
/// # Safety
/// `out` must be `n * pattern.len()` bytes on gpu(`dev`) that nothing else uses meanwhile.
pub unsafe fn fill(dev: i32, out: u64, pattern: &[u8], n: usize) -> Result<()> {
    let (name, mut value) = match pattern.len() {
        1 => ("mxrt_fill_b8", u64::from(pattern[0])),
        2 => ("mxrt_fill_b16", u64::from(u16::from_ne_bytes([pattern[0], pattern[1]]))),
        4 => ("mxrt_fill_b32", u64::from(u32::from_ne_bytes(pattern.try_into().expect("4")))),
        8 => ("mxrt_fill_b64", u64::from_ne_bytes(pattern.try_into().expect("8"))),
        w => return Err(Error::invalid(format!("no fill kernel for {w}-byte elements"))),
    };
    if n == 0 {
        return Ok(());
    }
    let (mut o, mut len) = (out, n as u64);
    stream::run(dev, "filling an array", |st| {
        // the value parameter is read with the kernel's width from the start of `value`, which
        // on a little-endian host holds the low bytes
        let mut params = [
            (&mut o as *mut u64).cast::<c_void>(),
            (&mut value as *mut u64).cast(),
            (&mut len as *mut u64).cast(),
        ];
        // SAFETY: `mxrt_fill_b*` takes (out, value, n); `out` is the caller's live range.
        unsafe { launch(dev, st, name, len, &mut params) }
    })
}
