//! Fuzz target: the input bytes are a program of C API calls (create, free, copy, slice, reshape,
//! engine pushes, KVStore init/push/pull, waits, engine variables) on a small table of handles,
//! with freed, NULL, garbage and wrongly typed handles mixed in.
//!
//! Build/run (from `fuzz/`): `cargo +nightly fuzz run abi_sequence -- -max_len=4096`.
//!
//! Checks: every call returns 0 or -1, a failed call leaves a message naming its function, calls
//! on handles that are certainly invalid (freed ones are only used while no live handle shares
//! their address) fail, and the process survives. Everything is freed at the end of each input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mxrt::capi::engine::*;
use mxrt::capi::engine_push::*;
use mxrt::capi::error::MXGetLastError;
use mxrt::capi::kvstore::*;
use mxrt::capi::ndarray::*;
use mxrt::capi::types::*;
use std::ffi::{CStr, c_int, c_void};
use std::ptr::{null, null_mut};

/// Reads the program's bytes.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn i64(&mut self) -> Option<i64> {
        let mut v = [0u8; 8];
        for b in &mut v {
            *b = self.u8()?;
        }
        Some(i64::from_le_bytes(v))
    }
}

fn check(rc: c_int, func: &str) {
    assert!(rc == 0 || rc == -1, "{func} returned {rc}");
    if rc == -1 {
        // SAFETY: MXGetLastError returns this thread's live message.
        let msg = unsafe { CStr::from_ptr(MXGetLastError()) }.to_string_lossy();
        assert!(!msg.is_empty(), "{func} failed without a message");
    }
}

fn refused(rc: c_int, func: &str) {
    assert_eq!(rc, -1, "{func} accepted an invalid handle");
}

unsafe extern "C" fn touch(_rc: *mut c_void, _p: *mut c_void) {}

const CPU: MXContext = MXContext {
    dev_type: 1,
    dev_id: 0,
};

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes(data);
    let mut live: Vec<NDArrayHandle> = Vec::new();
    let mut freed: Vec<NDArrayHandle> = Vec::new();
    let mut vars: Vec<*mut c_void> = Vec::new();
    let mut kv = null_mut();
    // SAFETY (whole body): arguments are valid except handles, which mxrt looks up before use;
    // buffers passed with a count hold at least that many elements.
    unsafe {
        check(
            MXKVStoreCreate(c"local".as_ptr(), &mut kv),
            "MXKVStoreCreate",
        );
        let pick = |b: &mut Bytes, v: &Vec<NDArrayHandle>| -> Option<NDArrayHandle> {
            let i = b.u8()? as usize;
            if v.is_empty() {
                Some(null_mut())
            } else {
                Some(v[i % v.len()])
            }
        };
        while let Some(op) = b.u8() {
            let mut out = null_mut();
            match op % 16 {
                0 => {
                    let nd = (b.u8().unwrap_or(1) % 4) as usize;
                    let dims: Vec<i64> =
                        (0..nd).map(|_| (b.u8().unwrap_or(1) % 9) as i64).collect();
                    let dtype = (b.u8().unwrap_or(0) % 16) as c_int - 1;
                    let rc = MXNDArrayCreateEx64(
                        dims.as_ptr(),
                        nd as c_int,
                        1,
                        0,
                        (op >> 4 & 1) as c_int,
                        dtype,
                        &mut out,
                    );
                    check(rc, "MXNDArrayCreateEx64");
                    if rc == 0 {
                        freed.retain(|&f| f != out);
                        live.push(out);
                    }
                }
                1 => {
                    // extreme shapes: must fail or succeed cleanly, never allocate absurdly
                    let dims = [b.i64().unwrap_or(0), b.i64().unwrap_or(0)];
                    let rc = MXNDArrayCreateEx64(dims.as_ptr(), 2, 1, 0, 1, 0, &mut out);
                    check(rc, "MXNDArrayCreateEx64");
                    if rc == 0 {
                        freed.retain(|&f| f != out);
                        live.push(out);
                    }
                }
                2 if !live.is_empty() => {
                    let i = b.u8().unwrap_or(0) as usize % live.len();
                    let h = live.swap_remove(i);
                    check(MXNDArrayFree(h), "MXNDArrayFree");
                    freed.push(h);
                }
                3 => {
                    // a freed handle (not reused by a live one), NULL, or garbage
                    let h = match b.u8().unwrap_or(0) % 3 {
                        0 => freed.last().copied().unwrap_or(null_mut()),
                        1 => null_mut(),
                        _ => b.i64().unwrap_or(8) as usize as NDArrayHandle,
                    };
                    if !live.contains(&h) && h != kv && !vars.contains(&h) {
                        refused(MXNDArrayWaitToRead(h), "MXNDArrayWaitToRead");
                        refused(MXNDArrayFree(h), "MXNDArrayFree");
                        refused(MXNDArraySlice64(h, 0, 1, &mut out), "MXNDArraySlice64");
                    }
                }
                4 => {
                    let Some(h) = pick(&mut b, &live) else { break };
                    let (lo, hi) = (b.i64().unwrap_or(0) % 10, b.i64().unwrap_or(1) % 10);
                    let rc = MXNDArraySlice64(h, lo, hi, &mut out);
                    check(rc, "MXNDArraySlice64");
                    if rc == 0 {
                        freed.retain(|&f| f != out);
                        live.push(out);
                    }
                }
                5 => {
                    let Some(h) = pick(&mut b, &live) else { break };
                    let rc = MXNDArrayAt64(h, b.i64().unwrap_or(0) % 10, &mut out);
                    check(rc, "MXNDArrayAt64");
                    if rc == 0 {
                        freed.retain(|&f| f != out);
                        live.push(out);
                    }
                }
                6 => {
                    let Some(h) = pick(&mut b, &live) else { break };
                    let n = (b.u8().unwrap_or(1) % 4) as usize;
                    let mut dims: Vec<i64> =
                        (0..n).map(|_| (b.u8().unwrap_or(0) as i8) as i64).collect();
                    let rc = MXNDArrayReshape64(
                        h,
                        n as c_int,
                        dims.as_mut_ptr(),
                        op & 0x10 != 0,
                        &mut out,
                    );
                    check(rc, "MXNDArrayReshape64");
                    if rc == 0 {
                        freed.retain(|&f| f != out);
                        live.push(out);
                    }
                }
                7 => {
                    let Some(h) = pick(&mut b, &live) else { break };
                    let n = b.u8().unwrap_or(0) as usize;
                    let buf = vec![0u64; n + 1]; // room for n elements of any dtype
                    check(
                        MXNDArraySyncCopyFromCPU(h, buf.as_ptr().cast(), n),
                        "MXNDArraySyncCopyFromCPU",
                    );
                }
                8 => {
                    let Some(h) = pick(&mut b, &live) else { break };
                    let n = b.u8().unwrap_or(0) as usize;
                    let mut buf = vec![0u64; n + 1];
                    check(
                        MXNDArraySyncCopyToCPU(h, buf.as_mut_ptr().cast(), n),
                        "MXNDArraySyncCopyToCPU",
                    );
                }
                9 => {
                    let (Some(d), Some(s)) = (pick(&mut b, &live), pick(&mut b, &live)) else {
                        break;
                    };
                    check(
                        MXNDArraySyncCopyFromNDArray(d, s, -1),
                        "MXNDArraySyncCopyFromNDArray",
                    );
                }
                10 => {
                    let Some(h) = pick(&mut b, &live) else { break };
                    let key = [(b.u8().unwrap_or(0) % 4) as c_int];
                    let rc = match b.u8().unwrap_or(0) % 3 {
                        0 => MXKVStoreInit(kv, 1, key.as_ptr(), [h].as_mut_ptr()),
                        1 => MXKVStorePush(kv, 1, key.as_ptr(), [h].as_mut_ptr(), 0),
                        _ => MXKVStorePull(kv, 1, key.as_ptr(), [h].as_mut_ptr(), 0),
                    };
                    check(rc, "MXKVStore{Init,Push,Pull}");
                }
                11 => {
                    let (Some(r), Some(w)) = (pick(&mut b, &live), pick(&mut b, &live)) else {
                        break;
                    };
                    let rc = MXEnginePushSyncND(
                        Some(touch),
                        null_mut(),
                        None,
                        &CPU as *const MXContext as ContextHandle,
                        [r].as_mut_ptr(),
                        1,
                        [w].as_mut_ptr(),
                        1,
                        null(),
                        0,
                        null(),
                    );
                    check(rc, "MXEnginePushSyncND");
                }
                12 => check(MXNDArrayWaitAll(), "MXNDArrayWaitAll"),
                13 => {
                    let mut v = null_mut();
                    check(MXEngineNewVariable(&mut v), "MXEngineNewVariable");
                    vars.push(v);
                }
                14 if !vars.is_empty() => {
                    let v = vars.swap_remove(b.u8().unwrap_or(0) as usize % vars.len());
                    check(MXEngineDeleteVariable(v), "MXEngineDeleteVariable");
                    if !vars.contains(&v) && !live.contains(&v) && v != kv {
                        refused(MXEngineWaitForVar(v), "MXEngineWaitForVar");
                    }
                }
                _ => {
                    let mut prev = 0;
                    check(
                        MXEngineSetBulkSize((b.u8().unwrap_or(0) % 4) as c_int, &mut prev),
                        "MXEngineSetBulkSize",
                    );
                }
            }
        }
        check(MXNDArrayWaitAll(), "MXNDArrayWaitAll");
        for h in live {
            assert_eq!(MXNDArrayFree(h), 0);
        }
        for v in vars {
            assert_eq!(MXEngineDeleteVariable(v), 0);
        }
        let mut prev = 0;
        assert_eq!(MXEngineSetBulkSize(0, &mut prev), 0);
        assert_eq!(MXKVStoreFree(kv), 0);
        // errors of failed ops are consumed, so the next input starts clean
        let _ = MXEngineWaitForAll();
    }
});
