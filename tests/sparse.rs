//! Sparse arrays (row_sparse, csr) through the C API: building one part by part, its parts as
//! dense arrays, casts both ways through `cast_storage`, files, the format check, and misuse
//! refused with a message and no data lost.

use mxrt::capi::imperative::*;
use mxrt::capi::ndarray::*;
use mxrt::capi::ndarray_io::*;
use mxrt::capi::ndarray_sparse::*;
use mxrt::capi::operator::*;
use std::ffi::{CString, c_void};
use std::ptr::{null, null_mut};

#[macro_use]
mod common;
use common::last_error;

type H = *mut c_void;

fn dense_f32(shape: &[u32], values: &[f32]) -> H {
    let mut h = null_mut();
    ok!(MXNDArrayCreateEx(
        shape.as_ptr(),
        shape.len() as u32,
        1,
        0,
        0,
        0,
        &mut h
    ));
    ok!(MXNDArraySyncCopyFromCPU(
        h,
        values.as_ptr().cast(),
        values.len()
    ));
    h
}

fn dense_i64(values: &[i64]) -> H {
    let mut h = null_mut();
    let shape = [values.len() as u32];
    ok!(MXNDArrayCreateEx(shape.as_ptr(), 1, 1, 0, 0, 6, &mut h));
    ok!(MXNDArraySyncCopyFromCPU(
        h,
        values.as_ptr().cast(),
        values.len()
    ));
    h
}

fn read_f32(h: H, n: usize) -> Vec<f32> {
    let mut v = vec![0f32; n];
    ok!(MXNDArraySyncCopyToCPU(h, v.as_mut_ptr().cast(), n));
    v
}

fn read_i64(h: H, n: usize) -> Vec<i64> {
    let mut v = vec![0i64; n];
    ok!(MXNDArraySyncCopyToCPU(h, v.as_mut_ptr().cast(), n));
    v
}

fn shape_of(h: H) -> Vec<u32> {
    let (mut nd, mut p) = (0u32, null());
    ok!(MXNDArrayGetShape(h, &mut nd, &mut p));
    // SAFETY: MXNDArrayGetShape reported `nd` dims at `p`.
    unsafe { std::slice::from_raw_parts(p, nd as usize) }.to_vec()
}

fn stype(h: H) -> i32 {
    let mut s = -2;
    ok!(MXNDArrayGetStorageType(h, &mut s));
    s
}

fn op(name: &str) -> OpHandle {
    let c = CString::new(name).unwrap();
    let mut h = null_mut();
    ok!(NNGetOpHandle(c.as_ptr(), &mut h));
    h
}

/// Invokes `name` with library-allocated outputs; returns the first output and its storage.
fn invoke(name: &str, inputs: &[H], params: &[(&str, &str)]) -> Result<(H, i32), String> {
    let keys: Vec<CString> = params
        .iter()
        .map(|(k, _)| CString::new(*k).unwrap())
        .collect();
    let vals: Vec<CString> = params
        .iter()
        .map(|(_, v)| CString::new(*v).unwrap())
        .collect();
    let mut kp: Vec<_> = keys.iter().map(|c| c.as_ptr()).collect();
    let mut vp: Vec<_> = vals.iter().map(|c| c.as_ptr()).collect();
    let mut ins = inputs.to_vec();
    let (mut n_out, mut outs, mut stypes) = (0, null_mut(), null());
    // SAFETY: valid arrays of the given lengths and out-parameters.
    let rc = unsafe {
        MXImperativeInvokeEx(
            op(name),
            ins.len() as i32,
            ins.as_mut_ptr(),
            &mut n_out,
            &mut outs,
            params.len() as i32,
            kp.as_mut_ptr(),
            vp.as_mut_ptr(),
            &mut stypes,
        )
    };
    if rc != 0 {
        return Err(last_error());
    }
    // SAFETY: one output was returned with its storage type.
    Ok(unsafe { (*outs, *stypes) })
}

/// `MXNDArrayCreateSparseEx` of a float32 array on cpu(0) with `num_aux` int64 aux arrays of the
/// 1-D lengths `aux_lens` (two entries, so `num_aux` may be given wrong on purpose).
fn create(storage: i32, shape: &[u32], num_aux: u32, aux_lens: [u32; 2], out: *mut H) -> i32 {
    let (mut types, mut ndims) = ([6, 6], [1u32, 1]);
    // SAFETY: every array holds at least what the counts passed say; `out` is the caller's.
    unsafe {
        MXNDArrayCreateSparseEx(
            storage,
            shape.as_ptr(),
            shape.len() as u32,
            1,
            0,
            1,
            0,
            num_aux,
            types.as_mut_ptr(),
            ndims.as_mut_ptr(),
            aux_lens.as_ptr(),
            out,
        )
    }
}

/// The csr array [[1, 0, 2], [0, 0, 0], [0, 3, 0]] built part by part, as MXNet's Python
/// package builds `csr_matrix`.
fn csr_3x3() -> H {
    let mut h = null_mut();
    ok!(create(2, &[3, 3], 2, [4, 3], &mut h));
    let data = dense_f32(&[3], &[1.0, 2.0, 3.0]);
    let (indptr, indices) = (dense_i64(&[0, 2, 2, 3]), dense_i64(&[0, 2, 1]));
    ok!(MXNDArraySyncCopyFromNDArray(h, data, -1));
    ok!(MXNDArraySyncCopyFromNDArray(h, indptr, 0));
    ok!(MXNDArraySyncCopyFromNDArray(h, indices, 1));
    for a in [data, indptr, indices] {
        ok!(MXNDArrayFree(a));
    }
    h
}

#[test]
fn a_csr_array_is_built_part_by_part_and_read_back() {
    let csr = csr_3x3();
    assert_eq!(stype(csr), 2);
    assert_eq!(shape_of(csr), [3, 3]);
    ok!(MXNDArraySyncCheckFormat(csr, true));
    let mut t = -1;
    ok!(MXNDArrayGetAuxType(csr, 1, &mut t));
    assert_eq!(t, 6, "int64 indices");
    let (mut indptr, mut data) = (null_mut(), null_mut());
    ok!(MXNDArrayGetAuxNDArray(csr, 0, &mut indptr));
    ok!(MXNDArrayGetDataNDArray(csr, &mut data));
    assert_eq!(read_i64(indptr, 4), [0, 2, 2, 3]);
    assert_eq!(read_f32(data, 3), [1.0, 2.0, 3.0]);
    let (dense, st) = invoke("cast_storage", &[csr], &[("stype", "default")]).unwrap();
    assert_eq!(st, 0);
    assert_eq!(
        read_f32(dense, 9),
        [1.0, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0, 3.0, 0.0]
    );
    // dense -> row_sparse keeps the rows holding a non-zero
    let (rsp, st) = invoke("cast_storage", &[dense], &[("stype", "row_sparse")]).unwrap();
    assert_eq!((st, stype(rsp)), (1, 1));
    let mut idx = null_mut();
    ok!(MXNDArrayGetAuxNDArray(rsp, 0, &mut idx));
    assert_eq!(read_i64(idx, 2), [0, 2]);
    // an op on sparse inputs computes the dense op's values and keeps the storage MXNet gives
    let (doubled, st) = invoke("_mul_scalar", &[rsp], &[("scalar", "2")]).unwrap();
    assert_eq!(st, 1, "row_sparse * scalar stays row_sparse");
    let (back, _) = invoke("cast_storage", &[doubled], &[("stype", "default")]).unwrap();
    assert_eq!(
        read_f32(back, 9),
        [2.0, 0.0, 4.0, 0.0, 0.0, 0.0, 0.0, 6.0, 0.0]
    );
    for h in [csr, indptr, data, dense, rsp, idx, doubled, back] {
        ok!(MXNDArrayFree(h));
    }
}

#[test]
fn sparse_arrays_survive_a_file_round_trip() {
    let csr = csr_3x3();
    let (rsp, _) = invoke("cast_storage", &[csr], &[("stype", "row_sparse")]).unwrap();
    let path = std::env::temp_dir().join(format!("mxrt-sparse-{}.params", std::process::id()));
    let cpath = CString::new(path.to_str().unwrap()).unwrap();
    let mut arrays = [csr, rsp];
    let (k0, k1) = (CString::new("c").unwrap(), CString::new("r").unwrap());
    let mut keys = [k0.as_ptr(), k1.as_ptr()];
    ok!(MXNDArraySave(
        cpath.as_ptr(),
        2,
        arrays.as_mut_ptr(),
        keys.as_mut_ptr()
    ));
    let (mut n, mut out, mut nn, mut names) = (0u32, null_mut(), 0u32, null_mut());
    ok!(MXNDArrayLoad(
        cpath.as_ptr(),
        &mut n,
        &mut out,
        &mut nn,
        &mut names
    ));
    assert_eq!((n, nn), (2, 2));
    // SAFETY: MXNDArrayLoad returned `n` handles.
    let loaded = unsafe { std::slice::from_raw_parts(out, n as usize) }.to_vec();
    assert_eq!((stype(loaded[0]), stype(loaded[1])), (2, 1));
    for (h, want) in loaded.iter().zip([csr, rsp]) {
        let (a, _) = invoke("cast_storage", &[*h], &[("stype", "default")]).unwrap();
        let (b, _) = invoke("cast_storage", &[want], &[("stype", "default")]).unwrap();
        assert_eq!(read_f32(a, 9), read_f32(b, 9));
        for x in [a, b, *h] {
            ok!(MXNDArrayFree(x));
        }
    }
    let _ = std::fs::remove_file(path);
    ok!(MXNDArrayFree(csr));
    ok!(MXNDArrayFree(rsp));
}

#[test]
fn misuse_is_refused_with_a_message_and_the_array_kept() {
    let csr = csr_3x3();
    let mut h = null_mut();
    let fails = |rc: i32, needle: &str| {
        assert_eq!(rc, -1, "expected an error naming '{needle}'");
        let e = last_error();
        assert!(e.contains(needle), "'{e}' lacks '{needle}'");
    };
    fails(
        create(0, &[3, 3], 2, [4, 0], &mut h),
        "storage_type 0 is not sparse",
    );
    fails(
        create(2, &[3, 3], 1, [4, 0], &mut h),
        "num_aux is 1, a csr array has 2",
    );
    fails(
        create(2, &[3], 2, [4, 0], &mut h),
        "csr array is 2-dimensional",
    );
    fails(create(2, &[3, 3], 2, [4, 0], null_mut()), "out");
    // SAFETY (all calls below): valid pointers unless NULL on purpose; the library checks.
    unsafe {
        let mut t = 0;
        fails(
            MXNDArrayGetAuxType(csr, 2, &mut t),
            "aux index 2 out of range",
        );
        let mut v = [0f32; 9];
        fails(
            MXNDArraySyncCopyToCPU(csr, v.as_mut_ptr().cast(), 9),
            "holds no dense data",
        );
        let d = dense_f32(&[2], &[1.0, 2.0]);
        fails(
            MXNDArraySyncCopyFromNDArray(d, d, 0),
            "has default (dense) storage",
        );
        let mut s = 0;
        fails(MXNDArrayGetStorageType(null_mut(), &mut s), "handle");
        // a malformed array: the check names the problem, an op on it fails, nothing crashes
        let mut bad = null_mut();
        ok!(create(2, &[3, 3], 2, [4, 2], &mut bad));
        let indptr = dense_i64(&[0, 3, 1, 2]);
        ok!(MXNDArraySyncCopyFromNDArray(bad, indptr, 0));
        fails(MXNDArraySyncCheckFormat(bad, false), "indptr");
        let (out, _) = invoke("cast_storage", &[bad], &[("stype", "default")]).unwrap();
        fails(MXNDArrayWaitToRead(out), "malformed csr array");
        // the well-formed array is untouched by all of it
        let (dense, _) = invoke("cast_storage", &[csr], &[("stype", "default")]).unwrap();
        assert_eq!(
            read_f32(dense, 9),
            [1.0, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0, 3.0, 0.0]
        );
        for x in [csr, d, bad, indptr, out, dense] {
            ok!(MXNDArrayFree(x));
        }
    }
}
