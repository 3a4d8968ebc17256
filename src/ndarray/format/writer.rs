//! Writing lists and records: every record is checked first, so an invalid one writes nothing.

use super::layout::*;
use crate::dtype::DType;
use crate::error::{Error, Result};
use smallvec::SmallVec;
use std::io::Write;

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
