//! `NDArray`: a typed, shaped view of a chunk. Every data access goes through the engine (ops on
//! the chunk's variable, or a lease for synchronous copies), so it composes with user ops.

use super::chunk::{Chunk, Memory};
use super::format::{self, NpShape, RecordRef, SavedContext, StorageType};
use super::shape::{self, Shape};
use super::sparse::SparseCell;
use crate::context::Context;
use crate::dtype::DType;
use crate::engine::{Engine, FnProperty, PushArgs, Var};
use crate::error::{Error, Result};
use crate::gpu::{self, Endpoint};
use std::sync::Arc;

/// A dense n-dimensional array, or a "none" array (no shape, no data) as MXNet has.
#[derive(Clone)]
pub struct NDArray {
    pub(super) chunk: Option<Arc<Chunk>>,
    pub(super) shape: Shape,
    pub(super) dtype: DType,
    /// Byte offset of this view into its chunk.
    pub(super) offset: usize,
    /// The value of a row_sparse or csr array (its chunk then holds no data, only the
    /// variable); `None` for dense arrays.
    pub(super) sparse: Option<Arc<SparseCell>>,
    /// The autograd layer's record of this array (see [`AutogradSlot`]); shared by clones of
    /// this value, not by views or detached copies.
    pub(super) autograd: AutogradSlot,
}

/// Where the autograd layer keeps what it knows of an array: its entry in a recorded graph
/// (a variable marked for gradients, or the output of a recorded op). The array layer only
/// stores it; its type belongs to the layer above, so it is kept as `Any`.
///
/// Clones of an `NDArray` value are the same array to its user (a C handle holds one and the
/// calls it makes work on clones), so they share the slot: marking a handle's array as a
/// variable, or recording an op that writes it through `out=`, is seen through every clone.
#[derive(Clone, Default)]
pub struct AutogradSlot(Arc<parking_lot::Mutex<Option<Arc<dyn std::any::Any + Send + Sync>>>>);

fn engine() -> Result<&'static Engine> {
    Engine::global()
}

use crate::util::SendPtr;

impl NDArray {
    /// A "none" array: no storage, dtype/shape queries report "unknown".
    pub fn none() -> NDArray {
        NDArray {
            chunk: None,
            shape: Shape::new(),
            dtype: DType::F32,
            offset: 0,
            sparse: None,
            autograd: AutogradSlot::default(),
        }
    }

    /// A new dense array. With `delay_alloc` the memory is allocated on first use.
    pub fn new(shape: &[i64], ctx: Context, dtype: DType, delay_alloc: bool) -> Result<NDArray> {
        let bytes = shape::num_bytes(shape, dtype.size())?;
        // creates the device's manager: an unusable device (no GPU, bad pool settings) fails now
        gpu::storage().alloc(ctx, 0)?;
        let chunk = Chunk::new(ctx, bytes, delay_alloc)?;
        Ok(NDArray {
            chunk: Some(Arc::new(chunk)),
            shape: Shape::from_slice(shape),
            dtype,
            offset: 0,
            sparse: None,
            autograd: AutogradSlot::default(),
        })
    }

    /// An array over cpu_shared memory made by another process (`MXNDArrayCreateFromSharedMem`).
    pub fn from_shared(
        shared_pid: i32,
        shared_id: i32,
        shape: &[i64],
        dtype: DType,
    ) -> Result<NDArray> {
        let bytes = shape::num_bytes(shape, dtype.size())?;
        let alloc = gpu::storage().attach_shared(shared_pid, shared_id, bytes)?;
        let (ctx, len) = (alloc.ctx(), alloc.len());
        let chunk = Chunk::from_memory(Memory::Storage(alloc), ctx, len);
        Ok(NDArray {
            chunk: Some(Arc::new(chunk)),
            shape: Shape::from_slice(shape),
            dtype,
            offset: 0,
            sparse: None,
            autograd: AutogradSlot::default(),
        })
    }

    /// An array over foreign memory (`bytes` at `ptr`, on a host context) that calls `release`
    /// once the array and every op using it are gone (DLPack import).
    ///
    /// # Safety
    /// `ptr` must be valid for reads and writes of `shape`'s bytes until `release` runs.
    pub unsafe fn from_foreign(
        ptr: *mut u8,
        shape: &[i64],
        dtype: DType,
        ctx: Context,
        release: Box<dyn FnOnce() + Send>,
    ) -> Result<NDArray> {
        let bytes = shape::num_bytes(shape, dtype.size())?;
        let chunk = Chunk::from_memory(
            Memory::Foreign {
                ptr,
                release: Some(release),
            },
            ctx,
            bytes,
        );
        Ok(NDArray {
            chunk: Some(Arc::new(chunk)),
            shape: Shape::from_slice(shape),
            dtype,
            offset: 0,
            sparse: None,
            autograd: AutogradSlot::default(),
        })
    }

    /// The autograd entry of this array, if it has one.
    pub fn autograd_entry(&self) -> Option<Arc<dyn std::any::Any + Send + Sync>> {
        self.autograd.0.lock().clone()
    }

    /// Sets (or clears) the autograd entry; every clone of this value sees it.
    pub fn set_autograd_entry(&self, entry: Option<Arc<dyn std::any::Any + Send + Sync>>) {
        *self.autograd.0.lock() = entry;
    }

    /// The same array (shape, dtype, memory, engine variable) without autograd entry, as
    /// `MXNDArrayDetach` gives it.
    pub fn detach(&self) -> NDArray {
        NDArray {
            autograd: AutogradSlot::default(),
            ..self.clone()
        }
    }

    pub fn is_none(&self) -> bool {
        self.chunk.is_none()
    }
    pub fn shape(&self) -> &[i64] {
        &self.shape
    }
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// The device; cpu(0)-like `None` for a none array.
    pub fn ctx(&self) -> Option<Context> {
        self.chunk.as_ref().map(|c| c.ctx)
    }
    /// The engine variable ordering ops on this array's memory (shared by its views).
    pub fn var(&self) -> Option<&Var> {
        self.chunk.as_ref().map(|c| &c.var)
    }
    /// Number of elements.
    pub fn size(&self) -> usize {
        if self.is_none() {
            0
        } else {
            shape::num_elements(&self.shape).unwrap_or(0)
        }
    }
    /// Bytes of data this view covers.
    pub fn nbytes(&self) -> usize {
        self.size() * self.dtype.size()
    }
    /// True if both views share one chunk (and so one variable).
    pub fn shares_memory_with(&self, other: &NDArray) -> bool {
        match (&self.chunk, &other.chunk) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// The chunk of a dense array: a none or sparse array is an error naming `what`.
    pub(super) fn chunk(&self, what: &str) -> Result<&Arc<Chunk>> {
        if let Some(cell) = &self.sparse {
            return Err(Error::invalid(format!(
                "{what}: the array is {}, which holds no dense data: cast it to default storage \
                 first (tostype('default'), cast_storage)",
                cell.stype.name()
            )));
        }
        self.any_chunk(what)
    }

    /// The chunk of a dense or sparse array (sparse arrays' chunks carry only the variable).
    pub(super) fn any_chunk(&self, what: &str) -> Result<&Arc<Chunk>> {
        self.chunk.as_ref().ok_or_else(|| {
            Error::invalid(format!(
                "{what}: the array is a none array (no shape, no data)"
            ))
        })
    }

    /// Start of this view's data, allocating delayed storage; does not wait for pending ops
    /// (MXNet's `MXNDArrayGetData`). Null for a 0-byte array.
    pub fn data_ptr(&self) -> Result<*mut u8> {
        let p = self.chunk("data")?.data()?;
        // SAFETY: `offset` lies within the chunk (views are checked when made).
        Ok(if p.is_null() {
            p
        } else {
            unsafe { p.add(self.offset) }
        })
    }

    /// Waits for the writes pushed before; reports (once) an error the array carries.
    pub fn wait_to_read(&self) -> Result<()> {
        match &self.chunk {
            Some(c) => engine()?.wait_for_var(&c.var),
            None => Ok(()),
        }
    }

    /// Waits for every read and write pushed before (MXNet pushes an empty write and waits).
    pub fn wait_to_write(&self) -> Result<()> {
        if let Some(c) = &self.chunk {
            drop(engine()?.lease(&c.var, true)?)
        }
        Ok(())
    }

    /// Copies `src` (exactly `nbytes()` bytes) into the array on the calling thread, after the
    /// ops pushed before and before the ops pushed after.
    pub fn sync_copy_from_bytes(&self, src: &[u8]) -> Result<()> {
        if src.len() != self.nbytes() {
            return Err(Error::invalid(format!(
                "Memory size do not match: {} bytes given, the array holds {}",
                src.len(),
                self.nbytes()
            )));
        }
        if src.is_empty() {
            return Ok(());
        }
        let chunk = self.chunk("SyncCopyFromCPU")?;
        let _lease = engine()?.lease(&chunk.var, true)?;
        let dst = Endpoint::of(chunk.ctx, self.data_ptr()?);
        // SAFETY: `dst` has `nbytes` writable bytes on the chunk's device; the write lease
        // excludes every other access through the engine; `src` is a distinct caller buffer.
        unsafe { gpu::copy(dst, Endpoint::Host(src.as_ptr().cast_mut()), src.len()) }
    }

    /// Copies the array into `dst` (exactly `nbytes()` bytes) on the calling thread, after the
    /// writes pushed before. Reports (once) an error the array carries.
    pub fn sync_copy_to_bytes(&self, dst: &mut [u8]) -> Result<()> {
        if dst.len() != self.nbytes() {
            return Err(Error::invalid(format!(
                "Memory size do not match: {} bytes given, the array holds {}",
                dst.len(),
                self.nbytes()
            )));
        }
        let chunk = self.chunk("SyncCopyToCPU")?;
        let _lease = engine()?.lease(&chunk.var, false)?;
        if dst.is_empty() {
            return Ok(());
        }
        let src = Endpoint::of(chunk.ctx, self.data_ptr()?);
        // SAFETY: `src` has `nbytes` readable bytes on the chunk's device and the read lease
        // keeps writers out; `dst` is a distinct caller buffer.
        unsafe { gpu::copy(Endpoint::Host(dst.as_mut_ptr()), src, dst.len()) }
    }

    /// Appends the array's bytes to `out` on the calling thread, after the writes pushed before
    /// (like [`sync_copy_to_bytes`](Self::sync_copy_to_bytes), without first zeroing the space).
    pub fn append_bytes_to(&self, out: &mut Vec<u8>) -> Result<()> {
        let n = self.nbytes();
        let chunk = self.chunk("SyncCopyToCPU")?;
        let _lease = engine()?.lease(&chunk.var, false)?;
        if n == 0 {
            return Ok(());
        }
        let src = Endpoint::of(chunk.ctx, self.data_ptr()?);
        out.reserve(n);
        let len = out.len();
        // SAFETY: `src` has `n` readable bytes on the chunk's device and the read lease keeps
        // writers out; `reserve` made room for `n` more bytes after `len`, which the copy
        // initialises before `set_len` (on error the length stays as it was).
        unsafe {
            gpu::copy(Endpoint::Host(out.as_mut_ptr().add(len)), src, n)?;
            out.set_len(len + n);
        }
        Ok(())
    }

    /// The array's bytes (waits for pending writes).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut v = Vec::new();
        self.append_bytes_to(&mut v)?;
        Ok(v)
    }

    /// Pushes a copy of `src` into this array (an engine op: returns at once). Shapes and dtypes
    /// must match.
    pub fn copy_from(&self, src: &NDArray, priority: i32, prop: FnProperty) -> Result<()> {
        let (s, d) = (src.chunk("copy source")?, self.chunk("copy destination")?);
        if src.shape != self.shape {
            return Err(Error::invalid(format!(
                "operands shape mismatch from.shape = {:?} to.shape = {:?}",
                src.shape(),
                self.shape()
            )));
        }
        if src.dtype != self.dtype {
            return Err(Error::invalid(format!(
                "operands dtype mismatch: from {} to {}",
                src.dtype.name(),
                self.dtype.name()
            )));
        }
        let n = self.nbytes();
        if n == 0 {
            return Ok(());
        }
        let (sp, dp) = (SendPtr(src.data_ptr()?), SendPtr(self.data_ptr()?));
        let (sctx, dctx) = (s.ctx, d.ctx);
        // MXNet's choice of device and queue: host to host on the destination with the
        // caller's property; to a GPU on the copy queue of the destination, from a GPU on the
        // copy queue of the source.
        let (ctx, prop, name) = match (sctx.is_host(), dctx.is_host()) {
            (true, true) => (dctx, prop, "CopyCPU2CPU"),
            (true, false) => (dctx, FnProperty::CopyToGpu, "CopyCPU2GPU"),
            (false, true) => (sctx, FnProperty::CopyFromGpu, "CopyGPU2CPU"),
            (false, false) if sctx == dctx => (dctx, FnProperty::Normal, "CopyGPU2GPU"),
            (false, false) => (dctx, FnProperty::CopyFromGpu, "CopyGPU2GPU"),
        };
        // keep both chunks alive until the op has run
        let (keep_s, keep_d) = (s.clone(), d.clone());
        let reads = [s.var.clone()];
        let writes = [d.var.clone()];
        let same = Arc::ptr_eq(s, d);
        let args = PushArgs::new(ctx)
            .reads(if same { &[] } else { &reads })
            .writes(&writes)
            .priority(priority)
            .prop(prop)
            .name(name);
        if sctx.is_host() && dctx.is_host() {
            return engine()?.push_fn(args, move |_| {
                let _ = (&keep_s, &keep_d);
                // SAFETY: both ranges lie in live chunks; the engine grants this op write access
                // to the destination and read access to the source; `copy` handles overlap.
                unsafe { std::ptr::copy(sp.get(), dp.get(), n) };
                Ok(())
            });
        }
        super::gpu_op::push(args, move |finish| {
            let _ = (&keep_s, &keep_d);
            let (from, to) = (Endpoint::of(sctx, sp.get()), Endpoint::of(dctx, dp.get()));
            // SAFETY: both ranges lie in chunks the op holds until it completes, which is when
            // the device has finished the copy; the engine grants this op write access to the
            // destination and read access to the source until then.
            unsafe { gpu::copy_finish(to, from, n, finish) }
        })
    }

    /// Rows `[begin, end)` of axis 0, sharing memory and variable.
    pub fn slice(&self, begin: i64, end: i64) -> Result<NDArray> {
        self.chunk("Slice")?;
        let Some(&rows) = self.shape.first() else {
            return Err(Error::invalid("Slice: cannot slice a 0-dimensional array"));
        };
        if begin < 0 || begin > end {
            return Err(Error::invalid(format!(
                "Invalid slicing range [{begin}, {end})"
            )));
        }
        if end > rows {
            return Err(Error::invalid(format!(
                "Slice end index out of range: end {end} > {rows} rows"
            )));
        }
        let row_bytes = shape::num_elements(&self.shape[1..])? * self.dtype.size();
        let mut shape = self.shape.clone();
        shape[0] = end - begin;
        Ok(NDArray {
            chunk: self.chunk.clone(),
            shape,
            dtype: self.dtype,
            offset: self.offset + begin as usize * row_bytes,
            sparse: None,
            autograd: AutogradSlot::default(),
        })
    }

    /// Row `idx` of axis 0; the axis is dropped when the array has more than one dimension, or
    /// always in numpy-shape mode.
    pub fn at(&self, idx: i64) -> Result<NDArray> {
        let rows = self.shape.first().copied().unwrap_or(0);
        if idx < 0 || idx >= rows {
            return Err(Error::invalid(format!(
                "index {idx} out of range for axis 0 of size {rows}"
            )));
        }
        let mut v = self.slice(idx, idx + 1)?;
        if self.shape.len() > 1 || super::np_shape::current().is_on() {
            v.shape.remove(0);
        }
        Ok(v)
    }

    /// A view with another shape over the same memory; it may cover fewer elements, not more.
    pub fn reshape(&self, shape: &[i64]) -> Result<NDArray> {
        self.chunk("Reshape")?;
        let n = shape::num_elements(shape)?;
        if n > self.size() {
            return Err(Error::invalid(format!(
                "target shape size is larger than the current shape: {shape:?} ({n}) vs {:?} ({})",
                self.shape(),
                self.size()
            )));
        }
        Ok(NDArray {
            chunk: self.chunk.clone(),
            shape: Shape::from_slice(shape),
            dtype: self.dtype,
            offset: self.offset,
            sparse: None,
            autograd: AutogradSlot::default(),
        })
    }

    /// For cpu_shared arrays: a cross-process handle `(pid, fd)` another process passes to
    /// [`NDArray::from_shared`]. Waits for pending writes first.
    pub fn shared_handle(&self) -> Result<(i32, i32)> {
        let chunk = self.chunk("GetSharedMemHandle")?;
        self.wait_to_read()?;
        chunk.with_allocation(|a| a.share_fd())
    }

    /// Shares the (cpu_shared) array by name: `(pid, id)`, valid across processes until the
    /// receiver attaches and drops it. Waits for pending writes first.
    pub fn shared_name(&self) -> Result<(i32, i32)> {
        let chunk = self.chunk("GetSharedMemHandle")?;
        self.wait_to_read()?;
        chunk.with_allocation(|a| a.share())
    }

    /// The array as a file record borrowing its data (or the staged copy of it).
    ///
    /// # Safety
    /// The caller must hold a read lease on the array's variable while the record is used.
    unsafe fn record_ref<'a>(&'a self, staged: &'a Staged) -> Result<RecordRef<'a>> {
        let chunk = self.any_chunk("Save")?;
        if let Some(sp) = &staged.sparse {
            return Ok(RecordRef {
                stype: sp.value.stype,
                shape: Some(&self.shape),
                ctx: SavedContext::from(chunk.ctx),
                dtype: self.dtype,
                data: &sp.value.data,
                storage_shape: Some(&sp.value.data_shape),
                aux: sp
                    .aux
                    .iter()
                    .map(|(dtype, shape, data)| format::AuxRef {
                        dtype: *dtype,
                        shape,
                        data,
                    })
                    .collect(),
            });
        }
        let n = self.nbytes();
        let data: &[u8] = match &staged.bytes {
            Some(bytes) => bytes,
            None if n == 0 => &[],
            // SAFETY: the view's `n` bytes are allocated host memory (GPU arrays come staged);
            // the caller's read lease keeps writers out while the record lives.
            None => unsafe { std::slice::from_raw_parts(self.data_ptr()?, n) },
        };
        Ok(RecordRef {
            stype: StorageType::Default,
            shape: Some(&self.shape),
            ctx: SavedContext::from(chunk.ctx),
            dtype: self.dtype,
            data,
            storage_shape: None,
            aux: Vec::new(),
        })
    }

    /// What saving needs copied first: a GPU array's bytes (host arrays are written from their
    /// own memory) or a sparse array's parts.
    ///
    /// # Safety
    /// The caller holds a read lease on the array's chunk.
    unsafe fn staged_for_save(&self) -> Result<Staged> {
        if self.sparse.is_some() {
            return Ok(Staged {
                bytes: None,
                sparse: Some(self.sparse_for_save()?),
            });
        }
        let chunk = self.chunk("Save")?;
        if chunk.ctx.is_host() {
            return Ok(Staged::default());
        }
        let mut bytes = vec![0u8; self.nbytes()];
        let src = Endpoint::of(chunk.ctx, self.data_ptr()?);
        // SAFETY: `src` has `nbytes` bytes on the GPU and the caller's read lease keeps writers
        // out; `bytes` is a fresh buffer of that size.
        unsafe { gpu::copy(Endpoint::Host(bytes.as_mut_ptr()), src, bytes.len())? };
        Ok(Staged {
            bytes: Some(bytes),
            sparse: None,
        })
    }

    /// An array made from a file record. A GPU array loads onto its GPU when the
    /// machine has that GPU and onto the CPU otherwise, as in MXNet.
    pub fn from_record(rec: &format::Record) -> Result<NDArray> {
        let Some(shape) = &rec.shape else {
            return Ok(NDArray::none());
        };
        if rec.stype != StorageType::Default {
            return NDArray::sparse_from_record(rec, shape);
        }
        let ctx = match rec.ctx.to_context() {
            Ok(c) if !c.is_host() && (c.dev_id as usize) < gpu::device_count() => c,
            _ => Context::cpu(0),
        };
        let a = NDArray::new(shape, ctx, rec.dtype, false)?;
        a.sync_copy_from_bytes(&rec.data)?;
        Ok(a)
    }
}

/// Copies made before writing a record (see [`NDArray::staged_for_save`]).
#[derive(Default)]
struct Staged {
    bytes: Option<Vec<u8>>,
    sparse: Option<super::sparse_array::SparseSave>,
}

/// Read leases on the distinct chunks of `arrays` (each chunk once: leasing a chunk twice could
/// wait behind a write queued between the two leases).
fn read_leases(arrays: &[&NDArray]) -> Result<Vec<crate::engine::VarLease<'static>>> {
    let engine = engine()?;
    let mut seen: Vec<&Arc<Chunk>> = Vec::new();
    let mut leases = Vec::new();
    for (i, a) in arrays.iter().enumerate() {
        let c = a.chunk.as_ref().ok_or_else(|| {
            Error::invalid(format!(
                "array {i} is a none array (Unknown storage type-1)"
            ))
        })?;
        if !seen.iter().any(|s| Arc::ptr_eq(s, c)) {
            seen.push(c);
            leases.push(engine.lease(&c.var, false)?);
        }
    }
    Ok(leases)
}

/// Writes `arrays` (with one name each, or no names) as an MXNet list file to `w`, after the
/// writes pushed to them before.
pub fn save_list<W: std::io::Write>(
    w: &mut W,
    arrays: &[&NDArray],
    names: &[&str],
    np: NpShape,
) -> Result<()> {
    let _leases = read_leases(arrays)?;
    // SAFETY (both): read leases on every chunk are held until the records are written.
    let staged = arrays
        .iter()
        .map(|a| unsafe { a.staged_for_save() })
        .collect::<Result<Vec<_>>>()?;
    let records = arrays
        .iter()
        .zip(&staged)
        .map(|(a, s)| unsafe { a.record_ref(s) })
        .collect::<Result<Vec<_>>>()?;
    format::write_list(w, &records, names, np)
}

/// One array as a single record (`MXNDArraySaveRawBytes`).
pub fn save_record(array: &NDArray, np: NpShape) -> Result<Vec<u8>> {
    let _leases = read_leases(&[array])?;
    // SAFETY (both): the read lease is held until the record is written.
    let staged = unsafe { array.staged_for_save()? };
    let rec = unsafe { array.record_ref(&staged)? };
    let mut out = Vec::with_capacity(format::record_len(&rec, np)?);
    format::write_record(&mut out, &rec, np)?;
    Ok(out)
}

/// Arrays and names of an MXNet list file held in memory.
pub fn load_list(bytes: &[u8], np: NpShape) -> Result<(Vec<NDArray>, Vec<String>)> {
    let (records, names) = format::read_list(bytes, np)?;
    let arrays = records
        .iter()
        .enumerate()
        .map(|(i, r)| NDArray::from_record(r).map_err(|e| e.context(format_args!("array {i}"))))
        .collect::<Result<Vec<_>>>()?;
    Ok((arrays, names))
}
