//! Robustness of the NDArray file-format readers (`mxrt::ndarray::format`) on real files.
//!
//! Samples: every `*.params` / `*.v0` list file and `*.bin` raw record in `tests/fixtures/`
//! (written by MXNet 1.9.1; set `MXRT_FORMAT_FIXTURES` to read another directory), plus inline
//! samples (the spec's §4.3 walk-through among them) so the tests never run empty. For each:
//! it parses; every truncation fails cleanly; thousands of seeded random mutations return `Ok`
//! or `Err` without panicking and without allocating beyond the input's size; V2/V3 files
//! are written back byte for byte (sparse V2 ones, too).
//!
//! A counting global allocator records the largest single allocation a parse makes, so a
//! reader that sized a buffer from a declared count or shape would fail here even if the
//! allocation itself succeeded.
//!
//! The counting allocator conflicts with mxrt's mimalloc, so this file builds only without it:
//! `cargo test --no-default-features --test format_mutation` (as `make test` runs it).
#![cfg(not(feature = "mimalloc"))]

use mxrt::DType;
use mxrt::ErrorKind;
use mxrt::ndarray::format::{
    NpShape, Record, RecordRef, RecordVersion, read_list, read_record, read_record_prefix,
    write_list, write_record,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;

// ---- allocation accounting ----------------------------------------------------------------

#[path = "common/counting_alloc.rs"]
mod counting_alloc;

/// The most any single allocation of a parse of `len` input bytes may take. Element data and
/// names are copies of input bytes (<= len). The record vector holds at most one `Record` per
/// 8 input bytes and may have doubled its capacity once; error messages and shapes are small.
fn alloc_cap(len: usize) -> usize {
    let per_record = 2 * std::mem::size_of::<Record>() / 8 + 2;
    per_record.max(2) * len + 64 * 1024
}

// ---- samples -------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    List,
    Raw,
}

struct Sample {
    name: String,
    bytes: Vec<u8>,
    kind: Kind,
}

fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

/// Spec §4.3: `mx.nd.save('x.params', {'a': [[1,2],[3,4]] f32, 'b': ones((3,), int32)})`.
const WALKTHROUGH: &str = "
    1201 0000 0000 0000 0000 0000 0000 0000 0200 0000 0000 0000 c9fa 93f9 0000 0000
    0200 0000 0200 0000 0000 0000 0200 0000 0000 0000 0100 0000 0000 0000 0000 0000
    0000 803f 0000 0040 0000 4040 0000 8040 c9fa 93f9 0000 0000 0100 0000 0300 0000
    0000 0000 0100 0000 0000 0000 0400 0000 0100 0000 0100 0000 0100 0000 0200 0000
    0000 0000 0100 0000 0000 0000 6101 0000 0000 0000 0062";

fn le(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

fn inline_samples() -> Vec<Sample> {
    let mut out = vec![Sample {
        name: "spec 4.3 walk-through".into(),
        bytes: hex(WALKTHROUGH),
        kind: Kind::List,
    }];
    // The spec's row_sparse (3,2) sample (row 1 = [5,6]) in an unnamed list.
    let rsp = le(&[
        &0xF993_FAC9u32.to_le_bytes(),
        &1i32.to_le_bytes(),
        &2i32.to_le_bytes(),
        &1i64.to_le_bytes(),
        &2i64.to_le_bytes(),
        &2i32.to_le_bytes(),
        &3i64.to_le_bytes(),
        &2i64.to_le_bytes(),
        &1i32.to_le_bytes(),
        &0i32.to_le_bytes(),
        &0i32.to_le_bytes(),
        &6i32.to_le_bytes(),
        &1i32.to_le_bytes(),
        &1i64.to_le_bytes(),
        &5f32.to_le_bytes(),
        &6f32.to_le_bytes(),
        &1i64.to_le_bytes(),
    ]);
    out.push(Sample {
        name: "row_sparse list".into(),
        bytes: le(&[
            &0x112u64.to_le_bytes(),
            &[0; 8],
            &1u64.to_le_bytes(),
            &rsp,
            &0u64.to_le_bytes(),
        ]),
        kind: Kind::List,
    });
    out.push(Sample {
        name: "row_sparse raw record".into(),
        bytes: rsp,
        kind: Kind::Raw,
    });
    // A V0 (u32 ndim, u32 dims) list and a V1 record, as in legacy files.
    let v0 = |vals: &[f32]| {
        let data: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        le(&[
            &1u32.to_le_bytes(),
            &(vals.len() as u32).to_le_bytes(),
            &1i32.to_le_bytes(),
            &0i32.to_le_bytes(),
            &0i32.to_le_bytes(),
            &data,
        ])
    };
    out.push(Sample {
        name: "legacy V0 list".into(),
        bytes: le(&[
            &0x112u64.to_le_bytes(),
            &[0; 8],
            &2u64.to_le_bytes(),
            &v0(&[1.0, 2.0, 3.0]),
            &v0(&[4.0]),
            &0u64.to_le_bytes(),
        ]),
        kind: Kind::List,
    });
    out.push(Sample {
        name: "legacy V1 raw record".into(),
        bytes: le(&[
            &0xF993_FAC8u32.to_le_bytes(),
            &1i32.to_le_bytes(),
            &2i64.to_le_bytes(),
            &1i32.to_le_bytes(),
            &0i32.to_le_bytes(),
            &6i32.to_le_bytes(),
            &7i64.to_le_bytes(),
            &(-7i64).to_le_bytes(),
        ]),
        kind: Kind::Raw,
    });
    // A V3 (numpy-shape) list with a scalar and a zero-size array, as written by mxrt.
    let s = 2.5f64.to_le_bytes();
    let recs = [
        RecordRef::dense(&[], DType::F64, &s),
        RecordRef::dense(&[2, 0, 3], DType::F32, &[]),
    ];
    let mut v3 = Vec::new();
    write_list(
        &mut v3,
        &recs,
        &["scalar", "zero_size"],
        NpShape::ThreadLocalOn,
    )
    .unwrap();
    out.push(Sample {
        name: "V3 list".into(),
        bytes: v3,
        kind: Kind::List,
    });
    out
}

fn fixture_samples() -> Vec<Sample> {
    let dir = std::env::var_os("MXRT_FORMAT_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures"));
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut out: Vec<Sample> = entries
        .filter_map(|e| {
            let path = e.ok()?.path();
            let kind = match path.extension()?.to_str()? {
                "params" | "v0" => Kind::List,
                "bin" => Kind::Raw,
                _ => return None,
            };
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            Some(Sample {
                name: path.display().to_string(),
                bytes,
                kind,
            })
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

fn all_samples() -> Vec<Sample> {
    let mut v = inline_samples();
    v.extend(fixture_samples());
    v
}

// ---- helpers -------------------------------------------------------------------------------

const MODES: [NpShape; 3] = [NpShape::Off, NpShape::ThreadLocalOn, NpShape::GlobalOn];

type Parsed = (Vec<Record>, Vec<String>);

fn parse(kind: Kind, bytes: &[u8], np: NpShape) -> mxrt::Result<Parsed> {
    match kind {
        Kind::List => read_list(bytes, np),
        Kind::Raw => read_record(bytes, np).map(|r| (vec![r], Vec::new())),
    }
}

/// The first mode in which the sample parses (files written in numpy mode need it on).
fn parse_any_mode(s: &Sample) -> (NpShape, Parsed) {
    let mut first_err = None;
    for np in MODES {
        match parse(s.kind, &s.bytes, np) {
            Ok(p) => return (np, p),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    panic!(
        "{}: does not parse in any numpy-shape mode: {}",
        s.name,
        first_err.unwrap()
    );
}

/// Record start offsets and versions of a list (walked with `read_record_prefix`), plus the
/// offset just past the last record.
fn record_layout(s: &Sample, np: NpShape) -> (Vec<(usize, RecordVersion)>, usize) {
    let (mut at, count) = match s.kind {
        Kind::List => (
            24,
            u64::from_le_bytes(s.bytes[16..24].try_into().unwrap()) as usize,
        ),
        Kind::Raw => (0, 1),
    };
    let mut recs = Vec::new();
    for _ in 0..count {
        let magic = u32::from_le_bytes(s.bytes[at..at + 4].try_into().unwrap());
        recs.push((at, RecordVersion::from_magic(magic)));
        let (_, used) = read_record_prefix(&s.bytes[at..], np).unwrap();
        at += used;
    }
    (recs, at)
}

/// Runs a parse with a panic guard and the allocation check; returns the parse's result.
fn guarded_parse(
    kind: Kind,
    bytes: &[u8],
    np: NpShape,
    what: &dyn Fn() -> String,
) -> mxrt::Result<Parsed> {
    counting_alloc::reset_thread_max();
    let result = catch_unwind(AssertUnwindSafe(|| parse(kind, bytes, np)))
        .unwrap_or_else(|_| panic!("parser panicked on {}", what()));
    let max = counting_alloc::thread_max();
    assert!(
        max <= alloc_cap(bytes.len()),
        "{}: a single allocation of {max} bytes for {} input bytes",
        what(),
        bytes.len()
    );
    match &result {
        Ok((recs, names)) => check_consistent(recs, names, bytes.len(), what),
        Err(e) => assert_eq!(e.kind(), ErrorKind::Format, "{}: {e}", what()),
    }
    result
}

/// What a successful parse returns must be self-consistent and no bigger than its input.
fn check_consistent(recs: &[Record], names: &[String], len: usize, what: &dyn Fn() -> String) {
    let total: usize = recs.iter().map(Record::data_bytes).sum::<usize>()
        + names.iter().map(String::len).sum::<usize>();
    assert!(
        total <= len,
        "{}: {total} data bytes from {len} input bytes",
        what()
    );
    assert!(names.is_empty() || names.len() == recs.len(), "{}", what());
    for r in recs {
        let Some(shape) = &r.shape else {
            assert_eq!(r.data_bytes(), 0, "{}", what());
            continue;
        };
        let elems = |dims: &[i64]| -> u64 {
            assert!(
                dims.iter().all(|d| *d >= 0),
                "{}: negative dim in {dims:?}",
                what()
            );
            if dims.contains(&0) {
                0
            } else {
                dims.iter().map(|d| *d as u64).product()
            }
        };
        let data_dims = r.storage_shape.as_deref().unwrap_or(shape);
        assert_eq!(
            r.data.len() as u64,
            elems(data_dims) * r.dtype.size() as u64,
            "{}",
            what()
        );
        assert_eq!(r.aux.len(), r.stype.num_aux(), "{}", what());
        for a in &r.aux {
            assert_eq!(
                a.data.len() as u64,
                elems(&a.shape) * a.dtype.size() as u64,
                "{}",
                what()
            );
        }
    }
}

// ---- tests ---------------------------------------------------------------------------------

#[test]
fn every_sample_parses() {
    let samples = all_samples();
    assert!(samples.len() >= 6);
    for s in &samples {
        let (np, (recs, names)) = parse_any_mode(s);
        check_consistent(&recs, &names, s.bytes.len(), &|| s.name.clone());
        let (layout, end) = record_layout(s, np);
        assert_eq!(layout.len(), recs.len(), "{}", s.name);
        if s.kind == Kind::Raw {
            assert_eq!(
                end,
                s.bytes.len(),
                "{}: raw record has trailing bytes",
                s.name
            );
        }
        // Files with V3 records load only in numpy mode, the others also with it off.
        let has_v3 = layout.iter().any(|(_, v)| *v == RecordVersion::V3);
        assert_eq!(np == NpShape::Off, !has_v3, "{}", s.name);
    }
    let walk = &samples[0];
    let (recs, names) = read_list(&walk.bytes, NpShape::Off).unwrap();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(recs[0].shape, Some(vec![2, 2]));
    assert_eq!(recs[1].dtype, DType::I32);
}

#[test]
fn every_truncation_is_an_error() {
    for s in all_samples() {
        let (np, _) = parse_any_mode(&s);
        let (_, end) = record_layout(&s, np);
        let full = match s.kind {
            Kind::List => s.bytes.len(),
            Kind::Raw => end,
        };
        // Every length for files up to 64 KiB; for bigger ones every length in the first and
        // last 4 KiB and about 8000 in between.
        let step = if full <= 64 * 1024 { 1 } else { full / 8000 };
        let lens =
            (0..full).filter(|&l| step == 1 || l < 4096 || l + 4096 >= full || l % step == 0);
        for len in lens {
            let what = || format!("{} truncated to {len} bytes", s.name);
            let err = guarded_parse(s.kind, &s.bytes[..len], np, &what)
                .err()
                .unwrap_or_else(|| panic!("{} parsed", what()));
            let prefix = match s.kind {
                Kind::List => "Invalid NDArray file format: ",
                Kind::Raw => "Invalid NDArray serialization format: ",
            };
            assert!(err.message().starts_with(prefix), "{}: {err}", what());
            assert!(err.message().contains(" at byte "), "{}: {err}", what());
        }
    }
}

fn mutate(rng: &mut StdRng, input: &[u8]) -> Vec<u8> {
    const INTERESTING: [u64; 12] = [
        0,
        1,
        0xFF,
        32,
        33,
        0x7FFF_FFFF,
        0xFFFF_FFFF,
        0xF993_FAC8,
        0xF993_FAC9,
        0xF993_FACA,
        u64::MAX,
        1 << 40,
    ];
    let mut b = input.to_vec();
    for _ in 0..rng.gen_range(1..=4) {
        let len = b.len();
        match rng.gen_range(0..7) {
            // flip one bit
            0 if len > 0 => {
                let i = rng.gen_range(0..len);
                b[i] ^= 1 << rng.gen_range(0..8);
            }
            // random byte
            1 if len > 0 => {
                let i = rng.gen_range(0..len);
                b[i] = rng.r#gen();
            }
            // insert 1..8 random bytes
            2 => {
                let i = rng.gen_range(0..=len);
                let n = rng.gen_range(1..=8);
                let ins: Vec<u8> = (0..n).map(|_| rng.r#gen()).collect();
                b.splice(i..i, ins);
            }
            // delete a short range
            3 if len > 0 => {
                let i = rng.gen_range(0..len);
                let j = (i + rng.gen_range(1..=8)).min(len);
                b.drain(i..j);
            }
            // overwrite a 4- or 8-byte field (at a 4-aligned offset: fields are 4-aligned
            // until the first name) with an interesting value, or its negation
            4 | 5 if len >= 8 => {
                let width = if rng.gen_bool(0.5) { 4 } else { 8 };
                let i = rng.gen_range(0..=(len - width) / 4) * 4;
                let mut v = INTERESTING[rng.gen_range(0..INTERESTING.len())];
                if rng.gen_bool(0.25) {
                    v = v.wrapping_neg();
                }
                b[i..i + width].copy_from_slice(&v.to_le_bytes()[..width]);
            }
            // truncate
            _ if len > 0 => b.truncate(rng.gen_range(0..len)),
            _ => {}
        }
    }
    b
}

#[test]
fn random_mutations_never_panic_or_overallocate() {
    const PER_SAMPLE: usize = 2000;
    let mut ok = 0usize;
    let mut total = 0usize;
    for (k, s) in all_samples().into_iter().enumerate() {
        let mut rng = StdRng::seed_from_u64(0x5EED_0000 + k as u64);
        for i in 0..PER_SAMPLE {
            let m = mutate(&mut rng, &s.bytes);
            let np = MODES[i % 3];
            let what = || {
                format!(
                    "{} mutation {i} ({np:?}): {:02x?}",
                    s.name,
                    &m[..m.len().min(64)]
                )
            };
            ok += guarded_parse(s.kind, &m, np, &what).is_ok() as usize;
            // The same bytes through the other reader, too.
            let other = if s.kind == Kind::List {
                Kind::Raw
            } else {
                Kind::List
            };
            let _ = guarded_parse(other, &m, np, &what);
            total += 1;
        }
    }
    // Both outcomes occur, so the mutations exercise the accepting paths as well as the errors.
    assert!(
        ok > 0 && ok < total,
        "{ok} of {total} mutated inputs parsed"
    );
}

#[test]
fn hostile_counts_and_shapes_do_not_allocate() {
    // A list that claims 2^40 arrays, a record that claims 2^40 x 2^20 f64 elements, a name
    // 2^50 bytes long: all rejected with at most a small allocation.
    let walk = hex(WALKTHROUGH);
    let mut cases: Vec<(Kind, Vec<u8>)> = Vec::new();
    let mut b = walk.clone();
    b[16..24].copy_from_slice(&(1u64 << 40).to_le_bytes());
    cases.push((Kind::List, b));
    let mut b = walk.clone();
    b[0x24..0x2c].copy_from_slice(&(1i64 << 40).to_le_bytes());
    b[0x2c..0x34].copy_from_slice(&(1i64 << 20).to_le_bytes());
    b[0x3c..0x40].copy_from_slice(&1i32.to_le_bytes());
    cases.push((Kind::List, b));
    let mut b = walk.clone();
    b[0x84..0x8c].copy_from_slice(&(1u64 << 50).to_le_bytes());
    cases.push((Kind::List, b));
    cases.push((Kind::Raw, le(&[&32u32.to_le_bytes(), &[0xff; 128]])));
    for (i, (kind, bytes)) in cases.iter().enumerate() {
        let what = || format!("hostile case {i}");
        assert!(
            guarded_parse(*kind, bytes, NpShape::Off, &what).is_err(),
            "{}",
            what()
        );
        assert!(counting_alloc::thread_max() < 64 * 1024, "{}", what());
    }
}

#[test]
fn current_version_files_are_written_back_byte_for_byte() {
    let mut checked = 0;
    for s in all_samples() {
        let (np, (recs, names)) = parse_any_mode(&s);
        let (layout, end) = record_layout(&s, np);
        let current = layout
            .iter()
            .all(|(_, v)| matches!(v, RecordVersion::V2 | RecordVersion::V3));
        // Sparse V2 records are written back too; none records cannot be written at all.
        if !current || recs.iter().any(Record::is_none) {
            continue;
        }
        // MXNet writes V3 exactly when numpy mode is on.
        let write_np = if layout.iter().any(|(_, v)| *v == RecordVersion::V3) {
            NpShape::ThreadLocalOn
        } else {
            NpShape::Off
        };
        let refs: Vec<RecordRef<'_>> = recs.iter().map(Record::as_ref).collect();
        let mut out = Vec::new();
        match s.kind {
            Kind::List => write_list(&mut out, &refs, &names, write_np).unwrap(),
            Kind::Raw => write_record(&mut out, &refs[0], write_np).unwrap(),
        }
        let original = match s.kind {
            Kind::List => &s.bytes[..],
            Kind::Raw => &s.bytes[..end],
        };
        assert!(
            out == original,
            "{}: written bytes differ from the original",
            s.name
        );
        checked += 1;
    }
    // Inline: the walk-through, the row_sparse list and record, the V3 list.
    assert!(checked >= 4, "{checked}");
}
