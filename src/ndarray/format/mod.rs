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
//!
//! Files: `layout` (magics, limits, MXNet's messages, the record types), `reader`, `writer`.

mod layout;
mod reader;
#[cfg(test)]
mod tests;
mod writer;

pub use layout::*;
pub use reader::{read_list, read_record, read_record_prefix};
pub use writer::{record_len, write_list, write_record};
