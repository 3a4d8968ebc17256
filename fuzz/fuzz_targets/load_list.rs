//! Fuzz target: arbitrary bytes into `read_list` (and `read_record`) in every numpy-shape mode.
//!
//! Build/run (from `fuzz/`): `cargo +nightly fuzz run load_list`.
//!
//! Beyond "no panic", it checks that a successful parse returns no more element and name bytes
//! than the input held, that every record's data length matches its shape and dtype, and that
//! whatever global numpy-shape mode accepts survives a write/read round trip unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mxrt::ndarray::format::{NpShape, Record, RecordRef, read_list, read_record, write_list};

fn check(data: &[u8], recs: &[Record], names: &[String]) {
    let total: usize = recs.iter().map(Record::data_bytes).sum::<usize>()
        + names.iter().map(String::len).sum::<usize>();
    assert!(
        total <= data.len(),
        "{total} bytes out of {} in",
        data.len()
    );
    assert!(names.is_empty() || names.len() == recs.len());
    for r in recs {
        let Some(shape) = &r.shape else { continue };
        let count = |dims: &[i64]| -> u64 {
            if dims.contains(&0) {
                0
            } else {
                dims.iter().map(|&d| d as u64).product()
            }
        };
        let dims = r.storage_shape.as_deref().unwrap_or(shape);
        assert_eq!(r.data.len() as u64, count(dims) * r.dtype.size() as u64);
        for a in &r.aux {
            assert_eq!(a.data.len() as u64, count(&a.shape) * a.dtype.size() as u64);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    for np in [NpShape::Off, NpShape::ThreadLocalOn, NpShape::GlobalOn] {
        if let Ok((recs, names)) = read_list(data, np) {
            check(data, &recs, &names);
            // In global numpy mode every loadable non-none record can be saved (as V3) and
            // loads back identically.
            if np == NpShape::GlobalOn && !recs.iter().any(Record::is_none) {
                let refs: Vec<RecordRef<'_>> = recs.iter().map(Record::as_ref).collect();
                let mut out = Vec::new();
                write_list(&mut out, &refs, &names, np).expect("a loaded list can be saved");
                let (again, again_names) = read_list(&out, np).expect("a saved list loads");
                assert_eq!(again, recs);
                assert_eq!(again_names, names);
            }
        }
        if let Ok(rec) = read_record(data, np) {
            check(data, std::slice::from_ref(&rec), &[]);
        }
    }
});
