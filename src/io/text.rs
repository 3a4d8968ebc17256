//! Line-oriented input for the text iterators (CSV, LibSVM), as dmlc's line splitter reads it:
//! a file or every file of a directory (in name order), optionally cut into `num_parts` byte
//! ranges whose boundaries move forward to the next line start, read in blocks of whole lines
//! so that memory stays bounded and each block can be parsed in parallel.

use crate::error::{Error, Result};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};

/// Bytes read per block (a block is extended to the end of its last line).
const BLOCK: usize = 4 << 20;

struct FileSpan {
    path: String,
    /// This file's bytes to read: `[begin, end)`.
    begin: u64,
    end: u64,
}

/// Whole lines from a byte range of one or more files.
pub struct LineInput {
    spans: Vec<FileSpan>,
    /// The span being read, its open file and the bytes of it read so far.
    current: usize,
    file: Option<File>,
    read: u64,
    /// Bytes of the current file after the last complete line of the previous block.
    carry: Vec<u8>,
    /// Lines handed out so far (for messages).
    pub lines_before: usize,
}

fn files_of(uri: &str) -> Result<Vec<String>> {
    let meta = std::fs::metadata(uri).map_err(|e| Error::io(format!("cannot open {uri}: {e}")))?;
    if !meta.is_dir() {
        return Ok(vec![uri.to_owned()]);
    }
    let mut files: Vec<String> = std::fs::read_dir(uri)
        .map_err(|e| Error::io(format!("cannot list {uri}: {e}")))?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().map(|t| t.is_file()).unwrap_or(false))
        .map(|e| e.path().to_string_lossy().into_owned())
        .collect();
    files.sort();
    Ok(files)
}

/// How far past `pos` in `path` the next line starts: after the line holding `pos` and the
/// line breaks that follow it (dmlc's `SeekRecordBegin`).
fn skip_to_line_start(path: &str, pos: u64) -> Result<u64> {
    let mut f = File::open(path).map_err(|e| Error::io(format!("cannot open {path}: {e}")))?;
    f.seek(SeekFrom::Start(pos))
        .map_err(|e| Error::io(format!("{path}: {e}")))?;
    let mut buf = vec![0u8; 64 << 10];
    let mut n = 0u64;
    let mut in_break = false;
    loop {
        let got = f
            .read(&mut buf)
            .map_err(|e| Error::io(format!("reading {path}: {e}")))?;
        if got == 0 {
            return Ok(pos + n);
        }
        for &c in &buf[..got] {
            let brk = c == b'\n' || c == b'\r';
            if in_break && !brk {
                return Ok(pos + n);
            }
            in_break |= brk;
            n += 1;
        }
    }
}

impl LineInput {
    /// Part `part` of `parts` of `uri` (a file or a directory).
    pub fn open(uri: &str, part: usize, parts: usize) -> Result<LineInput> {
        let files = files_of(uri)?;
        let mut sizes = Vec::with_capacity(files.len());
        for f in &files {
            let m = std::fs::metadata(f).map_err(|e| Error::io(format!("cannot open {f}: {e}")))?;
            sizes.push(m.len());
        }
        let total: u64 = sizes.iter().sum();
        let step = total.div_ceil(parts.max(1) as u64);
        let (mut begin, mut end) = (
            (step * part as u64).min(total),
            (step * (part as u64 + 1)).min(total),
        );
        // move each cut that falls inside a file to that file's next line start
        let adjust = |pos: &mut u64| -> Result<()> {
            let mut start = 0;
            for (f, &size) in files.iter().zip(&sizes) {
                if *pos > start && *pos < start + size {
                    *pos = start + skip_to_line_start(f, *pos - start)?.min(size);
                    return Ok(());
                }
                start += size;
            }
            Ok(())
        };
        if begin < end {
            adjust(&mut end)?;
            adjust(&mut begin)?;
        } else {
            end = begin;
        }
        let mut spans = Vec::new();
        let mut start = 0;
        for (f, &size) in files.iter().zip(&sizes) {
            let (b, e) = (begin.max(start), end.min(start + size));
            if b < e {
                spans.push(FileSpan {
                    path: f.clone(),
                    begin: b - start,
                    end: e - start,
                });
            }
            start += size;
        }
        Ok(LineInput {
            spans,
            current: 0,
            file: None,
            read: 0,
            carry: Vec::new(),
            lines_before: 0,
        })
    }

    /// Back to the first line.
    pub fn rewind(&mut self) {
        self.current = 0;
        self.file = None;
        self.read = 0;
        self.carry.clear();
        self.lines_before = 0;
    }

    /// The file the last block came from.
    pub fn path(&self) -> &str {
        self.spans
            .get(self.current.min(self.spans.len().saturating_sub(1)))
            .map_or("", |s| s.path.as_str())
    }

    /// The next block of whole lines (never splitting a line), or `None` at the end.
    pub fn next_block(&mut self) -> Result<Option<Vec<u8>>> {
        let mut block = Vec::new();
        Ok(self.next_block_into(&mut block)?.then_some(block))
    }

    /// The next block of whole lines into `block` (its old contents dropped, its memory kept,
    /// so a caller that passes the same buffer every time faults in no new pages); false at the
    /// end.
    pub fn next_block_into(&mut self, block: &mut Vec<u8>) -> Result<bool> {
        block.clear();
        loop {
            let Some(span) = self.spans.get(self.current) else {
                return Ok(false);
            };
            if self.file.is_none() {
                let mut f = File::open(&span.path)
                    .map_err(|e| Error::io(format!("cannot open {}: {e}", span.path)))?;
                f.seek(SeekFrom::Start(span.begin))
                    .map_err(|e| Error::io(format!("{}: {e}", span.path)))?;
                self.file = Some(f);
                self.read = span.begin;
            }
            let left = span.end - self.read;
            block.append(&mut self.carry);
            if left > 0 {
                let want = (BLOCK as u64).min(left);
                let f = self.file.as_mut().expect("opened above");
                // read_to_end appends into the spare capacity without zeroing it first
                let got = f
                    .by_ref()
                    .take(want)
                    .read_to_end(block)
                    .map_err(|e| Error::io(format!("reading {}: {e}", span.path)))?;
                if (got as u64) < want {
                    return Err(Error::io(format!(
                        "reading {}: the file ended {} bytes early",
                        span.path,
                        want - got as u64
                    )));
                }
                self.read += want;
            }
            if self.read == span.end {
                // the file's last line needs no line break
                self.current += 1;
                self.file = None;
                if block.is_empty() {
                    continue;
                }
                return Ok(true);
            }
            match block.iter().rposition(|&c| c == b'\n' || c == b'\r') {
                Some(cut) => {
                    self.carry.extend_from_slice(&block[cut + 1..]);
                    block.truncate(cut + 1);
                    return Ok(true);
                }
                None => {} // one long line: read on, appending to it
            }
        }
    }
}

/// The lines of a block, without their line breaks; empty lines are skipped as dmlc does.
pub fn lines(block: &[u8]) -> impl Iterator<Item = &[u8]> {
    block
        .split(|&c| c == b'\n' || c == b'\r')
        .filter(|l| !l.is_empty())
}

/// Cuts `block` into about `n` pieces at line breaks.
pub fn split_lines(block: &[u8], n: usize) -> Vec<&[u8]> {
    let mut out = Vec::with_capacity(n);
    let mut start = 0;
    for k in 1..n {
        let mut cut = (block.len() * k / n).max(start);
        while cut < block.len() && block[cut] != b'\n' {
            cut += 1;
        }
        let cut = (cut + 1).min(block.len());
        out.push(&block[start..cut]);
        start = cut;
    }
    out.push(&block[start..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("mxrt-text-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn all_lines(mut input: LineInput) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(b) = input.next_block().unwrap() {
            out.extend(lines(&b).map(|l| String::from_utf8(l.to_vec()).unwrap()));
        }
        out
    }

    #[test]
    fn parts_split_at_line_starts_and_cover_every_line_once() {
        let d = dir().join("parts.txt");
        let text: String = (0..200)
            .map(|i| format!("line {i} {}\n", "x".repeat(i % 13)))
            .collect();
        std::fs::write(&d, &text).unwrap();
        let want: Vec<String> = text.lines().map(str::to_owned).collect();
        for parts in 1..6 {
            let mut got = Vec::new();
            for p in 0..parts {
                got.extend(all_lines(
                    LineInput::open(d.to_str().unwrap(), p, parts).unwrap(),
                ));
            }
            assert_eq!(got, want, "{parts} parts");
        }
        std::fs::remove_file(&d).unwrap();
    }

    #[test]
    fn directories_read_in_name_order_and_last_lines_need_no_break() {
        let d = dir().join("many");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("b.csv"), "3\n4").unwrap();
        std::fs::write(d.join("a.csv"), "1\r\n\n2\n").unwrap();
        let got = all_lines(LineInput::open(d.to_str().unwrap(), 0, 1).unwrap());
        assert_eq!(got, vec!["1", "2", "3", "4"]);
        assert!(LineInput::open("/nonexistent/x.csv", 0, 1).is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn split_lines_keeps_lines_whole() {
        let block = b"aa\nbbb\nc\ndddd\ne\n";
        for n in 1..6 {
            let pieces = split_lines(block, n);
            assert_eq!(pieces.concat(), block.to_vec());
            for p in &pieces {
                assert!(p.is_empty() || p.ends_with(b"\n"));
            }
        }
    }
}
