//! The operator registry's C functions: what they list, and misuse refused with a message.

use mxrt::capi::custom_op::MXCustomOpRegister;
use mxrt::capi::data_iter::*;
use mxrt::capi::error::MXGetLastError;
use mxrt::capi::imperative::*;
use mxrt::capi::ndarray::*;
use mxrt::capi::operator::*;
use std::ffi::{CStr, CString, c_char, c_void};
use std::ptr::{null, null_mut};

fn last_error() -> String {
    // SAFETY: MXGetLastError returns a NUL-terminated thread-local string.
    unsafe { CStr::from_ptr(MXGetLastError()) }
        .to_string_lossy()
        .into_owned()
}

fn op(name: &str) -> OpHandle {
    let c = CString::new(name).unwrap();
    let mut h = null_mut();
    // SAFETY: valid C string and out-parameter.
    assert_eq!(
        unsafe { NNGetOpHandle(c.as_ptr(), &mut h) },
        0,
        "{}",
        last_error()
    );
    h
}

/// # Safety
/// `p` is a NUL-terminated string.
unsafe fn text(p: *const c_char) -> String {
    // SAFETY: per the contract.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

#[test]
fn names_handles_and_argument_information() {
    // SAFETY: every pointer passed is a valid out-parameter; the returned arrays have the sizes
    // reported with them.
    unsafe {
        let (mut n, mut names) = (0u32, null_mut());
        assert_eq!(MXListAllOpNames(&mut n, &mut names), 0);
        assert_eq!(n, 1167);
        let listed: Vec<String> = (0..n as usize).map(|i| text(*names.add(i))).collect();
        assert!(listed.iter().any(|s| s == "sgd_update") && listed.iter().any(|s| s == "_plus"));
        // handles are stable, and an alias gives its op's handle
        assert_eq!(op("elemwise_add"), op("elemwise_add"));
        assert_eq!(op("_plus"), op("elemwise_add"));

        let (mut name, mut desc, mut key, mut ret) = (null(), null(), null(), null::<c_char>());
        let (mut nargs, mut an, mut at, mut ad) = (0u32, null_mut(), null_mut(), null_mut());
        assert_eq!(
            MXSymbolGetAtomicSymbolInfo(
                op("Concat"),
                &mut name,
                &mut desc,
                &mut nargs,
                &mut an,
                &mut at,
                &mut ad,
                &mut key,
                &mut ret
            ),
            0
        );
        assert_eq!(text(name), "Concat");
        assert_eq!(text(key), "num_args");
        assert!(ret.is_null(), "MXNet reports no return type");
        assert!(!text(desc).is_empty());
        let args: Vec<(String, String)> = (0..nargs as usize)
            .map(|i| (text(*an.add(i)), text(*at.add(i))))
            .collect();
        assert_eq!(args[0], ("data".into(), "NDArray-or-Symbol[]".into()));
        assert!(
            args.iter()
                .any(|(n, t)| n == "dim" && t.starts_with("int, optional, default='1'"))
        );
        assert!((0..nargs as usize).all(|i| !(*ad.add(i)).is_null()));

        let (mut ni, mut iters) = (0u32, null_mut());
        assert_eq!(MXListDataIters(&mut ni, &mut iters), 0);
        let iter_names: Vec<String> = (0..ni as usize)
            .map(|i| {
                let mut nm = null();
                let rc = MXDataIterGetIterInfo(
                    *iters.add(i),
                    &mut nm,
                    null_mut(),
                    null_mut(),
                    null_mut(),
                    null_mut(),
                    null_mut(),
                );
                assert_eq!(rc, 0);
                text(nm)
            })
            .collect();
        for want in ["CSVIter", "MNISTIter", "ImageRecordIter", "LibSVMIter"] {
            assert!(
                iter_names.iter().any(|n| n == want),
                "{want} in {iter_names:?}"
            );
        }
        let (mut ng, mut globals) = (-1, null_mut());
        assert_eq!(MXNetFuncListGlobalNames(&mut ng, &mut globals), 0);
        assert_eq!(ng, 0);
    }
}

#[test]
fn misuse_is_refused_with_a_message() {
    let mut h: *mut c_void = null_mut();
    let bogus = 0x1234usize as *mut c_void;
    let unknown = CString::new("no_such_op").unwrap();
    // SAFETY: every pointer is valid, NULL on purpose, or a bogus handle the functions must refuse.
    unsafe {
        assert_eq!(NNGetOpHandle(unknown.as_ptr(), &mut h), -1);
        assert!(
            last_error().contains("no operator named 'no_such_op'"),
            "{}",
            last_error()
        );
        assert_eq!(NNGetOpHandle(null(), &mut h), -1);
        assert!(last_error().contains("op_name is NULL"), "{}", last_error());
        assert_eq!(MXListAllOpNames(null_mut(), null_mut()), -1);
        assert!(
            last_error().starts_with("MXListAllOpNames: out_size"),
            "{}",
            last_error()
        );

        let mut name = null();
        let info = |h: *mut c_void, name: &mut *const c_char| {
            MXSymbolGetAtomicSymbolInfo(
                h,
                name,
                null_mut(),
                null_mut(),
                null_mut(),
                null_mut(),
                null_mut(),
                null_mut(),
                null_mut(),
            )
        };
        assert_eq!(info(bogus, &mut name), -1);
        assert!(
            last_error().contains("is not an operator handle"),
            "{}",
            last_error()
        );
        assert_eq!(info(null_mut(), &mut name), -1);
        assert!(last_error().contains("creator is NULL"), "{}", last_error());

        let (mut n_out, mut outs) = (0, null_mut());
        let (mut stypes, no_params) = (null(), null_mut());
        let invoke = |h,
                      n_in: i32,
                      n_params: i32,
                      n_out: &mut i32,
                      outs: &mut *mut *mut c_void,
                      stypes: &mut *const i32| {
            MXImperativeInvokeEx(
                h,
                n_in,
                null_mut(),
                n_out,
                outs,
                n_params,
                no_params,
                no_params,
                stypes,
            )
        };
        assert_eq!(
            invoke(op("_contrib_DeformableConvolution"), 0, 0, &mut n_out, &mut outs, &mut stypes),
            -1
        );
        assert_eq!(
            last_error(),
            "MXImperativeInvokeEx: operator _contrib_DeformableConvolution is not implemented by mxrt"
        );
        assert_eq!(
            invoke(op("_zeros"), -1, 0, &mut n_out, &mut outs, &mut stypes),
            -1
        );
        assert!(last_error().contains("num_inputs"), "{}", last_error());
        assert_eq!(
            invoke(op("_zeros"), 0, 2, &mut n_out, &mut outs, &mut stypes),
            -1
        );
        assert!(
            last_error().contains("param_keys is NULL"),
            "{}",
            last_error()
        );
        assert_eq!(invoke(bogus, 0, 0, &mut n_out, &mut outs, &mut stypes), -1);
        assert!(
            last_error().contains("is not an operator handle"),
            "{}",
            last_error()
        );

        let name = CString::new("np.zeros").unwrap();
        assert_eq!(MXNetFuncGetGlobal(name.as_ptr(), &mut h), -1);
        assert!(
            last_error().contains("no global function 'np.zeros'"),
            "{}",
            last_error()
        );
        assert_eq!(MXCustomOpRegister(name.as_ptr(), None), -1);
        assert!(last_error().contains("creator is NULL"), "{}", last_error());
    }
}

/// A new float32 array holding `values`.
fn array(shape: &[u32], values: &[f32]) -> *mut c_void {
    let mut h = null_mut();
    // SAFETY: valid shape and out-parameter; the copy reads `values.len()` floats.
    unsafe {
        assert_eq!(
            MXNDArrayCreateEx(shape.as_ptr(), shape.len() as u32, 1, 0, 0, 0, &mut h),
            0,
            "{}",
            last_error()
        );
        assert_eq!(
            MXNDArraySyncCopyFromCPU(h, values.as_ptr().cast(), values.len()),
            0,
            "{}",
            last_error()
        );
    }
    h
}

fn read(h: *mut c_void, n: usize) -> Vec<f32> {
    let mut v = vec![0f32; n];
    // SAFETY: `h` is a live float32 array of `n` elements.
    assert_eq!(
        unsafe { MXNDArraySyncCopyToCPU(h, v.as_mut_ptr().cast(), n) },
        0,
        "{}",
        last_error()
    );
    v
}

#[test]
fn invoke_runs_operators_into_new_or_given_outputs_and_refuses_misuse() {
    let x = array(&[2, 2], &[1.0, -2.0, 3.0, -4.0]);
    let y = array(&[2], &[10.0, 20.0]);
    let key = |s: &str| CString::new(s).unwrap();
    // SAFETY: every pointer is valid for the call; returned handle arrays hold `n_out` handles.
    unsafe {
        // library-allocated output, parameters as strings
        let (k, v) = (key("scalar"), key("0.5"));
        let (mut keys, mut vals) = ([k.as_ptr()], [v.as_ptr()]);
        let mut inputs = [x];
        let (mut n_out, mut outs, mut stypes) = (0, null_mut(), null());
        let rc = MXImperativeInvokeEx(
            op("_plus_scalar"),
            1,
            inputs.as_mut_ptr(),
            &mut n_out,
            &mut outs,
            1,
            keys.as_mut_ptr(),
            vals.as_mut_ptr(),
            &mut stypes,
        );
        assert_eq!(rc, 0, "{}", last_error());
        assert_eq!(n_out, 1);
        assert_eq!(*stypes, 0, "dense storage");
        let z = *outs;
        assert_eq!(read(z, 4), [1.5, -1.5, 3.5, -3.5]);

        // broadcasting into a given output (the first input itself: x += y)
        let mut bin = [x, y];
        let mut given = [x];
        let mut given_ptr = given.as_mut_ptr();
        let mut n_given = 1;
        let rc = MXImperativeInvoke(
            op("broadcast_add"),
            2,
            bin.as_mut_ptr(),
            &mut n_given,
            &mut given_ptr,
            0,
            null_mut(),
            null_mut(),
        );
        assert_eq!(rc, 0, "{}", last_error());
        assert_eq!(read(x, 4), [11.0, 18.0, 13.0, 16.0]);

        // misuse: unknown and malformed parameters, wrong outputs, freed handles
        let (bk, bv) = (key("scalr"), key("1"));
        let (mut keys, mut vals) = ([bk.as_ptr()], [bv.as_ptr()]);
        n_out = 0;
        assert_eq!(
            MXImperativeInvokeEx(
                op("_plus_scalar"),
                1,
                inputs.as_mut_ptr(),
                &mut n_out,
                &mut outs,
                1,
                keys.as_mut_ptr(),
                vals.as_mut_ptr(),
                &mut stypes
            ),
            -1
        );
        assert!(
            last_error().contains("operator _plus_scalar: unknown parameter 'scalr'"),
            "{}",
            last_error()
        );
        let (sk, sv) = (key("scalar"), key("one"));
        let (mut keys, mut vals) = ([sk.as_ptr()], [sv.as_ptr()]);
        assert_eq!(
            MXImperativeInvokeEx(
                op("_plus_scalar"),
                1,
                inputs.as_mut_ptr(),
                &mut n_out,
                &mut outs,
                1,
                keys.as_mut_ptr(),
                vals.as_mut_ptr(),
                &mut stypes
            ),
            -1
        );
        assert!(
            last_error().contains("parameter 'scalar' must be a number, got 'one'"),
            "{}",
            last_error()
        );
        let mut wrong = [y];
        let mut wrong_ptr = wrong.as_mut_ptr();
        n_given = 1;
        assert_eq!(
            MXImperativeInvoke(
                op("negative"),
                1,
                inputs.as_mut_ptr(),
                &mut n_given,
                &mut wrong_ptr,
                0,
                null_mut(),
                null_mut()
            ),
            -1
        );
        assert!(
            last_error().contains("output 0 has shape [2], the result has shape [2, 2]"),
            "{}",
            last_error()
        );
        assert_eq!(
            MXImperativeInvoke(
                op("broadcast_add"),
                1,
                inputs.as_mut_ptr(),
                &mut n_out,
                &mut outs,
                0,
                null_mut(),
                null_mut()
            ),
            -1
        );
        assert!(
            last_error().contains("operator broadcast_add takes 2 input(s), 1 given"),
            "{}",
            last_error()
        );
        assert_eq!(MXNDArrayFree(z), 0);
        let mut freed = [z];
        n_out = 0;
        assert_eq!(
            MXImperativeInvoke(
                op("negative"),
                1,
                freed.as_mut_ptr(),
                &mut n_out,
                &mut outs,
                0,
                null_mut(),
                null_mut()
            ),
            -1
        );
        assert!(last_error().contains("inputs[0]"), "{}", last_error());
        // the data held before the failures is intact
        assert_eq!(read(x, 4), [11.0, 18.0, 13.0, 16.0]);
        assert_eq!(MXNDArrayFree(x), 0);
        assert_eq!(MXNDArrayFree(y), 0);
    }
}
