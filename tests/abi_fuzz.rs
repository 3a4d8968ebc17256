//! The C ABI under misuse, driven through the exported functions themselves.
//!
//! * every export that takes a handle, given NULL, a freed handle, a live handle of another kind
//!   and pointers to garbage, returns -1 with a message naming the function and the argument;
//!   freeing twice is -1;
//! * bad sizes, counts, indices, dtypes, devices and type strings are -1 with a message, and the
//!   arrays, stores and settings they were aimed at keep their values;
//! * a random-sequence fuzzer (create, copy, slice, reshape, free, engine pushes, KVStore
//!   init/push/pull, waits, with stale, garbage and wrongly typed handles mixed in) checks every
//!   return code against a model and the arrays' values against the model's.
//!
//! Size: `MXRT_FUZZ_STEPS` steps per seed (default 100 000) for `MXRT_FUZZ_SEEDS` seeds (default
//! 3, starting at `MXRT_FUZZ_SEED`, default 1); `make soak` runs it longer.

use mxrt::capi::autograd::*;
use mxrt::capi::data_iter::*;
use mxrt::capi::dlpack::*;
use mxrt::capi::engine::*;
use mxrt::capi::engine_push::*;
use mxrt::capi::global::*;
use mxrt::capi::kvstore::*;
use mxrt::capi::ndarray::*;
use mxrt::capi::ndarray_io::*;
use mxrt::capi::ndarray_shared::*;
use mxrt::capi::ndarray_sparse::*;
use mxrt::capi::profiler::*;
use mxrt::capi::recordio::*;
use mxrt::capi::resource::*;
use mxrt::capi::storage::*;
use mxrt::capi::symbol::*;
use mxrt::capi::types::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::ffi::{CString, c_char, c_int, c_void};
use std::ptr::{null, null_mut};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

#[macro_use]
mod common;
use common::last_error;

/// Tests here free handles on purpose and then check that the freed address is refused: no other
/// test may allocate (and so reuse the address) meanwhile.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

macro_rules! fails {
    ($e:expr, $($needle:expr),+) => {{
        // SAFETY: deliberately wrong arguments, but only ones the API promises to check.
        #[allow(unused_unsafe)]
        let rc = unsafe { $e };
        assert_eq!(rc, -1, "{} should fail", stringify!($e));
        let msg = last_error();
        $(assert!(msg.contains($needle), "{}: message {:?} lacks {:?}", stringify!($e), msg, $needle);)+
    }};
}

const CPU: MXContext = MXContext {
    dev_type: 1,
    dev_id: 0,
};

fn ctx() -> ContextHandle {
    &CPU as *const MXContext as ContextHandle
}

fn new_f32(shape: &[i64]) -> NDArrayHandle {
    let mut h = null_mut();
    ok!(MXNDArrayCreateEx64(
        shape.as_ptr(),
        shape.len() as c_int,
        1,
        0,
        0,
        0,
        &mut h
    ));
    h
}

fn new_f32_delayed(shape: &[i64]) -> NDArrayHandle {
    let mut h = null_mut();
    ok!(MXNDArrayCreateEx64(
        shape.as_ptr(),
        shape.len() as c_int,
        1,
        0,
        1,
        0,
        &mut h
    ));
    h
}

fn set(h: NDArrayHandle, v: &[f32]) {
    ok!(MXNDArraySyncCopyFromCPU(
        h,
        v.as_ptr() as *const c_void,
        v.len()
    ));
}

fn get(h: NDArrayHandle, n: usize) -> Vec<f32> {
    let mut v = vec![f32::NAN; n];
    ok!(MXNDArraySyncCopyToCPU(h, v.as_mut_ptr() as *mut c_void, n));
    v
}

fn shape_of(h: NDArrayHandle) -> Vec<i64> {
    let mut nd = 0;
    let mut dims: *const i64 = null();
    ok!(MXNDArrayGetShapeEx64(h, &mut nd, &mut dims));
    // SAFETY: thread-local buffer of `nd` dims, valid until the next shape call.
    unsafe { std::slice::from_raw_parts(dims, nd.max(0) as usize) }.to_vec()
}

unsafe extern "C" fn nop_sync(_rc: *mut c_void, _p: *mut c_void) {}
unsafe extern "C" fn nop_async(_rc: *mut c_void, cb: *mut c_void, _p: *mut c_void) {
    // SAFETY: the engine passes a valid CallbackOnComplete for this call.
    let cb = unsafe { *(cb as *const mxrt::capi::completion::CallbackOnComplete) };
    // SAFETY: completing once with the struct the engine gave us.
    unsafe { (cb.callback.unwrap())(cb.engine, cb.param, null()) };
}
static DELETED: AtomicUsize = AtomicUsize::new(0);
unsafe extern "C" fn count_delete(_p: *mut c_void) {
    DELETED.fetch_add(1, Ordering::SeqCst);
}

/// What a bad handle argument is checked against.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Want {
    NDArray,
    KVStore,
    Var,
    Operator,
    Profile,
    Symbol,
    RecWriter,
    RecReader,
    DataIter,
    /// Resource handles live until the process exits: there is no freed one to try.
    Resource,
}

/// The live objects the table's calls use for their other arguments.
struct Live {
    nd: NDArrayHandle,
    kv: KVStoreHandle,
    var: *mut c_void,
    op: *mut c_void,
    domain: ProfileHandle,
    counter: ProfileHandle,
    task: ProfileHandle,
    sym: *mut c_void,
}

type Call = Box<dyn Fn(*mut c_void) -> c_int>;

/// One export and one of its handle arguments: (function, argument as named in messages, kind).
fn table(l: &Live) -> Vec<(&'static str, &'static str, Want, Call)> {
    let (nd, kv, var, op, dom) = (l.nd, l.kv, l.var, l.op, l.domain);
    let _ = (l.counter, l.task);
    let key = [3 as c_int];
    let skey = CString::new("s").unwrap();
    let fname = std::env::temp_dir().join(format!("mxrt-abi-{}.params", std::process::id()));
    let fname = CString::new(fname.to_str().unwrap()).unwrap();
    let name = CString::new("x").unwrap();
    // SAFETY (all closures): every argument except the handle under test is valid; the handle
    // under test is only looked up, never dereferenced, which is what this test checks.
    let mut t: Vec<(&'static str, &'static str, Want, Call)> = vec![
        (
            "MXNDArrayFree",
            "handle",
            Want::NDArray,
            Box::new(|h| unsafe { MXNDArrayFree(h) }),
        ),
        (
            "MXShallowCopyNDArray",
            "src",
            Want::NDArray,
            Box::new(|h| unsafe { MXShallowCopyNDArray(h, &mut null_mut()) }),
        ),
        (
            "MXNDArraySyncCopyFromCPU",
            "handle",
            Want::NDArray,
            Box::new(|h| unsafe { MXNDArraySyncCopyFromCPU(h, [0f32; 6].as_ptr().cast(), 6) }),
        ),
        (
            "MXNDArraySyncCopyToCPU",
            "handle",
            Want::NDArray,
            Box::new(|h| unsafe { MXNDArraySyncCopyToCPU(h, [0f32; 6].as_mut_ptr().cast(), 6) }),
        ),
        (
            "MXNDArraySyncCopyFromNDArray",
            "handle_dst",
            Want::NDArray,
            Box::new(move |h| unsafe { MXNDArraySyncCopyFromNDArray(h, nd, -1) }),
        ),
        (
            "MXNDArraySyncCopyFromNDArray",
            "handle_src",
            Want::NDArray,
            Box::new(move |h| unsafe { MXNDArraySyncCopyFromNDArray(nd, h, -1) }),
        ),
        (
            "MXNDArraySyncCheckFormat",
            "handle",
            Want::NDArray,
            Box::new(|h| unsafe { MXNDArraySyncCheckFormat(h, true) }),
        ),
        (
            "MXNDArrayWaitToRead",
            "handle",
            Want::NDArray,
            Box::new(|h| unsafe { MXNDArrayWaitToRead(h) }),
        ),
        (
            "MXNDArrayWaitToWrite",
            "handle",
            Want::NDArray,
            Box::new(|h| unsafe { MXNDArrayWaitToWrite(h) }),
        ),
        (
            "MXNDArrayGetData",
            "handle",
            Want::NDArray,
            Box::new(|h| unsafe { MXNDArrayGetData(h, &mut null_mut()) }),
        ),
        (
            "MXNDArraySlice",
            "handle",
            Want::NDArray,
            Box::new(|h| unsafe { MXNDArraySlice(h, 0, 1, &mut null_mut()) }),
        ),
        (
            "MXNDArraySlice64",
            "handle",
            Want::NDArray,
            Box::new(|h| unsafe { MXNDArraySlice64(h, 0, 1, &mut null_mut()) }),
        ),
        (
            "MXNDArrayAt",
            "handle",
            Want::NDArray,
            Box::new(|h| unsafe { MXNDArrayAt(h, 0, &mut null_mut()) }),
        ),
        (
            "MXNDArrayAt64",
            "handle",
            Want::NDArray,
            Box::new(|h| unsafe { MXNDArrayAt64(h, 0, &mut null_mut()) }),
        ),
        (
            "MXNDArrayReshape",
            "handle",
            Want::NDArray,
            Box::new(|h| unsafe {
                MXNDArrayReshape(h, 1, [6 as c_int].as_mut_ptr(), &mut null_mut())
            }),
        ),
        (
            "MXNDArrayReshape64",
            "handle",
            Want::NDArray,
            Box::new(|h| unsafe {
                MXNDArrayReshape64(h, 1, [6i64].as_mut_ptr(), false, &mut null_mut())
            }),
        ),
        (
            "MXNDArrayGetStorageType",
            "handle",
            Want::NDArray,
            Box::new(|h| unsafe { MXNDArrayGetStorageType(h, &mut 0) }),
        ),
        (
            "MXNDArrayGetShape",
            "handle",
            Want::NDArray,
            Box::new(|h| unsafe { MXNDArrayGetShape(h, &mut 0, &mut null()) }),
        ),
        (
            "MXNDArrayGetShapeEx",
            "handle",
            Want::NDArray,
            Box::new(|h| unsafe { MXNDArrayGetShapeEx(h, &mut 0, &mut null()) }),
        ),
        (
            "MXNDArrayGetShapeEx64",
            "handle",
            Want::NDArray,
            Box::new(|h| unsafe { MXNDArrayGetShapeEx64(h, &mut 0, &mut null()) }),
        ),
        (
            "MXNDArrayGetDType",
            "handle",
            Want::NDArray,
            Box::new(|h| unsafe { MXNDArrayGetDType(h, &mut 0) }),
        ),
        (
            "MXNDArrayGetContext",
            "handle",
            Want::NDArray,
            Box::new(|h| unsafe { MXNDArrayGetContext(h, &mut 0, &mut 0) }),
        ),
        (
            "MXNDArrayGetAuxType",
            "handle",
            Want::NDArray,
            Box::new(|h| unsafe { MXNDArrayGetAuxType(h, 0, &mut 0) }),
        ),
        (
            "MXNDArrayGetAuxNDArray",
            "handle",
            Want::NDArray,
            Box::new(|h| unsafe { MXNDArrayGetAuxNDArray(h, 0, &mut null_mut()) }),
        ),
        (
            "MXNDArrayGetDataNDArray",
            "handle",
            Want::NDArray,
            Box::new(|h| unsafe { MXNDArrayGetDataNDArray(h, &mut null_mut()) }),
        ),
        (
            "MXNDArrayGetGrad",
            "handle",
            Want::NDArray,
            Box::new(|h| unsafe { MXNDArrayGetGrad(h, &mut null_mut()) }),
        ),
        (
            "MXNDArrayDetach",
            "handle",
            Want::NDArray,
            Box::new(|h| unsafe { MXNDArrayDetach(h, &mut null_mut()) }),
        ),
        (
            "MXNDArraySetGradState",
            "handle",
            Want::NDArray,
            Box::new(|h| unsafe { MXNDArraySetGradState(h, 0) }),
        ),
        (
            "MXNDArrayGetGradState",
            "handle",
            Want::NDArray,
            Box::new(|h| unsafe { MXNDArrayGetGradState(h, &mut 0) }),
        ),
        (
            "MXNDArraySave",
            "args[0]",
            Want::NDArray,
            Box::new(move |h| unsafe {
                MXNDArraySave(fname.as_ptr(), 1, [h].as_mut_ptr(), null_mut())
            }),
        ),
        (
            "MXNDArraySaveRawBytes",
            "handle",
            Want::NDArray,
            Box::new(|h| unsafe { MXNDArraySaveRawBytes(h, &mut 0, &mut null()) }),
        ),
        (
            "MXNDArrayGetSharedMemHandle",
            "handle",
            Want::NDArray,
            Box::new(|h| unsafe { MXNDArrayGetSharedMemHandle(h, &mut 0, &mut 0) }),
        ),
        (
            "MXNDArrayToDLPack",
            "handle",
            Want::NDArray,
            Box::new(|h| unsafe { MXNDArrayToDLPack(h, &mut null_mut()) }),
        ),
        (
            "MXEnginePushSyncND",
            "const_nds_handle[0]",
            Want::NDArray,
            Box::new(|h| unsafe {
                MXEnginePushSyncND(
                    Some(nop_sync),
                    null_mut(),
                    Some(count_delete),
                    ctx(),
                    [h].as_mut_ptr(),
                    1,
                    null_mut(),
                    0,
                    null(),
                    0,
                    null(),
                )
            }),
        ),
        (
            "MXEnginePushSyncND",
            "mutable_nds_handle[0]",
            Want::NDArray,
            Box::new(|h| unsafe {
                MXEnginePushSyncND(
                    Some(nop_sync),
                    null_mut(),
                    Some(count_delete),
                    ctx(),
                    null_mut(),
                    0,
                    [h].as_mut_ptr(),
                    1,
                    null(),
                    0,
                    null(),
                )
            }),
        ),
        (
            "MXEnginePushAsyncND",
            "mutable_nds_handle[0]",
            Want::NDArray,
            Box::new(|h| unsafe {
                MXEnginePushAsyncND(
                    Some(nop_async),
                    null_mut(),
                    Some(count_delete),
                    ctx(),
                    null_mut(),
                    0,
                    [h].as_mut_ptr(),
                    1,
                    null(),
                    0,
                    null(),
                    false,
                )
            }),
        ),
        (
            "MXKVStoreInit",
            "vals[0]",
            Want::NDArray,
            Box::new(move |h| unsafe { MXKVStoreInit(kv, 1, key.as_ptr(), [h].as_mut_ptr()) }),
        ),
        (
            "MXKVStorePush",
            "vals[0]",
            Want::NDArray,
            Box::new(move |h| unsafe { MXKVStorePush(kv, 1, key.as_ptr(), [h].as_mut_ptr(), 0) }),
        ),
        (
            "MXKVStorePull",
            "vals[0]",
            Want::NDArray,
            Box::new(move |h| unsafe { MXKVStorePull(kv, 1, key.as_ptr(), [h].as_mut_ptr(), 0) }),
        ),
        (
            "MXKVStorePushPull",
            "outs[0]",
            Want::NDArray,
            Box::new(move |h| unsafe {
                MXKVStorePushPull(
                    kv,
                    1,
                    key.as_ptr(),
                    1,
                    key.as_ptr(),
                    [nd].as_mut_ptr(),
                    [h].as_mut_ptr(),
                    0,
                )
            }),
        ),
        (
            "MXKVStoreBroadcast",
            "vals[0]",
            Want::NDArray,
            Box::new(move |h| unsafe {
                MXKVStoreBroadcast(
                    kv,
                    1,
                    [9].as_ptr(),
                    1,
                    [9].as_ptr(),
                    [h].as_mut_ptr(),
                    [nd].as_mut_ptr(),
                    0,
                )
            }),
        ),
    ];
    let kv_calls: Vec<(&'static str, Call)> = vec![
        (
            "MXKVStoreInit",
            Box::new(move |h| unsafe { MXKVStoreInit(h, 1, key.as_ptr(), [nd].as_mut_ptr()) }),
        ),
        (
            "MXKVStoreInitEx",
            Box::new(move |h| unsafe {
                MXKVStoreInitEx(h, 1, [skey.as_ptr()].as_mut_ptr(), [nd].as_mut_ptr())
            }),
        ),
        (
            "MXKVStorePush",
            Box::new(move |h| unsafe { MXKVStorePush(h, 1, key.as_ptr(), [nd].as_mut_ptr(), 0) }),
        ),
        (
            "MXKVStorePushEx",
            Box::new(move |h| unsafe { MXKVStorePushEx(h, 0, null_mut(), null_mut(), 0) }),
        ),
        (
            "MXKVStorePull",
            Box::new(move |h| unsafe { MXKVStorePull(h, 1, key.as_ptr(), [nd].as_mut_ptr(), 0) }),
        ),
        (
            "MXKVStorePullEx",
            Box::new(move |h| unsafe { MXKVStorePullEx(h, 0, null_mut(), null_mut(), 0) }),
        ),
        (
            "MXKVStorePullWithSparse",
            Box::new(move |h| unsafe {
                MXKVStorePullWithSparse(h, 1, key.as_ptr(), [nd].as_mut_ptr(), 0, true)
            }),
        ),
        (
            "MXKVStorePullWithSparseEx",
            Box::new(move |h| unsafe {
                MXKVStorePullWithSparseEx(h, 0, null_mut(), null_mut(), 0, true)
            }),
        ),
        (
            "MXKVStorePullRowSparse",
            Box::new(move |h| unsafe {
                MXKVStorePullRowSparse(h, 0, null(), null_mut(), null(), 0)
            }),
        ),
        (
            "MXKVStorePullRowSparseEx",
            Box::new(move |h| unsafe {
                MXKVStorePullRowSparseEx(h, 0, null_mut(), null_mut(), null(), 0)
            }),
        ),
        (
            "MXKVStoreBroadcast",
            Box::new(move |h| unsafe {
                MXKVStoreBroadcast(h, 0, null(), 0, null(), null_mut(), null_mut(), 0)
            }),
        ),
        (
            "MXKVStoreBroadcastEx",
            Box::new(move |h| unsafe {
                MXKVStoreBroadcastEx(h, 0, null_mut(), 0, null_mut(), null_mut(), null_mut(), 0)
            }),
        ),
        (
            "MXKVStorePushPull",
            Box::new(move |h| unsafe {
                MXKVStorePushPull(h, 0, null(), 0, null(), null_mut(), null_mut(), 0)
            }),
        ),
        (
            "MXKVStorePushPullEx",
            Box::new(move |h| unsafe {
                MXKVStorePushPullEx(h, 0, null_mut(), 0, null_mut(), null_mut(), null_mut(), 0)
            }),
        ),
        (
            "MXKVStoreSetUpdater",
            Box::new(move |h| unsafe { MXKVStoreSetUpdater(h, None, null_mut()) }),
        ),
        (
            "MXKVStoreSetUpdaterEx",
            Box::new(move |h| unsafe { MXKVStoreSetUpdaterEx(h, None, None, null_mut()) }),
        ),
        (
            "MXKVStoreGetType",
            Box::new(move |h| unsafe { MXKVStoreGetType(h, &mut null()) }),
        ),
        (
            "MXKVStoreGetRank",
            Box::new(move |h| unsafe { MXKVStoreGetRank(h, &mut 0) }),
        ),
        (
            "MXKVStoreGetGroupSize",
            Box::new(move |h| unsafe { MXKVStoreGetGroupSize(h, &mut 0) }),
        ),
        (
            "MXKVStoreBarrier",
            Box::new(move |h| unsafe { MXKVStoreBarrier(h) }),
        ),
        (
            "MXKVStoreSetBarrierBeforeExit",
            Box::new(move |h| unsafe { MXKVStoreSetBarrierBeforeExit(h, 1) }),
        ),
        (
            "MXKVStoreRunServer",
            Box::new(move |h| unsafe { MXKVStoreRunServer(h, None, null_mut()) }),
        ),
        (
            "MXKVStoreSendCommmandToServers",
            Box::new(move |h| unsafe { MXKVStoreSendCommmandToServers(h, 0, c"".as_ptr()) }),
        ),
        (
            "MXKVStoreGetNumDeadNode",
            Box::new(move |h| unsafe { MXKVStoreGetNumDeadNode(h, 0, &mut 0, 1) }),
        ),
        (
            "MXKVStoreSetGradientCompression",
            Box::new(move |h| unsafe {
                MXKVStoreSetGradientCompression(h, 0, null_mut(), null_mut())
            }),
        ),
        (
            "MXKVStoreFree",
            Box::new(move |h| unsafe { MXKVStoreFree(h) }),
        ),
    ];
    t.extend(
        kv_calls
            .into_iter()
            .map(|(f, c)| (f, "handle", Want::KVStore, c)),
    );
    let var_calls: Vec<(&'static str, &'static str, Call)> = vec![
        (
            "MXEngineWaitForVar",
            "var",
            Box::new(|h| unsafe { MXEngineWaitForVar(h) }),
        ),
        (
            "MXEngineGetVarVersion",
            "var",
            Box::new(|h| unsafe { MXEngineGetVarVersion(h, &mut 0) }),
        ),
        (
            "MXEngineDeleteVariable",
            "var",
            Box::new(|h| unsafe { MXEngineDeleteVariable(h) }),
        ),
        (
            "MXEnginePushSync",
            "const_vars_handle[0]",
            Box::new(|h| unsafe {
                MXEnginePushSync(
                    Some(nop_sync),
                    null_mut(),
                    Some(count_delete),
                    ctx(),
                    [h].as_mut_ptr().cast(),
                    1,
                    null_mut(),
                    0,
                    null(),
                    0,
                    null(),
                )
            }),
        ),
        (
            "MXEnginePushSync",
            "mutable_vars_handle[0]",
            Box::new(move |h| unsafe {
                MXEnginePushSync(
                    Some(nop_sync),
                    null_mut(),
                    Some(count_delete),
                    ctx(),
                    [var].as_mut_ptr().cast(),
                    1,
                    [h].as_mut_ptr().cast(),
                    1,
                    null(),
                    0,
                    null(),
                )
            }),
        ),
        (
            "MXEnginePushAsync",
            "mutable_vars_handle[1]",
            Box::new(move |h| unsafe {
                MXEnginePushAsync(
                    Some(nop_async),
                    null_mut(),
                    Some(count_delete),
                    ctx(),
                    null_mut(),
                    0,
                    [var, h].as_mut_ptr().cast(),
                    2,
                    null(),
                    0,
                    null(),
                    false,
                )
            }),
        ),
        (
            "MXEngineNewOperator",
            "const_vars[0]",
            Box::new(|h| unsafe {
                MXEngineNewOperator(
                    Some(nop_async),
                    null_mut(),
                    Some(count_delete),
                    [h].as_mut_ptr().cast(),
                    1,
                    null_mut(),
                    0,
                    null(),
                    null(),
                    &mut null_mut(),
                )
            }),
        ),
        (
            "MXEngineNewOperator",
            "mutable_vars[0]",
            Box::new(|h| unsafe {
                MXEngineNewOperator(
                    Some(nop_async),
                    null_mut(),
                    Some(count_delete),
                    null_mut(),
                    0,
                    [h].as_mut_ptr().cast(),
                    1,
                    null(),
                    null(),
                    &mut null_mut(),
                )
            }),
        ),
    ];
    t.extend(var_calls.into_iter().map(|(f, a, c)| (f, a, Want::Var, c)));
    let _ = op;
    t.push((
        "MXEnginePushOperator",
        "op",
        Want::Operator,
        Box::new(|h| unsafe { MXEnginePushOperator(h, ctx(), 0) }),
    ));
    t.push((
        "MXEngineDeleteOperator",
        "op",
        Want::Operator,
        Box::new(|h| unsafe { MXEngineDeleteOperator(h) }),
    ));
    let prof: Vec<(&'static str, &'static str, Call)> = vec![
        (
            "MXProfileCreateTask",
            "domain",
            Box::new(move |h| unsafe { MXProfileCreateTask(h, name.as_ptr(), &mut null_mut()) }),
        ),
        (
            "MXProfileCreateFrame",
            "domain",
            Box::new(|h| unsafe { MXProfileCreateFrame(h, c"f".as_ptr(), &mut null_mut()) }),
        ),
        (
            "MXProfileCreateCounter",
            "domain",
            Box::new(|h| unsafe { MXProfileCreateCounter(h, c"c".as_ptr(), &mut null_mut()) }),
        ),
        (
            "MXProfileSetMarker",
            "domain",
            Box::new(|h| unsafe { MXProfileSetMarker(h, c"m".as_ptr(), c"process".as_ptr()) }),
        ),
        (
            "MXProfileDurationStart",
            "duration_handle",
            Box::new(|h| MXProfileDurationStart(h)),
        ),
        (
            "MXProfileDurationStop",
            "duration_handle",
            Box::new(|h| MXProfileDurationStop(h)),
        ),
        (
            "MXProfileSetCounter",
            "counter_handle",
            Box::new(|h| MXProfileSetCounter(h, 1)),
        ),
        (
            "MXProfileAdjustCounter",
            "counter_handle",
            Box::new(|h| MXProfileAdjustCounter(h, 1)),
        ),
        (
            "MXProfileDestroyHandle",
            "frame_handle",
            Box::new(|h| MXProfileDestroyHandle(h)),
        ),
    ];
    t.extend(prof.into_iter().map(|(f, a, c)| (f, a, Want::Profile, c)));
    let sym = l.sym;
    // SAFETY (all closures): as above; `sym` is a live symbol.
    let syms: Vec<(&'static str, &'static str, Call)> = vec![
        ("MXSymbolCopy", "symbol", Box::new(|x| unsafe { MXSymbolCopy(x, &mut null_mut()) })),
        ("MXShallowCopySymbol", "src", Box::new(|x| unsafe { MXShallowCopySymbol(x, &mut null_mut()) })),
        ("MXSymbolPrint", "symbol", Box::new(|x| unsafe { MXSymbolPrint(x, &mut null()) })),
        ("MXSymbolGetName", "symbol", Box::new(|x| unsafe { MXSymbolGetName(x, &mut null(), &mut 0) })),
        ("MXSymbolGetAttr", "symbol", Box::new(|x| unsafe { MXSymbolGetAttr(x, c"k".as_ptr(), &mut null(), &mut 0) })),
        ("MXSymbolSetAttr", "symbol", Box::new(|x| unsafe { MXSymbolSetAttr(x, c"__k__".as_ptr(), c"v".as_ptr()) })),
        ("MXSymbolListAttr", "symbol", Box::new(|x| unsafe { MXSymbolListAttr(x, &mut 0, &mut null_mut()) })),
        ("MXSymbolListArguments", "symbol", Box::new(|x| unsafe { MXSymbolListArguments(x, &mut 0, &mut null_mut()) })),
        ("MXSymbolListOutputs", "symbol", Box::new(|x| unsafe { MXSymbolListOutputs(x, &mut 0, &mut null_mut()) })),
        ("NNSymbolListInputNames", "symbol", Box::new(|x| unsafe { NNSymbolListInputNames(x, 0, &mut 0, &mut null_mut()) })),
        ("MXSymbolGetInternals", "symbol", Box::new(|x| unsafe { MXSymbolGetInternals(x, &mut null_mut()) })),
        ("MXSymbolGetOutput", "symbol", Box::new(|x| unsafe { MXSymbolGetOutput(x, 0, &mut null_mut()) })),
        ("MXSymbolSaveToJSON", "symbol", Box::new(|x| unsafe { MXSymbolSaveToJSON(x, &mut null()) })),
        ("MXSymbolCompose", "sym", Box::new(move |x| unsafe { MXSymbolCompose(x, null(), 0, null_mut(), null_mut()) })),
        ("MXSymbolCompose", "args[0]", Box::new(move |x| {
            let mut atomic = null_mut();
            let mut exp = null_mut();
            // SAFETY: valid arguments; only the argument handle is bad
            unsafe {
                assert_eq!(mxrt::capi::operator::NNGetOpHandle(c"exp".as_ptr(), &mut exp), 0);
                assert_eq!(MXSymbolCreateAtomicSymbol(exp, 0, null_mut(), null_mut(), &mut atomic), 0);
                let mut args = [x];
                let rc = MXSymbolCompose(atomic, null(), 1, null_mut(), args.as_mut_ptr());
                // a successful call keeps the last error message
                assert_eq!(NNSymbolFree(atomic), 0);
                rc
            }
        })),
        ("MXSymbolCreateGroup", "symbols[0]", Box::new(move |x| {
            let mut list = [sym, x];
            // SAFETY: two handles, the second under test
            unsafe { MXSymbolCreateGroup(2, list.as_mut_ptr(), &mut null_mut()) }
        })),
        ("MXSymbolInferShapeEx64", "sym", Box::new(|x| unsafe {
            let (mut a, mut b, mut c) = (0usize, 0usize, 0usize);
            let (mut an, mut bn, mut cn) = (null(), null(), null());
            let (mut ad, mut bd, mut cd) = (null_mut(), null_mut(), null_mut());
            MXSymbolInferShapeEx64(x, 0, null_mut(), null(), null(), &mut a, &mut an, &mut ad, &mut b, &mut bn, &mut bd, &mut c, &mut cn, &mut cd, &mut 0)
        })),
        ("MXSymbolInferType", "sym", Box::new(|x| unsafe {
            let (mut a, mut b, mut c) = (0u32, 0u32, 0u32);
            let (mut ad, mut bd, mut cd) = (null(), null(), null());
            MXSymbolInferType(x, 0, null_mut(), null(), &mut a, &mut ad, &mut b, &mut bd, &mut c, &mut cd, &mut 0)
        })),
        ("NNSymbolFree", "symbol", Box::new(|x| unsafe { NNSymbolFree(x) })),
    ];
    t.extend(syms.into_iter().map(|(f, a, c)| (f, a, Want::Symbol, c)));
    let res: Vec<(&'static str, Call)> = vec![
        (
            "MXResourceGetVar",
            Box::new(|h| unsafe { MXResourceGetVar(h, &mut null_mut()) }),
        ),
        (
            "MXResourceGetInfo",
            Box::new(|h| unsafe { MXResourceGetInfo(h, &mut 0, &mut 0, &mut 0, &mut 0) }),
        ),
        (
            "MXResourceGetTempSpace",
            Box::new(|h| unsafe { MXResourceGetTempSpace(h, 16, &mut null_mut()) }),
        ),
        (
            "MXResourceRandomUniform",
            Box::new(|h| unsafe { MXResourceRandomUniform(h, [0f32; 4].as_mut_ptr(), 4, 0., 1.) }),
        ),
        (
            "MXResourceRandomNormal",
            Box::new(|h| unsafe { MXResourceRandomNormal(h, [0f32; 4].as_mut_ptr(), 4, 0., 1.) }),
        ),
        (
            "MXResourceRandomBits",
            Box::new(|h| unsafe { MXResourceRandomBits(h, [0u32; 4].as_mut_ptr(), 4) }),
        ),
    ];
    t.extend(res.into_iter().map(|(f, c)| (f, "res", Want::Resource, c)));
    let writer: Vec<(&'static str, Call)> = vec![
        (
            "MXRecordIOWriterFree",
            Box::new(|h| unsafe { MXRecordIOWriterFree(h) }),
        ),
        (
            "MXRecordIOWriterWriteRecord",
            Box::new(|h| unsafe { MXRecordIOWriterWriteRecord(h, c"ab".as_ptr(), 2) }),
        ),
        (
            "MXRecordIOWriterTell",
            Box::new(|h| unsafe { MXRecordIOWriterTell(h, &mut 0) }),
        ),
    ];
    t.extend(
        writer
            .into_iter()
            .map(|(f, c)| (f, "handle", Want::RecWriter, c)),
    );
    let reader: Vec<(&'static str, Call)> = vec![
        (
            "MXRecordIOReaderFree",
            Box::new(|h| unsafe { MXRecordIOReaderFree(h) }),
        ),
        (
            "MXRecordIOReaderReadRecord",
            Box::new(|h| unsafe { MXRecordIOReaderReadRecord(h, &mut null(), &mut 0) }),
        ),
        (
            "MXRecordIOReaderSeek",
            Box::new(|h| unsafe { MXRecordIOReaderSeek(h, 0) }),
        ),
        (
            "MXRecordIOReaderTell",
            Box::new(|h| unsafe { MXRecordIOReaderTell(h, &mut 0) }),
        ),
    ];
    t.extend(
        reader
            .into_iter()
            .map(|(f, c)| (f, "handle", Want::RecReader, c)),
    );
    let iter: Vec<(&'static str, Call)> = vec![
        ("MXDataIterFree", Box::new(|h| unsafe { MXDataIterFree(h) })),
        (
            "MXDataIterNext",
            Box::new(|h| unsafe { MXDataIterNext(h, &mut 0) }),
        ),
        (
            "MXDataIterBeforeFirst",
            Box::new(|h| unsafe { MXDataIterBeforeFirst(h) }),
        ),
        (
            "MXDataIterGetData",
            Box::new(|h| unsafe { MXDataIterGetData(h, &mut null_mut()) }),
        ),
        (
            "MXDataIterGetLabel",
            Box::new(|h| unsafe { MXDataIterGetLabel(h, &mut null_mut()) }),
        ),
        (
            "MXDataIterGetIndex",
            Box::new(|h| unsafe { MXDataIterGetIndex(h, &mut null_mut(), &mut 0) }),
        ),
        (
            "MXDataIterGetPadNum",
            Box::new(|h| unsafe { MXDataIterGetPadNum(h, &mut 0) }),
        ),
    ];
    t.extend(
        iter.into_iter()
            .map(|(f, c)| (f, "handle", Want::DataIter, c)),
    );
    let _ = dom;
    t
}

/// A file in the temporary directory, named for this process and call: tests run on several
/// threads at once, and one rewriting a file another's iterator is reading would truncate it
/// under that reader.
fn temp_file(name: &str, contents: &[u8]) -> CString {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let p = std::env::temp_dir().join(format!("mxrt-abi-{}-{k}-{name}", std::process::id()));
    std::fs::write(&p, contents).unwrap();
    CString::new(p.to_str().unwrap()).unwrap()
}

/// A live RecordIO writer, reader and CSVIter (over files of their own).
fn io_handles() -> (*mut c_void, *mut c_void, *mut c_void) {
    let (mut w, mut r, mut it) = (null_mut(), null_mut(), null_mut());
    let wpath = temp_file("w.rec", b"");
    ok!(MXRecordIOWriterCreate(wpath.as_ptr(), &mut w));
    let rpath = temp_file("r.rec", b"");
    ok!(MXRecordIOReaderCreate(rpath.as_ptr(), &mut r));
    let csv = temp_file("d.csv", b"1,2\n3,4\n");
    let (mut n, mut creators) = (0u32, null_mut());
    ok!(MXListDataIters(&mut n, &mut creators));
    // SAFETY: MXListDataIters wrote `n` creators.
    let creators = unsafe { std::slice::from_raw_parts(creators, n as usize) };
    let csv_iter = creators
        .iter()
        .copied()
        .find(|&c| {
            let mut name = null();
            ok!(MXDataIterGetIterInfo(
                c,
                &mut name,
                null_mut(),
                null_mut(),
                null_mut(),
                null_mut(),
                null_mut()
            ));
            // SAFETY: a NUL-terminated name that lives for the process.
            unsafe { std::ffi::CStr::from_ptr(name) }.to_bytes() == b"CSVIter"
        })
        .expect("CSVIter is listed");
    let keys = [
        c"data_csv".as_ptr(),
        c"data_shape".as_ptr(),
        c"batch_size".as_ptr(),
    ];
    let vals = [csv.as_ptr(), c"(2,)".as_ptr(), c"1".as_ptr()];
    ok!(MXDataIterCreateIter(
        csv_iter,
        3,
        keys.as_ptr().cast_mut(),
        vals.as_ptr().cast_mut(),
        &mut it
    ));
    (w, r, it)
}

/// Calls `f` with `h` and checks the -1 and the message.
fn expect_refused(func: &str, arg: &str, what: &str, h: *mut c_void, f: &Call) {
    let rc = f(h);
    let msg = last_error();
    assert_eq!(rc, -1, "{func}({arg} = {what} {h:p}) returned {rc}");
    assert!(
        msg.starts_with(&format!("{func}: ")),
        "{func}({arg} = {what}): message {msg:?} does not name the function"
    );
    // the argument is named as declared; array elements by index
    let base = arg.split('[').next().unwrap();
    assert!(
        msg.contains(base),
        "{func}({arg} = {what}): message {msg:?} does not name the argument"
    );
}

#[test]
fn every_handle_argument_rejects_null_freed_wrong_kind_and_garbage() {
    let _s = serial();
    let nd = new_f32(&[2, 3]);
    set(nd, &[1., 2., 3., 4., 5., 6.]);
    let mut kv = null_mut();
    ok!(MXKVStoreCreate(c"local".as_ptr(), &mut kv));
    ok!(MXKVStoreInit(kv, 1, [3].as_ptr(), [nd].as_mut_ptr()));
    let mut var = null_mut();
    ok!(MXEngineNewVariable(&mut var));
    let mut op = null_mut();
    ok!(MXEngineNewOperator(
        Some(nop_async),
        null_mut(),
        None,
        null_mut(),
        0,
        [var].as_mut_ptr().cast(),
        1,
        null(),
        null(),
        &mut op
    ));
    let (mut domain, mut counter, mut task) = (null_mut(), null_mut(), null_mut());
    ok!(MXProfileCreateDomain(c"abi".as_ptr(), &mut domain));
    ok!(MXProfileCreateCounter(domain, c"c".as_ptr(), &mut counter));
    ok!(MXProfileCreateTask(domain, c"t".as_ptr(), &mut task));
    let mut resource = null_mut();
    ok!(MXResourceRequest(1, 0, 1, &mut resource));
    let mut sym = null_mut();
    ok!(MXSymbolCreateVariable(c"abi_var".as_ptr(), &mut sym));
    let (rec_w, rec_r, data_iter) = io_handles();
    let live = Live {
        nd,
        kv,
        var,
        op,
        domain,
        counter,
        task,
        sym,
    };
    // Garbage: a buffer of 0xAB bytes (looks like a pointer to an object but is not one), an
    // unaligned address inside it, a small integer and an address in the kernel half.
    let garbage_buf = vec![0xABu8; 256];
    let garbage: [(&str, *mut c_void); 4] = [
        ("a pointer to garbage", garbage_buf.as_ptr() as *mut c_void),
        (
            "an unaligned pointer",
            garbage_buf[3..].as_ptr() as *mut c_void,
        ),
        ("a small integer", 0x18 as *mut c_void),
        (
            "a kernel address",
            0xffff_8000_dead_bee0_usize as *mut c_void,
        ),
    ];
    let others = |want: Want| -> Vec<(&'static str, *mut c_void)> {
        [
            (Want::NDArray, "an NDArray handle", nd),
            (Want::KVStore, "a KVStore handle", kv),
            (Want::Var, "an engine variable", var),
            (Want::Operator, "an engine operator", op),
            (Want::Profile, "a profiler handle", domain),
            (Want::Symbol, "a symbol handle", sym),
            (Want::RecWriter, "a RecordIO writer", rec_w),
            (Want::RecReader, "a RecordIO reader", rec_r),
            (Want::DataIter, "a data iterator", data_iter),
            (Want::Resource, "a resource handle", resource),
        ]
        .into_iter()
        .filter(|&(w, _, _)| w != want)
        .map(|(_, name, h)| (name, h))
        .collect()
    };
    let calls = table(&live);
    // freed handles of each kind, made last so no allocation above reuses their addresses
    let freed_nd = new_f32(&[2, 3]);
    ok!(MXNDArrayFree(freed_nd));
    let mut freed_kv = null_mut();
    ok!(MXKVStoreCreate(c"local".as_ptr(), &mut freed_kv));
    ok!(MXKVStoreFree(freed_kv));
    let mut freed_var = null_mut();
    ok!(MXEngineNewVariable(&mut freed_var));
    ok!(MXEngineDeleteVariable(freed_var));
    let mut freed_op = null_mut();
    ok!(MXEngineNewOperator(
        Some(nop_async),
        null_mut(),
        None,
        null_mut(),
        0,
        null_mut(),
        0,
        null(),
        null(),
        &mut freed_op
    ));
    ok!(MXEngineDeleteOperator(freed_op));
    let mut freed_prof = null_mut();
    ok!(MXProfileCreateEvent(c"e".as_ptr(), &mut freed_prof));
    ok!(MXProfileDestroyHandle(freed_prof));
    let mut freed_sym = null_mut();
    ok!(MXSymbolCreateVariable(c"gone".as_ptr(), &mut freed_sym));
    ok!(NNSymbolFree(freed_sym));
    let (freed_w, freed_r, freed_iter) = io_handles();
    ok!(MXRecordIOWriterFree(freed_w));
    ok!(MXRecordIOReaderFree(freed_r));
    ok!(MXDataIterFree(freed_iter));
    let freed = |want: Want| match want {
        Want::Symbol => freed_sym,
        Want::NDArray => freed_nd,
        Want::KVStore => freed_kv,
        Want::Var => freed_var,
        Want::Operator => freed_op,
        Want::Profile => freed_prof,
        Want::RecWriter => freed_w,
        Want::RecReader => freed_r,
        Want::DataIter => freed_iter,
        Want::Resource => garbage_buf[8..].as_ptr() as *mut c_void,
    };

    let deleted_before = DELETED.load(Ordering::SeqCst);
    let mut pushes_refused = 0;
    let mut checked = 0;
    for (func, arg, want, f) in &calls {
        // every free included: NULL is -1 (MXNet's frees accept it as `delete nullptr`)
        expect_refused(func, arg, "NULL", null_mut(), f);
        checked += 1;
        expect_refused(func, arg, "a freed handle", freed(*want), f);
        checked += 1;
        for (what, h) in garbage.iter().copied().chain(others(*want)) {
            expect_refused(func, arg, what, h, f);
            checked += 1;
        }
        if *want == Want::Var && func.contains("Operator") | func.contains("Push") {
            pushes_refused += 2 + garbage.len() + others(*want).len();
        }
    }
    // A push (or new operator) refused for a bad variable still releases the caller's parameter
    // (MXNet: the deleter runs on failure); pushes refused for a bad NDArray argument do not take
    // the parameter over (documented for MXEnginePush*ND).
    assert_eq!(
        DELETED.load(Ordering::SeqCst) - deleted_before,
        pushes_refused,
        "deleters run for refused pushes of engine variables only"
    );
    eprintln!(
        "{checked} misuse calls over {} (export, argument) pairs refused",
        calls.len()
    );

    // the live objects were not disturbed
    assert_eq!(get(nd, 6), vec![1., 2., 3., 4., 5., 6.]);
    assert_eq!(shape_of(nd), vec![2, 3]);
    let out = new_f32(&[2, 3]);
    ok!(MXKVStorePull(kv, 1, [3].as_ptr(), [out].as_mut_ptr(), 0));
    assert_eq!(get(out, 6), vec![1., 2., 3., 4., 5., 6.]);
    let mut version = 7;
    ok!(MXEngineGetVarVersion(var, &mut version));
    assert_eq!(version, 0);
    ok!(MXEngineWaitForAll());
    let mut count = 0u32;
    let mut names: *mut *const c_char = null_mut();
    ok!(MXSymbolListArguments(sym, &mut count, &mut names));
    assert_eq!(count, 1, "the live symbol is unchanged");
    ok!(NNSymbolFree(sym));
    fails!(NNSymbolFree(sym), "not a live Symbol handle");

    // double free is -1, not a crash, for every kind
    ok!(MXNDArrayFree(out));
    fails!(
        MXNDArrayFree(out),
        "MXNDArrayFree: handle",
        "not a live NDArray handle"
    );
    ok!(MXNDArrayFree(nd));
    fails!(MXNDArrayFree(nd), "not a live NDArray handle");
    ok!(MXKVStoreFree(kv));
    fails!(
        MXKVStoreFree(kv),
        "MXKVStoreFree: handle",
        "not a live KVStore handle"
    );
    ok!(MXEngineDeleteOperator(op));
    fails!(MXEngineDeleteOperator(op), "MXEngineDeleteOperator: op");
    ok!(MXEngineDeleteVariable(var));
    fails!(MXEngineDeleteVariable(var), "MXEngineDeleteVariable: var");
    ok!(MXProfileDestroyHandle(task));
    fails!(MXProfileDestroyHandle(task), "MXProfileDestroyHandle");
    ok!(MXProfileDestroyHandle(counter));
    ok!(MXProfileDestroyHandle(domain));
    // the io handles still work, and free once
    let mut more = 0;
    ok!(MXDataIterNext(data_iter, &mut more));
    assert_eq!(more, 1);
    ok!(MXRecordIOWriterWriteRecord(rec_w, c"x".as_ptr(), 1));
    ok!(MXRecordIOWriterFree(rec_w));
    fails!(MXRecordIOWriterFree(rec_w), "MXRecordIOWriterFree: handle");
    ok!(MXRecordIOReaderFree(rec_r));
    fails!(MXRecordIOReaderFree(rec_r), "MXRecordIOReaderFree: handle");
    ok!(MXDataIterFree(data_iter));
    fails!(MXDataIterFree(data_iter), "MXDataIterFree: handle");
}

#[test]
fn null_out_parameters_and_strings_are_refused() {
    let _s = serial();
    let nd = new_f32(&[4]);
    fails!(
        MXNDArrayCreateEx64([4i64].as_ptr(), 1, 1, 0, 0, 0, null_mut()),
        "MXNDArrayCreateEx64: out is NULL"
    );
    fails!(
        MXNDArrayCreate([4u32].as_ptr(), 1, 1, 0, 0, null_mut()),
        "MXNDArrayCreate: out is NULL"
    );
    fails!(
        MXNDArrayCreateNone(null_mut()),
        "MXNDArrayCreateNone: out is NULL"
    );
    fails!(
        MXShallowCopyNDArray(nd, null_mut()),
        "MXShallowCopyNDArray: out is NULL"
    );
    fails!(
        MXNDArrayGetShapeEx64(nd, null_mut(), &mut null()),
        "MXNDArrayGetShapeEx64: out_dim is NULL"
    );
    fails!(
        MXNDArrayGetShapeEx64(nd, &mut 0, null_mut()),
        "out_pdata is NULL"
    );
    fails!(
        MXNDArrayGetDType(nd, null_mut()),
        "MXNDArrayGetDType: out_dtype is NULL"
    );
    fails!(
        MXNDArraySlice(nd, 0, 1, null_mut()),
        "MXNDArraySlice: out is NULL"
    );
    fails!(
        MXNDArraySyncCopyToCPU(nd, null_mut(), 4),
        "MXNDArraySyncCopyToCPU: data is NULL"
    );
    fails!(
        MXNDArraySyncCopyFromCPU(nd, null(), 4),
        "MXNDArraySyncCopyFromCPU: data is NULL"
    );
    fails!(
        MXNDArraySave(null(), 1, [nd].as_mut_ptr(), null_mut()),
        "MXNDArraySave: fname is NULL"
    );
    fails!(
        MXNDArraySave(c"/tmp/x".as_ptr(), 1, null_mut(), null_mut()),
        "MXNDArraySave: args is NULL"
    );
    fails!(
        MXNDArrayLoad(null(), &mut 0, &mut null_mut(), &mut 0, &mut null_mut()),
        "MXNDArrayLoad: fname is NULL"
    );
    fails!(
        MXNDArrayLoadFromBuffer(null(), 16, &mut 0, &mut null_mut(), &mut 0, &mut null_mut()),
        "MXNDArrayLoadFromBuffer: ndarray_buffer is NULL"
    );
    fails!(
        MXNDArrayLoadFromRawBytes(null(), 16, &mut null_mut()),
        "MXNDArrayLoadFromRawBytes: buf is NULL"
    );
    fails!(
        MXNDArrayFromDLPack(null_mut(), &mut null_mut()),
        "MXNDArrayFromDLPack"
    );
    fails!(
        MXKVStoreCreate(null(), &mut null_mut()),
        "MXKVStoreCreate: type is NULL"
    );
    fails!(
        MXKVStoreCreate(c"local".as_ptr(), null_mut()),
        "MXKVStoreCreate: out is NULL"
    );
    fails!(
        MXEngineNewVariable(null_mut()),
        "MXEngineNewVariable: out is NULL"
    );
    fails!(
        MXEngineGetVarVersion(null_mut(), null_mut()),
        "MXEngineGetVarVersion"
    );
    fails!(
        MXEngineSetBulkSize(4, null_mut()),
        "MXEngineSetBulkSize: prev_bulk_size is NULL"
    );
    fails!(
        MXEngineCallbackInvoke(null(), null()),
        "MXEngineCallbackInvoke: on_complete is NULL"
    );
    // a CallbackOnComplete that mxrt did not make is refused, not called
    let fake = [0xABu8; 24];
    fails!(
        MXEngineCallbackInvoke(fake.as_ptr().cast(), null()),
        "MXEngineCallbackInvoke",
        "not made by mxrt"
    );
    fails!(
        MXEngineSetOpError(null()),
        "MXEngineSetOpError: msg is NULL"
    );
    fails!(
        MXEngineSetOpError(c"x".as_ptr()),
        "MXEngineSetOpError",
        "no engine sync function is running"
    );
    fails!(
        MXEnginePushSync(
            None,
            null_mut(),
            None,
            ctx(),
            null_mut(),
            0,
            null_mut(),
            0,
            null(),
            0,
            null()
        ),
        "MXEnginePushSync: sync_func is NULL"
    );
    fails!(
        MXEnginePushAsync(
            None,
            null_mut(),
            None,
            ctx(),
            null_mut(),
            0,
            null_mut(),
            0,
            null(),
            0,
            null(),
            false
        ),
        "MXEnginePushAsync: async_func is NULL"
    );
    fails!(
        MXEnginePushSync(
            Some(nop_sync),
            null_mut(),
            None,
            null(),
            null_mut(),
            0,
            null_mut(),
            0,
            null(),
            0,
            null()
        ),
        "MXEnginePushSync: ctx_handle is NULL"
    );
    fails!(
        MXEnginePushSync(
            Some(nop_sync),
            null_mut(),
            None,
            ctx(),
            null_mut(),
            2,
            null_mut(),
            0,
            null(),
            0,
            null()
        ),
        "MXEnginePushSync: const_vars_handle is NULL but its count is 2"
    );
    fails!(MXGetVersion(null_mut()), "MXGetVersion: out is NULL");
    fails!(MXGetEnv(null(), &mut null()), "MXGetEnv: name is NULL");
    fails!(MXIsNumpyShape(null_mut()), "MXIsNumpyShape");
    fails!(MXGetGPUCount(null_mut()), "MXGetGPUCount");
    fails!(MXStorageGetStats(1, 0, null_mut()), "MXStorageGetStats");
    fails!(MXLibInfoFeatures(null_mut(), &mut 0), "MXLibInfoFeatures");
    fails!(
        MXProfileCreateDomain(null(), &mut null_mut()),
        "MXProfileCreateDomain"
    );
    fails!(
        MXAggregateProfileStatsPrint(null_mut(), 0),
        "MXAggregateProfileStatsPrint"
    );
    // a non-UTF-8 string is refused with its argument named
    let bad = [0xffu8, 0xfe, 0];
    fails!(
        MXKVStoreCreate(bad.as_ptr() as *const c_char, &mut null_mut()),
        "MXKVStoreCreate: type is not valid UTF-8"
    );
    // MXNet accepts NULL here: a no-op
    ok!(MXNDArrayCallDLPackDeleter(null_mut()));
    ok!(MXNDArrayFree(nd));
}

#[test]
fn bad_sizes_counts_indices_and_codes_change_nothing() {
    let _s = serial();
    let mut out: NDArrayHandle = 0x5A5A as NDArrayHandle;
    let sentinel = out;
    // shapes and codes at creation
    fails!(
        MXNDArrayCreateEx64([2i64, -3].as_ptr(), 2, 1, 0, 0, 0, &mut out),
        "MXNDArrayCreateEx64",
        "-3"
    );
    fails!(
        MXNDArrayCreateEx64([4i64].as_ptr(), -1, 1, 0, 0, 0, &mut out),
        "MXNDArrayCreateEx64: ndim must be non-negative"
    );
    fails!(
        MXNDArrayCreateEx64([i64::MAX / 2, 4].as_ptr(), 2, 1, 0, 0, 0, &mut out),
        "MXNDArrayCreateEx64"
    );
    fails!(
        MXNDArrayCreateEx64([1i64 << 40, 1 << 40].as_ptr(), 2, 1, 0, 1, 0, &mut out),
        "MXNDArrayCreateEx64"
    );
    fails!(
        MXNDArrayCreate(
            [u32::MAX, u32::MAX, u32::MAX].as_ptr(),
            3,
            1,
            0,
            1,
            &mut out
        ),
        "MXNDArrayCreate"
    );
    fails!(
        MXNDArrayCreateEx([4u32].as_ptr(), 1, 1, 0, 0, 13, &mut out),
        "MXNDArrayCreateEx",
        "13"
    );
    fails!(
        MXNDArrayCreateEx([4u32].as_ptr(), 1, 1, 0, 0, -1, &mut out),
        "MXNDArrayCreateEx",
        "-1"
    );
    fails!(
        MXNDArrayCreateEx([4u32].as_ptr(), 1, 99, 0, 0, 0, &mut out),
        "MXNDArrayCreateEx",
        "99"
    );
    fails!(
        MXNDArrayCreateEx([4u32].as_ptr(), 1, 2, 0, 0, 0, &mut out),
        "MXNDArrayCreateEx"
    );
    fails!(
        MXNDArrayCreateSparseEx(
            1,
            [4u32].as_ptr(),
            1,
            1,
            0,
            0,
            0,
            0,
            null_mut(),
            null_mut(),
            null(),
            &mut out
        ),
        "MXNDArrayCreateSparseEx",
        "num_aux is 0, a row_sparse array has 1"
    );
    assert_eq!(out, sentinel, "a failed create wrote its out-parameter");

    // element counts and ranges on a live array
    let a = new_f32(&[3, 2]);
    let vals = [1f32, 2., 3., 4., 5., 6.];
    set(a, &vals);
    let junk = [9f32; 16];
    fails!(
        MXNDArraySyncCopyFromCPU(a, junk.as_ptr().cast(), 5),
        "MXNDArraySyncCopyFromCPU: Memory size do not match"
    );
    fails!(
        MXNDArraySyncCopyFromCPU(a, junk.as_ptr().cast(), 7),
        "Memory size do not match"
    );
    fails!(
        MXNDArraySyncCopyFromCPU(a, junk.as_ptr().cast(), usize::MAX),
        "Memory size do not match"
    );
    let mut dst = [7f32; 16];
    fails!(
        MXNDArraySyncCopyToCPU(a, dst.as_mut_ptr().cast(), 16),
        "MXNDArraySyncCopyToCPU: Memory size do not match"
    );
    assert_eq!(
        dst, [7f32; 16],
        "a refused copy wrote into the caller's buffer"
    );
    let b = new_f32(&[2, 3]);
    set(b, &junk[..6]);
    fails!(
        MXNDArraySyncCopyFromNDArray(a, b, 0),
        "MXNDArraySyncCopyFromNDArray"
    );
    let c = new_f32(&[4]);
    set(c, &junk[..4]);
    fails!(
        MXNDArraySyncCopyFromNDArray(a, c, -1),
        "MXNDArraySyncCopyFromNDArray"
    );
    for (lo, hi) in [(2u32, 1u32), (0, 4), (4, 4), (u32::MAX, u32::MAX)] {
        fails!(MXNDArraySlice(a, lo, hi, &mut out), "MXNDArraySlice");
    }
    for (lo, hi) in [(-1i64, 2i64), (0, i64::MAX), (i64::MIN, 0), (2, 1)] {
        fails!(MXNDArraySlice64(a, lo, hi, &mut out), "MXNDArraySlice64");
    }
    fails!(MXNDArrayAt(a, 3, &mut out), "MXNDArrayAt");
    fails!(MXNDArrayAt(a, u32::MAX, &mut out), "MXNDArrayAt");
    fails!(MXNDArrayAt64(a, -1, &mut out), "MXNDArrayAt64");
    fails!(MXNDArrayAt64(a, i64::MAX, &mut out), "MXNDArrayAt64");
    fails!(
        MXNDArrayReshape(a, 2, [4, 2].as_mut_ptr(), &mut out),
        "MXNDArrayReshape"
    );
    fails!(
        MXNDArrayReshape(a, 2, [-1, -1].as_mut_ptr(), &mut out),
        "MXNDArrayReshape"
    );
    fails!(
        MXNDArrayReshape(a, 2, [-5, 2].as_mut_ptr(), &mut out),
        "MXNDArrayReshape"
    );
    fails!(
        MXNDArrayReshape(a, -2, [6].as_mut_ptr(), &mut out),
        "MXNDArrayReshape: ndim must be non-negative"
    );
    fails!(
        MXNDArrayReshape64(a, 2, [i64::MAX, 2].as_mut_ptr(), false, &mut out),
        "MXNDArrayReshape64"
    );
    fails!(
        MXNDArrayReshape64(a, 1, [-9].as_mut_ptr(), false, &mut out),
        "MXNDArrayReshape64"
    );
    fails!(MXNDArrayGetAuxType(a, 0, &mut 0), "MXNDArrayGetAuxType");
    assert_eq!(out, sentinel, "a refused view wrote its out-parameter");
    assert_eq!(get(a, 6), vals, "a refused call changed the array");
    assert_eq!(shape_of(a), vec![3, 2]);

    // truncated and corrupt buffers
    let (mut size, mut buf) = (0usize, null());
    ok!(MXNDArraySaveRawBytes(a, &mut size, &mut buf));
    // SAFETY: thread-local buffer of `size` bytes.
    let raw = unsafe { std::slice::from_raw_parts(buf as *const u8, size) }.to_vec();
    for cut in [0, 1, 8, size / 2, size - 1] {
        fails!(
            MXNDArrayLoadFromRawBytes(raw.as_ptr().cast(), cut, &mut out),
            "MXNDArrayLoadFromRawBytes"
        );
    }
    let (mut n, mut nn) = (0u32, 0u32);
    let (mut arr, mut names) = (null_mut(), null_mut());
    fails!(
        MXNDArrayLoadFromBuffer(
            raw.as_ptr().cast(),
            raw.len(),
            &mut n,
            &mut arr,
            &mut nn,
            &mut names
        ),
        "MXNDArrayLoadFromBuffer"
    );
    assert_eq!(out, sentinel);

    // KVStore: unknown types, uninitialised keys, mismatched shapes; the stored value survives
    // (unlike MXNet, which makes any other name a local store, unknown names are refused)
    fails!(
        MXKVStoreCreate(c"bogus".as_ptr(), &mut out),
        "MXKVStoreCreate",
        "unknown kvstore type 'bogus'"
    );
    fails!(
        MXKVStoreCreate(c"horovod_dist".as_ptr(), &mut out),
        "MXKVStoreCreate",
        "horovod_dist"
    );
    fails!(
        MXKVStoreCreate(c"nccl".as_ptr(), &mut out),
        "MXKVStoreCreate",
        "nccl"
    );
    // with the dist feature "dist_sync" starts MPI and works (tests/dist runs it as MPI jobs)
    #[cfg(not(feature = "dist"))]
    fails!(
        MXKVStoreCreate(c"dist_sync".as_ptr(), &mut out),
        "MXKVStoreCreate",
        "dist_sync"
    );
    assert_eq!(out, sentinel);
    let mut kv = null_mut();
    ok!(MXKVStoreCreate(c"local".as_ptr(), &mut kv));
    ok!(MXKVStoreInit(kv, 1, [5].as_ptr(), [a].as_mut_ptr()));
    fails!(
        MXKVStoreInit(kv, 1, [5].as_ptr(), [b].as_mut_ptr()),
        "MXKVStoreInit",
        "duplicate init of key 5"
    );
    fails!(
        MXKVStorePush(kv, 1, [6].as_ptr(), [a].as_mut_ptr(), 0),
        "MXKVStorePush",
        "key 6 has not been inited"
    );
    fails!(
        MXKVStorePush(kv, 1, [5].as_ptr(), [c].as_mut_ptr(), 0),
        "MXKVStorePush",
        "shape mismatch"
    );
    fails!(
        MXKVStorePush(kv, 2, [5, 5].as_ptr(), null_mut(), 0),
        "MXKVStorePush: vals is NULL but its count is 2"
    );
    fails!(
        MXKVStorePull(kv, 1, [5].as_ptr(), [c].as_mut_ptr(), 0),
        "MXKVStorePull",
        "shape mismatch"
    );
    fails!(
        MXKVStorePullEx(kv, 1, [c"w".as_ptr()].as_mut_ptr(), [a].as_mut_ptr(), 0),
        "MXKVStorePullEx",
        "Mixed key types"
    );
    fails!(
        MXKVStorePullRowSparse(kv, 1, [5].as_ptr(), [a].as_mut_ptr(), null(), 0),
        "MXKVStorePullRowSparse"
    );
    fails!(
        MXKVStoreSetGradientCompression(
            kv,
            1,
            [c"type".as_ptr()].as_mut_ptr(),
            [c"2bit".as_ptr()].as_mut_ptr()
        ),
        "MXKVStoreSetGradientCompression"
    );
    let pulled = new_f32(&[3, 2]);
    ok!(MXKVStorePull(kv, 1, [5].as_ptr(), [pulled].as_mut_ptr(), 0));
    assert_eq!(
        get(pulled, 6),
        vals,
        "a refused push changed the stored value"
    );
    assert_eq!(
        get(c, 4),
        junk[..4].to_vec(),
        "a refused pull changed its destination"
    );

    // engine: negative counts, unknown properties and devices, negative bulk size
    let before = DELETED.load(Ordering::SeqCst);
    fails!(
        MXEnginePushSync(
            Some(nop_sync),
            null_mut(),
            Some(count_delete),
            ctx(),
            null_mut(),
            -1,
            null_mut(),
            0,
            null(),
            0,
            null()
        ),
        "MXEnginePushSync: Non-negative number of const vars expected"
    );
    fails!(
        MXEnginePushAsync(
            Some(nop_async),
            null_mut(),
            Some(count_delete),
            ctx(),
            null_mut(),
            0,
            null_mut(),
            -7,
            null(),
            0,
            null(),
            false
        ),
        "MXEnginePushAsync: Non-negative number of mutable vars expected"
    );
    let prop: c_int = 42;
    fails!(
        MXEnginePushSync(
            Some(nop_sync),
            null_mut(),
            Some(count_delete),
            ctx(),
            null_mut(),
            0,
            null_mut(),
            0,
            (&prop as *const c_int).cast(),
            0,
            null()
        ),
        "MXEnginePushSync",
        "prop_handle"
    );
    let gpu9 = MXContext {
        dev_type: 9,
        dev_id: 0,
    };
    fails!(
        MXEnginePushSync(
            Some(nop_sync),
            null_mut(),
            Some(count_delete),
            (&gpu9 as *const MXContext).cast(),
            null_mut(),
            0,
            null_mut(),
            0,
            null(),
            0,
            null()
        ),
        "MXEnginePushSync",
        "ctx_handle"
    );
    fails!(
        MXEnginePushSyncND(
            Some(nop_sync),
            null_mut(),
            Some(count_delete),
            ctx(),
            [a].as_mut_ptr(),
            -1,
            null_mut(),
            0,
            null(),
            0,
            null()
        ),
        "MXEnginePushSyncND: Non-negative number of const NDArrays expected"
    );
    assert_eq!(
        DELETED.load(Ordering::SeqCst) - before,
        4,
        "deleters of refused pushes"
    );
    let mut prev = 0;
    ok!(MXEngineSetBulkSize(3, &mut prev));
    fails!(
        MXEngineSetBulkSize(-1, &mut prev),
        "MXEngineSetBulkSize: bulk_size must be non-negative"
    );
    ok!(MXEngineSetBulkSize(0, &mut prev));
    assert_eq!(prev, 3, "a refused bulk size changed the setting");

    // global settings: unknown values are refused and the setting stays
    fails!(MXSetIsNumpyShape(7, &mut prev), "MXSetIsNumpyShape");
    let mut np = -1;
    ok!(MXIsNumpyShape(&mut np));
    assert_eq!(np, 0);
    fails!(
        MXStorageGetStats(99, 0, &mut std::mem::zeroed()),
        "MXStorageGetStats"
    );
    fails!(MXStorageEmptyCache(99, 0), "MXStorageEmptyCache");
    let (mut free, mut total) = (0u64, 0u64);
    fails!(
        MXGetGPUMemoryInformation64(-1, &mut free, &mut total),
        "MXGetGPUMemoryInformation64"
    );
    fails!(MXSetProfilerState(5), "MXSetProfilerState");
    fails!(
        MXSetProfilerConfig(
            1,
            [c"no_such_key".as_ptr()].as_ptr(),
            [c"1".as_ptr()].as_ptr()
        ),
        "MXSetProfilerConfig",
        "no_such_key"
    );
    fails!(
        MXSetProfilerConfig(-1, null(), null()),
        "MXSetProfilerConfig"
    );
    fails!(
        MXAggregateProfileStatsPrintEx(&mut null(), 0, 9, 0, 0),
        "MXAggregateProfileStatsPrintEx"
    );

    ok!(MXEngineWaitForAll());
    for h in [a, b, c, pulled] {
        ok!(MXNDArrayFree(h));
    }
    ok!(MXKVStoreFree(kv));
}

/// Simulated allocation failure: creation fails with "out of memory" and leaves nothing behind.
#[test]
fn allocation_failure_is_out_of_memory() {
    let _s = serial();
    let mut out: NDArrayHandle = 0x5A5A as NDArrayHandle;
    // the hook fails requests the pool has to take from the device: empty its cache first
    ok!(MXNDArrayWaitAll());
    ok!(MXStorageEmptyCache(1, 0));
    // two failures: the device call, and its retry after the pool released its cache
    mxrt::storage::Storage::global().fail_next_allocations(2);
    fails!(
        MXNDArrayCreateEx64([1000i64, 1237].as_ptr(), 2, 1, 0, 0, 0, &mut out),
        "MXNDArrayCreateEx64",
        "out of memory"
    );
    assert_eq!(out, 0x5A5A as NDArrayHandle);
    // a delayed allocation fails where the memory is first needed
    let d = new_f32_delayed(&[999, 1237]);
    mxrt::storage::Storage::global().fail_next_allocations(2);
    let vals = vec![1f32; 999 * 1237];
    fails!(
        MXNDArraySyncCopyFromCPU(d, vals.as_ptr().cast(), vals.len()),
        "MXNDArraySyncCopyFromCPU",
        "out of memory"
    );
    let mut p = null_mut();
    ok!(MXNDArrayGetData(d, &mut p));
    assert!(
        !p.is_null(),
        "the array allocates once memory is available again"
    );
    ok!(MXNDArrayFree(d));
    // the hook is spent: the next one works
    let a = new_f32(&[1000, 1237]);
    ok!(MXNDArrayFree(a));
}

// ----------------------------------------------------------------------------------------------
// The random-sequence fuzzer.

/// An array the model knows: a view of `len` elements at `offset` of root buffer `root`.
#[derive(Clone, Debug)]
struct View {
    root: usize,
    offset: usize,
    shape: Vec<i64>,
}

impl View {
    fn len(&self) -> usize {
        self.shape.iter().product::<i64>() as usize
    }
}

/// The fuzzer's model of the C side: live handles, root buffers' values, the store's values.
struct Model {
    roots: Vec<Vec<f32>>,
    live: HashMap<usize, View>,
    live_order: Vec<usize>,
    stale: Vec<usize>,
    kv: KVStoreHandle,
    stored: HashMap<i32, Vec<f32>>,
    stored_shape: HashMap<i32, Vec<i64>>,
    vars: Vec<*mut c_void>,
    stale_vars: Vec<*mut c_void>,
    calls: u64,
    refused: u64,
    with_stale: bool,
}

/// Parameter of the engine op the fuzzer pushes: adds `delta` to every element of `target`.
struct AddOp {
    target: NDArrayHandle,
    len: usize,
    delta: f32,
}

unsafe extern "C" fn add_op(_rc: *mut c_void, p: *mut c_void) {
    // SAFETY: `p` is the AddOp this op was pushed with; it lives until the deleter.
    let op = unsafe { &*(p as *const AddOp) };
    let mut data = null_mut();
    // SAFETY: `target` is a shallow copy the op owns; the op has write access to it.
    let rc = unsafe { MXNDArrayGetData(op.target, &mut data) };
    assert_eq!(rc, 0);
    // SAFETY: the array holds `len` f32 elements at `data`, and this op is its only writer now.
    let s = unsafe { std::slice::from_raw_parts_mut(data as *mut f32, op.len) };
    for x in s {
        *x += op.delta;
    }
}

unsafe extern "C" fn free_add_op(p: *mut c_void) {
    // SAFETY: made by Box::into_raw in the fuzzer; the deleter runs once.
    let op = unsafe { Box::from_raw(p as *mut AddOp) };
    // SAFETY: the shallow copy is owned by the op.
    assert_eq!(unsafe { MXNDArrayFree(op.target) }, 0);
}

impl Model {
    fn rc(&mut self, rc: c_int, expect_ok: bool, what: &str) {
        self.calls += 1;
        assert!(rc == 0 || rc == -1, "{what} returned {rc}");
        if expect_ok {
            assert_eq!(rc, 0, "{what} failed: {}", last_error());
        } else {
            assert_eq!(rc, -1, "{what} should have failed");
            self.refused += 1;
        }
    }

    fn values(&self, v: &View) -> Vec<f32> {
        self.roots[v.root][v.offset..v.offset + v.len()].to_vec()
    }

    fn add_live(&mut self, h: NDArrayHandle, v: View) {
        self.live.insert(h as usize, v);
        self.live_order.push(h as usize);
        self.stale.retain(|&s| s != h as usize);
    }

    fn pick_live(&self, rng: &mut StdRng) -> Option<(NDArrayHandle, View)> {
        if self.live_order.is_empty() {
            return None;
        }
        let a = self.live_order[rng.gen_range(0..self.live_order.len())];
        Some((a as NDArrayHandle, self.live[&a].clone()))
    }

    /// A handle that must be refused: stale (unless its address is live again), NULL, garbage or
    /// a handle of another kind.
    fn pick_bad(&self, rng: &mut StdRng, garbage: &[u8]) -> NDArrayHandle {
        loop {
            let h = match rng.gen_range(0..5) {
                0 if self.with_stale && !self.stale.is_empty() => {
                    self.stale[rng.gen_range(0..self.stale.len())] as NDArrayHandle
                }
                1 => null_mut(),
                2 => garbage[rng.gen_range(0..garbage.len() - 8)..].as_ptr() as NDArrayHandle,
                3 => self.kv,
                4 if !self.vars.is_empty() => self.vars[0],
                _ => rng.r#gen::<u64>() as usize as NDArrayHandle,
            };
            if !self.live.contains_key(&(h as usize)) {
                return h;
            }
        }
    }
}

/// `with_stale`: also use freed handles (only when no other thread makes handles, since a freed
/// address may be handed out again to another thread).
fn fuzz_once(seed: u64, steps: usize, with_stale: bool) -> (u64, u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let garbage: Vec<u8> = (0..4096).map(|_| rng.r#gen()).collect();
    let mut kv = null_mut();
    ok!(MXKVStoreCreate(c"local".as_ptr(), &mut kv));
    let mut m = Model {
        roots: Vec::new(),
        live: HashMap::new(),
        live_order: Vec::new(),
        stale: Vec::new(),
        kv,
        stored: HashMap::new(),
        stored_shape: HashMap::new(),
        vars: Vec::new(),
        stale_vars: Vec::new(),
        calls: 0,
        refused: 0,
        with_stale,
    };
    let mut stale_kvs: Vec<KVStoreHandle> = Vec::new();
    for step in 0..steps {
        let choice = rng.gen_range(0..100);
        let ctx_msg = |op: &str| format!("seed {seed} step {step}: {op}");
        match choice {
            // create a root array, 1-D or 2-D
            0..=9 => {
                let shape: Vec<i64> = if rng.gen_bool(0.5) {
                    vec![rng.gen_range(1..9)]
                } else {
                    vec![rng.gen_range(1..5), rng.gen_range(1..5)]
                };
                let n = shape.iter().product::<i64>() as usize;
                let vals: Vec<f32> = (0..n).map(|_| rng.gen_range(-50..50) as f32).collect();
                let mut h = null_mut();
                // SAFETY: valid arguments.
                let rc = unsafe {
                    MXNDArrayCreateEx64(
                        shape.as_ptr(),
                        shape.len() as c_int,
                        1,
                        0,
                        rng.gen_range(0..2),
                        0,
                        &mut h,
                    )
                };
                m.rc(rc, true, &ctx_msg("create"));
                // SAFETY: `vals` holds the array's element count.
                let rc = unsafe { MXNDArraySyncCopyFromCPU(h, vals.as_ptr().cast(), n) };
                m.rc(rc, true, &ctx_msg("fill"));
                m.roots.push(vals);
                let root = m.roots.len() - 1;
                m.add_live(
                    h,
                    View {
                        root,
                        offset: 0,
                        shape,
                    },
                );
            }
            // free a live handle (keeping at least a few)
            10..=16 if m.live_order.len() > 3 => {
                let i = rng.gen_range(0..m.live_order.len());
                let h = m.live_order.swap_remove(i);
                m.live.remove(&h);
                // SAFETY: a live handle.
                let rc = unsafe { MXNDArrayFree(h as NDArrayHandle) };
                m.rc(rc, true, &ctx_msg("free"));
                m.stale.push(h);
                if m.stale.len() > 64 {
                    m.stale.remove(0);
                }
            }
            // calls on a bad handle: all refused
            17..=27 => {
                let h = m.pick_bad(&mut rng, &garbage);
                let mut out = null_mut();
                let mut buf = [0f32; 8];
                // SAFETY: every argument but `h` is valid; `h` is only looked up.
                let rc = unsafe {
                    match rng.gen_range(0..8) {
                        0 => MXNDArrayFree(h),
                        1 => MXNDArraySlice(h, 0, 1, &mut out),
                        2 => MXNDArraySyncCopyToCPU(h, buf.as_mut_ptr().cast(), 1),
                        3 => MXNDArraySyncCopyFromCPU(h, buf.as_ptr().cast(), 1),
                        4 => MXNDArrayWaitToRead(h),
                        5 => MXKVStorePush(m.kv, 1, [0].as_ptr(), [h].as_mut_ptr(), 0),
                        6 => MXShallowCopyNDArray(h, &mut out),
                        _ => MXEnginePushSyncND(
                            Some(nop_sync),
                            null_mut(),
                            None,
                            ctx(),
                            null_mut(),
                            0,
                            [h].as_mut_ptr(),
                            1,
                            null(),
                            0,
                            null(),
                        ),
                    }
                };
                m.rc(rc, false, &ctx_msg(&format!("bad handle {h:p}")));
                assert!(out.is_null(), "{}", ctx_msg("a refused call wrote out"));
            }
            // views: slice, at, reshape, shallow copy
            28..=39 => {
                let Some((h, v)) = m.pick_live(&mut rng) else {
                    continue;
                };
                let rows = v.shape[0] as usize;
                let row = v.len() / rows.max(1);
                let mut out = null_mut();
                let kind = rng.gen_range(0..5);
                let (rc, view) = match kind {
                    0 => {
                        let lo = rng.gen_range(0..rows);
                        let hi = rng.gen_range(lo + 1..=rows);
                        let mut shape = v.shape.clone();
                        shape[0] = (hi - lo) as i64;
                        // SAFETY: valid arguments.
                        (
                            unsafe { MXNDArraySlice64(h, lo as i64, hi as i64, &mut out) },
                            Some(View {
                                root: v.root,
                                offset: v.offset + lo * row,
                                shape,
                            }),
                        )
                    }
                    1 => {
                        let i = rng.gen_range(0..rows);
                        let shape = if v.shape.len() > 1 {
                            v.shape[1..].to_vec()
                        } else {
                            vec![1]
                        };
                        // SAFETY: valid arguments.
                        (
                            unsafe { MXNDArrayAt(h, i as u32, &mut out) },
                            Some(View {
                                root: v.root,
                                offset: v.offset + i * row,
                                shape,
                            }),
                        )
                    }
                    2 => {
                        let n = v.len() as c_int;
                        // SAFETY: valid arguments.
                        (
                            unsafe { MXNDArrayReshape(h, 2, [1, -1].as_mut_ptr(), &mut out) },
                            Some(View {
                                root: v.root,
                                offset: v.offset,
                                shape: vec![1, n as i64],
                            }),
                        )
                    }
                    3 => {
                        // SAFETY: valid arguments.
                        (
                            unsafe { MXShallowCopyNDArray(h, &mut out) },
                            Some(v.clone()),
                        )
                    }
                    _ => {
                        // out of range: refused
                        // SAFETY: valid arguments apart from the range.
                        (
                            unsafe { MXNDArraySlice64(h, rows as i64, rows as i64 + 1, &mut out) },
                            None,
                        )
                    }
                };
                m.rc(
                    rc,
                    view.is_some(),
                    &ctx_msg(&format!("view {kind} of {:?}", v.shape)),
                );
                if let Some(view) = view {
                    assert_eq!(shape_of(out), view.shape, "{}", ctx_msg("view shape"));
                    m.add_live(out, view);
                }
            }
            // write from the host (right or wrong element count)
            40..=47 => {
                let Some((h, v)) = m.pick_live(&mut rng) else {
                    continue;
                };
                let n = v.len();
                let wrong = rng.gen_bool(0.2);
                let count = if wrong { n + 1 } else { n };
                let vals: Vec<f32> = (0..count).map(|_| rng.gen_range(-50..50) as f32).collect();
                // SAFETY: `vals` holds `count` elements.
                let rc = unsafe { MXNDArraySyncCopyFromCPU(h, vals.as_ptr().cast(), count) };
                m.rc(rc, !wrong, &ctx_msg("copy from cpu"));
                if !wrong {
                    m.roots[v.root][v.offset..v.offset + n].copy_from_slice(&vals);
                }
            }
            // read and check against the model
            48..=57 => {
                let Some((h, v)) = m.pick_live(&mut rng) else {
                    continue;
                };
                let n = v.len();
                let mut got = vec![f32::NAN; n];
                // SAFETY: room for `n` elements.
                let rc = unsafe { MXNDArraySyncCopyToCPU(h, got.as_mut_ptr().cast(), n) };
                m.rc(rc, true, &ctx_msg("copy to cpu"));
                assert_eq!(
                    got,
                    m.values(&v),
                    "{}",
                    ctx_msg("values differ from the model")
                );
            }
            // array to array copy
            58..=62 => {
                let (Some((d, dv)), Some((s, sv))) = (m.pick_live(&mut rng), m.pick_live(&mut rng))
                else {
                    continue;
                };
                let okay = dv.shape == sv.shape;
                // SAFETY: live handles.
                let rc = unsafe { MXNDArraySyncCopyFromNDArray(d, s, -1) };
                m.rc(
                    rc,
                    okay,
                    &ctx_msg(&format!("copy {:?} <- {:?}", dv.shape, sv.shape)),
                );
                if okay {
                    let vals = m.values(&sv);
                    m.roots[dv.root][dv.offset..dv.offset + dv.len()].copy_from_slice(&vals);
                }
            }
            // engine op on an array (the op holds its own shallow copy)
            63..=70 => {
                let Some((h, v)) = m.pick_live(&mut rng) else {
                    continue;
                };
                let mut own = null_mut();
                // SAFETY: live handle.
                let rc = unsafe { MXShallowCopyNDArray(h, &mut own) };
                m.rc(rc, true, &ctx_msg("shallow copy for op"));
                // a handle C now holds: its address is no longer a stale one
                m.stale.retain(|&s| s != own as usize);
                let delta = rng.gen_range(1..4) as f32;
                let p = Box::into_raw(Box::new(AddOp {
                    target: own,
                    len: v.len(),
                    delta,
                }));
                let reads: Vec<NDArrayHandle> = (0..rng.gen_range(0..3))
                    .filter_map(|_| m.pick_live(&mut rng))
                    .map(|(r, _)| r)
                    .filter(|&r| r != h)
                    .collect();
                // SAFETY: valid arguments; the op owns `p` (freed by its deleter).
                let rc = unsafe {
                    MXEnginePushSyncND(
                        Some(add_op),
                        p.cast(),
                        Some(free_add_op),
                        ctx(),
                        reads.as_ptr() as *mut _,
                        reads.len() as c_int,
                        [h].as_mut_ptr(),
                        1,
                        null(),
                        rng.gen_range(0..3),
                        null(),
                    )
                };
                m.rc(rc, true, &ctx_msg("push add op"));
                for x in &mut m.roots[v.root][v.offset..v.offset + v.len()] {
                    *x += delta;
                }
            }
            // KVStore init / push / pull
            71..=82 => {
                let Some((h, v)) = m.pick_live(&mut rng) else {
                    continue;
                };
                let key = rng.gen_range(0..6);
                let known = m.stored_shape.get(&key).cloned();
                match rng.gen_range(0..3) {
                    0 => {
                        // SAFETY: valid arguments.
                        let rc =
                            unsafe { MXKVStoreInit(m.kv, 1, [key].as_ptr(), [h].as_mut_ptr()) };
                        m.rc(rc, known.is_none(), &ctx_msg("kv init"));
                        if known.is_none() {
                            m.stored.insert(key, m.values(&v));
                            m.stored_shape.insert(key, v.shape.clone());
                        }
                    }
                    1 => {
                        let okay = known.as_ref() == Some(&v.shape);
                        let twice = rng.gen_bool(0.3);
                        let (keys, vals) = if twice {
                            (vec![key, key], vec![h, h])
                        } else {
                            (vec![key], vec![h])
                        };
                        // SAFETY: valid arguments.
                        let rc = unsafe {
                            MXKVStorePush(
                                m.kv,
                                keys.len() as u32,
                                keys.as_ptr(),
                                vals.as_ptr() as *mut _,
                                0,
                            )
                        };
                        m.rc(rc, okay, &ctx_msg("kv push"));
                        if okay {
                            let mut s = m.values(&v);
                            if twice {
                                s.iter_mut().for_each(|x| *x *= 2.0);
                            }
                            m.stored.insert(key, s);
                        }
                    }
                    _ => {
                        let okay = known.as_ref() == Some(&v.shape);
                        // SAFETY: valid arguments.
                        let rc =
                            unsafe { MXKVStorePull(m.kv, 1, [key].as_ptr(), [h].as_mut_ptr(), 0) };
                        m.rc(rc, okay, &ctx_msg("kv pull"));
                        if okay {
                            let s = m.stored[&key].clone();
                            m.roots[v.root][v.offset..v.offset + v.len()].copy_from_slice(&s);
                        }
                    }
                }
            }
            // waits
            83..=87 => {
                let rc = match rng.gen_range(0..3) {
                    0 => MXNDArrayWaitAll(),
                    1 => match m.pick_live(&mut rng) {
                        // SAFETY: live handle.
                        Some((h, _)) => unsafe { MXNDArrayWaitToRead(h) },
                        None => 0,
                    },
                    _ => match m.pick_live(&mut rng) {
                        // SAFETY: live handle.
                        Some((h, _)) => unsafe { MXNDArrayWaitToWrite(h) },
                        None => 0,
                    },
                };
                m.rc(rc, true, &ctx_msg("wait"));
            }
            // engine variables: new, delete, use stale ones
            88..=92 => {
                if m.vars.len() < 4 || rng.gen_bool(0.4) {
                    let mut v = null_mut();
                    // SAFETY: valid out-parameter.
                    let rc = unsafe { MXEngineNewVariable(&mut v) };
                    m.rc(rc, true, &ctx_msg("new var"));
                    m.vars.push(v);
                } else if rng.gen_bool(0.5) {
                    let v = m.vars.swap_remove(rng.gen_range(0..m.vars.len()));
                    // SAFETY: a live variable.
                    let rc = unsafe { MXEngineDeleteVariable(v) };
                    m.rc(rc, true, &ctx_msg("delete var"));
                    m.stale_vars.push(v);
                } else if let Some(&v) = m
                    .stale_vars
                    .last()
                    .filter(|&v| with_stale && !m.vars.contains(v))
                {
                    // SAFETY: `v` is only looked up.
                    let rc = unsafe { MXEngineWaitForVar(v) };
                    m.rc(rc, false, &ctx_msg("wait on a deleted var"));
                }
            }
            // KVStores created and freed, and used after free
            93..=95 => {
                let mut k = null_mut();
                // SAFETY: valid arguments.
                let rc = unsafe { MXKVStoreCreate(c"device".as_ptr(), &mut k) };
                m.rc(rc, true, &ctx_msg("kv create"));
                // SAFETY: a live store.
                let rc = unsafe { MXKVStoreFree(k) };
                m.rc(rc, true, &ctx_msg("kv free"));
                stale_kvs.push(k);
                let s = stale_kvs[rng.gen_range(0..stale_kvs.len())];
                if with_stale && s != m.kv {
                    // SAFETY: `s` is only looked up.
                    let rc = unsafe { MXKVStorePull(s, 0, null(), null_mut(), 0) };
                    m.rc(rc, false, &ctx_msg("kv after free"));
                }
            }
            // bulk size changes
            _ => {
                let mut prev = 0;
                // SAFETY: valid out-parameter.
                let rc = unsafe { MXEngineSetBulkSize(rng.gen_range(0..8), &mut prev) };
                m.rc(rc, true, &ctx_msg("bulk size"));
            }
        }
    }
    // final check of every live array, then clean up
    ok!(MXNDArrayWaitAll());
    let live: Vec<(usize, View)> = m.live.iter().map(|(&h, v)| (h, v.clone())).collect();
    for (h, v) in &live {
        assert_eq!(
            get(*h as NDArrayHandle, v.len()),
            m.values(v),
            "seed {seed}: final values"
        );
        ok!(MXNDArrayFree(*h as NDArrayHandle));
    }
    for v in m.vars.drain(..) {
        ok!(MXEngineDeleteVariable(v));
    }
    let mut prev = 0;
    ok!(MXEngineSetBulkSize(0, &mut prev));
    ok!(MXKVStoreFree(m.kv));
    ok!(MXEngineWaitForAll());
    (m.calls, m.refused)
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn random_call_sequences_return_0_or_minus_1_and_match_the_model() {
    let _s = serial();
    let steps = env_usize("MXRT_FUZZ_STEPS", 100_000);
    let seeds = env_usize("MXRT_FUZZ_SEEDS", 3) as u64;
    let first = env_usize("MXRT_FUZZ_SEED", 1) as u64;
    let t = std::time::Instant::now();
    let (mut calls, mut refused) = (0, 0);
    for seed in first..first + seeds {
        let (c, r) = fuzz_once(seed, steps, true);
        calls += c;
        refused += r;
    }
    eprintln!(
        "fuzz: {seeds} seeds x {steps} steps: {calls} calls ({refused} refused as expected) in {:.1?}",
        t.elapsed()
    );
    assert!(refused > 0 && calls > refused);
}

/// The same fuzzer from several threads at once (each with its own arrays and store).
#[test]
fn random_call_sequences_from_several_threads() {
    let _s = serial();
    let steps = env_usize("MXRT_FUZZ_STEPS", 100_000) / 4;
    let handles: Vec<_> = (0..3u64)
        .map(|t| std::thread::spawn(move || fuzz_once(1000 + t, steps, false)))
        .collect();
    for h in handles {
        h.join().expect("a fuzzing thread failed");
    }
}
