//! The record layout: magics, limits, MXNet's messages, and the record types the reader returns
//! and the writer takes.

use crate::context::Context;
use crate::dtype::DType;
use crate::error::{Error, Result};

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
pub(super) fn element_count(dims: &[i64]) -> Option<u64> {
    if dims.contains(&0) {
        return Some(0);
    }
    dims.iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(u64::try_from(d).ok()?))
}
