//! NDArray behaviour through the exported C functions: MXNet-written fixtures load with their
//! names, shapes, dtypes and bytes; re-saving them reproduces MXNet's files byte for byte; views,
//! engine ordering, error propagation, DLPack and the storage pool behave as documented.

use mxrt::capi::dlpack::*;
use mxrt::capi::engine::*;
use mxrt::capi::engine_push::*;
use mxrt::capi::global::MXSetIsNumpyShape;
use mxrt::capi::ndarray::*;
use mxrt::capi::ndarray_sparse::*;
use mxrt::capi::ndarray_io::*;
use mxrt::capi::storage::*;
use mxrt::capi::types::*;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::ptr::null_mut;
use std::sync::Mutex;

#[macro_use]
mod common;
use common::last_error;

macro_rules! fails {
    ($e:expr, $needle:expr) => {{
        // SAFETY: test calls follow the C API contracts (or are deliberately wrong but checked).
        #[allow(unused_unsafe)]
        let rc = unsafe { $e };
        assert_eq!(rc, -1, "{} should fail", stringify!($e));
        let msg = last_error();
        assert!(
            msg.contains($needle),
            "{}: message {:?} lacks {:?}",
            stringify!($e),
            msg,
            $needle
        );
    }};
}

/// Tests that raise engine errors or call MXNDArrayWaitAll run one at a time: WaitAll reports
/// (and clears) the first error any engine op raised, whichever test pushed it.
static GLOBAL_ERRORS: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    GLOBAL_ERRORS.lock().unwrap_or_else(|e| e.into_inner())
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn manifest() -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixtures().join("manifest.json")).unwrap())
        .unwrap()
}

fn shape_of(h: NDArrayHandle) -> Vec<i64> {
    let mut nd = 0;
    let mut dims: *const i64 = std::ptr::null();
    ok!(MXNDArrayGetShapeEx64(h, &mut nd, &mut dims));
    // SAFETY: the thread-local buffer holds `nd` dims until the next shape call.
    unsafe { std::slice::from_raw_parts(dims, nd.max(0) as usize) }.to_vec()
}

fn dtype_of(h: NDArrayHandle) -> i32 {
    let mut d = 0;
    ok!(MXNDArrayGetDType(h, &mut d));
    d
}

/// The array's bytes (via MXNDArraySyncCopyToCPU).
fn bytes_of(h: NDArrayHandle) -> Vec<u8> {
    let shape = shape_of(h);
    let n: i64 = shape.iter().product();
    let elem = [4, 8, 2, 1, 4, 1, 8, 1, 2, 2, 4, 8, 2][dtype_of(h) as usize];
    let mut buf = vec![0u8; n as usize * elem];
    ok!(MXNDArraySyncCopyToCPU(
        h,
        buf.as_mut_ptr() as *mut c_void,
        n as usize
    ));
    buf
}

fn sha(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

struct Loaded {
    handles: Vec<NDArrayHandle>,
    names: Vec<String>,
}

impl Drop for Loaded {
    fn drop(&mut self) {
        for &h in &self.handles {
            ok!(MXNDArrayFree(h));
        }
    }
}

fn load(path: &Path) -> Result<Loaded, String> {
    let p = CString::new(path.to_str().unwrap()).unwrap();
    let (mut n, mut nn) = (0u32, 0u32);
    let mut arr: *mut NDArrayHandle = null_mut();
    let mut names: *mut *const c_char = null_mut();
    // SAFETY: valid out-parameters.
    if unsafe { MXNDArrayLoad(p.as_ptr(), &mut n, &mut arr, &mut nn, &mut names) } != 0 {
        return Err(last_error());
    }
    // SAFETY: thread-local buffers of `n` handles and `nn` names.
    let handles = unsafe { std::slice::from_raw_parts(arr, n as usize) }.to_vec();
    let names = (0..nn as usize)
        // SAFETY: as above.
        .map(|i| {
            unsafe { CStr::from_ptr(*names.add(i)) }
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    Ok(Loaded { handles, names })
}

fn check_against_manifest(file: &str, loaded: &Loaded) {
    let m = manifest();
    let entry = &m["files"][file];
    let arrays = entry["arrays"].as_array().unwrap();
    assert_eq!(loaded.handles.len(), arrays.len(), "{file}: array count");
    match entry["names"].as_array() {
        Some(names) => {
            let want: Vec<&str> = names.iter().map(|n| n.as_str().unwrap()).collect();
            assert_eq!(loaded.names, want, "{file}: names");
        }
        None => assert!(loaded.names.is_empty(), "{file}: unnamed"),
    }
    for (i, (a, &h)) in arrays.iter().zip(&loaded.handles).enumerate() {
        let shape: Vec<i64> = a["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_i64().unwrap())
            .collect();
        assert_eq!(shape_of(h), shape, "{file}[{i}] shape");
        assert_eq!(
            dtype_of(h) as i64,
            a["dtype"].as_i64().unwrap(),
            "{file}[{i}] dtype"
        );
        let stype = a["stype"].as_i64().unwrap_or(0);
        let mut got_stype = -1;
        ok!(MXNDArrayGetStorageType(h, &mut got_stype));
        assert_eq!(i64::from(got_stype), stype, "{file}[{i}] storage type");
        // a sparse array's data blob is its stored values; its aux blobs are checked too
        let data = if stype == 0 {
            h
        } else {
            let mut d = null_mut();
            ok!(MXNDArrayGetDataNDArray(h, &mut d));
            d
        };
        let b = bytes_of(data);
        assert_eq!(
            b.len() as u64,
            a["nbytes"].as_u64().unwrap(),
            "{file}[{i}] nbytes"
        );
        assert_eq!(sha(&b), a["sha256"].as_str().unwrap(), "{file}[{i}] data");
        if stype != 0 {
            for (j, aux) in a["aux"].as_array().unwrap().iter().enumerate() {
                let mut x = null_mut();
                ok!(MXNDArrayGetAuxNDArray(h, j as u32, &mut x));
                let want: Vec<i64> = aux["shape"].as_array().unwrap().iter().map(|d| d.as_i64().unwrap()).collect();
                assert_eq!(shape_of(x), want, "{file}[{i}] aux {j} shape");
                assert_eq!(sha(&bytes_of(x)), aux["sha256"].as_str().unwrap(), "{file}[{i}] aux {j}");
                ok!(MXNDArrayFree(x));
            }
            ok!(MXNDArrayFree(data));
        }
    }
}

#[test]
fn mxnet_fixtures_load_with_names_shapes_dtypes_and_bytes() {
    for file in [
        "named_dtypes.params",
        "unnamed_list.params",
        "legacy_ndarray.v0",
    ] {
        let l = load(&fixtures().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        check_against_manifest(file, &l);
    }
    // numpy-shape file: refused in classic mode with MXNet's message, loads in np mode
    let np = fixtures().join("np_shape.params");
    let e = load(&np).err().unwrap();
    assert!(e.contains("ndarray was saved in np shape semantics"), "{e}");
    let mut prev = 0;
    ok!(MXSetIsNumpyShape(1, &mut prev));
    let l = load(&np).unwrap();
    check_against_manifest("np_shape.params", &l);
    drop(l);
    ok!(MXSetIsNumpyShape(0, &mut prev));
    assert_eq!(prev, 1);
    // sparse arrays: storage type, stored values and aux arrays as MXNet wrote them
    let l = load(&fixtures().join("sparse.params")).unwrap();
    check_against_manifest("sparse.params", &l);
}

#[test]
fn resaving_mxnet_files_is_byte_identical() {
    for file in ["named_dtypes.params", "unnamed_list.params", "sparse.params"] {
        let path = fixtures().join(file);
        let original = std::fs::read(&path).unwrap();
        let l = load(&path).unwrap();
        let out = std::env::temp_dir().join(format!("mxrt-resave-{}-{file}", std::process::id()));
        let cout = CString::new(out.to_str().unwrap()).unwrap();
        let cnames: Vec<CString> = l
            .names
            .iter()
            .map(|n| CString::new(n.as_str()).unwrap())
            .collect();
        let mut pnames: Vec<*const c_char> = cnames.iter().map(|c| c.as_ptr()).collect();
        let mut hs = l.handles.clone();
        let keys = if pnames.is_empty() {
            null_mut()
        } else {
            pnames.as_mut_ptr()
        };
        ok!(MXNDArraySave(
            cout.as_ptr(),
            hs.len() as u32,
            hs.as_mut_ptr(),
            keys
        ));
        let written = std::fs::read(&out).unwrap();
        std::fs::remove_file(&out).unwrap();
        assert!(
            written == original,
            "{file}: mxrt's save differs from MXNet's file"
        );
    }
    // the single-record format (pickle)
    let raw = std::fs::read(fixtures().join("raw_record.bin")).unwrap();
    let mut h = null_mut();
    ok!(MXNDArrayLoadFromRawBytes(
        raw.as_ptr() as *const c_void,
        raw.len(),
        &mut h
    ));
    assert_eq!(shape_of(h), vec![2, 2]);
    let (mut size, mut buf) = (0usize, std::ptr::null());
    ok!(MXNDArraySaveRawBytes(h, &mut size, &mut buf));
    // SAFETY: thread-local buffer of `size` bytes.
    assert_eq!(
        unsafe { std::slice::from_raw_parts(buf as *const u8, size) },
        &raw[..]
    );
    ok!(MXNDArrayFree(h));
    // truncated buffers fail without crashing
    for cut in [0, 1, 10, raw.len() - 1] {
        fails!(
            MXNDArrayLoadFromRawBytes(raw.as_ptr() as *const c_void, cut, &mut h),
            "Invalid NDArray serialization format"
        );
    }
}

/// Runs MXNet's own loader on a file mxrt wrote, when `MXRT_MXNET_PYTHON` names the venv's python
/// (make test sets it; scripts/setup-mxnet.sh creates the venv).
#[test]
fn mxnet_loads_what_mxrt_writes() {
    let Ok(python) = std::env::var("MXRT_MXNET_PYTHON") else {
        eprintln!("MXRT_MXNET_PYTHON not set: skipping the MXNet round trip (make test runs it)");
        return;
    };
    let l = load(&fixtures().join("named_dtypes.params")).unwrap();
    let out = std::env::temp_dir().join(format!("mxrt-interop-{}.params", std::process::id()));
    let cout = CString::new(out.to_str().unwrap()).unwrap();
    let cnames: Vec<CString> = l
        .names
        .iter()
        .map(|n| CString::new(n.as_str()).unwrap())
        .collect();
    let mut pnames: Vec<*const c_char> = cnames.iter().map(|c| c.as_ptr()).collect();
    let mut hs = l.handles.clone();
    ok!(MXNDArraySave(
        cout.as_ptr(),
        hs.len() as u32,
        hs.as_mut_ptr(),
        pnames.as_mut_ptr()
    ));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/mxnet-inspect.py");
    let res = std::process::Command::new(python)
        .arg(script)
        .arg(&out)
        .output()
        .unwrap();
    std::fs::remove_file(&out).unwrap();
    assert!(
        res.status.success(),
        "MXNet could not load mxrt's file: {}",
        String::from_utf8_lossy(&res.stderr)
    );
    let got: Value = serde_json::from_slice(&res.stdout).unwrap();
    let want = &manifest()["files"]["named_dtypes.params"];
    assert_eq!(got["names"], want["names"]);
    for (g, w) in got["arrays"]
        .as_array()
        .unwrap()
        .iter()
        .zip(want["arrays"].as_array().unwrap())
    {
        assert_eq!(g["shape"], w["shape"]);
        assert_eq!(g["dtype"], w["dtype"]);
        assert_eq!(g["sha256"], w["sha256"]);
    }
}

fn new_array(shape: &[u32], dtype: i32) -> NDArrayHandle {
    let mut h = null_mut();
    ok!(MXNDArrayCreateEx(
        shape.as_ptr(),
        shape.len() as u32,
        1,
        0,
        0,
        dtype,
        &mut h
    ));
    h
}

fn put_f32(h: NDArrayHandle, v: &[f32]) {
    ok!(MXNDArraySyncCopyFromCPU(
        h,
        v.as_ptr() as *const c_void,
        v.len()
    ));
}

fn get_f32(h: NDArrayHandle) -> Vec<f32> {
    bytes_of(h)
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn views_reshape_codes_and_queries() {
    let a = new_array(&[2, 3, 4], 0);
    put_f32(a, &(0..24).map(|i| i as f32).collect::<Vec<_>>());
    let mut v = null_mut();
    let mut codes = [-1i64, 0];
    ok!(MXNDArrayReshape64(a, 2, codes.as_mut_ptr(), true, &mut v));
    assert_eq!(shape_of(v), vec![6, 4]);
    ok!(MXNDArrayFree(v));
    let mut codes = [-3i64, -2];
    ok!(MXNDArrayReshape64(a, 2, codes.as_mut_ptr(), false, &mut v));
    assert_eq!(shape_of(v), vec![6, 4]);
    ok!(MXNDArrayFree(v));
    let mut too_big = [5, 5];
    fails!(
        MXNDArrayReshape(a, 2, too_big.as_mut_ptr(), &mut v),
        "target shape size is larger"
    );
    ok!(MXNDArrayAt64(a, 1, &mut v));
    assert_eq!(shape_of(v), vec![3, 4]);
    assert_eq!(get_f32(v)[0], 12.0);
    ok!(MXNDArrayFree(v));
    fails!(MXNDArrayAt(a, 2, &mut v), "out of range");
    fails!(MXNDArraySlice64(a, 2, 1, &mut v), "Invalid slicing range");
    let (mut nd, mut dims) = (0u32, std::ptr::null());
    ok!(MXNDArrayGetShape(a, &mut nd, &mut dims));
    // SAFETY: thread-local buffer of `nd` dims.
    assert_eq!(
        unsafe { std::slice::from_raw_parts(dims, nd as usize) },
        &[2, 3, 4]
    );
    let mut st = 9;
    ok!(MXNDArrayGetStorageType(a, &mut st));
    assert_eq!(st, 0);
    // none arrays
    let mut none = null_mut();
    ok!(MXNDArrayCreateNone(&mut none));
    ok!(MXNDArrayGetStorageType(none, &mut st));
    assert_eq!((st, dtype_of(none), shape_of(none)), (-1, -1, vec![]));
    ok!(MXNDArrayWaitToRead(none));
    let mut p: *mut c_void = null_mut();
    ok!(MXNDArrayGetData(none, &mut p));
    assert!(p.is_null());
    let mut keys: [*const c_char; 1] = [c"x".as_ptr()];
    let mut hs = [none];
    fails!(
        MXNDArraySave(
            c"/tmp/mxrt-none.params".as_ptr(),
            1,
            hs.as_mut_ptr(),
            keys.as_mut_ptr()
        ),
        "none array"
    );
    ok!(MXNDArrayFree(none));
    ok!(MXNDArrayFree(a));
    // dtypes MXNet rejects but mxrt accepts, unknown codes, overflowing shapes
    for code in 8..=11 {
        let h = new_array(&[3], code);
        assert_eq!(dtype_of(h), code);
        ok!(MXNDArrayFree(h));
    }
    let mut h = null_mut();
    fails!(
        MXNDArrayCreateEx([1u32].as_ptr(), 1, 1, 0, 0, 13, &mut h),
        "Unknown type enum 13"
    );
    let huge = [i64::MAX / 2, 4];
    fails!(
        MXNDArrayCreateEx64(huge.as_ptr(), 2, 1, 0, 0, 0, &mut h),
        "too large to allocate"
    );
    let overflow = [i64::MAX, 4];
    fails!(
        MXNDArrayCreateEx64(overflow.as_ptr(), 2, 1, 0, 0, 0, &mut h),
        "too many elements"
    );
    fails!(
        MXNDArrayCreateEx64(huge.as_ptr(), -1, 1, 0, 0, 0, &mut h),
        "ndim must be non-negative"
    );
}

/// `MXEnginePushSyncND` of `f(param)` on `ctx`, reading `reads` and writing `writes`, with the
/// default property and priority and no name.
unsafe fn push_sync_nd(
    f: EngineSyncFunc,
    param: *mut c_void,
    deleter: EngineFuncParamDeleter,
    ctx: &MXContext,
    reads: &mut [NDArrayHandle],
    writes: &mut [NDArrayHandle],
) -> c_int {
    // SAFETY: the arrays hold `len` handles each; the rest is the caller's contract.
    unsafe {
        MXEnginePushSyncND(
            f,
            param,
            deleter,
            ctx as *const MXContext as ContextHandle,
            reads.as_mut_ptr(),
            reads.len() as c_int,
            writes.as_mut_ptr(),
            writes.len() as c_int,
            std::ptr::null(),
            0,
            std::ptr::null(),
        )
    }
}

extern "C" fn fill_ones(_rc: *mut c_void, param: *mut c_void) {
    let h = param as NDArrayHandle;
    let mut p: *mut c_void = null_mut();
    // SAFETY: the op holds the array as a mutable var; the pointer covers its 4 floats.
    unsafe {
        assert_eq!(MXNDArrayGetData(h, &mut p), 0);
        std::slice::from_raw_parts_mut(p as *mut f32, 4).fill(1.0);
    }
}

extern "C" fn fail_op(_rc: *mut c_void, _param: *mut c_void) {
    // SAFETY: called inside a running sync op.
    unsafe { MXEngineSetOpError(c"scale must be positive".as_ptr()) };
}

#[test]
fn copies_are_ordered_with_engine_ops_and_errors_are_reported_once() {
    let _serial = serial();
    let a = new_array(&[4], 0);
    let ctx = MXContext {
        dev_type: 1,
        dev_id: 0,
    };
    let mut m = [a];
    ok!(push_sync_nd(
        Some(fill_ones),
        a,
        None,
        &ctx,
        &mut [],
        &mut m
    ));
    assert_eq!(get_f32(a), vec![1.0; 4], "SyncCopyToCPU waits for the op");
    put_f32(a, &[5.0; 4]);
    let b = new_array(&[4], 0);
    let mut c = [a];
    let mut m = [b];
    ok!(push_sync_nd(
        Some(fail_op),
        null_mut(),
        None,
        &ctx,
        &mut [],
        &mut c
    ));
    ok!(push_sync_nd(Some(fill_ones), b, None, &ctx, &mut c, &mut m));
    let mut out = [0f32; 4];
    fails!(
        MXNDArraySyncCopyToCPU(b, out.as_mut_ptr() as *mut c_void, 4),
        "scale must be positive"
    );
    assert_eq!(out, [0.0; 4], "nothing copied from a failed array");
    ok!(MXNDArrayWaitToRead(a));
    ok!(MXNDArrayWaitAll());
    // SyncCopyFromNDArray and GetDataNDArray make real copies
    ok!(MXNDArraySyncCopyFromNDArray(b, a, -1));
    assert_eq!(get_f32(b), vec![5.0; 4]);
    let mut d = null_mut();
    ok!(MXNDArrayGetDataNDArray(b, &mut d));
    put_f32(b, &[7.0; 4]);
    assert_eq!(get_f32(d), vec![5.0; 4]);
    fails!(MXNDArraySyncCopyFromNDArray(b, a, 0), "has default (dense) storage");
    for h in [a, b, d] {
        ok!(MXNDArrayFree(h));
    }
    fails!(MXNDArrayFree(a), "not a live NDArray handle");
}

extern "C" fn free_array(param: *mut c_void) {
    // SAFETY: `param` is an NDArray handle the test handed over for this.
    assert_eq!(unsafe { MXNDArrayFree(param as NDArrayHandle) }, 0);
}

extern "C" fn free_input_then_complete(
    _rc: *mut c_void,
    on_complete: *mut c_void,
    param: *mut c_void,
) {
    // SAFETY: `param` is a handle the test handed over; `on_complete` is valid during the call.
    unsafe {
        assert_eq!(MXNDArrayFree(param as NDArrayHandle), 0);
        assert_eq!(MXEngineCallbackInvoke(on_complete, std::ptr::null()), 0);
    }
}

extern "C" fn free_input(_rc: *mut c_void, param: *mut c_void) {
    free_array(param);
}

#[test]
fn c_code_run_during_an_nd_push_may_free_the_pushed_arrays() {
    // a deadlock fails the test instead of hanging the suite
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        free_during_push();
        done.send(()).unwrap();
    });
    finished
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("a push deadlocked with C code freeing its arrays");
    // NaiveEngine runs every op inside its push
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "free_during_push_child", "--ignored"])
        .env("MXNET_ENGINE_TYPE", "NaiveEngine")
        .env("MXRT_FREE_DURING_PUSH_CHILD", "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > std::time::Duration::from_secs(60) {
            child.kill().unwrap();
            panic!("a NaiveEngine push deadlocked with C code freeing its arrays");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("1 passed"), "{stdout}");
}

#[test]
#[ignore = "run by c_code_run_during_an_nd_push_may_free_the_pushed_arrays"]
fn free_during_push_child() {
    if std::env::var_os("MXRT_FREE_DURING_PUSH_CHILD").is_some() {
        free_during_push();
    }
}

fn free_during_push() {
    let _serial = serial();
    // The push looks its arrays up without counting references, holding the registry's locks
    // until the engine has queued the op: C code that runs before then must not wait for them.
    let ctx = MXContext {
        dev_type: 1,
        dev_id: 0,
    };
    // a push that fails runs the deleter, which frees an array the push named
    let (a, b) = (new_array(&[4], 0), new_array(&[4], 0));
    let gpu = MXContext {
        dev_type: 2,
        dev_id: 0,
    };
    let mut c = [a, b];
    fails!(
        push_sync_nd(Some(fill_ones), a, Some(free_array), &gpu, &mut c, &mut []),
        "does not exist"
    );
    fails!(MXNDArrayFree(a), "not a live NDArray handle");
    // a kAsync op runs on the pushing thread as soon as it is queued, and frees its own input
    let prop: c_int = 1; // kAsync
    let mut c = [b];
    let out = new_array(&[4], 0);
    let mut m = [out];
    ok!(MXEnginePushAsyncND(
        Some(free_input_then_complete),
        b,
        None,
        &ctx as *const _ as ContextHandle,
        c.as_mut_ptr(),
        1,
        m.as_mut_ptr(),
        1,
        &prop as *const c_int as EngineFnPropertyHandle,
        0,
        std::ptr::null(),
        false
    ));
    ok!(MXNDArrayWaitAll());
    fails!(MXNDArrayFree(b), "not a live NDArray handle");
    // a sync op that frees its own input (NaiveEngine runs it inside the push)
    let d = new_array(&[4], 0);
    let mut c = [d];
    ok!(push_sync_nd(
        Some(free_input),
        d,
        None,
        &ctx,
        &mut c,
        &mut m
    ));
    ok!(MXNDArrayWaitAll());
    fails!(MXNDArrayFree(d), "not a live NDArray handle");
    ok!(MXNDArrayFree(out));
}

#[test]
fn dlpack_round_trip_shares_memory() {
    let _serial = serial();
    let a = new_array(&[2, 2], 0);
    put_f32(a, &[1.0, 2.0, 3.0, 4.0]);
    let mut t: DLManagedTensorHandle = null_mut();
    ok!(MXNDArrayToDLPack(a, &mut t));
    let mut b = null_mut();
    ok!(MXNDArrayFromDLPack(t, &mut b));
    assert_eq!(shape_of(b), vec![2, 2]);
    assert_eq!(dtype_of(b), 0);
    put_f32(b, &[9.0, 8.0, 7.0, 6.0]);
    assert_eq!(
        get_f32(a),
        vec![9.0, 8.0, 7.0, 6.0],
        "imported array aliases the original"
    );
    ok!(MXNDArrayFree(a));
    // the original memory lives on through the DLPack tensor until `b` goes
    assert_eq!(get_f32(b), vec![9.0, 8.0, 7.0, 6.0]);
    ok!(MXNDArrayFree(b));
    ok!(MXNDArrayWaitAll());
    ok!(MXNDArrayCallDLPackDeleter(null_mut()));
}

#[test]
fn pool_reuses_blocks() {
    let mut before = MXStorageStats::default();
    ok!(MXStorageGetStats(1, 0, &mut before));
    for _ in 0..100 {
        let h = new_array(&[256], 0);
        ok!(MXNDArrayFree(h));
    }
    let mut after = MXStorageStats::default();
    ok!(MXStorageGetStats(1, 0, &mut after));
    assert!(
        after.allocs >= before.allocs + 100,
        "{before:?} -> {after:?}"
    );
    assert!(
        after.hits >= before.hits + 90,
        "freed blocks are reused: {before:?} -> {after:?}"
    );
    ok!(MXStorageEmptyCache(1, 0));
    fails!(MXStorageEmptyCache(4, 0), "Unimplemented device 4");
}

/// The cost of the handle check: an export that only reads a field (MXNDArrayGetDType: guard +
/// registry lookup) against the same read on the Rust object. Run with
/// `cargo test --release --test ndarray handle_check_cost -- --ignored --nocapture`.
#[test]
#[ignore = "timing, not a check"]
fn handle_check_cost() {
    let h = new_array(&[4], 0);
    let core =
        mxrt::ndarray::NDArray::new(&[4], mxrt::Context::cpu(0), mxrt::DType::F32, false).unwrap();
    let n = 5_000_000;
    let mut d = 0;
    let t = std::time::Instant::now();
    for _ in 0..n {
        // SAFETY: live handle, valid out-parameter.
        unsafe { MXNDArrayGetDType(std::hint::black_box(h), &mut d) };
    }
    let c_ns = t.elapsed().as_nanos() as f64 / n as f64;
    let t = std::time::Instant::now();
    for _ in 0..n {
        d = std::hint::black_box(&core).dtype().code();
    }
    let rust_ns = t.elapsed().as_nanos() as f64 / n as f64;
    println!(
        "MXNDArrayGetDType: {c_ns:.1} ns per call; the same read in Rust: {rust_ns:.1} ns; guard + handle check: {:.1} ns",
        c_ns - rust_ns
    );
    assert_eq!(d, 0);
    ok!(MXNDArrayFree(h));
}

/// Freeing handles that were already freed, after their memory and table slots were reused by
/// new arrays, is -1 every time and leaves every live array and its data intact.
#[test]
fn stale_frees_after_reuse_are_refused_and_destroy_nothing() {
    let old: Vec<NDArrayHandle> = (0..2000).map(|_| new_array(&[4], 0)).collect();
    for &h in &old {
        ok!(MXNDArrayFree(h));
    }
    let live: Vec<NDArrayHandle> = (0..2000)
        .map(|i| {
            let h = new_array(&[4], 0);
            put_f32(h, &[i as f32; 4]);
            h
        })
        .collect();
    for &h in &old {
        // SAFETY: a stale handle is a value the library must refuse; it is never dereferenced.
        assert_eq!(unsafe { MXNDArrayFree(h) }, -1);
        let msg = last_error();
        assert!(
            msg.contains("MXNDArrayFree") && msg.contains("not a live NDArray handle"),
            "{msg}"
        );
    }
    for (i, &h) in live.iter().enumerate() {
        assert_eq!(get_f32(h), vec![i as f32; 4], "array {i}");
        ok!(MXNDArrayFree(h));
        // SAFETY: as above.
        assert_eq!(unsafe { MXNDArrayFree(h) }, -1, "double free of array {i}");
    }
}

/// Runs `child` (an ignored test of this binary) in a fresh process with `envs` and checks that it
/// passed: what a process does before its first call cannot leak in from other tests.
fn run_child_test(child: &str, envs: &[(&str, &str)]) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", child, "--ignored", "--nocapture"])
        .envs(envs.iter().copied())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{child} {envs:?}:\n{stdout}\n{stderr}"
    );
}

/// Storage sits below the GPU module and does not know it: the GPU module registers its memory
/// backends, and a gpu array made through the Rust API as a process's first call must still
/// reach them. Without a driver the error is the driver's (gpu(0) does not exist), not storage's
/// "no GPU backend"; with the fake driver (tests/gpu/fake_cuda.c, built here) the array works.
#[test]
fn gpu_arrays_reach_the_gpu_backends_as_a_first_call() {
    run_child_test("gpu_array_first_call_child", &[("MXRT_GPU_FIRST_CALL_CHILD", "none")]);
    let fake = std::env::temp_dir().join(format!("mxrt-fakecuda-{}", std::process::id()));
    std::fs::create_dir_all(&fake).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = std::process::Command::new(cc)
        .args(["-std=c11", "-O2", "-fPIC", "-shared", "-Wl,-soname,libcuda.so.1"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gpu/fake_cuda.c"))
        .arg("-o")
        .arg(fake.join("libcuda.so.1"))
        .arg("-lpthread")
        .status();
    match built {
        Ok(s) if s.success() => {
            std::os::unix::fs::symlink("libcuda.so.1", fake.join("libcuda.so")).ok();
            run_child_test(
                "gpu_array_first_call_child",
                &[
                    ("MXRT_GPU_FIRST_CALL_CHILD", "fake"),
                    ("LD_LIBRARY_PATH", fake.to_str().unwrap()),
                    ("FAKECUDA_DEVICES", "1"),
                    ("FAKECUDA_MEM_MB", "64"),
                ],
            );
        }
        other => eprintln!("no C compiler for the fake CUDA driver ({other:?}): that half is skipped"),
    }
    std::fs::remove_dir_all(&fake).ok();
}

#[test]
#[ignore = "run by gpu_arrays_reach_the_gpu_backends_as_a_first_call"]
fn gpu_array_first_call_child() {
    use mxrt::ndarray::NDArray;
    use mxrt::{Context, DType};
    let Ok(mode) = std::env::var("MXRT_GPU_FIRST_CALL_CHILD") else {
        return;
    };
    let bytes: Vec<u8> = (0..16).collect();
    match NDArray::new(&[4], Context::gpu(0), DType::F32, false) {
        Ok(a) => {
            assert_eq!(mode, "fake", "a gpu array without a driver");
            a.sync_copy_from_bytes(&bytes).unwrap();
            assert_eq!(a.to_bytes().unwrap(), bytes);
        }
        Err(e) => {
            assert_eq!(mode, "none", "{e}");
            assert!(!e.message().contains("USE_CUDA"), "storage had no GPU backend: {e}");
            assert!(e.message().contains("gpu(0) does not exist"), "{e}");
        }
    }
    // cpu_pinned: page-locked memory with a GPU, host memory without
    let p = NDArray::new(&[4], Context::cpu_pinned(0), DType::F32, false).unwrap();
    p.sync_copy_from_bytes(&bytes).unwrap();
    assert_eq!(p.to_bytes().unwrap(), bytes);
}
