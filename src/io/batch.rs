//! Batches and MXNet's batch loader: turning a source of single instances into batches of
//! `batch_size`, with MXNet's end-of-epoch rules (`round_batch`, pads).

use crate::context::Context;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ndarray::NDArray;

/// One batch as the C API hands it out.
#[derive(Clone)]
pub struct Batch {
    pub data: NDArray,
    pub label: NDArray,
    /// One entry per slot: the instance's position in its source (zeros for MNISTIter, as MXNet).
    pub index: Vec<u64>,
    /// Slots at the end that do not hold new instances (wrapped or stale).
    pub pad: usize,
    /// `round_batch` filled the batch from the start of the data: the next epoch continues
    /// after the wrapped instances.
    pub wrapped: bool,
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("data", &self.data.shape())
            .field("label", &self.label.shape())
            .field("index", &self.index)
            .field("pad", &self.pad)
            .field("wrapped", &self.wrapped)
            .finish()
    }
}

/// A batch producer that the prefetcher drives on its thread.
pub trait Loader: Send {
    /// The next batch, or `None` at the end of the epoch (then again `None` until
    /// [`before_first`](Self::before_first)).
    fn next_batch(&mut self) -> Result<Option<Batch>>;
    /// Starts the next epoch. `keep_wrap`: the consumer took the batch that wrapped around, so
    /// the epoch continues after the wrapped instances (MXNet's `round_batch` rule); otherwise
    /// the data starts over.
    fn before_first(&mut self, keep_wrap: bool) -> Result<()>;
}

/// A source of dense instances, each `data_len` and `label_len` elements of one dtype.
pub trait DenseSource: Send {
    fn dtype(&self) -> DType;
    /// The labels' dtype (the data's unless the source says otherwise).
    fn label_dtype(&self) -> DType {
        self.dtype()
    }
    fn data_shape(&self) -> &[i64];
    fn label_shape(&self) -> &[i64];
    /// Writes the next instance into `data` and `label` (exactly one instance's bytes each) and
    /// returns its index, or `None` at the end of the data.
    fn next_into(&mut self, data: &mut [u8], label: &mut [u8]) -> Result<Option<u64>>;
    /// Writes the next `index.len()` instances into consecutive slots of `data` and `label`
    /// (that many instances' bytes each) and their indices into `index`; returns how many it
    /// wrote, fewer only at the end of the data. A source that prepares several instances at
    /// once writes them straight into the batch.
    fn next_many(&mut self, data: &mut [u8], label: &mut [u8], index: &mut [u64]) -> Result<usize> {
        let n = index.len();
        if n == 0 {
            return Ok(0);
        }
        let (d, l) = (data.len() / n, label.len() / n);
        for (k, i) in index.iter_mut().enumerate() {
            match self.next_into(&mut data[k * d..(k + 1) * d], &mut label[k * l..(k + 1) * l])? {
                Some(v) => *i = v,
                None => return Ok(k),
            }
        }
        Ok(n)
    }
    /// Back to the first instance.
    fn rewind(&mut self) -> Result<()>;
}

/// `(n, *shape)`.
pub(crate) fn batch_shape(n: usize, shape: &[i64]) -> Vec<i64> {
    std::iter::once(n as i64)
        .chain(shape.iter().copied())
        .collect()
}

pub(crate) fn elements(shape: &[i64]) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d.max(0) as usize))
        .ok_or_else(|| Error::invalid(format!("shape {shape:?} is too large")))
}

/// A new cpu(0) array holding `bytes`.
pub(crate) fn dense_array(shape: &[i64], dtype: DType, bytes: &[u8]) -> Result<NDArray> {
    let a = NDArray::new(shape, Context::cpu(0), dtype, false)?;
    a.sync_copy_from_bytes(bytes)?;
    Ok(a)
}

/// A new cpu(0) array whose bytes `fill` writes (all of them) before anyone else can see it:
/// one pass over the array's memory instead of a staging buffer and a copy.
pub(crate) fn fresh_array_with(
    shape: &[i64],
    dtype: DType,
    fill: impl FnOnce(&mut [u8]),
) -> Result<NDArray> {
    let a = NDArray::new(shape, Context::cpu(0), dtype, false)?;
    let n = a.nbytes();
    if n > 0 {
        let p = a.data_ptr()?;
        // SAFETY: `a` was just allocated (not delayed) on a host context with `n` bytes at `p`;
        // no other handle, view or engine op refers to it yet, so this is the only access
        // until `fill` returns.
        fill(unsafe { std::slice::from_raw_parts_mut(p, n) });
    }
    Ok(a)
}

/// MXNet's `BatchLoader` over a dense source. The batch buffers persist across batches, so the
/// pad slots of a short batch with `round_batch=0` hold the previous batch's instances, as in
/// MXNet.
pub struct BatchLoader<S: DenseSource> {
    source: S,
    batch_size: usize,
    round_batch: bool,
    data: Vec<u8>,
    label: Vec<u8>,
    index: Vec<u64>,
    data_unit: usize,
    label_unit: usize,
    /// Instances taken from the next epoch to fill the last batch; while non-zero the epoch
    /// has ended.
    overflow: usize,
    ended: bool,
}

impl<S: DenseSource> BatchLoader<S> {
    pub fn new(source: S, batch_size: usize, round_batch: bool) -> Result<Self> {
        let data_unit = elements(source.data_shape())? * source.dtype().size();
        let label_unit = elements(source.label_shape())? * source.label_dtype().size();
        let total = |unit: usize| {
            unit.checked_mul(batch_size)
                .ok_or_else(|| Error::invalid(format!("batch_size {batch_size} is too large")))
        };
        let (data_bytes, label_bytes) = (total(data_unit)?, total(label_unit)?);
        let zeroed = |n: usize| -> Result<Vec<u8>> {
            let mut v = Vec::new();
            v.try_reserve_exact(n).map_err(|_| {
                Error::out_of_memory(format!("cannot allocate a batch buffer of {n} bytes"))
            })?;
            v.resize(n, 0);
            Ok(v)
        };
        Ok(BatchLoader {
            data: zeroed(data_bytes)?,
            label: zeroed(label_bytes)?,
            index: vec![0; batch_size],
            source,
            batch_size,
            round_batch,
            data_unit,
            label_unit,
            overflow: 0,
            ended: false,
        })
    }

    /// Fills slots `from..` with the source's next instances; how many it filled.
    fn fill(&mut self, from: usize) -> Result<usize> {
        let (d, l) = (self.data_unit, self.label_unit);
        self.source.next_many(
            &mut self.data[from * d..],
            &mut self.label[from * l..],
            &mut self.index[from..],
        )
    }

    fn emit(&self, pad: usize, wrapped: bool) -> Result<Batch> {
        let dtype = self.source.dtype();
        let mut label_shape = batch_shape(self.batch_size, self.source.label_shape());
        // MXNet hands out a (N, 1) label as (N,)
        if label_shape.len() == 2 && label_shape[1] == 1 {
            label_shape.pop();
        }
        Ok(Batch {
            data: dense_array(
                &batch_shape(self.batch_size, self.source.data_shape()),
                dtype,
                &self.data,
            )?,
            label: dense_array(&label_shape, self.source.label_dtype(), &self.label)?,
            index: self.index.clone(),
            pad,
            wrapped,
        })
    }
}

impl<S: DenseSource> Loader for BatchLoader<S> {
    fn next_batch(&mut self) -> Result<Option<Batch>> {
        if self.overflow != 0 || self.ended {
            return Ok(None);
        }
        let top = self.fill(0)?;
        if top == self.batch_size {
            return self.emit(0, false).map(Some);
        }
        self.ended = true;
        if top == 0 {
            return Ok(None);
        }
        if !self.round_batch {
            return self.emit(self.batch_size - top, false).map(Some);
        }
        self.source.rewind()?;
        let got = self.fill(top)?;
        self.overflow = got;
        if top + got < self.batch_size {
            return Err(Error::invalid(
                "number of input must be bigger than batch size",
            ));
        }
        self.emit(self.overflow, true).map(Some)
    }

    fn before_first(&mut self, keep_wrap: bool) -> Result<()> {
        if !(keep_wrap && self.overflow != 0) {
            self.source.rewind()?;
        }
        self.overflow = 0;
        self.ended = false;
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Instances 0..n, data = [i, i+0.5], label = [i * 10].
    pub(crate) struct Counting {
        pub n: usize,
        pub at: usize,
    }
    impl DenseSource for Counting {
        fn dtype(&self) -> DType {
            DType::F32
        }
        fn data_shape(&self) -> &[i64] {
            &[2]
        }
        fn label_shape(&self) -> &[i64] {
            &[1]
        }
        fn next_into(&mut self, data: &mut [u8], label: &mut [u8]) -> Result<Option<u64>> {
            if self.at == self.n {
                return Ok(None);
            }
            let i = self.at as f32;
            data[..4].copy_from_slice(&i.to_le_bytes());
            data[4..].copy_from_slice(&(i + 0.5).to_le_bytes());
            label.copy_from_slice(&(i * 10.0).to_le_bytes());
            self.at += 1;
            Ok(Some(self.at as u64 - 1))
        }
        fn rewind(&mut self) -> Result<()> {
            self.at = 0;
            Ok(())
        }
    }

    fn labels(b: &Batch) -> Vec<f32> {
        b.label
            .to_bytes()
            .unwrap()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()) / 10.0)
            .collect()
    }

    /// An epoch as (label lists, pads).
    fn epoch(l: &mut dyn Loader) -> Vec<(Vec<f32>, usize)> {
        let mut out = Vec::new();
        while let Some(b) = l.next_batch().unwrap() {
            assert_eq!(b.index.len(), b.label.shape()[0] as usize);
            out.push((labels(&b), b.pad));
        }
        assert!(l.next_batch().unwrap().is_none());
        out
    }

    #[test]
    fn round_batch_wraps_and_the_next_epoch_continues_after_the_wrap() {
        let mut l = BatchLoader::new(Counting { n: 10, at: 0 }, 4, true).unwrap();
        let e1 = epoch(&mut l);
        assert_eq!(
            e1,
            vec![
                (vec![0., 1., 2., 3.], 0),
                (vec![4., 5., 6., 7.], 0),
                (vec![8., 9., 0., 1.], 2)
            ]
        );
        l.before_first(true).unwrap();
        let e2 = epoch(&mut l);
        assert_eq!(
            e2,
            vec![(vec![2., 3., 4., 5.], 0), (vec![6., 7., 8., 9.], 0)]
        );
        l.before_first(true).unwrap();
        assert_eq!(epoch(&mut l), e1);
        // a reset before the wrapped batch was taken starts over
        l.next_batch().unwrap();
        l.before_first(false).unwrap();
        assert_eq!(epoch(&mut l), e1);
    }

    #[test]
    fn without_round_batch_the_last_batch_is_short_with_stale_slots() {
        let mut l = BatchLoader::new(Counting { n: 10, at: 0 }, 4, false).unwrap();
        let e = epoch(&mut l);
        assert_eq!(e[2], (vec![8., 9., 6., 7.], 2));
        l.before_first(true).unwrap();
        assert_eq!(epoch(&mut l), e);
    }

    #[test]
    fn a_batch_that_cannot_be_filled_by_wrapping_is_an_error() {
        // 3 instances fill a batch of 4 by wrapping once (pad 1), not one of 8
        let mut l = BatchLoader::new(Counting { n: 3, at: 0 }, 4, true).unwrap();
        assert_eq!(epoch(&mut l), vec![(vec![0., 1., 2., 0.], 1)]);
        let mut l = BatchLoader::new(Counting { n: 3, at: 0 }, 8, true).unwrap();
        let e = l.next_batch().unwrap_err();
        assert!(e.message().contains("bigger than batch size"), "{e}");
        let mut l = BatchLoader::new(Counting { n: 3, at: 0 }, 4, false).unwrap();
        assert_eq!(epoch(&mut l), vec![(vec![0., 1., 2., 0.], 1)]);
    }
}
