//! The enum values a C caller passes to and gets from the C API, as `#define`s in `include/mxrt.h`
//! (build.rs generates them from this file alone). Their values are MXNet 1.9.1's; the names carry
//! an `MXRT_` prefix, so the header still compiles together with MXNet's `mxnet/c_api.h` (which
//! defines none of them: MXNet keeps these enums in its C++ headers).
//!
//! This file holds literals only, because cbindgen reads it on its own; the tests below check
//! them against the core's enums, and `scripts/check-abi.sh` against MXNet's C++ headers.

use std::ffi::c_int;

/// FnProperty (`mxnet::FnProperty`): how the engine schedules an op (`MXEnginePush*` take a pointer
/// to one of these `int`s, or NULL for MXRT_FN_PROPERTY_NORMAL).
///
/// The device's normal queue.
pub const MXRT_FN_PROPERTY_NORMAL: c_int = 0;
/// A copy from a GPU (on a CPU context: like MXRT_FN_PROPERTY_NORMAL).
pub const MXRT_FN_PROPERTY_COPY_FROM_GPU: c_int = 1;
/// A copy to a GPU (on a CPU context: like MXRT_FN_PROPERTY_NORMAL).
pub const MXRT_FN_PROPERTY_COPY_TO_GPU: c_int = 2;
/// The CPU priority pool (higher priority first).
pub const MXRT_FN_PROPERTY_CPU_PRIORITIZED: c_int = 3;
/// Runs on the pushing thread when its dependencies are ready at push time; completes through
/// its completion callback.
pub const MXRT_FN_PROPERTY_ASYNC: c_int = 4;
/// Deletes a variable.
pub const MXRT_FN_PROPERTY_DELETE_VAR: c_int = 5;
/// The GPU priority pool.
pub const MXRT_FN_PROPERTY_GPU_PRIORITIZED: c_int = 6;
/// Runs even when an input carries an error.
pub const MXRT_FN_PROPERTY_NO_SKIP: c_int = 7;

/// Element types (`mshadow::TypeFlag`: the `dtype` arguments and results).
pub const MXRT_DTYPE_FLOAT32: c_int = 0;
pub const MXRT_DTYPE_FLOAT64: c_int = 1;
pub const MXRT_DTYPE_FLOAT16: c_int = 2;
pub const MXRT_DTYPE_UINT8: c_int = 3;
pub const MXRT_DTYPE_INT32: c_int = 4;
pub const MXRT_DTYPE_INT8: c_int = 5;
pub const MXRT_DTYPE_INT64: c_int = 6;
pub const MXRT_DTYPE_BOOL: c_int = 7;
/// MXNet 1.9.1 refuses to create arrays of this type; mxrt accepts it.
pub const MXRT_DTYPE_INT16: c_int = 8;
/// See MXRT_DTYPE_INT16.
pub const MXRT_DTYPE_UINT16: c_int = 9;
/// See MXRT_DTYPE_INT16.
pub const MXRT_DTYPE_UINT32: c_int = 10;
/// See MXRT_DTYPE_INT16.
pub const MXRT_DTYPE_UINT64: c_int = 11;
pub const MXRT_DTYPE_BFLOAT16: c_int = 12;

/// Device types (`mxnet::Context::DeviceType`: `dev_type` arguments, `MXContext.dev_type`).
pub const MXRT_DEVICE_CPU: c_int = 1;
/// An NVIDIA GPU, through the CUDA driver found at run time (MXGetGPUCount); without a driver, or
/// for a GPU the machine does not have, functions given a GPU context fail.
pub const MXRT_DEVICE_GPU: c_int = 2;
pub const MXRT_DEVICE_CPU_PINNED: c_int = 3;
pub const MXRT_DEVICE_CPU_SHARED: c_int = 5;

/// Storage types (`mxnet::NDArrayStorageType`: `MXNDArrayGetStorageType`,
/// `MXNDArrayCreateSparseEx`).
pub const MXRT_STORAGE_UNDEFINED: c_int = -1;
pub const MXRT_STORAGE_DEFAULT: c_int = 0;
pub const MXRT_STORAGE_ROW_SPARSE: c_int = 1;
pub const MXRT_STORAGE_CSR: c_int = 2;

/// Aux array indices of sparse arrays (`MXNDArrayGetAuxType`, `MXNDArrayGetAuxNDArray`).
///
/// A CSR array's row pointers.
pub const MXRT_CSR_AUX_INDPTR: c_int = 0;
/// A CSR array's column indices.
pub const MXRT_CSR_AUX_INDICES: c_int = 1;
/// A row-sparse array's row indices.
pub const MXRT_ROW_SPARSE_AUX_INDICES: c_int = 0;

/// Numpy-shape semantics (`MXSetIsNumpyShape`, `MXIsNumpyShape`).
pub const MXRT_NP_SHAPE_OFF: c_int = 0;
pub const MXRT_NP_SHAPE_THREAD_LOCAL_ON: c_int = 1;
pub const MXRT_NP_SHAPE_GLOBAL_ON: c_int = 2;

/// Resource kinds (`mxnet::ResourceRequest::Type`: `MXResourceRequest`, `MXResourceGetInfo`).
///
/// One random number generator per device.
pub const MXRT_RESOURCE_RANDOM: c_int = 0;
/// Scratch memory, several round-robin copies per device.
pub const MXRT_RESOURCE_TEMP_SPACE: c_int = 1;
/// Generators with one stream per parallel worker.
pub const MXRT_RESOURCE_PARALLEL_RANDOM: c_int = 2;

/// Profiler (`MXSetProfilerState`, `MXSetProcessProfilerState`, `MXAggregateProfileStatsPrintEx`;
/// the mode bits are what `MXNET_PROFILER_MODE` holds).
pub const MXRT_PROFILER_STATE_STOP: c_int = 0;
pub const MXRT_PROFILER_STATE_RUN: c_int = 1;
/// Mode bit: symbolic (graph) operators.
pub const MXRT_PROFILER_MODE_SYMBOLIC: c_int = 1;
/// Mode bit: engine operators and KVStore calls.
pub const MXRT_PROFILER_MODE_IMPERATIVE: c_int = 2;
/// Mode bit: C API calls.
pub const MXRT_PROFILER_MODE_API: c_int = 4;
/// Mode bit: storage use.
pub const MXRT_PROFILER_MODE_MEMORY: c_int = 8;
/// The profiling process of the `*ProcessProfiler*` functions: this one.
pub const MXRT_PROFILE_PROCESS_WORKER: c_int = 0;
/// The profiling process of the `*ProcessProfiler*` functions: the KVStore servers.
pub const MXRT_PROFILE_PROCESS_SERVER: c_int = 1;
pub const MXRT_AGGREGATE_FORMAT_TABLE: c_int = 0;
pub const MXRT_AGGREGATE_FORMAT_JSON: c_int = 1;
pub const MXRT_AGGREGATE_SORT_TOTAL: c_int = 0;
pub const MXRT_AGGREGATE_SORT_AVG: c_int = 1;
pub const MXRT_AGGREGATE_SORT_MIN: c_int = 2;
pub const MXRT_AGGREGATE_SORT_MAX: c_int = 3;
pub const MXRT_AGGREGATE_SORT_COUNT: c_int = 4;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::DeviceType;
    use crate::dtype::DType;
    use crate::engine::FnProperty;
    use crate::ndarray::format::{NpShape, StorageType};
    use crate::profiler::{Format, SortBy, config};
    use crate::resource::ResourceRequest;

    #[test]
    fn fn_properties_are_the_engines() {
        let all = [
            (MXRT_FN_PROPERTY_NORMAL, FnProperty::Normal),
            (MXRT_FN_PROPERTY_COPY_FROM_GPU, FnProperty::CopyFromGpu),
            (MXRT_FN_PROPERTY_COPY_TO_GPU, FnProperty::CopyToGpu),
            (MXRT_FN_PROPERTY_CPU_PRIORITIZED, FnProperty::CpuPrioritized),
            (MXRT_FN_PROPERTY_ASYNC, FnProperty::Async),
            (MXRT_FN_PROPERTY_DELETE_VAR, FnProperty::DeleteVar),
            (MXRT_FN_PROPERTY_GPU_PRIORITIZED, FnProperty::GpuPrioritized),
            (MXRT_FN_PROPERTY_NO_SKIP, FnProperty::NoSkip),
        ];
        for (code, p) in all {
            assert_eq!(FnProperty::from_code(code).unwrap(), p);
        }
        assert!(FnProperty::from_code(MXRT_FN_PROPERTY_NO_SKIP + 1).is_err());
    }

    #[test]
    fn dtypes_are_the_cores() {
        let all = [
            MXRT_DTYPE_FLOAT32,
            MXRT_DTYPE_FLOAT64,
            MXRT_DTYPE_FLOAT16,
            MXRT_DTYPE_UINT8,
            MXRT_DTYPE_INT32,
            MXRT_DTYPE_INT8,
            MXRT_DTYPE_INT64,
            MXRT_DTYPE_BOOL,
            MXRT_DTYPE_INT16,
            MXRT_DTYPE_UINT16,
            MXRT_DTYPE_UINT32,
            MXRT_DTYPE_UINT64,
            MXRT_DTYPE_BFLOAT16,
        ];
        let names = [
            "float32", "float64", "float16", "uint8", "int32", "int8", "int64", "bool", "int16",
            "uint16", "uint32", "uint64", "bfloat16",
        ];
        for ((code, name), dtype) in all.into_iter().zip(names).zip(DType::ALL) {
            assert_eq!(DType::from_code(code).unwrap(), dtype);
            assert_eq!(dtype.name(), name);
        }
    }

    #[test]
    fn devices_storage_np_shape_are_the_cores() {
        for (code, d) in [
            (MXRT_DEVICE_CPU, DeviceType::Cpu),
            (MXRT_DEVICE_GPU, DeviceType::Gpu),
            (MXRT_DEVICE_CPU_PINNED, DeviceType::CpuPinned),
            (MXRT_DEVICE_CPU_SHARED, DeviceType::CpuShared),
        ] {
            assert_eq!(DeviceType::from_code(code).unwrap(), d);
        }
        for (code, s) in [
            (MXRT_STORAGE_DEFAULT, StorageType::Default),
            (MXRT_STORAGE_ROW_SPARSE, StorageType::RowSparse),
            (MXRT_STORAGE_CSR, StorageType::Csr),
        ] {
            assert_eq!(StorageType::from_code(code), Some(s));
        }
        assert_eq!(StorageType::from_code(MXRT_STORAGE_UNDEFINED), None);
        assert_eq!(StorageType::Csr.num_aux(), 2);
        assert_eq!(StorageType::RowSparse.num_aux(), 1);
        assert_eq!(MXRT_CSR_AUX_INDICES, MXRT_CSR_AUX_INDPTR + 1);
        assert_eq!(MXRT_ROW_SPARSE_AUX_INDICES, 0);
        for (code, np) in [
            (MXRT_NP_SHAPE_OFF, NpShape::Off),
            (MXRT_NP_SHAPE_THREAD_LOCAL_ON, NpShape::ThreadLocalOn),
            (MXRT_NP_SHAPE_GLOBAL_ON, NpShape::GlobalOn),
        ] {
            assert_eq!(NpShape::from_code(code).unwrap(), np);
        }
    }

    #[test]
    fn resource_kinds_are_the_managers() {
        for (code, r) in [
            (MXRT_RESOURCE_RANDOM, ResourceRequest::Random),
            (MXRT_RESOURCE_TEMP_SPACE, ResourceRequest::TempSpace),
            (
                MXRT_RESOURCE_PARALLEL_RANDOM,
                ResourceRequest::ParallelRandom,
            ),
        ] {
            assert_eq!(ResourceRequest::from_code(code).unwrap(), r);
            assert_eq!(r.code(), code);
        }
    }

    #[test]
    fn profiler_codes_are_the_profilers() {
        assert_eq!(MXRT_PROFILER_MODE_SYMBOLIC as u32, config::MODE_SYMBOLIC);
        assert_eq!(
            MXRT_PROFILER_MODE_IMPERATIVE as u32,
            config::MODE_IMPERATIVE
        );
        assert_eq!(MXRT_PROFILER_MODE_API as u32, config::MODE_API);
        assert_eq!(MXRT_PROFILER_MODE_MEMORY as u32, config::MODE_MEMORY);
        assert_eq!(
            Format::from_code(MXRT_AGGREGATE_FORMAT_TABLE).unwrap(),
            Format::Table
        );
        assert_eq!(
            Format::from_code(MXRT_AGGREGATE_FORMAT_JSON).unwrap(),
            Format::Json
        );
        for (code, s) in [
            (MXRT_AGGREGATE_SORT_TOTAL, SortBy::Total),
            (MXRT_AGGREGATE_SORT_AVG, SortBy::Avg),
            (MXRT_AGGREGATE_SORT_MIN, SortBy::Min),
            (MXRT_AGGREGATE_SORT_MAX, SortBy::Max),
            (MXRT_AGGREGATE_SORT_COUNT, SortBy::Count),
        ] {
            assert_eq!(SortBy::from_code(code).unwrap(), s);
        }
    }
}
