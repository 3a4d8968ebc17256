//! Kernels run through the imperative runner on arrays of a few elements, with their values
//! checked: the pointer loops of every dtype family (f32, f64, f16, integers through f64),
//! outputs that are exactly an input (`out=x`, `x += y`), inputs an op mutates (optimizer
//! states, BatchNorm's gamma and moving statistics), outputs staged through scratch memory, and
//! sparse arrays run through their dense copies. Small enough for Miri (`make miri`), which
//! checks these unsafe paths for undefined behaviour; the Python suite compares the same
//! operators with MXNet at full size.

use super::imperative::{Invoke, invoke};
use super::kernel::Element;
use crate::context::Context;
use crate::dtype::DType;
use crate::ndarray::NDArray;
use crate::ndarray::format::StorageType;
use crate::ndarray::sparse::SparseValue;
use std::slice::from_ref;

/// Little-endian bytes of `v` as elements of `dtype`.
fn encode(v: &[f64], dtype: DType) -> Vec<u8> {
    crate::with_element!(dtype, T => {
        let mut out = Vec::with_capacity(v.len() * dtype.size());
        for &x in v {
            let e = T::from_f64(x);
            // SAFETY: every `Element` is plain old data of `size_of::<T>()` initialised bytes.
            let b = unsafe {
                std::slice::from_raw_parts((&e as *const T).cast::<u8>(), std::mem::size_of::<T>())
            };
            out.extend_from_slice(b);
        }
        out
    })
}

/// Elements of `dtype` in `bytes`, as f64.
fn decode(bytes: &[u8], dtype: DType) -> Vec<f64> {
    crate::with_element!(dtype, T => bytes
        .chunks_exact(std::mem::size_of::<T>())
        // SAFETY: each chunk holds the bytes of one `T` (plain old data; unaligned read).
        .map(|c| unsafe { (c.as_ptr() as *const T).read_unaligned() }.to_f64())
        .collect())
}

fn arr(shape: &[i64], v: &[f64], dtype: DType) -> NDArray {
    let a = NDArray::new(shape, Context::cpu(0), dtype, false).unwrap();
    a.sync_copy_from_bytes(&encode(v, dtype)).unwrap();
    a
}

fn f32s(shape: &[i64], v: &[f64]) -> NDArray {
    arr(shape, v, DType::F32)
}

fn vals(a: &NDArray) -> Vec<f64> {
    match a.stype() {
        StorageType::Default => decode(&a.to_bytes().unwrap(), a.dtype()),
        _ => {
            let dense = a.sparse_value().unwrap();
            decode(&dense.dense_bytes(a.shape(), a.dtype()).unwrap(), a.dtype())
        }
    }
}

fn rsp(shape: &[i64], v: &[f64]) -> NDArray {
    let value = SparseValue::from_dense(
        StorageType::RowSparse,
        shape,
        DType::F32,
        &encode(v, DType::F32),
    )
    .unwrap();
    NDArray::from_sparse_value(shape, Context::cpu(0), DType::F32, &[DType::I64], value).unwrap()
}

/// Runs `op` and returns its outputs: new arrays, or `out` when it names any (`out=`).
fn run(
    op: &'static str,
    inputs: &[NDArray],
    params: &[(&str, &str)],
    out: &[NDArray],
) -> Vec<NDArray> {
    invoke(Invoke {
        op,
        called_as: op,
        inputs,
        params: params.to_vec(),
        outputs: (!out.is_empty()).then(|| out.to_vec()),
        state: None,
    })
    .unwrap_or_else(|e| panic!("{op}: {e}"))
}

fn one(op: &'static str, inputs: &[NDArray], params: &[(&str, &str)]) -> Vec<f64> {
    vals(&run(op, inputs, params, &[])[0])
}

fn close(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= tol, "{got:?} vs {want:?}");
    }
}

const FLOATS: [DType; 3] = [DType::F32, DType::F64, DType::F16];

#[test]
fn unary_and_scalar_maps_in_every_dtype_family_in_place() {
    for dtype in [DType::F32, DType::F64, DType::F16, DType::I32] {
        let x = arr(&[4], &[1.0, 4.0, 9.0, 16.0], dtype);
        assert_eq!(
            one("sqrt", from_ref(&x), &[]),
            [1.0, 2.0, 3.0, 4.0],
            "{dtype:?}"
        );
        let y = arr(&[4], &[-1.0, 2.0, -3.0, 4.0], dtype);
        run("abs", from_ref(&y), &[], from_ref(&y));
        assert_eq!(vals(&y), [1.0, 2.0, 3.0, 4.0], "{dtype:?}");
        // x += 1 and x = 10 - x, in place
        run(
            "_plus_scalar",
            from_ref(&x),
            &[("scalar", "1")],
            from_ref(&x),
        );
        assert_eq!(vals(&x), [2.0, 5.0, 10.0, 17.0], "{dtype:?}");
        run(
            "_rminus_scalar",
            from_ref(&x),
            &[("scalar", "10")],
            from_ref(&x),
        );
        assert_eq!(vals(&x), [8.0, 5.0, 0.0, -7.0], "{dtype:?}");
    }
}

#[test]
fn binary_ops_write_into_either_input() {
    for dtype in FLOATS {
        let a = arr(&[4], &[1.0, 2.0, 3.0, 4.0], dtype);
        let b = arr(&[4], &[10.0, 20.0, 30.0, 40.0], dtype);
        // a += b
        run("elemwise_add", &[a.clone(), b.clone()], &[], from_ref(&a));
        assert_eq!(vals(&a), [11.0, 22.0, 33.0, 44.0], "{dtype:?}");
        // b = a - b
        run("elemwise_sub", &[a.clone(), b.clone()], &[], from_ref(&b));
        assert_eq!(vals(&b), [1.0, 2.0, 3.0, 4.0], "{dtype:?}");
        // a = a * a, the same array on both sides
        run("elemwise_mul", &[a.clone(), a.clone()], &[], from_ref(&a));
        assert_eq!(vals(&a), [121.0, 484.0, 1089.0, 1936.0], "{dtype:?}");
    }
    // integers: wrapping arithmetic in the type, division through f64
    let (a, b) = (
        arr(&[2], &[200.0, 100.0], DType::U8),
        arr(&[2], &[100.0, 5.0], DType::U8),
    );
    assert_eq!(one("elemwise_add", &[a, b], &[]), [44.0, 105.0]);
    let (a, b) = (
        arr(&[2], &[8.0, -6.0], DType::I32),
        arr(&[2], &[2.0, 3.0], DType::I32),
    );
    assert_eq!(one("elemwise_div", &[a, b], &[]), [4.0, -2.0]);
    let m = f32s(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let row = f32s(&[1, 2], &[10.0, 20.0]);
    assert_eq!(
        one("broadcast_add", &[m, row], &[]),
        [11.0, 22.0, 13.0, 24.0]
    );
}

#[test]
fn fills_and_casts() {
    let full = one(
        "_full",
        &[],
        &[("shape", "(2, 3)"), ("value", "2.5"), ("dtype", "float64")],
    );
    assert_eq!(full, [2.5; 6]);
    let x = f32s(&[2], &[1.5, -2.0]);
    for to in ["float16", "float32", "int32"] {
        let want = if to == "int32" {
            [1.0, -2.0]
        } else {
            [1.5, -2.0]
        };
        assert_eq!(one("Cast", from_ref(&x), &[("dtype", to)]), want, "{to}");
    }
    // a cast to the same dtype into the input itself leaves it as it is
    run("Cast", from_ref(&x), &[("dtype", "float32")], from_ref(&x));
    assert_eq!(vals(&x), [1.5, -2.0]);
}

#[test]
fn slice_assignment_in_place_and_into_a_new_array() {
    let lhs = f32s(&[3, 3], &[0.0; 9]);
    let rhs = f32s(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let region = [("begin", "(0, 1)"), ("end", "(2, 3)")];
    let copy = one("_slice_assign", &[lhs.clone(), rhs.clone()], &region);
    let want = [0.0, 1.0, 2.0, 0.0, 3.0, 4.0, 0.0, 0.0, 0.0];
    assert_eq!(copy, want);
    assert_eq!(vals(&lhs), [0.0; 9], "lhs is only read without out=");
    run(
        "_slice_assign",
        &[lhs.clone(), rhs],
        &region,
        from_ref(&lhs),
    );
    assert_eq!(vals(&lhs), want);
    let last_row = [("begin", "(2,)"), ("end", "(3,)"), ("scalar", "7")];
    run(
        "_slice_assign_scalar",
        from_ref(&lhs),
        &last_row,
        from_ref(&lhs),
    );
    assert_eq!(vals(&lhs)[6..], [7.0; 3]);
    assert_eq!(vals(&lhs)[..6], want[..6]);
}

#[test]
fn gathers_scatters_and_their_gradients() {
    let a = f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let idx = f32s(&[2], &[2.0, 0.0]);
    let axis1 = [("axis", "1")];
    assert_eq!(
        one("take", &[a.clone(), idx.clone()], &axis1),
        [3.0, 1.0, 6.0, 4.0]
    );
    // out-of-range indices clip; wrap wraps
    let far = f32s(&[2], &[5.0, -1.0]);
    assert_eq!(
        one("take", &[a.clone(), far.clone()], &[]),
        [4.0, 5.0, 6.0, 1.0, 2.0, 3.0]
    );
    let wrap = [("mode", "wrap")];
    assert_eq!(
        one("take", &[a.clone(), far], &wrap),
        [4.0, 5.0, 6.0, 4.0, 5.0, 6.0]
    );
    // take's gradient sums repeated indices into their slice
    let dy = f32s(&[2, 3], &[1.0, 1.0, 1.0, 1.0, 1.0, 1.0]);
    let twice = f32s(&[3], &[1.0, 1.0, 0.0]);
    let g = one("_mxrt_take_grad", &[dy, twice, a.clone()], &axis1);
    assert_eq!(g, [1.0, 2.0, 0.0, 1.0, 2.0, 0.0]);

    let which = f32s(&[2], &[1.0, 2.0]);
    assert_eq!(one("pick", &[a.clone(), which.clone()], &axis1), [2.0, 6.0]);
    let g = one(
        "_mxrt_pick_grad",
        &[f32s(&[2], &[7.0, 8.0]), which, a.clone()],
        &axis1,
    );
    assert_eq!(g, [0.0, 7.0, 0.0, 0.0, 0.0, 8.0]);

    // gather_nd: index tuples (1, 0) and (0, 2), axis-major
    let nd = f32s(&[2, 2], &[1.0, 0.0, 0.0, 2.0]);
    assert_eq!(one("gather_nd", &[a.clone(), nd.clone()], &[]), [4.0, 3.0]);
    let g = one(
        "_mxrt_gather_nd_grad",
        &[f32s(&[2], &[5.0, 6.0]), nd.clone(), a.clone()],
        &[],
    );
    assert_eq!(g, [0.0, 0.0, 6.0, 5.0, 0.0, 0.0]);
    let shape = [("shape", "(2, 3)")];
    let set = one(
        "_scatter_set_nd",
        &[a.clone(), f32s(&[2], &[-1.0, -2.0]), nd],
        &shape,
    );
    assert_eq!(set, [1.0, 2.0, -2.0, -1.0, 5.0, 6.0]);
    let bad = f32s(&[2, 1], &[2.0, 0.0]);
    let err = invoke(Invoke {
        op: "gather_nd",
        called_as: "gather_nd",
        inputs: &[a, bad],
        params: vec![],
        outputs: None,
        state: None,
    })
    .and_then(|o| o[0].to_bytes())
    .unwrap_err();
    assert!(
        err.to_string().contains("out of bounds for axis 0"),
        "{err}"
    );
}

#[test]
fn activations_and_their_gradients_in_place() {
    for dtype in FLOATS {
        let x = arr(&[4], &[-2.0, -1.0, 0.5, 2.0], dtype);
        assert_eq!(
            one("Activation", from_ref(&x), &[("act_type", "relu")]),
            [0.0, 0.0, 0.5, 2.0]
        );
        let leaky = [("act_type", "leaky"), ("slope", "0.5")];
        assert_eq!(
            one("LeakyReLU", from_ref(&x), &leaky),
            [-1.0, -0.5, 0.5, 2.0]
        );
        // dy = dy * relu'(y), written over dy
        let dy = arr(&[4], &[3.0; 4], dtype);
        let y = arr(&[4], &[0.0, 0.0, 0.5, 2.0], dtype);
        run(
            "_mxrt_activation_grad",
            &[dy.clone(), y],
            &[("act_type", "relu")],
            from_ref(&dy),
        );
        assert_eq!(vals(&dy), [0.0, 0.0, 3.0, 3.0], "{dtype:?}");
        // rrelu's gradient reads the forward's slopes: a third input
        let g = arr(&[4], &[4.0; 4], dtype);
        run(
            "_mxrt_leaky_grad",
            &[g.clone(), x.clone(), arr(&[4], &[0.25; 4], dtype)],
            &[("act_type", "rrelu")],
            from_ref(&g),
        );
        assert_eq!(vals(&g), [1.0, 1.0, 4.0, 4.0], "{dtype:?}");
        let clip = [("a_min", "-1"), ("a_max", "1")];
        assert_eq!(
            one("_mxrt_clip_grad", &[g, x], &clip),
            [0.0, 1.0, 4.0, 0.0],
            "{dtype:?}"
        );
    }
}

#[test]
fn softmax_and_its_gradient_staged_over_an_input() {
    let x = f32s(&[2, 2], &[0.0, 3f64.ln(), 1.0, 1.0]);
    close(&one("softmax", &[x], &[]), &[0.25, 0.75, 0.5, 0.5], 1e-6);
    let y = f32s(&[2, 2], &[0.25, 0.75, 0.5, 0.5]);
    let dy = f32s(&[2, 2], &[1.0, 0.0, 2.0, 2.0]);
    // not elementwise: an output that is an input goes through scratch memory
    run("_mxrt_softmax_grad", &[dy.clone(), y], &[], from_ref(&dy));
    close(&vals(&dy), &[0.1875, -0.1875, 0.0, 0.0], 1e-6);
}

#[test]
fn batch_norm_writes_gamma_and_folds_batch_statistics() {
    let x = f32s(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let gamma = f32s(&[2], &[5.0, 5.0]);
    let beta = f32s(&[2], &[0.0, 1.0]);
    let (mean, var) = (f32s(&[2], &[1.0, 2.0]), f32s(&[2], &[3.0, 0.0]));
    // outside training: the moving statistics; fix_gamma sets gamma to 1
    let eps = ("eps", "1");
    let y = one(
        "BatchNorm",
        &[x.clone(), gamma.clone(), beta, mean.clone(), var.clone()],
        &[eps],
    );
    assert_eq!(y, [0.0, 1.0, 1.0, 3.0]);
    assert_eq!(vals(&gamma), [1.0, 1.0]);
    // the gradient with batch statistics updates the moving ones in place
    let dy = f32s(&[2, 2], &[1.0; 4]);
    let p = [eps, ("momentum", "0.5"), ("batch_stats", "True")];
    let outs = run(
        "_mxrt_batch_norm_grad",
        &[dy, x, gamma, mean.clone(), var.clone()],
        &p,
        &[],
    );
    assert_eq!(vals(&mean), [1.5, 2.5]);
    assert_eq!(vals(&var), [2.0, 0.5]);
    assert_eq!(
        vals(&outs[2]),
        [2.0, 2.0],
        "beta's gradient sums dy per channel"
    );
    assert!(
        vals(&outs[0]).iter().all(|v| v.abs() < 1e-6),
        "a constant dy has no data gradient"
    );
}

#[test]
fn optimizer_updates_write_the_weight_and_their_states() {
    // mom = 0.5 mom - 0.5 g; w += mom
    let w = f32s(&[2], &[1.0, 2.0]);
    let (g, mom) = (f32s(&[2], &[0.5, -1.0]), f32s(&[2], &[0.25, 0.0]));
    let p = [("lr", "0.5"), ("momentum", "0.5")];
    run(
        "sgd_mom_update",
        &[w.clone(), g.clone(), mom.clone()],
        &p,
        from_ref(&w),
    );
    assert_eq!(vals(&mom), [-0.125, 0.5]);
    assert_eq!(vals(&w), [0.875, 2.5]);
    // float16 weights with a float32 master copy
    let w16 = arr(&[2], &[1.0, 2.0], DType::F16);
    let w32 = f32s(&[2], &[1.0, 2.0]);
    let g16 = arr(&[2], &[0.5, -1.0], DType::F16);
    run(
        "mp_sgd_update",
        &[w16.clone(), g16, w32.clone()],
        &[("lr", "0.5")],
        from_ref(&w16),
    );
    assert_eq!(vals(&w16), [0.75, 2.5]);
    assert_eq!(vals(&w32), [0.75, 2.5]);
    // adam: m = 0.5 g, v = 0.75 g², w -= lr m / sqrt(v) (no epsilon)
    let w = arr(&[2], &[1.0, 1.0], DType::F64);
    let (m, v) = (
        arr(&[2], &[0.0; 2], DType::F64),
        arr(&[2], &[0.0; 2], DType::F64),
    );
    let g = arr(&[2], &[2.0, -4.0], DType::F64);
    let p = [
        ("lr", "0.1"),
        ("beta1", "0.5"),
        ("beta2", "0.25"),
        ("epsilon", "0"),
    ];
    run(
        "adam_update",
        &[w.clone(), g, m.clone(), v.clone()],
        &p,
        from_ref(&w),
    );
    assert_eq!(vals(&m), [1.0, -2.0]);
    assert_eq!(vals(&v), [3.0, 12.0]);
    close(
        &vals(&w),
        &[1.0 - 0.1 / 3f64.sqrt(), 1.0 + 0.1 / 3f64.sqrt()],
        1e-12,
    );
}

#[test]
fn lamb_phases_update_moments_then_the_weight() {
    let w = f32s(&[2], &[1.0, 2.0]);
    let g = f32s(&[2], &[2.0, -4.0]);
    let (m, v) = (f32s(&[2], &[0.0; 2]), f32s(&[2], &[0.0; 2]));
    let p = [
        ("beta1", "0.5"),
        ("beta2", "0.75"),
        ("epsilon", "0"),
        ("t", "1"),
        ("wd", "0"),
        ("bias_correction", "False"),
    ];
    let dir = run(
        "lamb_update_phase1",
        &[w.clone(), g, m.clone(), v.clone()],
        &p,
        &[],
    );
    assert_eq!(vals(&m), [1.0, -2.0]);
    assert_eq!(vals(&v), [1.0, 4.0]);
    assert_eq!(vals(&dir[0]), [1.0, -1.0]);
    // lr * |w| / |dir| with the norms given: 0.1 * 2 / 4
    let (r1, r2) = (f32s(&[1], &[2.0]), f32s(&[1], &[4.0]));
    run(
        "lamb_update_phase2",
        &[w.clone(), dir[0].clone(), r1, r2],
        &[("lr", "0.1")],
        from_ref(&w),
    );
    close(&vals(&w), &[0.95, 2.05], 1e-6);
}

#[test]
fn sparse_inputs_and_lazy_updates_run_on_dense_copies() {
    let data = rsp(&[3, 2], &[1.0, 1.0, 0.0, 0.0, 3.0, 3.0]);
    let rows = f32s(&[2], &[2.0, 1.0]);
    let kept = run("_sparse_retain", &[data, rows], &[], &[]);
    assert_eq!(kept[0].stype(), StorageType::RowSparse);
    assert_eq!(vals(&kept[0]), [0.0, 0.0, 0.0, 0.0, 3.0, 3.0]);
    // a lazy update touches only the rows the gradient stores: the others keep their weight
    // decay undone
    let w = f32s(&[3, 2], &[1.0; 6]);
    let g = rsp(&[3, 2], &[0.0, 0.0, 2.0, 2.0, 0.0, 0.0]);
    let p = [("lr", "0.5"), ("wd", "0.5")];
    run("sgd_update", &[w.clone(), g.clone()], &p, from_ref(&w));
    assert_eq!(vals(&w), [1.0, 1.0, -0.25, -0.25, 1.0, 1.0]);
    let eager = f32s(&[3, 2], &[1.0; 6]);
    let p = [("lr", "0.5"), ("wd", "0.5"), ("lazy_update", "False")];
    run("sgd_update", &[eager.clone(), g], &p, from_ref(&eager));
    assert_eq!(vals(&eager), [0.75, 0.75, -0.25, -0.25, 0.75, 0.75]);
    // a sparse output is written back from the kernel's dense result
    let dense = f32s(&[2, 2], &[0.0, 0.0, 5.0, 6.0]);
    let out = run("cast_storage", &[dense], &[("stype", "row_sparse")], &[]);
    assert_eq!(out[0].stype(), StorageType::RowSparse);
    assert_eq!(vals(&out[0]), [0.0, 0.0, 5.0, 6.0]);
}

#[test]
#[cfg_attr(miri, ignore)] // reads the 700 KB op table: hours of safe JSON code under Miri
fn parameters_left_over_are_refused_only_by_ops_that_declare_some() {
    let (a, b) = (f32s(&[1], &[1.0]), f32s(&[1], &[2.0]));
    let err = invoke(Invoke {
        op: "_plus_scalar",
        called_as: "_plus_scalar",
        inputs: from_ref(&a),
        params: vec![("scalar", "1"), ("no_such", "1")],
        outputs: None,
        state: None,
    })
    .err()
    .expect("an unknown parameter is refused");
    assert!(
        err.to_string().contains("unknown parameter 'no_such'"),
        "{err}"
    );
    // MXNet's broadcast_maximum declares none: Gluon passes it an axis it ignores
    assert_eq!(one("broadcast_maximum", &[a, b], &[("axis", "1")]), [2.0]);
}
