//! Unit tests of the reader and writer: MXNet's own bytes, round trips, and hostile input.

use super::*;
use crate::context::Context;
use crate::dtype::DType;
use crate::error::{ErrorKind, Result};
use std::io::Write;

/// Bytes from a hex dump (whitespace ignored).
fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

/// §4.3: `mx.nd.save('x.params', {'a': [[1,2],[3,4]] f32, 'b': ones((3,), int32)})`.
fn walkthrough() -> Vec<u8> {
    hex("1201 0000 0000 0000 0000 0000 0000 0000
         0200 0000 0000 0000 c9fa 93f9 0000 0000
         0200 0000 0200 0000 0000 0000 0200 0000
         0000 0000 0100 0000 0000 0000 0000 0000
         0000 803f 0000 0040 0000 4040 0000 8040
         c9fa 93f9 0000 0000 0100 0000 0300 0000
         0000 0000 0100 0000 0000 0000 0400 0000
         0100 0000 0100 0000 0100 0000 0200 0000
         0000 0000 0100 0000 0000 0000 6101 0000
         0000 0000 0062")
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
fn i64s(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
fn to_bytes(f: impl FnOnce(&mut Vec<u8>) -> Result<()>) -> Vec<u8> {
    let mut v = Vec::new();
    f(&mut v).unwrap();
    v
}
fn format_err<T: std::fmt::Debug>(r: Result<T>) -> String {
    let e = r.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Format, "{e}");
    e.message().to_owned()
}

/// A buffer built field by field.
#[derive(Default)]
struct B(Vec<u8>);
impl B {
    fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn i32(mut self, v: i32) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn shape(mut self, dims: &[i64]) -> Self {
        self = self.i32(dims.len() as i32);
        self.0.extend_from_slice(&i64s(dims));
        self
    }
    fn bytes(mut self, b: &[u8]) -> Self {
        self.0.extend_from_slice(b);
        self
    }
}

#[test]
fn walkthrough_reads_and_writes_byte_identically() {
    let bytes = walkthrough();
    assert_eq!(bytes.len(), 150);
    let (recs, names) = read_list(&bytes, NpShape::Off).unwrap();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(recs.len(), 2);
    let a = &recs[0];
    assert_eq!(a.stype, StorageType::Default);
    assert_eq!(a.shape.as_deref(), Some(&[2i64, 2][..]));
    assert_eq!(a.ctx, SavedContext::CPU);
    assert_eq!(a.dtype, DType::F32);
    assert_eq!(a.data, f32s(&[1.0, 2.0, 3.0, 4.0]));
    assert!(a.storage_shape.is_none() && a.aux.is_empty());
    let b = &recs[1];
    assert_eq!(b.shape.as_deref(), Some(&[3i64][..]));
    assert_eq!(b.dtype, DType::I32);
    assert_eq!(
        b.data,
        [1i32, 1, 1]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect::<Vec<_>>()
    );

    // Written from scratch (not from what was read), the bytes are MXNet's exactly.
    let a_data = f32s(&[1.0, 2.0, 3.0, 4.0]);
    let b_data: Vec<u8> = [1i32; 3].iter().flat_map(|x| x.to_le_bytes()).collect();
    let refs = [
        RecordRef::dense(&[2, 2], DType::F32, &a_data),
        RecordRef::dense(&[3], DType::I32, &b_data),
    ];
    let out = to_bytes(|w| write_list(w, &refs, &["a", "b"], NpShape::Off));
    assert_eq!(out, bytes);
    // And from what was read.
    let refs: Vec<_> = recs.iter().map(Record::as_ref).collect();
    assert_eq!(
        to_bytes(|w| write_list(w, &refs, &names, NpShape::Off)),
        bytes
    );
    // The record alone is the raw-bytes format: bytes 0x18..0x50.
    let raw = to_bytes(|w| write_record(w, &recs[0].as_ref(), NpShape::Off));
    assert_eq!(raw, bytes[0x18..0x50]);
    assert_eq!(
        record_len(&recs[0].as_ref(), NpShape::Off).unwrap(),
        raw.len()
    );
    assert_eq!(read_record(&raw, NpShape::Off).unwrap(), recs[0]);
    assert_eq!(
        read_record_prefix(&bytes[0x50..], NpShape::Off).unwrap(),
        (recs[1].clone(), 0x7c - 0x50)
    );
}

#[test]
fn list_without_names_ends_with_zero_count() {
    let data = f32s(&[7.0]);
    let refs = [RecordRef::dense(&[1], DType::F32, &data)];
    let out = to_bytes(|w| write_list(w, &refs, &[] as &[&str], NpShape::Off));
    assert_eq!(&out[out.len() - 8..], &[0; 8]);
    assert_eq!(out.len(), 24 + 4 + 4 + 12 + 12 + 4 + 8);
    let (recs, names) = read_list(&out, NpShape::Off).unwrap();
    assert!(names.is_empty());
    assert_eq!(recs, [refs[0].to_owned()]);
    // An empty list.
    let out = to_bytes(|w| write_list(w, &[], &[] as &[String], NpShape::Off));
    assert_eq!(out, B::default().u64(0x112).u64(0).u64(0).u64(0).0);
    assert_eq!(read_list(&out, NpShape::Off).unwrap(), (vec![], vec![]));
}

#[test]
fn every_dtype_round_trips_in_v2_and_v3() {
    for dtype in DType::ALL {
        let data: Vec<u8> = (0..6 * dtype.size()).map(|i| (i * 7 + 1) as u8).collect();
        let rec = RecordRef::dense(&[2, 3], dtype, &data);
        for (np, magic) in [
            (NpShape::Off, RECORD_V2_MAGIC),
            (NpShape::ThreadLocalOn, RECORD_V3_MAGIC),
        ] {
            let out = to_bytes(|w| write_record(w, &rec, np));
            assert_eq!(out[..4], magic.to_le_bytes());
            // magic, stype, ndim + 2 dims, ctx -> the type flag is at byte 36.
            assert_eq!(out[36..40], dtype.code().to_le_bytes(), "{dtype:?}");
            assert_eq!(out.len(), 40 + data.len());
            let back = read_record(&out, np).unwrap();
            assert_eq!(back, rec.to_owned(), "{dtype:?} {np:?}");
        }
    }
}

#[test]
fn unknown_dtype_codes_are_errors() {
    for code in [13, -1, 1000] {
        let buf = B::default()
            .u32(RECORD_V2_MAGIC)
            .i32(0)
            .shape(&[1])
            .i32(1)
            .i32(0)
            .i32(code)
            .0;
        let msg = format_err(read_record(&buf, NpShape::Off));
        assert_eq!(
            msg,
            format!(
                "Invalid NDArray serialization format: array has unknown type flag {code} (Unknown type enum {code}) at byte 28"
            )
        );
    }
}

#[test]
fn zero_size_and_scalar_shapes() {
    for shape in [&[0i64][..], &[2, 0, 3], &[0, 0], &[i64::MAX, 0, i64::MAX]] {
        let rec = RecordRef::dense(shape, DType::F64, &[]);
        for np in [NpShape::Off, NpShape::GlobalOn] {
            let out = to_bytes(|w| write_record(w, &rec, np));
            assert_eq!(out.len(), 24 + 8 * shape.len());
            assert_eq!(read_record(&out, np).unwrap(), rec.to_owned());
        }
    }
    // A 0-d (scalar) array exists only in numpy semantics: one element, V3.
    let data = 5.0f32.to_le_bytes();
    let scalar = RecordRef::dense(&[], DType::F32, &data);
    let out = to_bytes(|w| write_record(w, &scalar, NpShape::ThreadLocalOn));
    assert_eq!(
        out,
        B::default()
            .u32(RECORD_V3_MAGIC)
            .i32(0)
            .i32(0)
            .i32(1)
            .i32(0)
            .i32(0)
            .bytes(&data)
            .0
    );
    assert_eq!(
        read_record(&out, NpShape::ThreadLocalOn).unwrap(),
        scalar.to_owned()
    );
    // In classic semantics ndim 0 is a none array: reading stops after the shape.
    let none = B::default().u32(RECORD_V2_MAGIC).i32(0).i32(0).0;
    let (rec, used) = read_record_prefix(&none, NpShape::Off).unwrap();
    assert!(rec.is_none());
    assert_eq!(
        (used, rec.ctx, rec.data_bytes()),
        (12, SavedContext::NONE, 0)
    );
    // ... but a known scalar under global numpy semantics.
    let v2_scalar = B::default()
        .u32(RECORD_V2_MAGIC)
        .i32(0)
        .i32(0)
        .i32(1)
        .i32(0)
        .i32(0)
        .bytes(&data)
        .0;
    assert_eq!(
        read_record(&v2_scalar, NpShape::GlobalOn).unwrap(),
        scalar.to_owned()
    );
    // A none record cannot be written (MXNet: storage type -1).
    let err = write_record(&mut Vec::new(), &rec.as_ref(), NpShape::Off).unwrap_err();
    assert_eq!(
        (err.kind(), err.message()),
        (ErrorKind::InvalidArgument, "Unknown storage type-1")
    );
}

#[test]
fn unknown_shapes_in_numpy_semantics_are_none() {
    // ndim -1: nothing follows the shape.
    let buf = B::default().u32(RECORD_V3_MAGIC).i32(0).i32(-1).0;
    let (rec, used) = read_record_prefix(&buf, NpShape::ThreadLocalOn).unwrap();
    assert!(rec.is_none());
    assert_eq!(used, 12);
    // a -1 dim: the dims are read, then the record stops.
    let buf = B::default().u32(RECORD_V3_MAGIC).i32(0).shape(&[3, -1]).0;
    let (rec, used) = read_record_prefix(&buf, NpShape::ThreadLocalOn).unwrap();
    assert!(rec.is_none());
    assert_eq!(used, 28);
    // Dims below -1 are errors in every semantics.
    let buf = B::default().u32(RECORD_V3_MAGIC).i32(0).shape(&[3, -2]).0;
    assert_eq!(
        format_err(read_record(&buf, NpShape::GlobalOn)),
        "Invalid NDArray serialization format: shape dim 1 is -2, a negative size at byte 20"
    );
    // In classic semantics -1 is no "unknown" marker.
    let buf = B::default().u32(RECORD_V2_MAGIC).i32(0).shape(&[-1]).0;
    assert_eq!(
        format_err(read_record(&buf, NpShape::Off)),
        "Invalid NDArray serialization format: shape dim 0 is -1, a negative size at byte 12"
    );
    let buf = B::default().u32(RECORD_V2_MAGIC).i32(0).i32(-1).0;
    assert_eq!(
        format_err(read_record(&buf, NpShape::Off)),
        "Invalid NDArray serialization format: shape ndim -1 is negative at byte 8"
    );
}

#[test]
fn numpy_shape_mismatch_fails_in_both_directions() {
    let data = f32s(&[7.0]);
    let rec = RecordRef::dense(&[1], DType::F32, &data);
    let v3 = to_bytes(|w| write_record(w, &rec, NpShape::ThreadLocalOn));
    // npx.save of float32 [7.] starts with ca fa 93 f9.
    assert_eq!(v3[..4], [0xca, 0xfa, 0x93, 0xf9]);
    assert_eq!(
        format_err(read_record(&v3, NpShape::Off)),
        MSG_SAVED_IN_NP_SHAPE
    );
    assert_eq!(
        read_record(&v3, NpShape::ThreadLocalOn).unwrap(),
        rec.to_owned()
    );
    assert_eq!(read_record(&v3, NpShape::GlobalOn).unwrap(), rec.to_owned());

    let v2 = to_bytes(|w| write_record(w, &rec, NpShape::Off));
    assert_eq!(
        format_err(read_record(&v2, NpShape::ThreadLocalOn)),
        MSG_NOT_SAVED_IN_NP_SHAPE
    );
    assert_eq!(read_record(&v2, NpShape::GlobalOn).unwrap(), rec.to_owned());
    assert_eq!(read_record(&v2, NpShape::Off).unwrap(), rec.to_owned());

    // Inside a list the same messages come through unchanged.
    let list = to_bytes(|w| {
        write_list(
            w,
            std::slice::from_ref(&rec),
            &["x"],
            NpShape::ThreadLocalOn,
        )
    });
    assert_eq!(
        format_err(read_list(&list, NpShape::Off)),
        MSG_SAVED_IN_NP_SHAPE
    );
    let (recs, names) = read_list(&list, NpShape::ThreadLocalOn).unwrap();
    assert_eq!((recs, names), (vec![rec.to_owned()], vec!["x".to_owned()]));
    let list = to_bytes(|w| write_list(w, std::slice::from_ref(&rec), &["x"], NpShape::Off));
    assert_eq!(
        format_err(read_list(&list, NpShape::ThreadLocalOn)),
        MSG_NOT_SAVED_IN_NP_SHAPE
    );

    // Legacy records, too, need numpy semantics off (or global).
    let v1 = B::default()
        .u32(RECORD_V1_MAGIC)
        .shape(&[1])
        .i32(1)
        .i32(0)
        .i32(0)
        .bytes(&data)
        .0;
    assert_eq!(
        format_err(read_record(&v1, NpShape::ThreadLocalOn)),
        MSG_NOT_SAVED_IN_NP_SHAPE
    );
    assert_eq!(read_record(&v1, NpShape::GlobalOn).unwrap(), rec.to_owned());
}

/// The spec's verified row_sparse sample: (3,2) with row 1 = [5,6].
fn row_sparse_sample() -> Vec<u8> {
    B::default()
        .u32(RECORD_V2_MAGIC)
        .i32(1)
        .shape(&[1, 2])
        .shape(&[3, 2])
        .i32(1)
        .i32(0)
        .i32(0)
        .i32(6)
        .shape(&[1])
        .bytes(&f32s(&[5.0, 6.0]))
        .bytes(&i64s(&[1]))
        .0
}

#[test]
fn sparse_records_round_trip() {
    let bytes = row_sparse_sample();
    let rec = read_record(&bytes, NpShape::Off).unwrap();
    assert_eq!(rec.stype, StorageType::RowSparse);
    assert_eq!(rec.shape.as_deref(), Some(&[3i64, 2][..]));
    assert_eq!(rec.storage_shape.as_deref(), Some(&[1i64, 2][..]));
    assert_eq!(rec.data, f32s(&[5.0, 6.0]));
    assert_eq!(
        rec.aux,
        [AuxArray {
            dtype: DType::I64,
            shape: vec![1],
            data: i64s(&[1])
        }]
    );
    assert_eq!(
        to_bytes(|w| write_record(w, &rec.as_ref(), NpShape::Off)),
        bytes
    );

    // csr (2,3) [[0,7,0],[8,0,9]]: indptr [0,1,3], indices [1,0,2].
    let values = f32s(&[7.0, 8.0, 9.0]);
    let indptr = i64s(&[0, 1, 3]);
    let indices = i64s(&[1, 0, 2]);
    let csr = RecordRef {
        stype: StorageType::Csr,
        shape: Some(&[2, 3]),
        ctx: SavedContext {
            dev_type: 2,
            dev_id: 1,
        },
        dtype: DType::F32,
        data: &values,
        storage_shape: Some(&[3]),
        aux: [
            AuxRef {
                dtype: DType::I64,
                shape: &[3],
                data: &indptr,
            },
            AuxRef {
                dtype: DType::I64,
                shape: &[3],
                data: &indices,
            },
        ]
        .into_iter()
        .collect(),
    };
    let out = to_bytes(|w| write_record(w, &csr, NpShape::Off));
    let expected = B::default()
        .u32(RECORD_V2_MAGIC)
        .i32(2)
        .shape(&[3])
        .shape(&[2, 3])
        .i32(2)
        .i32(1)
        .i32(0)
        .i32(6)
        .shape(&[3])
        .i32(6)
        .shape(&[3])
        .bytes(&values)
        .bytes(&indptr)
        .bytes(&indices)
        .0;
    assert_eq!(out, expected);
    assert_eq!(record_len(&csr, NpShape::Off).unwrap(), out.len());
    let back = read_record(&out, NpShape::Off).unwrap();
    assert_eq!(back, csr.to_owned());
    assert_eq!(back.ctx.to_context().unwrap(), Context::gpu(1));

    // Sparse is refused in numpy semantics, both ways, with MXNet's words.
    assert_eq!(
        format_err(read_record(&out, NpShape::GlobalOn)),
        MSG_SPARSE_LOAD_IN_NP_SHAPE
    );
    let err = write_record(&mut Vec::new(), &csr, NpShape::GlobalOn).unwrap_err();
    assert_eq!(err.message(), MSG_SPARSE_SAVE_IN_NP_SHAPE);

    // A sparse none record (ndim 0) still has its storage shape read.
    let none = B::default()
        .u32(RECORD_V2_MAGIC)
        .i32(1)
        .shape(&[0, 2])
        .i32(0)
        .0;
    let (rec, used) = read_record_prefix(&none, NpShape::Off).unwrap();
    assert!(rec.is_none());
    assert_eq!((used, rec.storage_shape), (none.len(), Some(vec![0, 2])));
}

#[test]
fn legacy_v1_and_v0_records() {
    let data = f32s(&[1.0, 2.0, 3.0]);
    let v1 = B::default()
        .u32(RECORD_V1_MAGIC)
        .shape(&[3])
        .i32(1)
        .i32(0)
        .i32(0)
        .bytes(&data)
        .0;
    let want = Record::dense(vec![3], DType::F32, data.clone());
    assert_eq!(read_record(&v1, NpShape::Off).unwrap(), want);
    // V0: the first u32 is ndim, dims are u32.
    let v0 = B::default()
        .u32(1)
        .u32(3)
        .i32(1)
        .i32(0)
        .i32(0)
        .bytes(&data)
        .0;
    assert_eq!(
        read_record_prefix(&v0, NpShape::Off).unwrap(),
        (want.clone(), v0.len())
    );
    let v0 = B::default()
        .u32(2)
        .u32(0xFFFF_FFFF)
        .u32(0)
        .i32(1)
        .i32(0)
        .i32(3)
        .0;
    let rec = read_record(&v0, NpShape::Off).unwrap();
    assert_eq!(rec.shape, Some(vec![0xFFFF_FFFF, 0]));
    assert_eq!(rec.dtype, DType::U8);
    // V1 with a -1 dim is none; ndim 0 is a one-element scalar (MXNet 1.9.1's LegacyLoad).
    let v1 = B::default().u32(RECORD_V1_MAGIC).shape(&[-1, 4]).0;
    assert!(read_record(&v1, NpShape::Off).unwrap().is_none());
    let v1 = B::default()
        .u32(RECORD_V1_MAGIC)
        .i32(0)
        .i32(1)
        .i32(0)
        .i32(4)
        .i32(9)
        .0;
    let rec = read_record(&v1, NpShape::Off).unwrap();
    assert_eq!(
        (rec.shape, rec.data),
        (Some(vec![]), 9i32.to_le_bytes().to_vec())
    );

    // The layout of tests/python/unittest/legacy_ndarray.v0: 6 x arange(128) f32 in a list.
    let arange: Vec<f32> = (0..128).map(|i| i as f32).collect();
    let mut file = B::default().u64(0x112).u64(0).u64(6);
    for _ in 0..6 {
        file = file
            .u32(1)
            .u32(128)
            .i32(1)
            .i32(0)
            .i32(0)
            .bytes(&f32s(&arange));
    }
    let file = file.u64(0).0;
    assert_eq!(file.len(), 3224);
    let (recs, names) = read_list(&file, NpShape::Off).unwrap();
    assert!(names.is_empty());
    assert_eq!(
        recs,
        vec![Record::dense(vec![128], DType::F32, f32s(&arange)); 6]
    );
    // Saved again, they become V2.
    let refs: Vec<_> = recs.iter().map(Record::as_ref).collect();
    let out = to_bytes(|w| write_list(w, &refs, &[] as &[&str], NpShape::Off));
    assert_eq!(out[24..28], RECORD_V2_MAGIC.to_le_bytes());
    assert_eq!(read_list(&out, NpShape::Off).unwrap().0, recs);
}

#[test]
fn smallest_records_fill_a_list_exactly() {
    // V1 records of unknown shape are 8 bytes each: the count check must allow them.
    let mut file = B::default().u64(0x112).u64(0).u64(3);
    for _ in 0..3 {
        file = file.u32(RECORD_V1_MAGIC).i32(-1);
    }
    let file = file.u64(0).0;
    let (recs, names) = read_list(&file, NpShape::Off).unwrap();
    assert!(names.is_empty() && recs.len() == 3 && recs.iter().all(Record::is_none));
    // One more than the remaining bytes could hold is refused up front.
    let mut more = file.clone();
    more[16..24].copy_from_slice(&5u64.to_le_bytes());
    assert_eq!(
        format_err(read_list(&more, NpShape::Off)),
        "Invalid NDArray file format: array count 5 cannot fit in the 32 bytes that follow \
         (a record takes at least 8) at byte 16"
    );
}

#[test]
fn every_truncation_is_an_error_naming_the_offset() {
    let bytes = walkthrough();
    for len in 0..bytes.len() {
        let msg = format_err(read_list(&bytes[..len], NpShape::Off));
        assert!(
            msg.starts_with("Invalid NDArray file format: "),
            "{len}: {msg}"
        );
        assert!(
            msg.contains("truncated input") || msg.contains("cannot fit"),
            "{len}: {msg}"
        );
    }
    assert_eq!(
        format_err(read_list(&bytes[..0x4c], NpShape::Off)),
        "Invalid NDArray file format: array 0 (record at byte 24): truncated input: data \
         (float32 elements of [2, 2]) needs 16 bytes but only 12 remain at byte 64"
    );
    assert_eq!(
        format_err(read_list(&bytes[..0x7c], NpShape::Off)),
        "Invalid NDArray file format: truncated input: name count needs 8 bytes but only 0 remain at byte 124"
    );
    assert_eq!(
        format_err(read_list(&bytes[..0x95], NpShape::Off)),
        "Invalid NDArray file format: truncated input: name 1 needs 1 bytes but only 0 remain at byte 149"
    );
    let raw = &bytes[0x18..0x50];
    for len in 0..raw.len() {
        let msg = format_err(read_record(&raw[..len], NpShape::Off));
        assert!(
            msg.starts_with("Invalid NDArray serialization format: truncated input"),
            "{msg}"
        );
    }
    let sparse = row_sparse_sample();
    for len in 0..sparse.len() {
        format_err(read_record(&sparse[..len], NpShape::Off));
    }
    // Trailing bytes are ignored, as by MXNet's memory streams.
    let mut longer = bytes.clone();
    longer.extend_from_slice(b"trailing");
    assert_eq!(
        read_list(&longer, NpShape::Off).unwrap(),
        read_list(&bytes, NpShape::Off).unwrap()
    );
}

#[test]
fn hostile_headers_are_rejected_before_allocating() {
    let bytes = walkthrough();
    let patched = |at: usize, v: &[u8]| {
        let mut b = bytes.clone();
        b[at..at + v.len()].copy_from_slice(v);
        b
    };
    let list = |b: &[u8]| format_err(read_list(b, NpShape::Off));
    assert_eq!(
        list(&patched(0, &0x113u64.to_le_bytes())),
        "Invalid NDArray file format: list magic is 0x113, expected 0x112 at byte 0"
    );
    assert_eq!(
        list(&patched(16, &u64::MAX.to_le_bytes())),
        format!(
            "Invalid NDArray file format: array count {} cannot fit in the 126 bytes that follow (a record takes at least 8) at byte 16",
            u64::MAX
        )
    );
    assert_eq!(
        list(&patched(0x20, &33i32.to_le_bytes())),
        "Invalid NDArray file format: array 0 (record at byte 24): shape ndim 33 exceeds the supported maximum of 32 at byte 32"
    );
    assert_eq!(
        list(&patched(0x20, &i32::MIN.to_le_bytes())),
        format!(
            "Invalid NDArray file format: array 0 (record at byte 24): shape ndim {} is negative at byte 32",
            i32::MIN
        )
    );
    // dims whose product overflows u64
    let mut b = patched(0x24, &(1i64 << 40).to_le_bytes());
    b[0x2c..0x34].copy_from_slice(&(1i64 << 40).to_le_bytes());
    assert_eq!(
        list(&b),
        "Invalid NDArray file format: array 0 (record at byte 24): data size of shape [1099511627776, 1099511627776] x float32 overflows at byte 64"
    );
    // a product that fits u64 but not the input
    let b = patched(0x24, &(1i64 << 40).to_le_bytes());
    assert!(
        list(&b).contains("needs 8796093022208 bytes but only 86 remain at byte 64"),
        "{}",
        list(&b)
    );
    assert_eq!(
        list(&patched(0x1c, &3i32.to_le_bytes())),
        "Invalid NDArray file format: array 0 (record at byte 24): Unknown storage type 3 at byte 28"
    );
    assert_eq!(
        list(&patched(0x7c, &1u64.to_le_bytes())),
        "Invalid NDArray file format: name count 1 must be 0 or equal the array count 2 at byte 124"
    );
    assert_eq!(
        list(&bytes[..0x84]),
        "Invalid NDArray file format: name count 2 cannot fit in the 0 bytes that follow (a name takes at least 8) at byte 124"
    );
    assert_eq!(
        list(&patched(0x84, &u64::MAX.to_le_bytes())),
        format!(
            "Invalid NDArray file format: truncated input: name 0 needs {} bytes but only 10 remain at byte 140",
            u64::MAX
        )
    );
    assert_eq!(
        list(&patched(0x8c, &[0xff])),
        "Invalid NDArray file format: name 0 is not valid UTF-8 (invalid utf-8 sequence of 1 bytes from index 0) at byte 140"
    );
    // A V0 "ndim" that is really garbage.
    let msg = format_err(read_record(&0x1234_5678u32.to_le_bytes(), NpShape::Off));
    assert_eq!(
        msg,
        "Invalid NDArray serialization format: legacy (V0) record: first u32 read as ndim 305419896 exceeds the supported maximum of 32 at byte 0"
    );
    // Sparse storage shapes and aux shapes may not hold -1 even in global numpy mode.
    let mut rsp = row_sparse_sample();
    rsp[12..20].copy_from_slice(&(-1i64).to_le_bytes());
    assert_eq!(
        format_err(read_record(&rsp, NpShape::Off)),
        "Invalid NDArray serialization format: storage shape dim 0 is -1, a negative size at byte 12"
    );
}

#[test]
fn writers_check_their_input() {
    let data = f32s(&[1.0, 2.0]);
    let good = RecordRef::dense(&[2], DType::F32, &data);
    let bad = |rec: RecordRef<'_>| {
        let mut out = Vec::new();
        let err =
            write_list(&mut out, &[good.clone(), rec], &["a", "b"], NpShape::Off).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        assert!(
            out.is_empty(),
            "nothing is written before every record is checked"
        );
        err.message().to_owned()
    };
    assert_eq!(
        bad(RecordRef::dense(&[3], DType::F32, &data)),
        "array 1: data has 8 bytes but shape [3] of float32 needs 12"
    );
    assert_eq!(
        bad(RecordRef::dense(&[2, -1], DType::F32, &data)),
        "array 1: cannot save shape [2, -1]: dim 1 is -1"
    );
    assert_eq!(
        bad(RecordRef::dense(&[1; 33], DType::U8, &data[..1])),
        "array 1: cannot save shape with ndim 33 (the format readers accept at most 32)"
    );
    let mut sparse = RecordRef::dense(&[2], DType::F32, &data);
    sparse.stype = StorageType::RowSparse;
    assert_eq!(
        bad(sparse.clone()),
        "array 1: a row_sparse record needs 1 aux arrays, got 0"
    );
    sparse.aux.push(AuxRef {
        dtype: DType::I64,
        shape: &[1],
        data: &data,
    });
    assert_eq!(
        bad(sparse),
        "array 1: a row_sparse record needs a storage shape"
    );

    let recs = [RecordRef::dense(&[2], DType::F32, &data)];
    let err = write_list(&mut Vec::new(), &recs, &["a", "b"], NpShape::Off).unwrap_err();
    assert_eq!(
        err.message(),
        "2 names for 1 arrays: give none or one per array"
    );

    // I/O failures surface as Io errors.
    struct Full;
    impl Write for Full {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("disk full"))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let err = write_list(&mut Full, &recs, &["a"], NpShape::Off).unwrap_err();
    assert_eq!((err.kind(), err.message()), (ErrorKind::Io, "disk full"));
}

#[test]
fn np_shape_codes() {
    for code in 0..3 {
        assert_eq!(NpShape::from_code(code).unwrap().code(), code);
    }
    assert!(NpShape::from_code(3).is_err());
    assert!(!NpShape::Off.is_on() && NpShape::ThreadLocalOn.is_on() && NpShape::GlobalOn.is_on());
    assert_eq!(RecordVersion::from_magic(0xF993_FACA), RecordVersion::V3);
    assert_eq!(RecordVersion::from_magic(1), RecordVersion::V0);
    assert_eq!(
        SavedContext::from(Context::cpu_shared(3)),
        SavedContext {
            dev_type: 5,
            dev_id: 3
        }
    );
}
