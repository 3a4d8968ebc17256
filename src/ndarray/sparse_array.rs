//! Sparse NDArrays (`row_sparse`, `csr`): creation, their parts as dense arrays, and moving
//! contents between storage types. A sparse array's chunk holds no data; it carries the engine
//! variable that orders the ops reading and replacing the array's [`SparseValue`].

use super::array::NDArray;
use super::chunk::Chunk;
use super::format::StorageType;
use super::shape::Shape;
use super::sparse::{SparseCell, SparseValue, check_shape};
use crate::context::Context;
use crate::dtype::DType;
use crate::engine::{Engine, PushArgs};
use crate::error::{Error, Result};
use parking_lot::Mutex;
use std::sync::Arc;

/// Aux values (stored as i64) as bytes of `dtype`, and back. Aux arrays are integer indices:
/// int64 (MXNet's default), int32 and the other integer types are accepted.
fn aux_to_bytes(v: &[i64], dtype: DType) -> Result<Vec<u8>> {
    Ok(match dtype {
        DType::I64 => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        DType::I32 => v.iter().flat_map(|&x| (x as i32).to_le_bytes()).collect(),
        DType::U8 => v.iter().map(|&x| x as u8).collect(),
        DType::I8 => v.iter().map(|&x| x as i8 as u8).collect(),
        other => return Err(aux_dtype_error(other)),
    })
}

fn aux_from_bytes(b: &[u8], dtype: DType) -> Result<Vec<i64>> {
    Ok(match dtype {
        DType::I64 => b
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().expect("8")))
            .collect(),
        DType::I32 => b
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes(c.try_into().expect("4")) as i64)
            .collect(),
        DType::U8 => b.iter().map(|&x| x as i64).collect(),
        DType::I8 => b.iter().map(|&x| x as i8 as i64).collect(),
        other => return Err(aux_dtype_error(other)),
    })
}

/// Row ids from an array of any numeric dtype (Python passes float32 ids as often as int64).
fn ids_as_i64(dtype: DType, b: &[u8]) -> Result<Vec<i64>> {
    Ok(match dtype {
        DType::F32 => b
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4")) as i64)
            .collect(),
        DType::F64 => b
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().expect("8")) as i64)
            .collect(),
        DType::F16 => b
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes(c.try_into().expect("2")).to_f32() as i64)
            .collect(),
        other => aux_from_bytes(b, other)?,
    })
}

fn aux_dtype_error(d: DType) -> Error {
    Error::invalid(format!(
        "sparse aux arrays hold integer indices (int64, int32, int8, uint8), not {}",
        d.name()
    ))
}

impl NDArray {
    /// A new all-zero sparse array of logical `shape` on a CPU context.
    pub fn new_sparse(
        stype: StorageType,
        shape: &[i64],
        ctx: Context,
        dtype: DType,
        aux_types: &[DType],
    ) -> Result<NDArray> {
        let value = SparseValue::zeros(stype, shape)?;
        NDArray::from_sparse_value(shape, ctx, dtype, aux_types, value)
    }

    /// A sparse array holding `value`. Only its sizes are checked: parts are often set one by
    /// one (`SyncCopyFromNDArray`), so the structure is checked where it is used.
    pub fn from_sparse_value(
        shape: &[i64],
        ctx: Context,
        dtype: DType,
        aux_types: &[DType],
        value: SparseValue,
    ) -> Result<NDArray> {
        let stype = value.stype;
        check_shape(stype, shape)?;
        if !ctx.is_host() {
            return Err(Error::not_supported(format!(
                "{} arrays live on CPU contexts; {ctx} is not one",
                stype.name()
            )));
        }
        if aux_types.len() != stype.num_aux() {
            return Err(Error::invalid(format!(
                "a {} array has {} aux array(s), {} aux type(s) given",
                stype.name(),
                stype.num_aux(),
                aux_types.len()
            )));
        }
        for &t in aux_types {
            aux_to_bytes(&[], t)?;
        }
        value.check_data_size(dtype)?;
        Ok(NDArray {
            chunk: Some(Arc::new(Chunk::new(ctx, 0, true)?)),
            shape: Shape::from_slice(shape),
            dtype,
            offset: 0,
            sparse: Some(Arc::new(SparseCell {
                stype,
                aux_types: aux_types.to_vec(),
                value: Mutex::new(value),
            })),
            autograd: super::array::AutogradSlot::default(),
        })
    }

    /// Storage type: default (dense), row_sparse or csr.
    pub fn stype(&self) -> StorageType {
        self.sparse
            .as_ref()
            .map_or(StorageType::Default, |c| c.stype)
    }

    pub fn is_sparse(&self) -> bool {
        self.sparse.is_some()
    }

    pub(crate) fn sparse_cell(&self) -> Option<&Arc<SparseCell>> {
        self.sparse.as_ref()
    }

    fn cell(&self, what: &str) -> Result<&Arc<SparseCell>> {
        self.any_chunk(what)?;
        self.sparse.as_ref().ok_or_else(|| {
            Error::invalid(format!(
                "{what}: the array has default (dense) storage, not sparse"
            ))
        })
    }

    /// The sparse value after the writes pushed before (a copy).
    pub fn sparse_value(&self) -> Result<SparseValue> {
        let cell = self.cell("sparse value")?;
        self.wait_to_read()?;
        Ok(cell.value.lock().clone())
    }

    /// Dtype of aux array `i`.
    pub fn aux_type(&self, i: usize) -> Result<DType> {
        let cell = self.cell("GetAuxType")?;
        cell.aux_types.get(i).copied().ok_or_else(|| {
            Error::invalid(format!(
                "aux index {i} out of range: a {} array has {} aux array(s)",
                cell.stype.name(),
                cell.aux_types.len()
            ))
        })
    }

    /// A dense copy of aux array `i` (after the writes pushed before).
    pub fn aux_array(&self, i: usize) -> Result<NDArray> {
        let t = self.aux_type(i)?;
        let v = self.sparse_value()?;
        let aux = &v.aux[i];
        let a = NDArray::new(&[aux.len() as i64], Context::cpu(0), t, false)?;
        a.sync_copy_from_bytes(&aux_to_bytes(aux, t)?)?;
        Ok(a)
    }

    /// A dense copy of the stored values (after the writes pushed before).
    pub fn data_array(&self) -> Result<NDArray> {
        let v = self.sparse_value()?;
        let a = NDArray::new(&v.data_shape, Context::cpu(0), self.dtype(), false)?;
        a.sync_copy_from_bytes(&v.data)?;
        Ok(a)
    }

    /// Copies the dense array `src` into this sparse array's values (`i == None`) or aux array
    /// `i`, which take `src`'s length (MXNet's `SyncCopyFromNDArray`, used to build sparse
    /// arrays part by part; the parts need not agree until the array is used or checked).
    pub fn sync_copy_part_from(&self, src: &NDArray, i: Option<usize>) -> Result<()> {
        let cell = self.cell("SyncCopyFromNDArray")?;
        if src.is_sparse() {
            return Err(Error::invalid(
                "SyncCopyFromNDArray: the source must be dense",
            ));
        }
        let bytes = src.to_bytes()?;
        let var = self.var().expect("checked").clone();
        let _lease = Engine::global()?.lease(&var, true)?;
        let mut v = cell.value.lock();
        match i {
            None => {
                if src.dtype() != self.dtype() {
                    return Err(Error::invalid(format!(
                        "SyncCopyFromNDArray: values of dtype {} into a {} array",
                        src.dtype().name(),
                        self.dtype().name()
                    )));
                }
                v.data_shape = src.shape().to_vec();
                v.data = bytes;
            }
            Some(i) => {
                let t = self.aux_type(i)?;
                if src.dtype() != t {
                    return Err(Error::invalid(format!(
                        "SyncCopyFromNDArray: aux {i} has dtype {}, the source {}",
                        t.name(),
                        src.dtype().name()
                    )));
                }
                v.aux[i] = aux_from_bytes(&bytes, t)?;
            }
        }
        Ok(())
    }

    /// Checks a sparse array's structure after the writes pushed before (dense arrays pass).
    pub fn check_format(&self, full: bool) -> Result<()> {
        if !self.is_sparse() {
            return self.wait_to_read();
        }
        let v = self.sparse_value()?;
        v.check_data_size(self.dtype())?;
        v.check(self.shape(), full)
    }

    /// The contents as dense bytes, read inside an engine op that holds read access to the
    /// array's variable.
    ///
    /// # Safety
    /// The caller holds read access to the array's variable (or is its only user).
    pub(crate) unsafe fn read_dense_in_op(&self) -> Result<Vec<u8>> {
        match &self.sparse {
            Some(cell) => cell.value.lock().dense_bytes(self.shape(), self.dtype()),
            None => {
                let n = self.nbytes();
                if n == 0 {
                    return Ok(Vec::new());
                }
                let p = self.data_ptr()?;
                // SAFETY: a host array's `n` bytes, which per the contract nothing writes now.
                Ok(unsafe { std::slice::from_raw_parts(p, n) }.to_vec())
            }
        }
    }

    /// Replaces the contents with dense `bytes` (converted to the array's storage), inside an
    /// engine op that holds write access to the array's variable.
    ///
    /// # Safety
    /// The caller holds write access to the array's variable (or is its only user), and the
    /// array is in host memory.
    pub(crate) unsafe fn write_dense_in_op(&self, bytes: &[u8]) -> Result<()> {
        if bytes.len() != self.nbytes() {
            return Err(Error::invalid("contents of another size than the array"));
        }
        match &self.sparse {
            Some(cell) => {
                let v = SparseValue::from_dense(cell.stype, self.shape(), self.dtype(), bytes)?;
                *cell.value.lock() = v;
            }
            None if bytes.is_empty() => {}
            None => {
                let p = self.data_ptr()?;
                // SAFETY: `n` writable host bytes that per the contract only this op touches.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len()) };
            }
        }
        Ok(())
    }

    /// Pushes a copy of `src` into this array converting between storage types (dense, row_sparse,
    /// csr, on CPU): MXNet's `CopyFromTo` when either side is sparse. Shapes and dtypes match.
    pub fn copy_storage_from(&self, src: &NDArray, priority: i32) -> Result<()> {
        if !src.is_sparse() && !self.is_sparse() {
            return self.copy_from(src, priority, crate::engine::FnProperty::Normal);
        }
        let (s, d) = (
            src.any_chunk("copy source")?,
            self.any_chunk("copy destination")?,
        );
        if src.shape() != self.shape() || src.dtype() != self.dtype() {
            return Err(Error::invalid(format!(
                "operands mismatch from {:?} {} to {:?} {}",
                src.shape(),
                src.dtype().name(),
                self.shape(),
                self.dtype().name()
            )));
        }
        if !s.ctx.is_host() || !d.ctx.is_host() {
            return Err(Error::not_supported(
                "copies of sparse arrays to or from a GPU",
            ));
        }
        let (from, to) = (src.clone(), self.clone());
        let same = Arc::ptr_eq(s, d);
        let reads = [s.var.clone()];
        let writes = [d.var.clone()];
        let args = PushArgs::new(d.ctx)
            .reads(if same { &[] } else { &reads })
            .writes(&writes)
            .priority(priority)
            .name("CopyCPU2CPU");
        Engine::global()?.push_fn(args, move |_| {
            // SAFETY: the op reads the source's variable and writes the destination's; both are
            // host arrays kept alive by the closure.
            let r = unsafe {
                match (&from.sparse, &to.sparse) {
                    (Some(a), Some(b)) if a.stype == b.stype => {
                        let v = a.value.lock().clone();
                        *b.value.lock() = v;
                        Ok(())
                    }
                    _ => from
                        .read_dense_in_op()
                        .and_then(|bytes| to.write_dense_in_op(&bytes)),
                }
            };
            r.map_err(|e| e.message().to_string())
        })
    }

    /// Replaces a row_sparse array's value by the rows of `src` (row_sparse) listed in `rows`
    /// (a dense array of row ids): MXNet's `_sparse_retain`, which `row_sparse_pull` runs.
    pub fn retain_rows_from(&self, src: &NDArray, rows: &NDArray, priority: i32) -> Result<()> {
        let (s, d) = (
            src.cell("row_sparse_pull source")?,
            self.cell("row_sparse_pull output")?,
        );
        if s.stype != StorageType::RowSparse || d.stype != StorageType::RowSparse {
            return Err(Error::invalid(
                "retaining rows needs row_sparse source and output",
            ));
        }
        if src.shape() != self.shape() || src.dtype() != self.dtype() {
            return Err(Error::invalid(format!(
                "row_sparse_pull: output of shape {:?} {} for a value of shape {:?} {}",
                self.shape(),
                self.dtype().name(),
                src.shape(),
                src.dtype().name()
            )));
        }
        if rows.is_sparse() {
            return Err(Error::invalid("row ids must be a dense array"));
        }
        let mut reads = vec![src.var().expect("checked").clone()];
        reads.push(
            rows.var()
                .ok_or_else(|| Error::invalid("row ids: a none array"))?
                .clone(),
        );
        let writes = [self.var().expect("checked").clone()];
        let (from, ids, to) = (src.clone(), rows.clone(), self.clone());
        let args = PushArgs::new(Context::cpu(0))
            .reads(&reads)
            .writes(&writes)
            .priority(priority)
            .name("_sparse_retain");
        Engine::global()?.push_fn(args, move |_| {
            let run = || -> Result<()> {
                // SAFETY: the op reads `ids`' variable; it is a host array.
                let raw = unsafe { ids.read_dense_in_op()? };
                let keep = ids_as_i64(ids.dtype(), &raw)?;
                let v = from.sparse.as_ref().expect("checked").value.lock().clone();
                let kept = v.retain_rows(from.shape(), from.dtype(), &keep)?;
                *to.sparse.as_ref().expect("checked").value.lock() = kept;
                Ok(())
            };
            run().map_err(|e| e.message().to_string())
        })
    }

    /// A copy of the parts for saving, the aux arrays as bytes of their dtypes.
    pub(super) fn sparse_for_save(&self) -> Result<SparseSave> {
        let cell = self.cell("Save")?;
        let value = cell.value.lock().clone();
        let aux = value
            .aux
            .iter()
            .zip(&cell.aux_types)
            .map(|(a, &t)| Ok((t, vec![a.len() as i64], aux_to_bytes(a, t)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(SparseSave { value, aux })
    }

    /// A sparse array from a file record (on CPU, where sparse arrays live).
    pub(super) fn sparse_from_record(
        rec: &super::format::Record,
        shape: &[i64],
    ) -> Result<NDArray> {
        let mut value = SparseValue::zeros(rec.stype, shape)?;
        value.data = rec.data.clone();
        value.data_shape = rec.storage_shape.clone().unwrap_or_default();
        let mut types = Vec::new();
        for (i, a) in rec.aux.iter().enumerate() {
            value.aux[i] = aux_from_bytes(&a.data, a.dtype)?;
            types.push(a.dtype);
        }
        NDArray::from_sparse_value(shape, Context::cpu(0), rec.dtype, &types, value)
    }
}

/// A sparse array's parts copied for saving: the value and each aux array's dtype, shape and
/// bytes.
pub(super) struct SparseSave {
    pub value: SparseValue,
    pub aux: Vec<(DType, Vec<i64>, Vec<u8>)>,
}
