//! Reading lists and records from untrusted bytes: every count, length and shape is checked
//! against the bytes that remain before anything is allocated.

use super::layout::*;
use crate::dtype::DType;
use crate::error::{Error, Result};
use smallvec::SmallVec;

/// The smallest number of bytes any record can take: a V1 record of unknown shape (magic and
/// `ndim == -1`) is a complete none record.
/// Used to reject array counts that the input cannot possibly hold.
const MIN_RECORD_BYTES: usize = 8;
/// The smallest number of bytes a name can take (its `u64` length).
const MIN_NAME_BYTES: usize = 8;

/// The message prefixes of MXNet's list and single-record loaders.
const LIST_PREFIX: &str = "Invalid NDArray file format";
const RECORD_PREFIX: &str = "Invalid NDArray serialization format";

/// A bounds-checked little-endian cursor whose errors name the byte offset.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    prefix: &'static str,
    /// The list entry being read (index, offset of its record), named in error messages.
    scope: Option<(u64, usize)>,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8], prefix: &'static str) -> Self {
        Reader {
            buf,
            pos: 0,
            prefix,
            scope: None,
        }
    }

    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn err(&self, at: usize, msg: impl std::fmt::Display) -> Error {
        let prefix = self.prefix;
        Error::format(match self.scope {
            Some((i, rec_at)) => {
                format!("{prefix}: array {i} (record at byte {rec_at}): {msg} at byte {at}")
            }
            None => format!("{prefix}: {msg} at byte {at}"),
        })
    }

    /// Fails unless the bytes that remain can hold `count` items of at least `min_bytes` each, so
    /// a hostile count is refused before anything is sized by it.
    fn check_count_fits(
        &self,
        at: usize,
        what: &str,
        count: u64,
        item: &str,
        min_bytes: usize,
    ) -> Result<()> {
        let rem = self.remaining();
        if count > (rem / min_bytes) as u64 {
            return Err(self.err(
                at,
                format_args!(
                    "{what} {count} cannot fit in the {rem} bytes that follow (a {item} takes at least {min_bytes})"
                ),
            ));
        }
        Ok(())
    }

    fn take(&mut self, n: u64, what: &dyn std::fmt::Display) -> Result<&'a [u8]> {
        let rem = self.remaining();
        match usize::try_from(n) {
            Ok(n) if n <= rem => {
                let s = &self.buf[self.pos..self.pos + n];
                self.pos += n;
                Ok(s)
            }
            _ => Err(self.err(
                self.pos,
                format_args!("truncated input: {what} needs {n} bytes but only {rem} remain"),
            )),
        }
    }

    fn array<const N: usize>(&mut self, what: &dyn std::fmt::Display) -> Result<[u8; N]> {
        let s = self.take(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }
    fn u32(&mut self, what: &dyn std::fmt::Display) -> Result<u32> {
        self.array(what).map(u32::from_le_bytes)
    }
    fn i32(&mut self, what: &dyn std::fmt::Display) -> Result<i32> {
        self.array(what).map(i32::from_le_bytes)
    }
    fn u64(&mut self, what: &dyn std::fmt::Display) -> Result<u64> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// Reads `i32 ndim` + `ndim` × `i64`; returns where the dims start and the dims, unchecked
    /// (the caller applies the rules of its semantics).
    fn known_shape(&mut self, what: &str) -> Result<(usize, Vec<i64>)> {
        let at = self.pos;
        let ndim = self.i32(&format_args!("{what} ndim"))?;
        let ndim = self.check_ndim(at, what, i64::from(ndim))?;
        let dims_at = self.pos;
        let bytes = self.take(ndim as u64 * 8, &format_args!("{what} dims (ndim {ndim})"))?;
        let dims = bytes
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().expect("chunks_exact(8) yields 8 bytes")))
            .collect();
        Ok((dims_at, dims))
    }

    /// Like [`Self::known_shape`], but `Ok(None)` for `ndim == -1` (unknown) when `allow_unknown`.
    fn shape(&mut self, what: &str, allow_unknown: bool) -> Result<Option<(usize, Vec<i64>)>> {
        let next = self.buf.get(self.pos..self.pos + 4);
        if allow_unknown && next == Some(&(-1i32).to_le_bytes()[..]) {
            self.pos += 4;
            return Ok(None);
        }
        self.known_shape(what).map(Some)
    }

    fn check_ndim(&self, at: usize, what: &str, ndim: i64) -> Result<usize> {
        if ndim < 0 {
            return Err(self.err(at, format_args!("{what} ndim {ndim} is negative")));
        }
        if ndim > MAX_NDIM as i64 {
            return Err(self.err(
                at,
                format_args!("{what} ndim {ndim} exceeds the supported maximum of {MAX_NDIM}"),
            ));
        }
        Ok(ndim as usize)
    }

    /// Fails unless every dim is `>= 0` (or `>= -1` when `allow_unknown`). Returns whether any
    /// dim is -1.
    fn check_dims(
        &self,
        dims_at: usize,
        what: &str,
        dims: &[i64],
        allow_unknown: bool,
    ) -> Result<bool> {
        let mut unknown = false;
        for (i, &d) in dims.iter().enumerate() {
            if d == -1 && allow_unknown {
                unknown = true;
            } else if d < 0 {
                return Err(self.err(
                    dims_at + 8 * i,
                    format_args!("{what} dim {i} is {d}, a negative size"),
                ));
            }
        }
        Ok(unknown)
    }

    /// Reads `element_count(dims) * dtype.size()` bytes of element data.
    fn data(&mut self, what: &str, dims: &[i64], dtype: DType) -> Result<Vec<u8>> {
        let at = self.pos;
        let n = element_count(dims)
            .and_then(|c| c.checked_mul(dtype.size() as u64))
            .ok_or_else(|| {
                self.err(
                    at,
                    format_args!("{what} size of shape {dims:?} x {} overflows", dtype.name()),
                )
            })?;
        Ok(self
            .take(
                n,
                &format_args!("{what} ({} elements of {dims:?})", dtype.name()),
            )?
            .to_vec())
    }

    fn dtype(&mut self, what: &str) -> Result<DType> {
        let at = self.pos;
        let code = self.i32(&format_args!("{what} type flag"))?;
        DType::from_code(code).map_err(|_| {
            self.err(
                at,
                format_args!("{what} has unknown type flag {code} (Unknown type enum {code})"),
            )
        })
    }

    fn ctx(&mut self) -> Result<SavedContext> {
        let dev_type = self.i32(&"context dev_type")?;
        let dev_id = self.i32(&"context dev_id")?;
        Ok(SavedContext { dev_type, dev_id })
    }

    /// One record at the cursor (§4.2).
    fn record(&mut self, np: NpShape) -> Result<Record> {
        let magic = self.u32(&"record magic")?;
        if magic == RECORD_V3_MAGIC {
            if !np.is_on() {
                return Err(Error::format(MSG_SAVED_IN_NP_SHAPE));
            }
        } else if np == NpShape::ThreadLocalOn {
            return Err(Error::format(MSG_NOT_SAVED_IN_NP_SHAPE));
        }
        if magic != RECORD_V2_MAGIC && magic != RECORD_V3_MAGIC {
            return self.legacy_record(magic);
        }

        let stype_at = self.pos;
        let code = self.i32(&"storage type")?;
        if np.is_on() && code != StorageType::Default.code() {
            return Err(Error::format(MSG_SPARSE_LOAD_IN_NP_SHAPE));
        }
        let stype = StorageType::from_code(code)
            .ok_or_else(|| self.err(stype_at, format_args!("Unknown storage type {code}")))?;
        let nad = stype.num_aux();

        let storage_shape = if nad > 0 {
            let (at, dims) = self.known_shape("storage shape")?;
            self.check_dims(at, "storage shape", &dims, false)?;
            Some(dims)
        } else {
            None
        };

        let shape = match self.shape("shape", np.is_on())? {
            None => None,
            Some((at, dims)) => {
                if np.is_on() {
                    let unknown = self.check_dims(at, "shape", &dims, true)?;
                    (!unknown).then_some(dims)
                } else if dims.is_empty() {
                    None
                } else {
                    self.check_dims(at, "shape", &dims, false)?;
                    Some(dims)
                }
            }
        };
        let Some(shape) = shape else {
            return Ok(none_record(stype, storage_shape));
        };

        let ctx = self.ctx()?;
        let dtype = self.dtype("array")?;
        let mut aux_headers: SmallVec<[(DType, Vec<i64>); 2]> = SmallVec::new();
        for i in 0..nad {
            let dt = self.dtype(&format!("aux {i}"))?;
            let what = format!("aux {i} shape");
            let (at, dims) = self.known_shape(&what)?;
            self.check_dims(at, &what, &dims, false)?;
            aux_headers.push((dt, dims));
        }
        let data = self.data("data", storage_shape.as_deref().unwrap_or(&shape), dtype)?;
        let mut aux = Vec::with_capacity(nad);
        for (i, (dt, dims)) in aux_headers.into_iter().enumerate() {
            let data = self.data(&format!("aux {i} data"), &dims, dt)?;
            aux.push(AuxArray {
                dtype: dt,
                shape: dims,
                data,
            });
        }
        Ok(Record {
            stype,
            shape: Some(shape),
            ctx,
            dtype,
            data,
            storage_shape,
            aux,
        })
    }

    /// V1 and V0 records (no storage type; MXNet's `LegacyLoad`). Unknown shapes (ndim -1 or a
    /// -1 dim) are none arrays whatever the numpy mode; `ndim == 0` is a scalar (MXNet 1.9.1's
    /// `shape_is_none` treats it as known).
    fn legacy_record(&mut self, magic: u32) -> Result<Record> {
        let shape = if magic == RECORD_V1_MAGIC {
            match self.shape("shape", true)? {
                None => None,
                Some((at, dims)) => {
                    let unknown = self.check_dims(at, "shape", &dims, true)?;
                    (!unknown).then_some(dims)
                }
            }
        } else {
            let at = self.pos - 4;
            let ndim = self.check_ndim(
                at,
                "legacy (V0) record: first u32 read as",
                i64::from(magic),
            )?;
            let bytes = self.take(
                ndim as u64 * 4,
                &format_args!("legacy (V0) u32 dims (ndim {ndim})"),
            )?;
            Some(
                bytes
                    .chunks_exact(4)
                    .map(|c| i64::from(u32::from_le_bytes(c.try_into().expect("4-byte chunk"))))
                    .collect(),
            )
        };
        let Some(shape) = shape else {
            return Ok(none_record(StorageType::Default, None));
        };
        let ctx = self.ctx()?;
        let dtype = self.dtype("array")?;
        let data = self.data("data", &shape, dtype)?;
        Ok(Record {
            stype: StorageType::Default,
            shape: Some(shape),
            ctx,
            dtype,
            data,
            storage_shape: None,
            aux: Vec::new(),
        })
    }
}

fn none_record(stype: StorageType, storage_shape: Option<Vec<i64>>) -> Record {
    Record {
        stype,
        shape: None,
        ctx: SavedContext::NONE,
        dtype: DType::F32,
        data: Vec::new(),
        storage_shape,
        aux: Vec::new(),
    }
}

/// Reads a list file (`MXNDArrayLoad`/`MXNDArrayLoadFromBuffer`): the records and the names
/// (empty, or one per record). Bytes after the names are ignored, as MXNet does.
pub fn read_list(buf: &[u8], np: NpShape) -> Result<(Vec<Record>, Vec<String>)> {
    let mut r = Reader::new(buf, LIST_PREFIX);
    let magic = r.u64(&"list magic")?;
    if magic != LIST_MAGIC {
        return Err(r.err(
            0,
            format_args!("list magic is {magic:#x}, expected {LIST_MAGIC:#x}"),
        ));
    }
    r.u64(&"reserved field")?;
    let count_at = r.pos;
    let count = r.u64(&"array count")?;
    r.check_count_fits(count_at, "array count", count, "record", MIN_RECORD_BYTES)?;
    // Grows with the records actually parsed; the count alone never sizes an allocation.
    let mut records = Vec::new();
    for i in 0..count {
        r.scope = Some((i, r.pos));
        records.push(r.record(np)?);
    }
    r.scope = None;

    let names_at = r.pos;
    let n_names = r.u64(&"name count")?;
    if n_names != 0 && n_names != count {
        return Err(r.err(
            names_at,
            format_args!("name count {n_names} must be 0 or equal the array count {count}"),
        ));
    }
    r.check_count_fits(names_at, "name count", n_names, "name", MIN_NAME_BYTES)?;
    let mut names = Vec::new();
    for i in 0..n_names {
        let len = r.u64(&format_args!("name {i} length"))?;
        let at = r.pos;
        let bytes = r.take(len, &format_args!("name {i}"))?;
        let name = std::str::from_utf8(bytes)
            .map_err(|e| r.err(at, format_args!("name {i} is not valid UTF-8 ({e})")))?;
        names.push(name.to_owned());
    }
    Ok((records, names))
}

/// Reads one record (`MXNDArrayLoadFromRawBytes`). Bytes after the record are ignored, as MXNet
/// does.
pub fn read_record(buf: &[u8], np: NpShape) -> Result<Record> {
    read_record_prefix(buf, np).map(|(rec, _)| rec)
}

/// Reads the record at the start of `buf` and says how many bytes it took.
pub fn read_record_prefix(buf: &[u8], np: NpShape) -> Result<(Record, usize)> {
    let mut r = Reader::new(buf, RECORD_PREFIX);
    let rec = r.record(np)?;
    Ok((rec, r.pos))
}
