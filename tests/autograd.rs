//! Autograd through the C API: recording per thread, backward into gradient buffers with each
//! request, the variables form, retain_graph, create_graph, gradient state, detach, and misuse
//! refused with a message that leaves the thread able to record again.

#[macro_use]
mod common;

use common::last_error;
use mxrt::capi::autograd::*;
use mxrt::capi::imperative::*;
use mxrt::capi::ndarray::*;
use mxrt::capi::operator::*;
use std::ffi::{CString, c_int, c_void};
use std::ptr::{null, null_mut};

type H = *mut c_void;

fn op(name: &str) -> OpHandle {
    let c = CString::new(name).unwrap();
    let mut h = null_mut();
    ok!(NNGetOpHandle(c.as_ptr(), &mut h));
    h
}

fn array(shape: &[u32], values: &[f32]) -> H {
    let mut h = null_mut();
    ok!(MXNDArrayCreateEx(shape.as_ptr(), shape.len() as u32, 1, 0, 0, 0, &mut h));
    ok!(MXNDArraySyncCopyFromCPU(h, values.as_ptr().cast(), values.len()));
    h
}

fn read(h: H) -> Vec<f32> {
    let mut ndim = 0;
    let mut dims = null();
    ok!(MXNDArrayGetShape(h, &mut ndim, &mut dims));
    // SAFETY: `dims` holds `ndim` dimensions of a live array.
    let n: u32 = unsafe { std::slice::from_raw_parts(dims, ndim as usize) }.iter().product();
    let mut v = vec![0f32; n as usize];
    ok!(MXNDArraySyncCopyToCPU(h, v.as_mut_ptr().cast(), v.len()));
    v
}

/// `name(inputs; params)`, its first output.
fn call(name: &str, inputs: &[H], params: &[(&str, &str)]) -> Result<H, String> {
    let keys: Vec<CString> = params.iter().map(|(k, _)| CString::new(*k).unwrap()).collect();
    let vals: Vec<CString> = params.iter().map(|(_, v)| CString::new(*v).unwrap()).collect();
    let mut kp: Vec<_> = keys.iter().map(|k| k.as_ptr()).collect();
    let mut vp: Vec<_> = vals.iter().map(|v| v.as_ptr()).collect();
    let mut ins = inputs.to_vec();
    let (mut n_out, mut outs, mut stypes) = (0, null_mut(), null());
    // SAFETY: valid arrays of the given lengths and out-parameters.
    let rc = unsafe {
        MXImperativeInvokeEx(
            op(name),
            ins.len() as c_int,
            ins.as_mut_ptr(),
            &mut n_out,
            &mut outs,
            kp.len() as c_int,
            kp.as_mut_ptr(),
            vp.as_mut_ptr(),
            &mut stypes,
        )
    };
    if rc != 0 {
        return Err(last_error());
    }
    // SAFETY: one output was returned.
    Ok(unsafe { *outs })
}

fn record(on: bool) -> bool {
    let mut prev = 0;
    ok!(MXAutogradSetIsRecording(c_int::from(on), &mut prev));
    prev != 0
}

fn mark(vars: &[H], reqs: &[u32]) -> Vec<H> {
    let grads: Vec<H> = vars.iter().map(|&v| call("zeros_like", &[v], &[]).unwrap()).collect();
    let (mut v, mut r, mut g) = (vars.to_vec(), reqs.to_vec(), grads.clone());
    ok!(MXAutogradMarkVariables(v.len() as u32, v.as_mut_ptr(), r.as_mut_ptr(), g.as_mut_ptr()));
    grads
}

fn backward(heads: &[H], retain: bool) -> Result<(), String> {
    let mut h = heads.to_vec();
    // SAFETY: `h` holds the heads; NULL head gradients mean ones.
    let rc = unsafe {
        MXAutogradBackwardEx(
            h.len() as u32,
            h.as_mut_ptr(),
            null_mut(),
            0,
            null_mut(),
            c_int::from(retain),
            0,
            1,
            null_mut(),
            null_mut(),
        )
    };
    if rc == 0 { Ok(()) } else { Err(last_error()) }
}

fn grad_of(x: H) -> H {
    let mut g = null_mut();
    ok!(MXNDArrayGetGrad(x, &mut g));
    g
}

#[test]
fn backward_writes_adds_and_skips_by_request() {
    let (x, w, c) = (array(&[3], &[1.0, 2.0, 3.0]), array(&[3], &[0.5, -1.0, 2.0]), array(&[3], &[1.0; 3]));
    mark(&[x, w], &[1, 3]);
    assert!(!record(true));
    // y = x * w + c (c is a constant: no entry, no gradient)
    let xw = call("elemwise_mul", &[x, w], &[]).unwrap();
    let y = call("elemwise_add", &[xw, c], &[]).unwrap();
    assert!(record(false));
    backward(&[y], true).unwrap();
    assert_eq!(read(grad_of(x)), [0.5, -1.0, 2.0]);
    assert_eq!(read(grad_of(w)), [1.0, 2.0, 3.0]);
    // retained: a second backward writes x's gradient again and adds to w's
    backward(&[y], false).unwrap();
    assert_eq!(read(grad_of(x)), [0.5, -1.0, 2.0]);
    assert_eq!(read(grad_of(w)), [2.0, 4.0, 6.0]);
    // the graph is freed now: a third is refused with MXNet's message
    let e = backward(&[y], false).unwrap_err();
    assert!(e.contains("Cannot differentiate node because it is not in a computational graph"), "{e}");
    // a constant has no gradient buffer
    assert!(grad_of(c).is_null());
    let mut state = 0;
    ok!(MXNDArrayGetGradState(x, &mut state));
    assert_eq!(state, 1, "the backward refreshed x's gradient");
    ok!(MXNDArraySetGradState(x, 0));
    ok!(MXNDArrayGetGradState(x, &mut state));
    assert_eq!(state, 0);
    // SAFETY: c is a live array that is not a variable.
    assert_eq!(unsafe { MXNDArraySetGradState(c, 1) }, -1);
    assert!(last_error().contains("has not been marked as a variable"), "{}", last_error());
}

#[test]
fn unused_variables_keep_a_stale_gradient_state() {
    let (a, b) = (array(&[2], &[1.0, 2.0]), array(&[2], &[3.0, 4.0]));
    mark(&[a, b], &[1, 1]);
    record(true);
    let y = call("square", &[a], &[]).unwrap();
    record(false);
    backward(&[y], false).unwrap();
    let (mut sa, mut sb) = (0, 0);
    ok!(MXNDArrayGetGradState(a, &mut sa));
    ok!(MXNDArrayGetGradState(b, &mut sb));
    assert_eq!((sa, sb), (1, 0), "only variables a backward reached are fresh");
    assert_eq!(read(grad_of(a)), [2.0, 4.0]);
}

#[test]
fn the_variables_form_returns_new_arrays_and_create_graph_differentiates_again() {
    let x = array(&[2], &[1.0, 2.0]);
    let gbuf = mark(&[x], &[1]);
    record(true);
    let y = call("_power_scalar", &[x], &[("scalar", "3")]).unwrap();
    let (mut heads, mut vars) = ([y], [x]);
    let (mut grads, mut stypes): (*mut H, *mut c_int) = (null_mut(), null_mut());
    ok!(MXAutogradBackwardEx(
        1,
        heads.as_mut_ptr(),
        null_mut(),
        1,
        vars.as_mut_ptr(),
        1,
        1,
        1,
        &mut grads,
        &mut stypes
    ));
    // SAFETY: one gradient handle and storage type were returned.
    let (dx, st) = unsafe { (*grads, *stypes) };
    assert_eq!(st, 0);
    assert_eq!(read(dx), [3.0, 12.0]);
    assert_eq!(read(gbuf[0]), [0.0, 0.0], "the variables form leaves the buffer alone");
    // d/dx of sum(3x^2) = 6x
    let s = call("sum", &[dx], &[]).unwrap();
    record(false);
    backward(&[s], false).unwrap();
    assert_eq!(read(grad_of(x)), [6.0, 12.0]);
}

#[test]
fn misuse_is_refused_and_recording_goes_on() {
    let x = array(&[2], &[1.0, 2.0]);
    let not_recorded = array(&[2], &[1.0, 2.0]);
    // a head that is in no graph
    let e = backward(&[not_recorded], false).unwrap_err();
    assert!(e.starts_with("MXAutogradBackwardEx: Cannot differentiate node"), "{e}");
    mark(&[x], &[1]);
    record(true);
    let y = call("exp", &[x], &[]).unwrap();
    // writing into an array in a graph while recording: refused before anything runs
    let mut ins = [x];
    let mut outs = [y];
    let mut outp = outs.as_mut_ptr();
    let mut n = 1;
    // SAFETY: valid arrays and out-parameters.
    let rc = unsafe {
        MXImperativeInvoke(op("exp"), 1, ins.as_mut_ptr(), &mut n, &mut outp, 0, null_mut(), null_mut())
    };
    assert_eq!(rc, -1);
    assert!(last_error().contains("Assigning to NDArrays that are already in a computational graph"), "{}", last_error());
    record(false);
    // head gradients of the wrong shape
    let bad = array(&[3], &[1.0; 3]);
    let (mut h, mut og) = ([y], [bad]);
    // SAFETY: one head and one head gradient.
    let rc = unsafe {
        MXAutogradBackwardEx(1, h.as_mut_ptr(), og.as_mut_ptr(), 0, null_mut(), 1, 0, 1, null_mut(), null_mut())
    };
    assert_eq!(rc, -1);
    assert!(last_error().contains("head gradient 0 has shape [3], its head [2]"), "{}", last_error());
    // a variable that is not marked, in the variables form
    let (mut v, mut grads, mut stypes) = ([not_recorded], null_mut(), null_mut());
    // SAFETY: valid arrays and out-parameters.
    let rc = unsafe {
        MXAutogradBackwardEx(1, h.as_mut_ptr(), null_mut(), 1, v.as_mut_ptr(), 1, 0, 1, &mut grads, &mut stypes)
    };
    assert_eq!(rc, -1);
    assert!(last_error().contains("1-th variable because it does not require gradient"), "{}", last_error());
    // a bad request code, NULL arrays
    let (mut vs, mut rs, mut gs) = ([x], [7u32], [x]);
    // SAFETY: one variable, request and gradient.
    assert_eq!(unsafe { MXAutogradMarkVariables(1, vs.as_mut_ptr(), rs.as_mut_ptr(), gs.as_mut_ptr()) }, -1);
    assert!(last_error().contains("reqs_array[0] = 7"), "{}", last_error());
    // SAFETY: NULL arrays with a non-zero count are refused.
    assert_eq!(unsafe { MXAutogradMarkVariables(1, null_mut(), null_mut(), null_mut()) }, -1);
    assert!(last_error().contains("var_handles"), "{}", last_error());
    // the graph is intact: the backward works
    backward(&[y], false).unwrap();
    let e = [1f32, 2.0].map(f32::exp);
    let g = read(grad_of(x));
    assert!((g[0] - e[0]).abs() < 1e-5 && (g[1] - e[1]).abs() < 1e-5, "{g:?}");
}

#[test]
fn threads_record_and_differentiate_independently() {
    let workers: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                let v = t as f32 + 1.0;
                let x = array(&[4], &[v; 4]);
                mark(&[x], &[1]);
                for _ in 0..50 {
                    record(true);
                    let y = call("_mul_scalar", &[x], &[("scalar", "3")]).unwrap();
                    let z = call("elemwise_mul", &[y, x], &[]).unwrap();
                    record(false);
                    backward(&[z], false).unwrap();
                    // d(3x^2)/dx = 6x
                    assert_eq!(read(grad_of(x)), [6.0 * v; 4]);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    // another thread's recording never reached this one
    let mut on = true;
    ok!(MXAutogradIsRecording(&mut on));
    assert!(!on);
}

#[test]
fn detach_and_views_made_while_recording() {
    let x = array(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    mark(&[x], &[1]);
    record(true);
    let mut row = null_mut();
    ok!(MXNDArrayAt(x, 1, &mut row));
    let y = call("square", &[row], &[]).unwrap();
    let mut d = null_mut();
    ok!(MXNDArrayDetach(x, &mut d));
    let z = call("elemwise_mul", &[d, d], &[]).unwrap();
    record(false);
    backward(&[y], false).unwrap();
    assert_eq!(read(grad_of(x)), [0.0, 0.0, 6.0, 8.0], "the row's gradient, through the view");
    assert!(grad_of(d).is_null(), "a detached array is no variable");
    let e = backward(&[z], false).unwrap_err();
    assert!(e.contains("not in a computational graph"), "{e}");
}
