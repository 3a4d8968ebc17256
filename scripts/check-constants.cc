// Compiled (never run) by scripts/check-abi.sh: every MXRT_* constant of include/mxrt.h that MXNet
// defines in its C++ headers has MXNet's value. The profiler's codes are compared with MXNet's
// Python package by scripts/check-constants.py.
#include <mxnet/engine.h>
#include <mxnet/imperative.h>
#include <mxnet/ndarray.h>
#include <mxnet/resource.h>

#include "mxrt.h"

#define SAME(ours, theirs) \
  static_assert((ours) == static_cast<int>(theirs), #ours " is not MXNet's " #theirs);

SAME(MXRT_FN_PROPERTY_NORMAL, mxnet::FnProperty::kNormal)
SAME(MXRT_FN_PROPERTY_COPY_FROM_GPU, mxnet::FnProperty::kCopyFromGPU)
SAME(MXRT_FN_PROPERTY_COPY_TO_GPU, mxnet::FnProperty::kCopyToGPU)
SAME(MXRT_FN_PROPERTY_CPU_PRIORITIZED, mxnet::FnProperty::kCPUPrioritized)
SAME(MXRT_FN_PROPERTY_ASYNC, mxnet::FnProperty::kAsync)
SAME(MXRT_FN_PROPERTY_DELETE_VAR, mxnet::FnProperty::kDeleteVar)
SAME(MXRT_FN_PROPERTY_GPU_PRIORITIZED, mxnet::FnProperty::kGPUPrioritized)
SAME(MXRT_FN_PROPERTY_NO_SKIP, mxnet::FnProperty::kNoSkip)

SAME(MXRT_DTYPE_FLOAT32, mshadow::kFloat32)
SAME(MXRT_DTYPE_FLOAT64, mshadow::kFloat64)
SAME(MXRT_DTYPE_FLOAT16, mshadow::kFloat16)
SAME(MXRT_DTYPE_UINT8, mshadow::kUint8)
SAME(MXRT_DTYPE_INT32, mshadow::kInt32)
SAME(MXRT_DTYPE_INT8, mshadow::kInt8)
SAME(MXRT_DTYPE_INT64, mshadow::kInt64)
SAME(MXRT_DTYPE_BOOL, mshadow::kBool)
SAME(MXRT_DTYPE_INT16, mshadow::kInt16)
SAME(MXRT_DTYPE_UINT16, mshadow::kUint16)
SAME(MXRT_DTYPE_UINT32, mshadow::kUint32)
SAME(MXRT_DTYPE_UINT64, mshadow::kUint64)
SAME(MXRT_DTYPE_BFLOAT16, mshadow::kBfloat16)

SAME(MXRT_DEVICE_CPU, mxnet::Context::kCPU)
SAME(MXRT_DEVICE_GPU, mxnet::Context::kGPU)
SAME(MXRT_DEVICE_CPU_PINNED, mxnet::Context::kCPUPinned)
SAME(MXRT_DEVICE_CPU_SHARED, mxnet::Context::kCPUShared)

SAME(MXRT_STORAGE_UNDEFINED, mxnet::kUndefinedStorage)
SAME(MXRT_STORAGE_DEFAULT, mxnet::kDefaultStorage)
SAME(MXRT_STORAGE_ROW_SPARSE, mxnet::kRowSparseStorage)
SAME(MXRT_STORAGE_CSR, mxnet::kCSRStorage)
SAME(MXRT_CSR_AUX_INDPTR, mxnet::csr::kIndPtr)
SAME(MXRT_CSR_AUX_INDICES, mxnet::csr::kIdx)
SAME(MXRT_ROW_SPARSE_AUX_INDICES, mxnet::rowsparse::kIdx)

SAME(MXRT_NP_SHAPE_OFF, mxnet::Off)
SAME(MXRT_NP_SHAPE_THREAD_LOCAL_ON, mxnet::ThreadLocalOn)
SAME(MXRT_NP_SHAPE_GLOBAL_ON, mxnet::GlobalOn)

SAME(MXRT_RESOURCE_RANDOM, mxnet::ResourceRequest::kRandom)
SAME(MXRT_RESOURCE_TEMP_SPACE, mxnet::ResourceRequest::kTempSpace)
SAME(MXRT_RESOURCE_PARALLEL_RANDOM, mxnet::ResourceRequest::kParallelRandom)
