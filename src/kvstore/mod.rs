//! MXNet's key-value store, local flavour (`KVStoreLocal` with `CommCPU`/`CommDevice`).
//!
//! A store keeps one value per key. `init` stores a copy; `push` sums the values given for each
//! key (one "KVStoreReduce" engine op per key, split across threads above
//! `MXNET_KVSTORE_BIGARRAY_BOUND`) and folds the sum into the stored value, through the updater
//! when one is set; `pull` copies the stored value into the outputs. Every data movement is an
//! engine op, so calls return before the data moves and ops on different keys overlap.
//!
//! Layout: `store` (the store and its calls), `keys` (int/string keys and grouping), `comm` (the
//! reduce and broadcast engine ops), `reduce` (the summing kernels, split over
//! [`crate::parallel`]'s pool for big arrays), `updater` (the callbacks).
//!
//! ```
//! use mxrt::kvstore::{KVStore, Keys};
//! use mxrt::ndarray::NDArray;
//! use mxrt::{Context, DType};
//!
//! let kv = KVStore::create("local").unwrap();
//! let make = |x: f32| {
//!     let a = NDArray::new(&[2], Context::cpu(0), DType::F32, false).unwrap();
//!     a.sync_copy_from_bytes(bytemuck_f32(&[x, x])).unwrap();
//!     a
//! };
//! fn bytemuck_f32(v: &[f32]) -> &[u8] {
//!     // SAFETY: f32 has no padding; the slice covers exactly the floats' bytes.
//!     unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, v.len() * 4) }
//! }
//! kv.init(Keys::Int(&[3]), &[&make(0.0)]).unwrap();
//! kv.push(Keys::Int(&[3, 3]), &[&make(1.0), &make(2.0)], 0).unwrap();
//! let out = make(-1.0);
//! kv.pull(Keys::Int(&[3]), &[&out], 0, true).unwrap();
//! assert_eq!(out.to_bytes().unwrap(), bytemuck_f32(&[3.0, 3.0]));
//! ```

pub mod api;
pub mod comm;
pub mod keys;
pub mod reduce;
pub mod store;
mod trace;
#[cfg(feature = "dist")]
pub(crate) use trace::Traced;
pub mod updater;

pub use api::{
    Controller, DistributedFactory, KeyValueStore, ServerProfilerCommand, create, is_distributed,
    register_distributed,
};
pub use comm::CommKind;
pub use keys::{KeyKind, KeyRef, Keys};
pub use reduce::ReduceConfig;
pub use store::{KVStore, STORE_CTX, StoreKind};
pub use updater::{IntUpdater, StrUpdater};
