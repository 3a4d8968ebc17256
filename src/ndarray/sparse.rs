//! Sparse storage: what a `row_sparse` or `csr` array holds and the conversions between that and
//! dense bytes.
//!
//! A sparse array's value is replaced as a whole by the engine op that writes it (how many rows
//! or non-zeros a result has is known only when its kernel runs), so the value sits behind a lock
//! in a [`SparseCell`] that every handle of the array shares; the array's engine variable orders
//! the ops that read and replace it, the lock only makes each access atomic. Values are host
//! memory: sparse arrays live on CPU contexts.
//!
//! Layouts, as in MXNet:
//! - `row_sparse` of shape `(R, d1, ..)`: `indices` (aux 0) lists the stored rows in ascending
//!   order; `data` has shape `(len(indices), d1, ..)`, row `k` being row `indices[k]`.
//! - `csr` of shape `(R, C)`: `indptr` (aux 0, `R + 1` entries) and `indices` (aux 1, the column
//!   of each stored value); `data` has shape `(nnz,)`; row `r` is `data[indptr[r]..indptr[r+1]]`.

use super::format::StorageType;
use crate::dtype::DType;
use crate::error::{Error, Result};
use parking_lot::Mutex;

/// The stored values and aux arrays of a sparse array.
#[derive(Clone, Debug, PartialEq)]
pub struct SparseValue {
    pub stype: StorageType,
    /// The stored values, C-contiguous, `data_shape` elements.
    pub data: Vec<u8>,
    pub data_shape: Vec<i64>,
    /// row_sparse: `[indices]`; csr: `[indptr, indices]`.
    pub aux: Vec<Vec<i64>>,
}

/// What every handle of one sparse array shares.
#[derive(Debug)]
pub struct SparseCell {
    pub stype: StorageType,
    /// The dtypes the aux arrays are reported and saved with (MXNet's default: int64).
    pub aux_types: Vec<DType>,
    pub value: Mutex<SparseValue>,
}

/// `n` zeros, or an out-of-memory error instead of the abort a failed `vec![0; n]` would be (the
/// sizes come from callers' shapes).
pub(crate) fn zeroed<T: Clone + Default>(n: usize) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| {
        Error::out_of_memory(format!("cannot allocate {n} elements for a sparse array"))
    })?;
    v.resize(n, T::default());
    Ok(v)
}

/// Bytes of `shape` elements of `dtype`, or an error when that does not fit in memory's range.
pub(crate) fn dense_len(shape: &[i64], dtype: DType) -> Result<usize> {
    shape
        .iter()
        .try_fold(dtype.size(), |acc, &d| acc.checked_mul(d.max(0) as usize))
        .ok_or_else(|| Error::out_of_memory(format!("an array of shape {shape:?} is too large")))
}

/// True if the element's bytes are a zero of `dtype` (`-0.0` included, as `x != 0` in MXNet).
fn is_zero(dtype: DType, e: &[u8]) -> bool {
    let sign_masked = |hi: usize, mask: u8| {
        e.iter()
            .enumerate()
            .all(|(i, &b)| if i == hi { b & mask == 0 } else { b == 0 })
    };
    match dtype {
        DType::F16 | DType::BF16 => sign_masked(1, 0x7f),
        DType::F32 => sign_masked(3, 0x7f),
        DType::F64 => sign_masked(7, 0x7f),
        _ => e.iter().all(|&b| b == 0),
    }
}

/// Elements per row (the product of the dims after the first).
fn row_len(shape: &[i64]) -> usize {
    shape.iter().skip(1).map(|&d| d.max(0) as usize).product()
}

fn rows(shape: &[i64]) -> usize {
    shape.first().map_or(0, |&d| d.max(0) as usize)
}

impl SparseValue {
    /// An all-zero array of `stype` and logical `shape`.
    pub fn zeros(stype: StorageType, shape: &[i64]) -> Result<SparseValue> {
        check_shape(stype, shape)?;
        Ok(match stype {
            StorageType::RowSparse => {
                let mut data_shape = shape.to_vec();
                data_shape[0] = 0;
                SparseValue {
                    stype,
                    data: Vec::new(),
                    data_shape,
                    aux: vec![Vec::new()],
                }
            }
            _ => SparseValue {
                stype,
                data: Vec::new(),
                data_shape: vec![0],
                aux: vec![zeroed(rows(shape) + 1)?, Vec::new()],
            },
        })
    }

    /// The sparse form of a dense array (`bytes`: `shape` elements of `dtype`): the rows with a
    /// non-zero (row_sparse) or the non-zero elements (csr).
    pub fn from_dense(
        stype: StorageType,
        shape: &[i64],
        dtype: DType,
        bytes: &[u8],
    ) -> Result<SparseValue> {
        check_shape(stype, shape)?;
        let es = dtype.size();
        let width = row_len(shape) * es;
        let mut v = SparseValue::zeros(stype, shape)?;
        match stype {
            StorageType::RowSparse => {
                for r in 0..rows(shape) {
                    let row = &bytes[r * width..(r + 1) * width];
                    if row.chunks_exact(es).any(|e| !is_zero(dtype, e)) {
                        v.aux[0].push(r as i64);
                        v.data.extend_from_slice(row);
                    }
                }
                v.data_shape[0] = v.aux[0].len() as i64;
            }
            _ => {
                for r in 0..rows(shape) {
                    let row = &bytes[r * width..(r + 1) * width];
                    for (c, e) in row.chunks_exact(es).enumerate() {
                        if !is_zero(dtype, e) {
                            v.aux[1].push(c as i64);
                            v.data.extend_from_slice(e);
                        }
                    }
                    v.aux[0][r + 1] = v.aux[1].len() as i64;
                }
                v.data_shape[0] = v.aux[1].len() as i64;
            }
        }
        Ok(v)
    }

    /// Writes the dense form into `out` (`shape` elements of `dtype`, zeroed first). The value
    /// must be well formed for `shape` ([`SparseValue::check`]).
    pub fn to_dense(&self, shape: &[i64], dtype: DType, out: &mut [u8]) -> Result<()> {
        self.check_data_size(dtype)?;
        self.check(shape, false)?;
        let es = dtype.size();
        let width = row_len(shape) * es;
        out.fill(0);
        match self.stype {
            StorageType::RowSparse => {
                for (k, &r) in self.aux[0].iter().enumerate() {
                    let r = r as usize;
                    out[r * width..(r + 1) * width]
                        .copy_from_slice(&self.data[k * width..(k + 1) * width]);
                }
            }
            _ => {
                for r in 0..rows(shape) {
                    let (a, b) = (self.aux[0][r] as usize, self.aux[0][r + 1] as usize);
                    for k in a..b {
                        let c = self.aux[1][k] as usize;
                        out[r * width + c * es..r * width + (c + 1) * es]
                            .copy_from_slice(&self.data[k * es..(k + 1) * es]);
                    }
                }
            }
        }
        Ok(())
    }

    /// The dense form as a new buffer.
    pub fn dense_bytes(&self, shape: &[i64], dtype: DType) -> Result<Vec<u8>> {
        let mut out = zeroed(dense_len(shape, dtype)?)?;
        self.to_dense(shape, dtype, &mut out)?;
        Ok(out)
    }

    /// The stored values fill exactly their shape of `dtype` elements.
    pub fn check_data_size(&self, dtype: DType) -> Result<()> {
        if dense_len(&self.data_shape, dtype).ok() != Some(self.data.len()) {
            return Err(Error::invalid(format!(
                "malformed {} array: {} bytes of values for a values shape of {:?}",
                self.stype.name(),
                self.data.len(),
                self.data_shape
            )));
        }
        Ok(())
    }

    /// Number of stored rows (row_sparse) or values (csr).
    pub fn nnz(&self) -> usize {
        self.data_shape.first().map_or(0, |&d| d.max(0) as usize)
    }

    /// A row_sparse value keeping only the stored rows listed in `rows` (any order, duplicates
    /// allowed): MXNet's `_sparse_retain`. Rows not stored stay absent.
    pub fn retain_rows(&self, shape: &[i64], dtype: DType, keep: &[i64]) -> Result<SparseValue> {
        if self.stype != StorageType::RowSparse {
            return Err(Error::invalid("retaining rows needs a row_sparse array"));
        }
        self.check_data_size(dtype)?;
        self.check(shape, false)?;
        let width = row_len(shape) * dtype.size();
        let mut want: Vec<i64> = keep.to_vec();
        want.sort_unstable();
        want.dedup();
        let mut v = SparseValue::zeros(StorageType::RowSparse, shape)?;
        for (k, &r) in self.aux[0].iter().enumerate() {
            if want.binary_search(&r).is_ok() {
                v.aux[0].push(r);
                v.data
                    .extend_from_slice(&self.data[k * width..(k + 1) * width]);
            }
        }
        v.data_shape[0] = v.aux[0].len() as i64;
        Ok(v)
    }

    /// Checks the structure against the logical `shape` (MXNet's `SyncCheckFormat`): sizes
    /// agree, row ids ascending and in range (row_sparse); `indptr` starts at 0, never
    /// decreases and ends at the value count, columns in range and, with `full`, ascending
    /// within each row (csr).
    pub fn check(&self, shape: &[i64], full: bool) -> Result<()> {
        let bad = |what: String| {
            Err(Error::invalid(format!(
                "malformed {} array: {what}",
                self.stype.name()
            )))
        };
        let nnz = self.nnz();
        match self.stype {
            StorageType::RowSparse => {
                let idx = &self.aux[0];
                if idx.len() != nnz {
                    return bad(format!("{} row ids for {nnz} stored rows", idx.len()));
                }
                if self.data_shape.len() != shape.len() || self.data_shape[1..] != shape[1..] {
                    return bad(format!(
                        "values of shape {:?} for an array of shape {:?}",
                        self.data_shape, shape
                    ));
                }
                for (k, &r) in idx.iter().enumerate() {
                    if r < 0 || r >= shape[0] {
                        return bad(format!("row id {r} out of range 0..{}", shape[0]));
                    }
                    if k > 0 && r <= idx[k - 1] {
                        return bad(format!("row ids not strictly ascending at position {k}"));
                    }
                }
            }
            StorageType::Csr => {
                let (indptr, idx) = (&self.aux[0], &self.aux[1]);
                if shape.len() != 2 {
                    return bad(format!("shape {shape:?} is not 2-dimensional"));
                }
                if indptr.len() != rows(shape) + 1 {
                    return bad(format!(
                        "indptr has {} entries for {} rows (needs rows + 1)",
                        indptr.len(),
                        rows(shape)
                    ));
                }
                if idx.len() != nnz {
                    return bad(format!("{} column indices for {nnz} values", idx.len()));
                }
                if indptr[0] != 0 || indptr[indptr.len() - 1] != nnz as i64 {
                    return bad(format!(
                        "indptr must start at 0 and end at {nnz}, it runs {}..{}",
                        indptr[0],
                        indptr[indptr.len() - 1]
                    ));
                }
                if let Some(r) = (0..rows(shape)).find(|&r| indptr[r + 1] < indptr[r]) {
                    return bad(format!("indptr decreases at row {r}"));
                }
                for r in 0..rows(shape) {
                    let row = &idx[indptr[r] as usize..indptr[r + 1] as usize];
                    for (k, &c) in row.iter().enumerate() {
                        if c < 0 || c >= shape[1] {
                            return bad(format!(
                                "column index {c} out of range 0..{} in row {r}",
                                shape[1]
                            ));
                        }
                        if full && k > 0 && c <= row[k - 1] {
                            return bad(format!("column indices not ascending in row {r}"));
                        }
                    }
                }
            }
            StorageType::Default => return bad("a dense value".into()),
        }
        Ok(())
    }
}

/// Sparse storage's shape rules: csr is 2-D, row_sparse at least 1-D.
pub fn check_shape(stype: StorageType, shape: &[i64]) -> Result<()> {
    match stype {
        StorageType::Csr if shape.len() != 2 => Err(Error::invalid(format!(
            "a csr array is 2-dimensional, not of shape {shape:?}"
        ))),
        StorageType::RowSparse if shape.is_empty() => Err(Error::invalid(
            "a row_sparse array needs at least one dimension",
        )),
        StorageType::Default => Err(Error::invalid("default storage is not sparse")),
        _ if shape.iter().any(|&d| d < 0) => Err(Error::invalid(format!(
            "a sparse array needs a known shape, not {shape:?}"
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn dense_round_trips_through_both_layouts() {
        let shape = [3, 2];
        let dense = f32s(&[0.0, 0.0, 5.0, 0.0, -0.0, 7.0]);
        let rsp =
            SparseValue::from_dense(StorageType::RowSparse, &shape, DType::F32, &dense).unwrap();
        assert_eq!(rsp.aux, vec![vec![1, 2]]);
        assert_eq!(rsp.data, f32s(&[5.0, 0.0, -0.0, 7.0]));
        assert_eq!(rsp.data_shape, vec![2, 2]);
        assert_eq!(rsp.dense_bytes(&shape, DType::F32).unwrap(), dense);
        let csr = SparseValue::from_dense(StorageType::Csr, &shape, DType::F32, &dense).unwrap();
        assert_eq!(csr.aux, vec![vec![0, 0, 1, 2], vec![0, 1]]);
        assert_eq!(csr.data, f32s(&[5.0, 7.0]));
        let back = csr.dense_bytes(&shape, DType::F32).unwrap();
        assert_eq!(back, f32s(&[0.0, 0.0, 5.0, 0.0, 0.0, 7.0]));
    }

    #[test]
    fn retain_keeps_listed_stored_rows() {
        let shape = [4, 1];
        let dense = f32s(&[1.0, 2.0, 0.0, 4.0]);
        let rsp =
            SparseValue::from_dense(StorageType::RowSparse, &shape, DType::F32, &dense).unwrap();
        let kept = rsp.retain_rows(&shape, DType::F32, &[3, 2, 0, 3]).unwrap();
        assert_eq!(kept.aux, vec![vec![0, 3]]);
        assert_eq!(kept.data, f32s(&[1.0, 4.0]));
    }

    #[test]
    fn malformed_values_are_reported() {
        let mut v = SparseValue::zeros(StorageType::Csr, &[2, 3]).unwrap();
        v.check(&[2, 3], true).unwrap();
        v.aux[0] = vec![0, 2, 1];
        v.aux[1] = vec![1, 0];
        v.data_shape = vec![2];
        let e = v.check(&[2, 3], false).unwrap_err();
        assert!(e.message().contains("end at 2"), "{e}");
        v.aux[0] = vec![0, 2, 2];
        assert!(v.check(&[2, 3], false).is_ok());
        let e = v.check(&[2, 3], true).unwrap_err();
        assert!(e.message().contains("not ascending in row 0"), "{e}");
        let mut r = SparseValue::zeros(StorageType::RowSparse, &[2, 3]).unwrap();
        r.aux[0] = vec![5];
        r.data_shape[0] = 1;
        assert!(
            r.check(&[2, 3], false)
                .unwrap_err()
                .message()
                .contains("out of range")
        );
    }
}
