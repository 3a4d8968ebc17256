//! NDArray functions of MXNet 1.9.1's C API.
//!
//! An `NDArrayHandle` is an `Arc<NDArray>` registered in the handle registry: views and shallow
//! copies are new handles to new `NDArray` values sharing the same chunk.

use super::handle::{self, Handle, HandleKind};
use super::types::NDArrayHandle;
use crate::error::Result;
use crate::ndarray::NDArray;
use std::sync::Arc;

impl Handle for NDArray {
    const KIND: HandleKind = HandleKind::NDArray;
}

/// Looks up an NDArray handle.
pub(crate) fn nd(h: NDArrayHandle, arg: &str) -> Result<Arc<NDArray>> {
    handle::borrow::<NDArray>(h, arg)
}

/// Hands a new NDArray to C.
pub(crate) fn new_handle(a: NDArray) -> NDArrayHandle {
    handle::into_handle(Arc::new(a))
}
