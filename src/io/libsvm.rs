//! `LibSVMIter`: lines `label idx:value idx:value ...` with 0-based ascending column indices,
//! batched into csr arrays `(batch_size, data_shape[0])`; labels are the lines' leading numbers
//! (a dense `(batch_size,)` array) or, with `label_libsvm`, the features of that file's lines
//! (csr `(batch_size, label_shape[0])`). Only `round_batch=True` exists, as in MXNet; the last
//! batch of an epoch is filled from the start and the next epoch continues after it. The input
//! can be cut into `num_parts` byte ranges at line starts (parts need not be even).
//!
//! Unlike MXNet, an index outside `data_shape`, indices out of order and malformed features are
//! errors naming the file and row, so every batch is a valid csr array.

use super::batch::{Batch, Loader};
use super::params::Params;
use super::text::{LineInput, lines};
use crate::context::Context;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ndarray::NDArray;
use crate::ndarray::format::StorageType;
use crate::ndarray::sparse::SparseValue;

/// Parsed rows of one block.
#[derive(Default)]
struct Rows {
    labels: Vec<f32>,
    /// Row r's features are `indices/values[offsets[r]..offsets[r + 1]]`.
    offsets: Vec<usize>,
    indices: Vec<i64>,
    values: Vec<f32>,
}

fn number(tok: &[u8]) -> Option<f32> {
    std::str::from_utf8(tok).ok()?.parse().ok()
}

/// Parses one line into `rows`; `Ok(false)` for a line without a label (blank or comment).
fn parse_line(line: &[u8], dim: i64, rows: &mut Rows) -> std::result::Result<bool, String> {
    let line = match line.iter().position(|&c| c == b'#') {
        Some(i) => &line[..i],
        None => line,
    };
    let mut toks = line
        .split(|c| *c == b' ' || *c == b'\t')
        .filter(|t| !t.is_empty());
    let Some(first) = toks.next() else {
        return Ok(false);
    };
    let label_tok = first.split(|&c| c == b':').next().unwrap_or(first);
    let label = number(label_tok)
        .ok_or_else(|| format!("bad label '{}'", String::from_utf8_lossy(first)))?;
    let mut last: Option<i64> = None;
    for tok in toks {
        if tok.starts_with(b"qid:") {
            continue;
        }
        let text = String::from_utf8_lossy(tok);
        let colon = tok
            .iter()
            .position(|&c| c == b':')
            .ok_or_else(|| format!("feature '{text}' has no value (index:value)"))?;
        let idx = std::str::from_utf8(&tok[..colon])
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
            .ok_or_else(|| format!("bad feature index in '{text}'"))?;
        if idx < 0 || idx >= dim {
            return Err(format!(
                "feature index {idx} is out of range for data_shape ({dim},)"
            ));
        }
        if last.is_some_and(|l| idx <= l) {
            return Err(format!(
                "feature index {idx} follows {}: indices must be ascending",
                last.unwrap_or(0)
            ));
        }
        last = Some(idx);
        let value = number(&tok[colon + 1..]).ok_or_else(|| format!("bad value in '{text}'"))?;
        rows.indices.push(idx);
        rows.values.push(value);
    }
    rows.labels.push(label);
    rows.offsets.push(rows.indices.len());
    Ok(true)
}

/// One row: its label, column indices and values.
type Row<'a> = (f32, &'a [i64], &'a [f32]);

/// One LibSVM file read row by row.
struct Column {
    input: LineInput,
    what: &'static str,
    dim: i64,
    rows: Rows,
    next: usize,
    rows_before: usize,
}

impl Column {
    fn new(uri: &str, what: &'static str, dim: i64, part: usize, parts: usize) -> Result<Self> {
        Ok(Column {
            input: LineInput::open(uri, part, parts)?,
            what,
            dim,
            rows: Rows::default(),
            next: 0,
            rows_before: 0,
        })
    }

    fn rewind(&mut self) {
        self.input.rewind();
        self.rows = Rows::default();
        self.next = 0;
        self.rows_before = 0;
    }

    fn nrows(&self) -> usize {
        self.rows.labels.len()
    }

    /// The next row: (label, indices, values), or `None` at the end.
    fn next_row(&mut self) -> Result<Option<Row<'_>>> {
        while self.next >= self.nrows() {
            self.rows_before += self.nrows();
            self.rows = Rows {
                offsets: vec![0],
                ..Rows::default()
            };
            self.next = 0;
            let Some(block) = self.input.next_block()? else {
                return Ok(None);
            };
            for line in lines(&block) {
                if let Err(msg) = parse_line(line, self.dim, &mut self.rows) {
                    return Err(Error::format(format!(
                        "{} {}, row {}: {msg}",
                        self.what,
                        self.input.path(),
                        self.rows_before + self.nrows() + 1
                    )));
                }
            }
        }
        let r = self.next;
        self.next += 1;
        let (a, b) = (self.rows.offsets[r], self.rows.offsets[r + 1]);
        Ok(Some((
            self.rows.labels[r],
            &self.rows.indices[a..b],
            &self.rows.values[a..b],
        )))
    }
}

/// A csr batch under construction.
#[derive(Default)]
struct Csr {
    values: Vec<f32>,
    indices: Vec<i64>,
    indptr: Vec<i64>,
}

impl Csr {
    fn clear(&mut self) {
        self.values.clear();
        self.indices.clear();
        self.indptr.clear();
        self.indptr.push(0);
    }
    fn push(&mut self, idx: &[i64], val: &[f32]) {
        self.indices.extend_from_slice(idx);
        self.values.extend_from_slice(val);
        self.indptr.push(self.indices.len() as i64);
    }
    fn array(&self, rows: usize, cols: i64) -> Result<NDArray> {
        let value = SparseValue {
            stype: StorageType::Csr,
            data: self.values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            data_shape: vec![self.values.len() as i64],
            aux: vec![self.indptr.clone(), self.indices.clone()],
        };
        NDArray::from_sparse_value(
            &[rows as i64, cols],
            Context::cpu(0),
            DType::F32,
            &[DType::I64, DType::I64],
            value,
        )
    }
}

pub struct LibSvmLoader {
    data: Column,
    label: Option<Column>,
    label_dim: i64,
    batch_size: usize,
    counter: u64,
    overflow: usize,
    ended: bool,
    batch: Csr,
    label_batch: Csr,
    dense_labels: Vec<f32>,
    index: Vec<u64>,
}

impl LibSvmLoader {
    pub fn new(p: &Params, batch_size: usize) -> Result<LibSvmLoader> {
        let data_libsvm = p.string("data_libsvm", None)?;
        let data_shape = p.shape("data_shape", None)?;
        if data_shape.len() != 1 {
            return Err(Error::invalid(format!(
                "dimension of data_shape is expected to be 1, got {data_shape:?}"
            )));
        }
        let label_libsvm = p.string("label_libsvm", Some("NULL"))?;
        let label_shape = p.shape("label_shape", Some(&[1]))?;
        let num_parts = p.int("num_parts", Some(1))?;
        let part_index = p.int("part_index", Some(0))?;
        if num_parts < 1 {
            return Err(Error::invalid("number of parts should be positive"));
        }
        if part_index < 0 || part_index >= num_parts {
            return Err(Error::invalid(format!(
                "part_index {part_index} must be in [0, num_parts={num_parts})"
            )));
        }
        if !p.bool("round_batch", true)? {
            return Err(Error::not_supported(
                "sparse batch loader doesn't support round_batch == false yet",
            ));
        }
        let label_size: i64 = label_shape.iter().product();
        let (part, parts) = (part_index as usize, num_parts as usize);
        let label = if label_libsvm != "NULL" {
            if label_size <= 1 {
                return Err(Error::invalid(
                    "label_shape is not expected to be (1,) when label_libsvm is set",
                ));
            }
            Some(Column::new(
                &label_libsvm,
                "label_libsvm",
                label_size,
                part,
                parts,
            )?)
        } else {
            if label_size != 1 {
                return Err(Error::invalid(
                    "label_shape is expected to be (1,) when label_libsvm is NULL",
                ));
            }
            None
        };
        Ok(LibSvmLoader {
            data: Column::new(&data_libsvm, "data_libsvm", data_shape[0], part, parts)?,
            label,
            label_dim: label_size,
            batch_size,
            counter: 0,
            overflow: 0,
            ended: false,
            batch: Csr::default(),
            label_batch: Csr::default(),
            dense_labels: Vec::new(),
            index: Vec::new(),
        })
    }

    fn rewind(&mut self) {
        self.data.rewind();
        if let Some(l) = &mut self.label {
            l.rewind();
        }
        self.counter = 0;
    }

    /// Adds the next instance to the batch; false at the end of the data.
    fn take(&mut self) -> Result<bool> {
        let Some((label, idx, val)) = self.data.next_row()? else {
            return Ok(false);
        };
        self.batch.push(idx, val);
        self.dense_labels.push(label);
        if let Some(l) = &mut self.label {
            let Some((_, li, lv)) = l.next_row()? else {
                return Err(Error::format(format!(
                    "label_libsvm {} has fewer rows than data_libsvm {}",
                    l.input.path(),
                    self.data.input.path()
                )));
            };
            self.label_batch.push(li, lv);
        }
        self.index.push(self.counter);
        self.counter += 1;
        Ok(true)
    }

    fn emit(&self, pad: usize, wrapped: bool) -> Result<Batch> {
        let n = self.batch_size;
        let label = match self.label {
            Some(_) => self.label_batch.array(n, self.label_dim)?,
            None => super::batch::dense_array(
                &[n as i64],
                DType::F32,
                &self
                    .dense_labels
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect::<Vec<u8>>(),
            )?,
        };
        Ok(Batch {
            data: self.batch.array(n, self.data.dim)?,
            label,
            index: self.index.clone(),
            pad,
            wrapped,
        })
    }
}

impl Loader for LibSvmLoader {
    fn next_batch(&mut self) -> Result<Option<Batch>> {
        if self.overflow != 0 || self.ended {
            return Ok(None);
        }
        self.batch.clear();
        self.label_batch.clear();
        self.dense_labels.clear();
        self.index.clear();
        while self.index.len() < self.batch_size {
            if !self.take()? {
                break;
            }
        }
        if self.index.len() == self.batch_size {
            return self.emit(0, false).map(Some);
        }
        self.ended = true;
        if self.index.is_empty() {
            return Ok(None);
        }
        self.rewind();
        while self.index.len() < self.batch_size {
            if !self.take()? {
                return Err(Error::invalid(
                    "number of input must be bigger than batch size",
                ));
            }
            self.overflow += 1;
        }
        self.emit(self.overflow, true).map(Some)
    }

    fn before_first(&mut self, keep_wrap: bool) -> Result<()> {
        if !(keep_wrap && self.overflow != 0) {
            self.rewind();
        }
        self.overflow = 0;
        self.ended = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_into_rows_and_bad_features_are_refused() {
        let mut rows = Rows {
            offsets: vec![0],
            ..Rows::default()
        };
        assert!(parse_line(b"1.5 0:0.5 2:1.25 # c", 3, &mut rows).unwrap());
        assert!(parse_line(b"-2", 3, &mut rows).unwrap());
        assert!(!parse_line(b"   # only a comment", 3, &mut rows).unwrap());
        assert_eq!(rows.labels, vec![1.5, -2.0]);
        assert_eq!(rows.offsets, vec![0, 2, 2]);
        assert_eq!(rows.indices, vec![0, 2]);
        assert_eq!(rows.values, vec![0.5, 1.25]);
        for (line, want) in [
            (&b"1 3:1"[..], "out of range"),
            (b"1 -1:0.6", "out of range"),
            (b"1 2:1 1:1", "ascending"),
            (b"1 2", "no value"),
            (b"x 1:1", "bad label"),
        ] {
            let e = parse_line(line, 3, &mut rows).unwrap_err();
            assert!(e.contains(want), "{e}");
        }
    }
}
