//! Robustness of the data-loading readers on damaged input: the RecordIO reader (through the
//! Rust API and `MXRecordIOReaderReadRecord`), the JPEG/PNG decoder behind `_cvimdecode` and
//! `ImageRecordIter`, `ImageRecordIter` over damaged `.rec` and `.idx` files, and `CSVIter` /
//! `LibSVMIter` over damaged text.
//!
//! Every sample is read clean first (it must work), then every truncation (sampled for long
//! inputs) and seeded random mutations (bit flips, bytes set to random or extreme values, 32-bit
//! words set to huge lengths, slices deleted, duplicated or inserted). Each case must:
//! - return (`Ok` or `Err`), never panic: a panic fails the test;
//! - finish within a time bound (a watchdog fails the test on a hang);
//! - allocate no single block larger than a bound set by the input's size (RecordIO, text) or by
//!   the decoder's documented image limit (`imgproc::MAX_PIXELS`), so a declared length or size
//!   is never trusted for an allocation;
//! - on `Err`, name the file read (and, from the record reader, the byte offset; from the text
//!   iterators, the row), except MXNet's own message for a file too short to fill one batch
//!   with `round_batch` (`number of input must be bigger than batch size`, kept as MXNet words
//!   it: no place in the file is wrong).
//!
//! `MXRT_IO_MUTATIONS` sets the number of mutations per sample (default 200). As
//! `format_mutation`, this file counts allocations with its own global allocator and builds only
//! without mimalloc: `cargo test --no-default-features --test io_mutation`.
#![cfg(not(feature = "mimalloc"))]

use mxrt::capi::error::MXGetLastError;
use mxrt::capi::recordio::{
    MXRecordIOReaderCreate, MXRecordIOReaderFree, MXRecordIOReaderReadRecord,
};
use mxrt::imgproc;
use mxrt::io::DataIter;
use mxrt::io::recordio::{RecordReader, RecordWriter};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::ffi::{CStr, CString, c_char, c_void};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

// ---- allocation accounting ----------------------------------------------------------------

#[path = "common/counting_alloc.rs"]
mod counting_alloc;

/// Allocations are measured process-wide (not per thread): the iterators allocate on their
/// prefetch and decoding threads. The tests of this file run one at a time (`SERIAL`) so that
/// one test's allocations are not charged to another.
static SERIAL: Mutex<()> = Mutex::new(());

/// The most one decoded image may take: RGBA or 16-bit samples of the largest image the decoder
/// accepts, plus slack for the decoders' tables.
const IMAGE_CAP: usize = 8 * imgproc::MAX_PIXELS + (16 << 20);

// ---- cases ---------------------------------------------------------------------------------

fn mutations() -> usize {
    std::env::var("MXRT_IO_MUTATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200)
}

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mxrt-io-mutation-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs `case` on a thread of its own with the allocation maximum reset; fails the test if it
/// panics, runs longer than `limit` or allocates more than `cap` bytes at once. Returns its
/// result.
fn bounded<T: Send + 'static>(
    what: &str,
    cap: usize,
    limit: Duration,
    case: impl FnOnce() -> T + Send + 'static,
) -> T {
    counting_alloc::reset_process_max();
    let (tx, rx) = std::sync::mpsc::channel();
    let start = Instant::now();
    std::thread::spawn(move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(case));
        let _ = tx.send(r);
    });
    let r = match rx.recv_timeout(limit) {
        Ok(Ok(v)) => v,
        Ok(Err(_)) => panic!("{what}: panicked"),
        Err(_) => panic!("{what}: no result after {limit:?} (a hang)"),
    };
    let most = counting_alloc::process_max();
    assert!(
        most <= cap,
        "{what}: an allocation of {most} bytes (cap {cap}) after {:?}",
        start.elapsed()
    );
    r
}

/// One seeded mutation of `b`: how a damaged file can look.
fn mutate(b: &[u8], r: &mut StdRng, text: bool) -> Vec<u8> {
    let mut v = b.to_vec();
    let n = r.gen_range(1..=4);
    for _ in 0..n {
        if v.is_empty() {
            v.push(r.r#gen());
            continue;
        }
        let at = r.gen_range(0..v.len());
        match r.gen_range(0..8) {
            0 => v[at] ^= 1 << r.gen_range(0..8),
            1 => v[at] = r.r#gen(),
            2 => {
                // a 32-bit length or size field set to something extreme
                let word: u32 =
                    [u32::MAX, 0x7FFF_FFFF, 0x1FFF_FFFF, 0, 0xFFFF, 0xE000_0000][r.gen_range(0..6)];
                for (k, byte) in word.to_le_bytes().iter().enumerate() {
                    if at + k < v.len() {
                        v[at + k] = *byte;
                    }
                }
            }
            3 => {
                let end = (at + r.gen_range(1..64)).min(v.len());
                v.drain(at..end);
            }
            4 => {
                let end = (at + r.gen_range(1..64)).min(v.len());
                let piece = v[at..end].to_vec();
                let to = r.gen_range(0..=v.len());
                v.splice(to..to, piece);
            }
            5 => v.truncate(at),
            _ if text => {
                // characters that matter to the text formats, and long numbers
                const PIECES: [&str; 14] = [
                    ",",
                    ":",
                    "\n",
                    "\r\n",
                    " ",
                    "-",
                    "e308",
                    "1e-400",
                    "nan",
                    "inf",
                    "abc",
                    "99999999999999999999",
                    "4294967296:1",
                    "\t",
                ];
                let p = PIECES[r.gen_range(0..PIECES.len())].as_bytes();
                v.splice(at..at, p.iter().copied());
            }
            _ => {
                let k = r.gen_range(1..16);
                let piece: Vec<u8> = (0..k).map(|_| r.r#gen()).collect();
                v.splice(at..at, piece);
            }
        }
    }
    v
}

/// The inputs a sample is checked with: the truncations (every one for short inputs, about 64
/// spread evenly otherwise) and `mutations()` seeded mutations.
fn variants(b: &[u8], seed: u64, text: bool) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let step = (b.len() / 64).max(1);
    for len in (0..b.len()).step_by(step) {
        out.push((format!("truncated to {len}"), b[..len].to_vec()));
    }
    let mut r = StdRng::seed_from_u64(seed);
    for i in 0..mutations() {
        out.push((
            format!("mutation {i} (seed {seed})"),
            mutate(b, &mut r, text),
        ));
    }
    out
}

fn fixture_images() -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/images");
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("jpg" | "png")))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect();
    out.sort();
    assert!(out.len() >= 4, "no images in {}", dir.display());
    out
}

// ---- RecordIO ------------------------------------------------------------------------------

const MAGIC: [u8; 4] = 0xCED7_230Au32.to_le_bytes();

/// A .rec file whose records exercise the format: empty, unaligned tails, the magic inside a
/// payload (split into parts), and a record over the reader's 64 KiB large-part size.
fn sample_rec(dir: &Path) -> Vec<u8> {
    let path = dir.join("sample.rec");
    let mut w = RecordWriter::create(path.to_str().unwrap()).unwrap();
    let mut r = StdRng::seed_from_u64(3);
    let big: Vec<u8> = (0..70_000).map(|_| r.r#gen()).collect();
    let payloads: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b"abc".to_vec(),
        [&MAGIC[..], b"xyz"].concat(),
        [b"abcd", &MAGIC[..], &MAGIC[..], b"q"].concat(),
        big,
        b"last".to_vec(),
    ];
    for p in &payloads {
        w.write_record(p).unwrap();
    }
    w.flush().unwrap();
    drop(w);
    std::fs::read(&path).unwrap()
}

/// Reads every record of `path`; returns how many were read and the error, if any.
fn read_all(path: &str) -> (usize, Option<String>) {
    let mut reader = match RecordReader::open(path) {
        Ok(r) => r,
        Err(e) => return (0, Some(e.message().to_owned())),
    };
    let mut n = 0;
    loop {
        match reader.next_record() {
            Ok(Some(_)) => n += 1,
            Ok(None) => return (n, None),
            Err(e) => return (n, Some(e.message().to_owned())),
        }
    }
}

/// The same through the C API: `MXRecordIOReaderReadRecord` until the end or -1.
fn read_all_c(path: &str) -> (usize, Option<String>) {
    let uri = CString::new(path).unwrap();
    let mut h: *mut c_void = std::ptr::null_mut();
    let last_error = || {
        // SAFETY: MXGetLastError returns this thread's NUL-terminated message.
        unsafe { CStr::from_ptr(MXGetLastError()) }
            .to_string_lossy()
            .into_owned()
    };
    // SAFETY: a valid C string and out-parameter.
    if unsafe { MXRecordIOReaderCreate(uri.as_ptr(), &mut h) } != 0 {
        return (0, Some(last_error()));
    }
    let mut n = 0;
    let result = loop {
        let mut buf: *const c_char = std::ptr::null();
        let mut size = 0usize;
        // SAFETY: a live reader handle and two out-parameters.
        if unsafe { MXRecordIOReaderReadRecord(h, &mut buf, &mut size) } != 0 {
            break Some(last_error());
        }
        if buf.is_null() {
            assert_eq!(size, 0);
            break None;
        }
        n += 1;
    };
    // SAFETY: the reader created above, freed once.
    assert_eq!(unsafe { MXRecordIOReaderFree(h) }, 0);
    (n, result)
}

#[test]
fn record_reader_on_damaged_files() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = temp_dir("rec");
    let clean = sample_rec(&dir);
    let path = dir.join("case.rec");
    let p = path.to_str().unwrap().to_owned();
    std::fs::write(&path, &clean).unwrap();
    assert_eq!(read_all(&p), (6, None));
    assert_eq!(read_all_c(&p), (6, None));
    let (mut errors, mut cases) = (0, 0);
    for (what, bytes) in variants(&clean, 11, false) {
        std::fs::write(&path, &bytes).unwrap();
        // record bytes are copies of file bytes; the part vector may double once, the reader
        // buffers up to 64 KiB
        let cap = 2 * bytes.len() + (256 << 10);
        let p2 = p.clone();
        let (n, err) = bounded(&what, cap, Duration::from_secs(30), move || read_all(&p2));
        let p3 = p.clone();
        let (n_c, err_c) = bounded(&what, cap, Duration::from_secs(30), move || read_all_c(&p3));
        assert!(
            n <= bytes.len() / 8,
            "{what}: {n} records from {} bytes",
            bytes.len()
        );
        assert_eq!(n, n_c, "{what}: the C API read another count");
        cases += 1;
        if let Some(m) = err {
            errors += 1;
            assert!(m.contains(&p) && m.contains("at byte"), "{what}: {m}");
            let m_c = err_c.unwrap_or_else(|| panic!("{what}: no error through the C API"));
            assert!(
                m_c.contains("MXRecordIOReaderReadRecord") && m_c.contains(&p),
                "{what}: {m_c}"
            );
        } else {
            assert!(err_c.is_none(), "{what}: {err_c:?}");
        }
    }
    assert!(
        errors > cases / 4,
        "only {errors} of {cases} damaged files were errors"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---- image decoding ------------------------------------------------------------------------

#[test]
fn image_decoder_on_damaged_files() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut errors = 0;
    for (k, (name, clean)) in fixture_images().into_iter().enumerate() {
        let im = imgproc::decode(&clean, 1, true).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert_eq!(im.data.len(), im.h * im.w * 3);
        for (what, bytes) in variants(&clean, 100 + k as u64, false) {
            let what = format!("{name}, {what}");
            let flag = (bytes.len() % 2) as i64;
            let r = bounded(&what, IMAGE_CAP, Duration::from_secs(30), move || {
                imgproc::decode(&bytes, flag, false).map(|im| (im.h, im.w, im.c, im.data.len()))
            });
            match r {
                Ok((h, w, c, len)) => {
                    assert_eq!(len, h * w * c, "{what}");
                    assert_eq!(c, if flag == 0 { 1 } else { 3 }, "{what}");
                }
                Err(e) => {
                    errors += 1;
                    assert!(
                        e.message().starts_with("Decoding failed"),
                        "{what}: {}",
                        e.message()
                    )
                }
            }
        }
    }
    assert!(errors > 100, "only {errors} damaged images were errors");
}

// ---- ImageRecordIter -----------------------------------------------------------------------

/// A .rec file of the 96x96 JPEG fixtures packed as `mx.recordio.pack` does (flag 0, label i,
/// ids), and its .idx.
fn image_rec(dir: &Path) -> (Vec<u8>, String) {
    let path = dir.join("images.rec");
    let mut w = RecordWriter::create(path.to_str().unwrap()).unwrap();
    let mut idx = String::new();
    let jpegs: Vec<_> = fixture_images()
        .into_iter()
        .filter(|(n, _)| n.starts_with("rgb96_"))
        .collect();
    assert!(jpegs.len() >= 4);
    for (i, (_, jpg)) in jpegs.iter().enumerate() {
        idx.push_str(&format!("{i}\t{}\n", w.tell()));
        let mut rec = Vec::new();
        rec.extend_from_slice(&0u32.to_le_bytes());
        rec.extend_from_slice(&(i as f32).to_le_bytes());
        rec.extend_from_slice(&(i as u64).to_le_bytes());
        rec.extend_from_slice(&0u64.to_le_bytes());
        rec.extend_from_slice(jpg);
        w.write_record(&rec).unwrap();
    }
    w.flush().unwrap();
    drop(w);
    (std::fs::read(&path).unwrap(), idx)
}

/// An iterator's error names `file`, or is MXNet's message for too few instances to fill a
/// batch (the file is valid, only short).
fn names_file_or_too_short(m: &str, file: &str) -> bool {
    m.contains(file) || m == "number of input must be bigger than batch size"
}

fn kw(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Creates `name` over `kwargs` and runs two epochs; returns the batches read and the error.
fn run_iter(name: &str, kwargs: Vec<(String, String)>) -> (usize, Option<String>) {
    let mut it = match DataIter::create(name, &kwargs) {
        Ok(it) => it,
        Err(e) => return (0, Some(e.message().to_owned())),
    };
    let mut n = 0;
    for epoch in 0..2 {
        if epoch > 0 {
            if let Err(e) = it.before_first() {
                return (n, Some(e.message().to_owned()));
            }
        }
        loop {
            match it.next_batch() {
                Ok(true) => {
                    n += 1;
                    assert!(it.current().is_ok());
                    assert!(n < 10_000, "{name}: no end of the epoch");
                }
                Ok(false) => break,
                Err(e) => return (n, Some(e.message().to_owned())),
            }
        }
    }
    (n, None)
}

/// Batches of `ImageRecordIter` are small: 2 x 3 x 32 x 32 floats; the decoder's limit bounds
/// what one damaged image may take.
fn image_iter_args(rec: &str, idx: Option<&str>) -> Vec<(String, String)> {
    let mut a = kw(&[
        ("path_imgrec", rec),
        ("data_shape", "(3,32,32)"),
        ("batch_size", "3"),
        ("preprocess_threads", "2"),
        ("prefetch_buffer", "2"),
    ]);
    if let Some(idx) = idx {
        a.extend(kw(&[("path_imgidx", idx), ("shuffle", "1")]));
    }
    a
}

#[test]
fn image_record_iter_on_damaged_rec_files() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = temp_dir("imgrec");
    let (clean, _) = image_rec(&dir);
    let path = dir.join("case.rec");
    let p = path.to_str().unwrap().to_owned();
    std::fs::write(&path, &clean).unwrap();
    let (n, err) = run_iter("ImageRecordIter", image_iter_args(&p, None));
    assert!(err.is_none() && n >= 4, "{n} {err:?}");
    let mut errors = 0;
    for (what, bytes) in variants(&clean, 21, false) {
        std::fs::write(&path, &bytes).unwrap();
        let args = image_iter_args(&p, None);
        let (_, err) = bounded(&what, IMAGE_CAP, Duration::from_secs(60), move || {
            run_iter("ImageRecordIter", args)
        });
        if let Some(m) = err {
            errors += 1;
            assert!(
                names_file_or_too_short(&m, &p),
                "{what}: the error does not name the file: {m}"
            );
        }
    }
    assert!(errors > 50, "only {errors} damaged .rec files were errors");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn image_record_iter_on_damaged_idx_files() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = temp_dir("imgidx");
    let (clean, idx) = image_rec(&dir);
    let rec = dir.join("case.rec");
    let idx_path = dir.join("case.idx");
    let (r, i) = (
        rec.to_str().unwrap().to_owned(),
        idx_path.to_str().unwrap().to_owned(),
    );
    std::fs::write(&rec, &clean).unwrap();
    std::fs::write(&idx_path, &idx).unwrap();
    let (n, err) = run_iter("ImageRecordIter", image_iter_args(&r, Some(&i)));
    assert!(err.is_none() && n >= 4, "{n} {err:?}");
    for (what, bytes) in variants(idx.as_bytes(), 31, true) {
        std::fs::write(&idx_path, &bytes).unwrap();
        let args = image_iter_args(&r, Some(&i));
        let (_, err) = bounded(&what, IMAGE_CAP, Duration::from_secs(60), move || {
            run_iter("ImageRecordIter", args)
        });
        if let Some(m) = err {
            // a bad line names the .idx file; an offset into the middle of a record, the .rec
            assert!(
                names_file_or_too_short(&m, &i) || m.contains(&r),
                "{what}: {m}"
            );
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---- CSVIter and LibSVMIter ----------------------------------------------------------------

/// The text iterators hold a block of text and a batch of rows at a time.
const TEXT_CAP: usize = 64 << 20;

fn text_case(name: &str, clean: &str, seed: u64, args: impl Fn(&str) -> Vec<(String, String)>) {
    let dir = temp_dir(name);
    let path = dir.join("case.txt");
    let p = path.to_str().unwrap().to_owned();
    std::fs::write(&path, clean).unwrap();
    let (n, err) = run_iter(name, args(&p));
    assert!(err.is_none() && n >= 4, "{name}: {n} {err:?}");
    let mut errors = 0;
    for (what, bytes) in variants(clean.as_bytes(), seed, true) {
        std::fs::write(&path, &bytes).unwrap();
        let a = args(&p);
        let it = name.to_owned();
        let (_, err) = bounded(&what, TEXT_CAP, Duration::from_secs(60), move || {
            run_iter(&it, a)
        });
        if let Some(m) = err {
            errors += 1;
            assert!(
                names_file_or_too_short(&m, &p),
                "{name}, {what}: the error does not name the file: {m}"
            );
        }
    }
    assert!(errors > 0, "{name}: no damaged file was an error");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn csv_iter_on_damaged_text() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut clean = String::new();
    for i in 0..20 {
        clean.push_str(&format!("{},{}.5,-{}e-1\n", i, i * 3, i + 1));
    }
    text_case("CSVIter", &clean, 41, |p| {
        kw(&[
            ("data_csv", p),
            ("data_shape", "(3,)"),
            ("batch_size", "4"),
            ("prefetch_buffer", "2"),
        ])
    });
}

#[test]
fn libsvm_iter_on_damaged_text() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut clean = String::new();
    for i in 0..20 {
        clean.push_str(&format!("{} 0:{}.5 3:-1 {}:2e-1\n", i % 2, i, 4 + i % 5));
    }
    text_case("LibSVMIter", &clean, 51, |p| {
        kw(&[
            ("data_libsvm", p),
            ("data_shape", "(10,)"),
            ("batch_size", "4"),
            ("prefetch_buffer", "2"),
        ])
    });
}
