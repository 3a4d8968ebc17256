//! Unit tests of arrays over engine-ordered chunks: byte copies in and out, views, copies
//! between (overlapping) arrays, foreign memory, saving and loading. Small sizes: these run under
//! Miri too, where the raw pointer work in `array.rs` and `chunk.rs` is checked.

use super::format::NpShape;
use super::*;
use crate::context::Context;
use crate::dtype::DType;
use crate::engine::FnProperty;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn array(shape: &[i64], ctx: Context, v: &[f32]) -> NDArray {
    let a = NDArray::new(shape, ctx, DType::F32, false).unwrap();
    a.sync_copy_from_bytes(&bytes(v)).unwrap();
    a
}

#[test]
fn bytes_in_and_out_on_host_contexts() {
    for ctx in [Context::cpu(0), Context::cpu_pinned(0)] {
        let a = array(&[2, 3], ctx, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(floats(&a.to_bytes().unwrap()), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let mut out = vec![0u8; 24];
        a.sync_copy_to_bytes(&mut out).unwrap();
        assert_eq!(floats(&out), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert!(a.sync_copy_from_bytes(&[0u8; 4]).is_err(), "a short source is refused");
    }
    // delayed allocation: the memory comes with the first write
    let d = NDArray::new(&[3], Context::cpu(0), DType::F32, true).unwrap();
    d.sync_copy_from_bytes(&bytes(&[7.0, 8.0, 9.0])).unwrap();
    assert_eq!(floats(&d.to_bytes().unwrap()), [7.0, 8.0, 9.0]);
}

#[test]
fn views_share_memory_and_order() {
    let a = array(&[4, 2], Context::cpu(0), &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]);
    let rows = a.slice(1, 3).unwrap();
    assert_eq!(rows.shape(), &[2, 2]);
    assert_eq!(floats(&rows.to_bytes().unwrap()), [2.0, 3.0, 4.0, 5.0]);
    let row = a.at(3).unwrap();
    assert_eq!(floats(&row.to_bytes().unwrap()), [6.0, 7.0]);
    let flat = a.reshape(&[8]).unwrap();
    assert!(flat.shares_memory_with(&a) && rows.shares_memory_with(&row));
    // writing a view writes the array
    row.sync_copy_from_bytes(&bytes(&[-6.0, -7.0])).unwrap();
    assert_eq!(floats(&flat.to_bytes().unwrap())[6..], [-6.0, -7.0]);
}

#[test]
fn copies_between_arrays_and_overlapping_views() {
    let a = array(&[6], Context::cpu(0), &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    let b = NDArray::new(&[6], Context::cpu_pinned(0), DType::F32, false).unwrap();
    b.copy_from(&a, 0, FnProperty::Normal).unwrap();
    assert_eq!(floats(&b.to_bytes().unwrap()), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    // rows 0..4 onto rows 2..6 of the same chunk: overlapping ranges
    let m = a.reshape(&[6, 1]).unwrap();
    let (src, dst) = (m.slice(0, 4).unwrap(), m.slice(2, 6).unwrap());
    dst.copy_from(&src, 0, FnProperty::Normal).unwrap();
    assert_eq!(floats(&a.to_bytes().unwrap()), [0.0, 1.0, 0.0, 1.0, 2.0, 3.0]);
    let wrong = NDArray::new(&[5], Context::cpu(0), DType::F32, false).unwrap();
    assert!(wrong.copy_from(&a, 0, FnProperty::Normal).is_err());
}

#[test]
fn foreign_memory_is_released_after_the_last_use() {
    let mut buf = bytes(&[1.0, 2.0]).into_boxed_slice();
    let released = Arc::new(AtomicBool::new(false));
    let r = released.clone();
    // SAFETY: `buf` outlives the array (released is checked before `buf` is dropped) and is
    // only used through it meanwhile.
    let a = unsafe {
        NDArray::from_foreign(
            buf.as_mut_ptr(),
            &[2],
            DType::F32,
            Context::cpu(0),
            Box::new(move || r.store(true, Ordering::SeqCst)),
        )
    }
    .unwrap();
    let view = a.slice(1, 2).unwrap();
    view.sync_copy_from_bytes(&bytes(&[5.0])).unwrap();
    drop(a);
    assert!(!released.load(Ordering::SeqCst), "a view still uses the memory");
    assert_eq!(floats(&view.to_bytes().unwrap()), [5.0]);
    drop(view);
    crate::engine::Engine::global().unwrap().wait_for_all().unwrap();
    assert!(released.load(Ordering::SeqCst));
    assert_eq!(floats(&buf), [1.0, 5.0]);
}

#[test]
fn save_and_load_round_trip() {
    let a = array(&[2, 2], Context::cpu(0), &[1.0, -2.0, 3.5, 0.25]);
    let b = array(&[3], Context::cpu_pinned(0), &[9.0, 8.0, 7.0]);
    let mut file = Vec::new();
    save_list(&mut file, &[&a, &b.slice(1, 3).unwrap()], &["a", "b"], NpShape::Off).unwrap();
    let (arrays, names) = load_list(&file, NpShape::Off).unwrap();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(arrays[0].shape(), &[2, 2]);
    assert_eq!(floats(&arrays[0].to_bytes().unwrap()), [1.0, -2.0, 3.5, 0.25]);
    assert_eq!(floats(&arrays[1].to_bytes().unwrap()), [8.0, 7.0]);
    let one = save_record(&a, NpShape::Off).unwrap();
    assert!(one.len() > 16);
}
