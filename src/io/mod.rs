//! Data loading: dmlc's RecordIO files and MXNet's non-image data iterators (`MNISTIter`,
//! `CSVIter`, `LibSVMIter`).
//!
//! An iterator is a [`Loader`](batch::Loader) (the source and MXNet's batching rules) driven by a
//! [`Prefetcher`](prefetch::Prefetcher) thread that keeps `prefetch_buffer` batches ready. Each
//! batch is a fresh set of NDArrays on `cpu(0)`, so arrays the caller keeps are never
//! overwritten. `ImageRecordIter` and its `uint8`/`int8` variants ([`image_rec`]) decode and
//! augment images on their own threads, `ImageDetRecordIter` ([`image_det`]) detection records
//! with their boxes.

pub mod batch;
pub mod csv;
pub mod image_det;
pub mod image_rec;
pub mod libsvm;
pub mod mnist;
pub mod params;
pub mod prefetch;
pub mod recordio;
pub mod text;

use crate::error::{Error, Result};
use batch::{Batch, Loader};
use params::Params;
use prefetch::Prefetcher;

/// A data iterator as the C API drives it: `next` / `before_first` and the current batch.
pub struct DataIter {
    name: String,
    prefetcher: Prefetcher,
    current: Option<Batch>,
}

/// The iterators mxrt builds, by MXNet's name.
pub const BUILT: [&str; 10] = [
    "MNISTIter",
    "CSVIter",
    "LibSVMIter",
    "ImageRecordIter",
    "ImageRecordIter_v1",
    "ImageRecordUInt8Iter",
    "ImageRecordUInt8Iter_v1",
    "ImageRecordInt8Iter",
    "ImageRecordInt8Iter_v1",
    "ImageDetRecordIter",
];

impl DataIter {
    /// Creates the iterator MXNet registers as `name` from its keyword arguments (unknown
    /// names are ignored, as MXNet does).
    pub fn create(name: &str, kwargs: &[(String, String)]) -> Result<DataIter> {
        let p = Params::new(kwargs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let prefetch_buffer = p.int_at_least("prefetch_buffer", Some(4), 0)? as usize;
        p.check_ctx()?;
        let dtype = if image_rec::NAMES.contains(&name) { None } else { p.dtype("dtype")? };
        let check_dtype = |source: crate::dtype::DType| match dtype {
            Some(d) if d != source => Err(Error::invalid(format!(
                "dtype {} is not the data's {}: {name} does not convert its output",
                d.name(),
                source.name()
            ))),
            _ => Ok(()),
        };
        let batch_size =
            || -> Result<usize> { Ok(p.int_at_least("batch_size", None, 1)? as usize) };
        let loader: Box<dyn Loader> = match name {
            "MNISTIter" => {
                check_dtype(crate::dtype::DType::F32)?;
                Box::new(mnist::MnistLoader::new(&p)?)
            }
            "CSVIter" => {
                // CSVIter reads `dtype` itself: the values are parsed as that type
                let round_batch = p.bool("round_batch", true)?;
                Box::new(csv::loader(&p, batch_size()?, round_batch)?)
            }
            "LibSVMIter" => {
                check_dtype(crate::dtype::DType::F32)?;
                Box::new(libsvm::LibSvmLoader::new(&p, batch_size()?)?)
            }
            n if image_rec::NAMES.contains(&n) => Box::new(image_rec::loader(&p, name)?),
            _ => {
                return Err(Error::not_supported(format!(
                    "this data iterator is not implemented by mxrt yet ({} are built)",
                    BUILT.join(", ")
                )));
            }
        };
        Ok(DataIter {
            name: name.to_owned(),
            prefetcher: Prefetcher::start(loader, prefetch_buffer, name)?,
            current: None,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Moves to the next batch: false at the end of the epoch (and until `before_first`).
    pub fn next_batch(&mut self) -> Result<bool> {
        self.current = None;
        self.current = self.prefetcher.next_batch()?;
        Ok(self.current.is_some())
    }

    /// Starts the next epoch.
    pub fn before_first(&mut self) -> Result<()> {
        self.current = None;
        self.prefetcher.before_first()
    }

    /// The batch the last `next` moved to.
    pub fn current(&self) -> Result<&Batch> {
        self.current.as_ref().ok_or_else(|| {
            Error::invalid(format!(
                "{}: no current batch (call Next first; after the end of an epoch or \
                 BeforeFirst there is none)",
                self.name
            ))
        })
    }
}
