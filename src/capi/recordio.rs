//! RecordIO functions of MXNet 1.9.1's C API (`MXRecordIOWriter*`, `MXRecordIOReader*`), over
//! `crate::io::recordio`. Files are byte-identical to MXNet's.
//!
//! A writer and a reader are handles of two kinds, so a reader passed to a writer function (or
//! a freed one) is -1 with a message. The record `MXRecordIOReaderReadRecord` returns lives in
//! the reader until its next read or free, as in MXNet, and is followed by a NUL byte.
//!
//! Differences from MXNet, on purpose: a corrupt or truncated file is -1 naming the file and the
//! byte offset (MXNet aborts on some of them); `MXRecordIOReaderSeek` clears the end-of-file state,
//! so a record can be read again after a read reached the end (MXNet keeps returning NULL);
//! `MXRecordIOWriterFree` reports a failure to write out buffered records.
//!
//! # Safety
//! Every export has MXNet's C contract: pointer arguments are NULL or valid for the sizes given,
//! strings are NUL-terminated, handles come from mxrt. NULL and stale handles are reported (-1).
#![allow(clippy::missing_safety_doc)]

use super::args;
use super::error::api_call;
use super::handle::{self, Handle, HandleKind};
use super::types::RecordIOHandle;
use crate::error::Result;
use crate::io::recordio::{RecordReader, RecordWriter};
use parking_lot::Mutex;
use std::ffi::{c_char, c_int};
use std::sync::Arc;

pub(crate) struct CWriter(Mutex<RecordWriter>);
pub(crate) struct CReader(Mutex<RecordReader>);

impl Handle for CWriter {
    const KIND: HandleKind = HandleKind::RecordIOWriter;
}
impl Handle for CReader {
    const KIND: HandleKind = HandleKind::RecordIOReader;
}

fn writer(h: RecordIOHandle) -> Result<Arc<CWriter>> {
    handle::borrow::<CWriter>(h, "handle")
}
fn reader(h: RecordIOHandle) -> Result<Arc<CReader>> {
    handle::borrow::<CReader>(h, "handle")
}

/// Creates (or truncates) the file `uri` and returns a writer for it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXRecordIOWriterCreate(
    uri: *const c_char,
    out: *mut RecordIOHandle,
) -> c_int {
    api_call("MXRecordIOWriterCreate", || {
        // SAFETY: API contract: a C string and an out-parameter.
        let (uri, out) = unsafe { (args::c_str(uri, "uri")?, args::out(out, "out")?) };
        let w = RecordWriter::create(uri).map_err(|e| e.context("uri"))?;
        *out = handle::into_handle(Arc::new(CWriter(Mutex::new(w))));
        Ok(())
    })
}

/// Writes out the buffered records, closes the file and frees the writer. The handle is freed
/// even when writing fails (then -1).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXRecordIOWriterFree(handle: RecordIOHandle) -> c_int {
    api_call("MXRecordIOWriterFree", || {
        let w = handle::take::<CWriter>(handle, "handle")?;
        w.0.lock().flush()
    })
}

/// Appends a record of `size` bytes (less than 2^29) from `buf`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXRecordIOWriterWriteRecord(
    handle: RecordIOHandle,
    buf: *const c_char,
    size: usize,
) -> c_int {
    api_call("MXRecordIOWriterWriteRecord", || {
        let w = writer(handle)?;
        // SAFETY: API contract: `buf` holds `size` bytes.
        let bytes = unsafe { args::slice(buf.cast::<u8>(), size, "buf")? };
        w.0.lock().write_record(bytes)
    })
}

/// The byte offset the next record will start at (what `MXIndexedRecordIO` writes to `.idx`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXRecordIOWriterTell(handle: RecordIOHandle, pos: *mut usize) -> c_int {
    api_call("MXRecordIOWriterTell", || {
        let w = writer(handle)?;
        // SAFETY: API contract: out-parameter.
        let pos = unsafe { args::out(pos, "pos")? };
        *pos = w.0.lock().tell() as usize;
        Ok(())
    })
}

/// Opens the file `uri` for reading records.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXRecordIOReaderCreate(
    uri: *const c_char,
    out: *mut RecordIOHandle,
) -> c_int {
    api_call("MXRecordIOReaderCreate", || {
        // SAFETY: API contract: a C string and an out-parameter.
        let (uri, out) = unsafe { (args::c_str(uri, "uri")?, args::out(out, "out")?) };
        let r = RecordReader::open(uri).map_err(|e| e.context("uri"))?;
        *out = handle::into_handle(Arc::new(CReader(Mutex::new(r))));
        Ok(())
    })
}

/// Closes the file and frees the reader (and the last record read).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXRecordIOReaderFree(handle: RecordIOHandle) -> c_int {
    api_call("MXRecordIOReaderFree", || {
        handle::take::<CReader>(handle, "handle").map(drop)
    })
}

/// Reads the next record: `*buf` points to its bytes (owned by the reader, valid until its next
/// read or free) and `*size` is its length; at the end of the file `*buf` is NULL and `*size` 0.
/// A corrupt file is -1 naming the file and offset; the reader then stays at that record.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXRecordIOReaderReadRecord(
    handle: RecordIOHandle,
    buf: *mut *const c_char,
    size: *mut usize,
) -> c_int {
    api_call("MXRecordIOReaderReadRecord", || {
        let r = reader(handle)?;
        // SAFETY: API contract: out-parameters.
        let (buf, size) = unsafe { (args::out(buf, "buf")?, args::out(size, "size")?) };
        let mut g = r.0.lock();
        match g.next_record()? {
            Some(rec) => {
                let (ptr, len) = (rec.as_ptr(), rec.len());
                *buf = ptr.cast();
                *size = len;
            }
            None => {
                *buf = std::ptr::null();
                *size = 0;
            }
        }
        Ok(())
    })
}

/// Moves the reader to byte `pos` (a record start, from `Tell` or an `.idx` file).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXRecordIOReaderSeek(handle: RecordIOHandle, pos: usize) -> c_int {
    api_call("MXRecordIOReaderSeek", || {
        reader(handle)?.0.lock().seek(pos as u64)
    })
}

/// The byte offset the next read starts at.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXRecordIOReaderTell(handle: RecordIOHandle, pos: *mut usize) -> c_int {
    api_call("MXRecordIOReaderTell", || {
        let r = reader(handle)?;
        // SAFETY: API contract: out-parameter.
        let pos = unsafe { args::out(pos, "pos")? };
        *pos = r.0.lock().tell() as usize;
        Ok(())
    })
}
