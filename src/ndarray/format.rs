//! The NDArray binary format: the list container of `MXNDArraySave`/`MXNDArrayLoad` and the
//! single-array record of `MXNDArraySaveRawBytes`/`MXNDArrayLoadFromRawBytes` (spec §4, §2.6).
//!
//! This module is pure byte handling: records in, bytes out and back. It knows nothing about the
//! engine or storage; the NDArray layer turns a [`Record`] into an array and an array into a
//! [`RecordRef`].
//!
//! # Layout (always little-endian)
//!
//! * List: `u64 0x112`, `u64 reserved`, `u64 n`, `n` records, `u64 m`, `m` names (`u64 len` +
//!   bytes), where `m` is 0 or `n`.
//! * Record V2 (`0xF993FAC9`) / V3 (`0xF993FACA`, numpy-shape semantics, dense only):
//!   `u32 magic`, `i32 stype`, [storage shape if sparse], shape (`i32 ndim` + `ndim` × `i64`),
//!   `i32 dev_type`, `i32 dev_id`, `i32 dtype`, [per aux: `i32 dtype` + shape], data, [aux data].
//! * Legacy V1 (`0xF993FAC8`): magic, shape, context, dtype, data.
//! * Legacy V0: the first `u32` is `ndim`, then `ndim` × `u32` dims, context, dtype, data.
//!
//! # Hostile input
//!
//! Readers never panic and never allocate more than the bytes they were given (plus small
//! constants): every declared count, length and shape is checked against the bytes that remain
//! before anything is allocated. Failures are [`ErrorKind::Format`](crate::ErrorKind::Format) errors whose message starts
//! with MXNet's own wording ("Invalid NDArray file format" for lists, "Invalid NDArray
//! serialization format" for single records) and says what is wrong at which byte offset. The
//! numpy-shape mismatches use MXNet's exact messages.
//!
//! Like MXNet's memory streams, the readers ignore bytes after the end of the list (or record).

use crate::context::Context;
use crate::dtype::DType;
use crate::error::{Error, Result};
use smallvec::SmallVec;
use std::io::Write;

/// `kMXAPINDArrayListMagic`: the first `u64` of a list file.
pub const LIST_MAGIC: u64 = 0x112;
/// Legacy record with `i64` dims and no storage type.
pub const RECORD_V1_MAGIC: u32 = 0xF993_FAC8;
/// Record with storage type (what MXNet writes normally).
pub const RECORD_V2_MAGIC: u32 = 0xF993_FAC9;
/// Record written in numpy-shape semantics (dense only).
pub const RECORD_V3_MAGIC: u32 = 0xF993_FACA;
/// Largest `ndim` the readers accept (numpy's limit). MXNet has none, but anything larger in a
/// file is far more likely corruption than data; the writers refuse it too, so every file mxrt
/// writes can be read back.
pub const MAX_NDIM: usize = 32;

/// The smallest number of bytes any record can take: a V1 record of unknown shape (magic and
/// `ndim == -1`) is a complete none record.
/// Used to reject array counts that the input cannot possibly hold.
const MIN_RECORD_BYTES: usize = 8;
/// The smallest number of bytes a name can take (its `u64` length).
const MIN_NAME_BYTES: usize = 8;

/// MXNet's message for a V3 record read outside numpy-shape semantics.
pub const MSG_SAVED_IN_NP_SHAPE: &str = "ndarray was saved in np shape semantics, must be loaded in the same semantics. Please turn on np shape semantics in Python using `with np_shape(True)` or decorator `use_np_shape` to scope the code of loading the ndarray.";
/// MXNet's message for a V2/legacy record read with thread-local numpy-shape semantics on.
pub const MSG_NOT_SAVED_IN_NP_SHAPE: &str = "ndarray was not saved in np shape semantics, but being loaded in np shape semantics. Please turn off np shape semantics in Python using `with np_shape(False)` to scope the code of loading the ndarray.";
/// MXNet's message for a sparse record read in numpy-shape semantics.
pub const MSG_SPARSE_LOAD_IN_NP_SHAPE: &str =
    "only allow deserializing ndarray of default storage type in np shape semantics";
/// MXNet's message for saving a sparse array in numpy-shape semantics.
pub const MSG_SPARSE_SAVE_IN_NP_SHAPE: &str =
    "only allow serializing ndarray of default storage type in np shape semantics";

const LIST_PREFIX: &str = "Invalid NDArray file format";
const RECORD_PREFIX: &str = "Invalid NDArray serialization format";

/// MXNet's numpy-shape state (`MXIsNumpyShape`): it decides which record version is written and
/// which versions and shapes are accepted on load.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum NpShape {
    /// Classic semantics: `ndim == 0` means "unknown"; V3 records are refused.
    #[default]
    Off,
    /// Numpy semantics on for this thread: only V3 records load.
    ThreadLocalOn,
    /// Numpy semantics on globally: V3, V2 and legacy records all load (V2/legacy with numpy
    /// shape rules).
    GlobalOn,
}

impl NpShape {
    /// From the C code (0 off, 1 thread-local on, 2 global on).
    pub fn from_code(code: i32) -> Result<Self> {
        match code {
            0 => Ok(NpShape::Off),
            1 => Ok(NpShape::ThreadLocalOn),
            2 => Ok(NpShape::GlobalOn),
            _ => Err(Error::invalid(format!(
                "numpy shape state {code} is not one of 0 (off), 1 (thread-local on), 2 (global on)"
            ))),
        }
    }
    pub fn code(self) -> i32 {
        match self {
            NpShape::Off => 0,
            NpShape::ThreadLocalOn => 1,
            NpShape::GlobalOn => 2,
        }
    }
    /// True unless `Off`: numpy shape rules apply.
    pub fn is_on(self) -> bool {
        self != NpShape::Off
    }
}

/// Storage type of a record (`NDArrayStorageType`; the numeric values are the file's codes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum StorageType {
    Default = 0,
    RowSparse = 1,
    Csr = 2,
}

impl StorageType {
    /// The storage type for a code, or `None` for codes MXNet does not know.
    pub fn from_code(code: i32) -> Option<Self> {
        match code {
            0 => Some(StorageType::Default),
            1 => Some(StorageType::RowSparse),
            2 => Some(StorageType::Csr),
            _ => None,
        }
    }
    pub fn code(self) -> i32 {
        self as i32
    }
    /// Number of aux arrays: 0 dense, 1 row_sparse (indices), 2 csr (indptr, indices).
    pub fn num_aux(self) -> usize {
        match self {
            StorageType::Default => 0,
            StorageType::RowSparse => 1,
            StorageType::Csr => 2,
        }
    }
    /// MXNet's name (`default`, `row_sparse`, `csr`).
    pub fn name(self) -> &'static str {
        match self {
            StorageType::Default => "default",
            StorageType::RowSparse => "row_sparse",
            StorageType::Csr => "csr",
        }
    }
}

/// The context as stored in a record: raw `dev_type`/`dev_id` codes, not validated (MXNet loads
/// every record to CPU first and only then looks at the saved context).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SavedContext {
    pub dev_type: i32,
    pub dev_id: i32,
}

impl SavedContext {
    /// `cpu(0)`, what MXNet writes for every host array.
    pub const CPU: SavedContext = SavedContext {
        dev_type: 1,
        dev_id: 0,
    };
    /// What a "none" record carries (it stores no context); MXNet reports (0, 0) for none arrays.
    pub const NONE: SavedContext = SavedContext {
        dev_type: 0,
        dev_id: 0,
    };

    /// The saved context as a [`Context`], if its codes are valid.
    pub fn to_context(self) -> Result<Context> {
        Context::from_codes(self.dev_type, self.dev_id)
    }
}

impl From<Context> for SavedContext {
    fn from(ctx: Context) -> Self {
        SavedContext {
            dev_type: ctx.dev_type.code(),
            dev_id: ctx.dev_id,
        }
    }
}

/// One aux array of a sparse record (row_sparse: indices; csr: indptr then indices).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuxArray {
    pub dtype: DType,
    pub shape: Vec<i64>,
    pub data: Vec<u8>,
}

/// An owned array record, as read from a file.
///
/// A "none" record (classic semantics: `ndim == 0`; numpy semantics: unknown ndim or a `-1` dim)
/// has `shape == None`; it stores no context, dtype or data, so those fields hold
/// [`SavedContext::NONE`], `DType::F32` and nothing. Such a record cannot be written (MXNet fails
/// the same way: "Unknown storage type-1").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub stype: StorageType,
    /// The logical shape; `None` for a none array.
    pub shape: Option<Vec<i64>>,
    pub ctx: SavedContext,
    pub dtype: DType,
    /// Element bytes, C-contiguous, little-endian. For sparse records these are the stored values
    /// (shaped `storage_shape`).
    pub data: Vec<u8>,
    /// Shape of `data` for sparse records; `None` for dense ones.
    pub storage_shape: Option<Vec<i64>>,
    /// Aux arrays (empty for dense records).
    pub aux: Vec<AuxArray>,
}

impl Record {
    /// A dense record on `cpu(0)`.
    pub fn dense(shape: Vec<i64>, dtype: DType, data: Vec<u8>) -> Self {
        Record {
            stype: StorageType::Default,
            shape: Some(shape),
            ctx: SavedContext::CPU,
            dtype,
            data,
            storage_shape: None,
            aux: Vec::new(),
        }
    }
    /// True for a none array.
    pub fn is_none(&self) -> bool {
        self.shape.is_none()
    }
    /// Bytes of element data this record holds (values plus aux arrays).
    pub fn data_bytes(&self) -> usize {
        self.data.len() + self.aux.iter().map(|a| a.data.len()).sum::<usize>()
    }
    /// A borrowed view for the writers.
    pub fn as_ref(&self) -> RecordRef<'_> {
        RecordRef {
            stype: self.stype,
            shape: self.shape.as_deref(),
            ctx: self.ctx,
            dtype: self.dtype,
            data: &self.data,
            storage_shape: self.storage_shape.as_deref(),
            aux: self
                .aux
                .iter()
                .map(|a| AuxRef {
                    dtype: a.dtype,
                    shape: &a.shape,
                    data: &a.data,
                })
                .collect(),
        }
    }
}

/// A borrowed aux array for writing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuxRef<'a> {
    pub dtype: DType,
    pub shape: &'a [i64],
    pub data: &'a [u8],
}

/// A borrowed record for writing without copying the data. Same meaning as [`Record`]'s fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordRef<'a> {
    pub stype: StorageType,
    pub shape: Option<&'a [i64]>,
    pub ctx: SavedContext,
    pub dtype: DType,
    pub data: &'a [u8],
    pub storage_shape: Option<&'a [i64]>,
    pub aux: Vec<AuxRef<'a>>,
}

impl<'a> RecordRef<'a> {
    /// A dense record on `cpu(0)`.
    pub fn dense(shape: &'a [i64], dtype: DType, data: &'a [u8]) -> Self {
        RecordRef {
            stype: StorageType::Default,
            shape: Some(shape),
            ctx: SavedContext::CPU,
            dtype,
            data,
            storage_shape: None,
            aux: Vec::new(),
        }
    }
    /// An owned copy.
    pub fn to_owned(&self) -> Record {
        Record {
            stype: self.stype,
            shape: self.shape.map(<[i64]>::to_vec),
            ctx: self.ctx,
            dtype: self.dtype,
            data: self.data.to_vec(),
            storage_shape: self.storage_shape.map(<[i64]>::to_vec),
            aux: self
                .aux
                .iter()
                .map(|a| AuxArray {
                    dtype: a.dtype,
                    shape: a.shape.to_vec(),
                    data: a.data.to_vec(),
                })
                .collect(),
        }
    }
}

/// Which layout a record uses (from its first `u32`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RecordVersion {
    /// No magic: the first `u32` is `ndim`, dims are `u32`.
    V0,
    V1,
    V2,
    V3,
}

impl RecordVersion {
    /// The version a record's first `u32` announces.
    pub fn from_magic(magic: u32) -> Self {
        match magic {
            RECORD_V1_MAGIC => RecordVersion::V1,
            RECORD_V2_MAGIC => RecordVersion::V2,
            RECORD_V3_MAGIC => RecordVersion::V3,
            _ => RecordVersion::V0,
        }
    }
}

/// Number of elements of a shape whose dims are all `>= 0`; `None` if the product overflows.
/// A zero dim makes the product 0 whatever the other dims are.
fn element_count(dims: &[i64]) -> Option<u64> {
    if dims.contains(&0) {
        return Some(0);
    }
    dims.iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(u64::try_from(d).ok()?))
}

// ---------------------------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------------------------

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
    if count > (r.remaining() / MIN_RECORD_BYTES) as u64 {
        return Err(r.err(
            count_at,
            format_args!(
                "array count {count} cannot fit in the {} bytes that follow (a record takes at least {MIN_RECORD_BYTES})",
                r.remaining()
            ),
        ));
    }
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
    if n_names > (r.remaining() / MIN_NAME_BYTES) as u64 {
        return Err(r.err(
            names_at,
            format_args!(
                "name count {n_names} cannot fit in the {} bytes that follow",
                r.remaining()
            ),
        ));
    }
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

// ---------------------------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------------------------

fn check_shape_for_write(what: &str, dims: &[i64]) -> Result<()> {
    if dims.len() > MAX_NDIM {
        return Err(Error::invalid(format!(
            "cannot save {what} with ndim {} (the format readers accept at most {MAX_NDIM})",
            dims.len()
        )));
    }
    if let Some((i, d)) = dims.iter().enumerate().find(|(_, d)| **d < 0) {
        return Err(Error::invalid(format!(
            "cannot save {what} {dims:?}: dim {i} is {d}"
        )));
    }
    Ok(())
}

fn check_data_len(what: &str, dims: &[i64], dtype: DType, len: usize) -> Result<()> {
    let want = element_count(dims).and_then(|c| c.checked_mul(dtype.size() as u64));
    if want != Some(len as u64) {
        return Err(Error::invalid(format!(
            "{what} has {len} bytes but shape {dims:?} of {} needs {}",
            dtype.name(),
            want.map_or_else(|| "more than 2^64".to_owned(), |w| w.to_string())
        )));
    }
    Ok(())
}

/// Checks that `rec` can be written in numpy mode `np` and returns its shape.
fn check_writable<'a>(rec: &RecordRef<'a>, np: NpShape) -> Result<&'a [i64]> {
    let Some(shape) = rec.shape else {
        // A none NDArray has storage type -1; MXNet fails in num_aux_data with this message.
        return Err(Error::invalid("Unknown storage type-1"));
    };
    if np.is_on() && rec.stype != StorageType::Default {
        return Err(Error::invalid(MSG_SPARSE_SAVE_IN_NP_SHAPE));
    }
    check_shape_for_write("shape", shape)?;
    let nad = rec.stype.num_aux();
    if rec.aux.len() != nad {
        return Err(Error::invalid(format!(
            "a {} record needs {nad} aux arrays, got {}",
            rec.stype.name(),
            rec.aux.len()
        )));
    }
    let data_shape = match (rec.stype, rec.storage_shape) {
        (StorageType::Default, None) => shape,
        (StorageType::Default, Some(_)) => {
            return Err(Error::invalid("a dense record has no storage shape"));
        }
        (_, Some(s)) => {
            check_shape_for_write("storage shape", s)?;
            s
        }
        (_, None) => {
            return Err(Error::invalid(format!(
                "a {} record needs a storage shape",
                rec.stype.name()
            )));
        }
    };
    check_data_len("data", data_shape, rec.dtype, rec.data.len())?;
    for (i, a) in rec.aux.iter().enumerate() {
        check_shape_for_write(&format!("aux {i} shape"), a.shape)?;
        check_data_len(&format!("aux {i} data"), a.shape, a.dtype, a.data.len())?;
    }
    Ok(shape)
}

fn put_shape(out: &mut SmallVec<[u8; 256]>, dims: &[i64]) {
    out.extend_from_slice(&(dims.len() as i32).to_le_bytes());
    for d in dims {
        out.extend_from_slice(&d.to_le_bytes());
    }
}

/// Writes an already-checked record.
fn write_checked<W: Write + ?Sized>(
    w: &mut W,
    rec: &RecordRef<'_>,
    shape: &[i64],
    np: NpShape,
) -> Result<()> {
    // The header (at most 4 + 4 + 3 * (4 + 8 * MAX_NDIM) + 12 + 2 * 4 bytes) is assembled on the
    // stack in the common case; element data goes straight from the caller's slices.
    let mut head: SmallVec<[u8; 256]> = SmallVec::new();
    let magic = if np.is_on() {
        RECORD_V3_MAGIC
    } else {
        RECORD_V2_MAGIC
    };
    head.extend_from_slice(&magic.to_le_bytes());
    head.extend_from_slice(&rec.stype.code().to_le_bytes());
    if let Some(s) = rec.storage_shape {
        put_shape(&mut head, s);
    }
    put_shape(&mut head, shape);
    head.extend_from_slice(&rec.ctx.dev_type.to_le_bytes());
    head.extend_from_slice(&rec.ctx.dev_id.to_le_bytes());
    head.extend_from_slice(&rec.dtype.code().to_le_bytes());
    for a in &rec.aux {
        head.extend_from_slice(&a.dtype.code().to_le_bytes());
        put_shape(&mut head, a.shape);
    }
    w.write_all(&head)?;
    w.write_all(rec.data)?;
    for a in &rec.aux {
        w.write_all(a.data)?;
    }
    Ok(())
}

/// Writes one record (`MXNDArraySaveRawBytes`): V2, or V3 when numpy-shape mode is on (then only
/// dense records are allowed). Nothing is written if the record is invalid.
pub fn write_record<W: Write + ?Sized>(w: &mut W, rec: &RecordRef<'_>, np: NpShape) -> Result<()> {
    let shape = check_writable(rec, np)?;
    write_checked(w, rec, shape, np)
}

/// The number of bytes [`write_record`] writes for `rec`.
pub fn record_len(rec: &RecordRef<'_>, np: NpShape) -> Result<usize> {
    let shape = check_writable(rec, np)?;
    let shape_len = |d: &[i64]| 4 + 8 * d.len();
    let mut n = 4 + 4 + shape_len(shape) + 12 + rec.data.len();
    if let Some(s) = rec.storage_shape {
        n += shape_len(s);
    }
    for a in &rec.aux {
        n += 4 + shape_len(a.shape) + a.data.len();
    }
    Ok(n)
}

/// Writes a list file (`MXNDArraySave`): `names` is empty (no names) or has one name per record.
/// Every record is checked before the first byte is written; data is streamed from the records'
/// slices, so wrap a file in a `BufWriter`.
pub fn write_list<W: Write + ?Sized, S: AsRef<str>>(
    w: &mut W,
    records: &[RecordRef<'_>],
    names: &[S],
    np: NpShape,
) -> Result<()> {
    if !names.is_empty() && names.len() != records.len() {
        return Err(Error::invalid(format!(
            "{} names for {} arrays: give none or one per array",
            names.len(),
            records.len()
        )));
    }
    let shapes = records
        .iter()
        .enumerate()
        .map(|(i, r)| check_writable(r, np).map_err(|e| e.context(format_args!("array {i}"))))
        .collect::<Result<Vec<_>>>()?;
    let mut head = [0u8; 24];
    head[..8].copy_from_slice(&LIST_MAGIC.to_le_bytes());
    head[16..].copy_from_slice(&(records.len() as u64).to_le_bytes());
    w.write_all(&head)?;
    for (rec, shape) in records.iter().zip(shapes) {
        write_checked(w, rec, shape, np)?;
    }
    w.write_all(&(names.len() as u64).to_le_bytes())?;
    for name in names {
        let name = name.as_ref().as_bytes();
        w.write_all(&(name.len() as u64).to_le_bytes())?;
        w.write_all(name)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

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
        assert!(
            !NpShape::Off.is_on() && NpShape::ThreadLocalOn.is_on() && NpShape::GlobalOn.is_on()
        );
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
}
