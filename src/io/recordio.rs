//! dmlc's RecordIO format, as MXNet 1.9.1 writes and reads `.rec` files.
//!
//! A record is one or more parts. Each part is `magic` (`0xced7230a`, little-endian), a `u32`
//! holding the continuation flag in its top 3 bits and the part's length in the low 29, the
//! payload, and zero padding to a multiple of 4 bytes. A payload that contains the magic at a
//! 4-byte-aligned offset is cut there: the magic is dropped and the parts are flagged 1 (first),
//! 2 (middle) and 3 (last); a record without such a hit is one part flagged 0. The reader joins
//! the parts and puts the magic back between them, so every payload round-trips and a reader can
//! find record starts by scanning for an aligned magic.
//!
//! The reader checks every header against the bytes left in the file before it allocates, so a
//! truncated or corrupt file is an error naming the offset, never a huge allocation.

use crate::error::{Error, Result};
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;

/// The magic number that starts every part.
pub const MAGIC: u32 = 0xced7_230a;
/// A record (and each of its parts) must be shorter than this.
pub const MAX_RECORD: usize = 1 << 29;

const MAGIC_BYTES: [u8; 4] = MAGIC.to_le_bytes();
/// Parts at least this long are read straight from the file into the record; smaller reads go
/// through the reader's buffer of this size.
const LARGE_PART: usize = 64 << 10;

fn encode_lrec(cflag: u32, len: usize) -> [u8; 4] {
    ((cflag << 29) | len as u32).to_le_bytes()
}

/// Appends `payload` to `out` in RecordIO layout, split and padded as dmlc's writer does.
pub fn encode_record(payload: &[u8], out: &mut Vec<u8>) -> Result<()> {
    if payload.len() >= MAX_RECORD {
        return Err(Error::invalid(format!(
            "RecordIO only accept record less than 2^29 bytes (the record has {} bytes)",
            payload.len()
        )));
    }
    let lower_align = payload.len() & !3;
    let mut start = 0;
    for i in (0..lower_align).step_by(4) {
        if payload[i..i + 4] == MAGIC_BYTES {
            out.extend_from_slice(&MAGIC_BYTES);
            out.extend_from_slice(&encode_lrec(if start == 0 { 1 } else { 2 }, i - start));
            out.extend_from_slice(&payload[start..i]);
            start = i + 4;
        }
    }
    out.extend_from_slice(&MAGIC_BYTES);
    out.extend_from_slice(&encode_lrec(
        if start != 0 { 3 } else { 0 },
        payload.len() - start,
    ));
    out.extend_from_slice(&payload[start..]);
    let padded = (payload.len() + 3) & !3;
    out.resize(out.len() + padded - payload.len(), 0);
    Ok(())
}

/// Writes records to a file (`MXRecordIOWriterCreate`).
pub struct RecordWriter {
    file: BufWriter<File>,
    path: String,
    pos: u64,
    scratch: Vec<u8>,
}

impl RecordWriter {
    /// Creates (or truncates) `path`.
    pub fn create(path: &str) -> Result<RecordWriter> {
        let file = File::create(Path::new(path))
            .map_err(|e| Error::io(format!("cannot open {path} for writing: {e}")))?;
        Ok(RecordWriter {
            file: BufWriter::with_capacity(1 << 20, file),
            path: path.to_owned(),
            pos: 0,
            scratch: Vec::new(),
        })
    }

    /// Appends one record.
    pub fn write_record(&mut self, payload: &[u8]) -> Result<()> {
        self.scratch.clear();
        encode_record(payload, &mut self.scratch)?;
        self.file
            .write_all(&self.scratch)
            .map_err(|e| Error::io(format!("writing {}: {e}", self.path)))?;
        self.pos += self.scratch.len() as u64;
        Ok(())
    }

    /// The byte offset the next record starts at.
    pub fn tell(&self) -> u64 {
        self.pos
    }

    /// Writes out what is buffered.
    pub fn flush(&mut self) -> Result<()> {
        self.file
            .flush()
            .map_err(|e| Error::io(format!("writing {}: {e}", self.path)))
    }
}

/// Reads records from a file (`MXRecordIOReaderCreate`).
pub struct RecordReader {
    file: BufReader<File>,
    path: String,
    /// Where the next read starts.
    pos: u64,
    /// The file's size when opened (or last re-checked).
    len: u64,
    /// The last record read.
    record: Vec<u8>,
    at_end: bool,
    /// The last part read was large: with the buffer empty, the next header is read on its own
    /// so that the buffer does not fill with the next payload (which would then be copied twice).
    large_parts: bool,
}

impl RecordReader {
    pub fn open(path: &str) -> Result<RecordReader> {
        let file = File::open(Path::new(path))
            .map_err(|e| Error::io(format!("cannot open {path} for reading: {e}")))?;
        let len = file
            .metadata()
            .map_err(|e| Error::io(format!("{path}: {e}")))?
            .len();
        Ok(RecordReader {
            // small records come through the buffer, parts of 64 KiB and more straight from
            // the file (see `read_exact`)
            file: BufReader::with_capacity(LARGE_PART, file),
            path: path.to_owned(),
            pos: 0,
            len,
            record: Vec::new(),
            at_end: false,
            large_parts: false,
        })
    }

    fn corrupt(&self, at: u64, what: impl std::fmt::Display) -> Error {
        Error::format(format!(
            "Invalid RecordIO File {}: {what} at byte {at}",
            self.path
        ))
    }

    fn read_exact(&mut self, buf: &mut [u8]) -> Result<()> {
        let buffered = self.file.buffer().len();
        let r = if buf.len() > buffered && buf.len() >= LARGE_PART {
            // a large part: what is buffered, then the rest straight from the file (one copy)
            let (head, tail) = buf.split_at_mut(buffered);
            head.copy_from_slice(self.file.buffer());
            self.file.consume(buffered);
            self.file.get_mut().read_exact(tail)
        } else {
            self.file.read_exact(buf)
        };
        r.map_err(|e| Error::io(format!("reading {}: {e}", self.path)))?;
        self.pos += buf.len() as u64;
        Ok(())
    }

    /// The next record, or `None` at the end of the file. The slice stays valid until the next
    /// call. On an error the reader stays where the bad part starts.
    pub fn next_record(&mut self) -> Result<Option<&[u8]>> {
        if self.at_end {
            return Ok(None);
        }
        let start = self.pos;
        self.record.clear();
        loop {
            let part_at = self.pos;
            let left = self.len.saturating_sub(part_at);
            if left == 0 {
                // the file may have grown since it was opened (a writer still appending)
                self.len = self.file.get_ref().metadata().map_or(self.len, |m| m.len());
            }
            let left = self.len.saturating_sub(part_at);
            if left == 0 && part_at == start {
                self.at_end = true;
                return Ok(None);
            }
            let fail = |r: &mut Self, e: Error| {
                let _ = r.seek(start);
                Err(e)
            };
            if left < 8 {
                let e = if part_at == start {
                    self.corrupt(part_at, format!("a truncated header ({left} bytes)"))
                } else {
                    self.corrupt(part_at, "a record whose last part is missing")
                };
                return fail(self, e);
            }
            let mut header = [0u8; 8];
            let r = if self.large_parts && self.file.buffer().is_empty() {
                self.file
                    .get_mut()
                    .read_exact(&mut header)
                    .map(|_| self.pos += 8)
                    .map_err(|e| Error::io(format!("reading {}: {e}", self.path)))
            } else {
                self.read_exact(&mut header)
            };
            if let Err(e) = r {
                return fail(self, e);
            }
            let magic = u32::from_le_bytes(header[..4].try_into().expect("4 bytes"));
            if magic != MAGIC {
                let e = self.corrupt(part_at, format!("bad magic {magic:#010x}"));
                return fail(self, e);
            }
            let lrec = u32::from_le_bytes(header[4..].try_into().expect("4 bytes"));
            let (cflag, len) = (lrec >> 29, (lrec & (MAX_RECORD as u32 - 1)) as usize);
            let padded = (len + 3) & !3;
            if padded as u64 > left - 8 {
                let e = self.corrupt(
                    part_at,
                    format!(
                        "a part of {len} bytes with only {} bytes left in the file",
                        left - 8
                    ),
                );
                return fail(self, e);
            }
            self.large_parts = padded >= LARGE_PART;
            let base = self.record.len();
            self.record.resize(base + padded, 0);
            let mut body = std::mem::take(&mut self.record);
            let r = self.read_exact(&mut body[base..]);
            self.record = body;
            if let Err(e) = r {
                return fail(self, e);
            }
            self.record.truncate(base + len);
            if cflag == 0 || cflag == 3 {
                // a NUL after the bytes, and a real allocation even for an empty record, as
                // MXNet's `std::string` gives C callers
                self.record.push(0);
                self.record.pop();
                return Ok(Some(&self.record));
            }
            self.record.extend_from_slice(&MAGIC_BYTES);
        }
    }

    /// Moves to byte `pos` (a record start). Clears the end-of-file state.
    pub fn seek(&mut self, pos: u64) -> Result<()> {
        self.file
            .seek(SeekFrom::Start(pos))
            .map_err(|e| Error::io(format!("seeking {} to {pos}: {e}", self.path)))?;
        self.pos = pos;
        self.at_end = false;
        Ok(())
    }

    /// Where the next read starts.
    pub fn tell(&self) -> u64 {
        self.pos
    }

    pub fn path(&self) -> &str {
        &self.path
    }
}

/// Byte offsets of the record starts in `bytes[begin..end]`: aligned positions holding the magic
/// followed by a first-part or whole-record flag (how dmlc's splitter finds them).
pub fn find_record_starts(bytes: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut i = 0;
    while i + 8 <= bytes.len() {
        if bytes[i..i + 4] == MAGIC_BYTES {
            let lrec = u32::from_le_bytes(bytes[i + 4..i + 8].try_into().expect("4 bytes"));
            if matches!(lrec >> 29, 0 | 1) {
                out.push(i);
            }
        }
        i += 4;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> String {
        let dir = std::env::temp_dir().join(format!("mxrt-recordio-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join(name).to_str().unwrap().to_owned()
    }

    /// dmlc's writer, spelled out independently: scan aligned words, cut at the magic.
    fn reference_parts(payload: &[u8]) -> Vec<(u32, Vec<u8>)> {
        let mut parts = Vec::new();
        let mut cur = Vec::new();
        let mut i = 0;
        while i < payload.len() {
            if i % 4 == 0 && i + 4 <= payload.len() && payload[i..i + 4] == MAGIC_BYTES {
                parts.push(std::mem::take(&mut cur));
                i += 4;
                continue;
            }
            cur.push(payload[i]);
            i += 1;
        }
        parts.push(cur);
        let n = parts.len();
        parts
            .into_iter()
            .enumerate()
            .map(|(k, p)| {
                let flag = match (n, k) {
                    (1, _) => 0,
                    (_, 0) => 1,
                    (_, k) if k == n - 1 => 3,
                    _ => 2,
                };
                (flag, p)
            })
            .collect()
    }

    #[test]
    fn layout_matches_the_reference_split() {
        let m = MAGIC_BYTES;
        let cases: Vec<Vec<u8>> = vec![
            vec![],
            b"a".to_vec(),
            b"abcd".to_vec(),
            m.to_vec(),
            [m, m].concat(),
            [b"xy".as_slice(), &m, b"zz"].concat(), // unaligned: not cut
            [b"wxyz".as_slice(), &m, b"12345", &m, &m, b"q"].concat(),
            [m.as_slice(), b"abc"].concat(),
        ];
        for payload in cases {
            let mut enc = Vec::new();
            encode_record(&payload, &mut enc).unwrap();
            let mut want = Vec::new();
            for (flag, part) in reference_parts(&payload) {
                want.extend_from_slice(&m);
                want.extend_from_slice(&((flag << 29) | part.len() as u32).to_le_bytes());
                want.extend_from_slice(&part);
                if flag == 0 || flag == 3 {
                    while want.len() % 4 != 0 {
                        want.push(0);
                    }
                }
            }
            assert_eq!(enc, want, "payload {payload:?}");
            assert_eq!(enc.len() % 4, 0);
        }
    }

    #[test]
    fn records_round_trip_with_tell_and_seek() {
        let path = temp("rt.rec");
        let m = MAGIC_BYTES;
        let records: Vec<Vec<u8>> = vec![
            b"hello".to_vec(),
            vec![],
            [m.as_slice(), b"abcd", &m].concat(),
            (0..5000u32).flat_map(|i| (i * 7).to_le_bytes()).collect(),
            [b"ab".as_slice(), &m].concat(),
            // large parts, read straight from the file, then small ones through the buffer
            (0..70_001u32).map(|i| (i % 251) as u8).collect(),
            [vec![9u8; 65_536], m.to_vec(), vec![4u8; 65_540]].concat(),
            b"small after large".to_vec(),
            vec![1u8; 65_535],
        ];
        let mut w = RecordWriter::create(&path).unwrap();
        let mut offsets = Vec::new();
        for r in &records {
            offsets.push(w.tell());
            w.write_record(r).unwrap();
        }
        w.flush().unwrap();
        drop(w);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(
            find_record_starts(&bytes),
            offsets.iter().map(|&o| o as usize).collect::<Vec<_>>()
        );
        let mut r = RecordReader::open(&path).unwrap();
        for (i, want) in records.iter().enumerate() {
            assert_eq!(r.tell(), offsets[i]);
            assert_eq!(r.next_record().unwrap().unwrap(), want.as_slice());
        }
        assert!(r.next_record().unwrap().is_none());
        assert!(r.next_record().unwrap().is_none());
        r.seek(offsets[2]).unwrap();
        assert_eq!(r.next_record().unwrap().unwrap(), records[2].as_slice());
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn corrupt_files_are_errors_with_offsets() {
        let path = temp("bad.rec");
        let mut w = RecordWriter::create(&path).unwrap();
        w.write_record(b"first").unwrap();
        w.write_record(&[MAGIC_BYTES.as_slice(), b"second!!"].concat())
            .unwrap();
        drop(w);
        let good = std::fs::read(&path).unwrap();
        // every truncation: whole records read, then an error or a clean end
        for cut in 0..good.len() {
            std::fs::write(&path, &good[..cut]).unwrap();
            let mut r = RecordReader::open(&path).unwrap();
            let mut n = 0;
            loop {
                match r.next_record() {
                    Ok(Some(_)) => n += 1,
                    Ok(None) => break,
                    Err(e) => {
                        assert!(e.message().contains("Invalid RecordIO File"), "{e}");
                        break;
                    }
                }
            }
            assert!(n <= 1 || cut == good.len(), "cut {cut}: {n} records");
        }
        // bad magic
        let mut bad = good.clone();
        bad[0] ^= 1;
        std::fs::write(&path, &bad).unwrap();
        let e = RecordReader::open(&path)
            .unwrap()
            .next_record()
            .unwrap_err();
        assert!(
            e.message().contains("bad magic") && e.message().contains("byte 0"),
            "{e}"
        );
        // a length beyond the file
        let mut long = good.clone();
        long[4..8].copy_from_slice(&((MAX_RECORD as u32) - 1).to_le_bytes());
        std::fs::write(&path, &long).unwrap();
        let e = RecordReader::open(&path)
            .unwrap()
            .next_record()
            .unwrap_err();
        assert!(e.message().contains("bytes left in the file"), "{e}");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn mutated_files_never_panic_or_over_allocate() {
        let path = temp("mut.rec");
        let m = MAGIC_BYTES;
        let mut w = RecordWriter::create(&path).unwrap();
        for r in [
            b"abc".to_vec(),
            [m.as_slice(), b"wxyz", &m, b"1"].concat(),
            vec![7u8; 300],
        ] {
            w.write_record(&r).unwrap();
        }
        drop(w);
        let good = std::fs::read(&path).unwrap();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut rand = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..2000 {
            let mut bad = good.clone();
            for _ in 0..1 + rand() % 4 {
                let at = (rand() % bad.len() as u64) as usize;
                bad[at] = rand() as u8;
            }
            std::fs::write(&path, &bad).unwrap();
            let mut r = RecordReader::open(&path).unwrap();
            for _ in 0..8 {
                match r.next_record() {
                    Ok(Some(rec)) => assert!(rec.len() <= bad.len(), "a record past the file"),
                    Ok(None) | Err(_) => break,
                }
            }
            assert!(
                r.record.capacity() <= 2 * bad.len() + 64,
                "allocation beyond the file"
            );
        }
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn oversized_records_are_refused() {
        let big = vec![0u8; MAX_RECORD];
        let mut out = Vec::new();
        let e = encode_record(&big, &mut out).unwrap_err();
        assert!(e.message().contains("less than 2^29"), "{e}");
        assert!(out.is_empty());
    }
}
