//! Process-wide functions: version, shutdown, thread settings, environment helpers.

use super::args;
use super::engine::engine;
use super::error::api_call;
use crate::error::Error;
use std::cell::Cell;
use std::ffi::{CString, c_char, c_int};

/// The MXNet version mxrt reports: 1.9.1 as MAJOR*10000 + MINOR*100 + PATCH, the C ABI it
/// implements, so clients that check for MXNet >= 1.x accept it.
pub const MXNET_VERSION: c_int = 10901;

/// Writes MXNet's version number, 10901 (1.9.1): the C ABI mxrt implements. mxrt's own version is
/// in the MXRT_VERSION_* macros.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXGetVersion(out: *mut c_int) -> c_int {
    api_call("MXGetVersion", || {
        // SAFETY: API contract: out-parameter.
        *unsafe { args::out(out, "out")? } = MXNET_VERSION;
        Ok(())
    })
}

/// Marks the engine as shutting down and waits for it to become idle: later pushes fail (-1),
/// except the variable deletions that freeing NDArrays performs, and ops still queued are skipped.
/// Call it once before the process exits (MXNet's Python frontend does).
#[unsafe(no_mangle)]
pub extern "C" fn MXNotifyShutdown() -> c_int {
    api_call("MXNotifyShutdown", || engine()?.notify_shutdown())
}

/// MXNet sets OpenMP's thread count for the calling thread. mxrt has no OpenMP: the value (>= 1)
/// caps the threads of the KVStore reductions that the calling thread's pushes start (otherwise
/// MXNET_KVSTORE_REDUCTION_NTHREADS); operator kernels' intra-op pool (MXNET_OMP_MAX_THREADS) and
/// other threads are not affected. Values < 1 are an error.
#[unsafe(no_mangle)]
pub extern "C" fn MXSetNumOMPThreads(thread_num: c_int) -> c_int {
    api_call("MXSetNumOMPThreads", || {
        if thread_num < 1 {
            return Err(Error::invalid(format!(
                "thread_num must be at least 1, got {thread_num}"
            )));
        }
        crate::util::thread_cap::set(thread_num as usize);
        Ok(())
    })
}

thread_local! {
    static ENV_VALUE: Cell<Option<CString>> = const { Cell::new(None) };
}

/// Reads environment variable `name` into `*value` (NULL if unset). The string stays valid until
/// the next MXGetEnv on the same thread. (MXNet's test helper, used by its Python frontend.)
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXGetEnv(name: *const c_char, value: *mut *const c_char) -> c_int {
    api_call("MXGetEnv", || {
        // SAFETY: API contract: NUL-terminated string.
        let name = unsafe { args::c_str(name, "name")? };
        // SAFETY: API contract: out-parameter.
        let value = unsafe { args::out(value, "value")? };
        let v = std::env::var_os(name)
            .map(|v| CString::new(v.into_encoded_bytes()).unwrap_or_default());
        *value = v.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
        ENV_VALUE.with(|slot| slot.set(v));
        Ok(())
    })
}

/// Sets environment variable `name` to `value` (NULL unsets it). Settings mxrt reads once (engine
/// type, worker counts) only take effect before first use. (MXNet's test helper.)
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXSetEnv(name: *const c_char, value: *const c_char) -> c_int {
    api_call("MXSetEnv", || {
        // SAFETY: API contract: NUL-terminated strings.
        let name = unsafe { args::c_str(name, "name")? };
        // SAFETY: as above.
        let value = unsafe { args::opt_c_str(value, "value")? };
        if name.is_empty() || name.contains('=') {
            return Err(Error::invalid(format!(
                "name {name:?} is not a valid variable name"
            )));
        }
        // SAFETY: setenv/unsetenv are not thread-safe against concurrent getenv in C; MXNet has
        // the same contract for this test helper: call it before starting concurrent work.
        unsafe {
            match value {
                Some(v) => std::env::set_var(name, v),
                None => std::env::remove_var(name),
            }
        }
        Ok(())
    })
}

/// MXNet's `struct LibFeature`. Opaque here so that this header and `mxnet/c_api.h` (which
/// defines it) can be included together in any order; read the entries through
/// [`MXRTLibFeature`], which has the same layout.
#[allow(dead_code)]
pub struct LibFeature {
    _opaque: [u8; 0],
}

/// Layout of one MXLibInfoFeatures entry: `{const char *name; bool enabled;}` (MXNet's
/// `struct LibFeature`).
#[repr(C)]
pub struct MXRTLibFeature {
    pub name: *const c_char,
    pub enabled: bool,
}

struct FeatureTable([MXRTLibFeature; 32]);
// SAFETY: the table only holds pointers to static C string literals and is never mutated.
unsafe impl Sync for FeatureTable {}

const X86: bool = cfg!(any(target_arch = "x86", target_arch = "x86_64"));

macro_rules! feature {
    ($name:literal, $on:expr) => {
        MXRTLibFeature {
            name: $name.as_ptr(),
            enabled: $on,
        }
    };
}

/// MXNet's 32 features in its order; enabled only where this build really has the feature
/// (CPU flags are the ones mxrt was compiled for).
static FEATURES: FeatureTable = FeatureTable([
    feature!(c"CUDA", false),
    feature!(c"CUDNN", false),
    feature!(c"NCCL", false),
    feature!(c"CUDA_RTC", false),
    feature!(c"TENSORRT", false),
    feature!(c"CPU_SSE", X86 && cfg!(target_feature = "sse")),
    feature!(c"CPU_SSE2", X86 && cfg!(target_feature = "sse2")),
    feature!(c"CPU_SSE3", X86 && cfg!(target_feature = "sse3")),
    feature!(c"CPU_SSE4_1", X86 && cfg!(target_feature = "sse4.1")),
    feature!(c"CPU_SSE4_2", X86 && cfg!(target_feature = "sse4.2")),
    feature!(c"CPU_SSE4A", X86 && cfg!(target_feature = "sse4a")),
    feature!(c"CPU_AVX", X86 && cfg!(target_feature = "avx")),
    feature!(c"CPU_AVX2", X86 && cfg!(target_feature = "avx2")),
    feature!(c"OPENMP", false),
    feature!(c"SSE", X86 && cfg!(target_feature = "sse")),
    feature!(c"F16C", X86 && cfg!(target_feature = "f16c")),
    feature!(c"JEMALLOC", false),
    feature!(c"BLAS_OPEN", false),
    feature!(c"BLAS_ATLAS", false),
    feature!(c"BLAS_MKL", false),
    feature!(c"BLAS_APPLE", false),
    feature!(c"LAPACK", false),
    feature!(c"MKLDNN", false),
    feature!(c"OPENCV", false),
    feature!(c"CAFFE", false),
    feature!(c"PROFILER", true),
    feature!(c"DIST_KVSTORE", cfg!(feature = "dist")),
    feature!(c"CXX14", false),
    feature!(c"INT64_TENSOR_SIZE", true),
    feature!(c"SIGNAL_HANDLER", false),
    feature!(c"DEBUG", cfg!(debug_assertions)),
    feature!(c"TVM_OP", false),
]);

/// The features of this build: a static array of 32 entries in MXNet's order (CUDA, CUDNN, ...,
/// TVM_OP); read them as `const MXRTLibFeature *`. PROFILER and INT64_TENSOR_SIZE are on,
/// DIST_KVSTORE follows the `dist` feature, DEBUG is on in debug builds, the CPU_* flags follow
/// the instruction sets mxrt was compiled for, the rest (CUDA, BLAS, OPENMP, ...) are off: mxrt
/// is not built against the CUDA toolkit and finds GPUs through the driver at run time
/// (MXGetGPUCount).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXLibInfoFeatures(
    lib_feature: *mut *const LibFeature,
    size: *mut usize,
) -> c_int {
    api_call("MXLibInfoFeatures", || {
        // SAFETY: API contract: out-parameters.
        let (f, n) = unsafe {
            (
                args::out(lib_feature, "libFeature")?,
                args::out(size, "size")?,
            )
        };
        *f = FEATURES.0.as_ptr() as *const LibFeature;
        *n = FEATURES.0.len();
        Ok(())
    })
}

/// Number of GPUs the CUDA driver reports (0 when the machine has no driver, `libcuda.so`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXGetGPUCount(out: *mut c_int) -> c_int {
    api_call("MXGetGPUCount", || {
        // SAFETY: API contract: out-parameter.
        *unsafe { args::out(out, "out")? } = crate::gpu::device_count() as c_int;
        Ok(())
    })
}

/// Free and total memory of GPU `dev`, in bytes. A device that does not exist is -1 naming it
/// and why (no driver, or the devices there are).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXGetGPUMemoryInformation64(
    dev: c_int,
    free_mem: *mut u64,
    total_mem: *mut u64,
) -> c_int {
    api_call("MXGetGPUMemoryInformation64", || {
        // SAFETY: API contract: out-parameters.
        let (f, t) = unsafe { (args::out(free_mem, "free_mem")?, args::out(total_mem, "total_mem")?) };
        let (free, total) = crate::gpu::memory_info(dev.into())?;
        *f = free;
        *t = total;
        Ok(())
    })
}

/// Sets numpy-shape semantics: 0 off (clears the process-wide and this thread's flag), 1 on for
/// the calling thread, 2 on for the whole process. `*prev` gets whether it was on before (0 or 1,
/// as MXNet reports).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXSetIsNumpyShape(is_np_shape: c_int, prev: *mut c_int) -> c_int {
    api_call("MXSetIsNumpyShape", || {
        // SAFETY: API contract: out-parameter.
        let prev = unsafe { args::out(prev, "prev")? };
        let state = crate::ndarray::format::NpShape::from_code(is_np_shape)?;
        *prev = crate::ndarray::np_shape::set(state) as c_int;
        Ok(())
    })
}

/// The calling thread's numpy-shape state: 2 on globally, 1 on for this thread, 0 off.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXIsNumpyShape(curr: *mut c_int) -> c_int {
    api_call("MXIsNumpyShape", || {
        // SAFETY: API contract: out-parameter.
        *unsafe { args::out(curr, "curr")? } = crate::ndarray::np_shape::current().code();
        Ok(())
    })
}
