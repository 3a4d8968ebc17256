//! [`Tensor`]: the view of an array a kernel gets inside its engine op — start of the data, shape
//! and dtype — with typed access.
//!
//! Soundness rests on the runner (`imperative.rs`), which makes every `Tensor` with
//! [`Tensor::new`] under this contract: the memory is live and engine-ordered for the whole
//! kernel (read access to inputs, exclusive write access to outputs and mutated inputs), and a
//! tensor is marked `exclusive` only when no other tensor of the same kernel call overlaps it in
//! a way that could be written. Slices are handed out only for exclusive tensors; kernels that
//! allow exact in-place aliasing ([`super::op::Aliasing::Elementwise`]) work through
//! [`Tensor::ptr`].

use super::kernel::Element;
use crate::dtype::DType;
use crate::ndarray::Shape;

/// A kernel's view of one array.
pub struct Tensor {
    ptr: *mut u8,
    pub shape: Shape,
    pub dtype: DType,
    len: usize,
    exclusive: bool,
}

// SAFETY: a tensor is only used inside the engine op it was made for, which holds the engine's
// access rights to its memory (see the module contract); moving it to the worker thread that runs
// the op is the point.
unsafe impl Send for Tensor {}

impl Tensor {
    /// # Safety
    /// `ptr` must be valid for reads (and, for outputs, writes) of `shape`'s elements of `dtype`
    /// for as long as the tensor is used, aligned for `dtype`, and (if `exclusive`) not written
    /// through any other tensor or pointer while it is used; see the module contract.
    pub unsafe fn new(ptr: *mut u8, shape: &[i64], dtype: DType, exclusive: bool) -> Tensor {
        let len = shape.iter().map(|&d| d.max(0) as usize).product();
        Tensor {
            ptr,
            shape: Shape::from_slice(shape),
            dtype,
            len,
            exclusive,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Start of the data as `T` (null or dangling for an empty tensor). Dereferencing it follows
    /// the module contract: element `i` may be read, and for outputs written, for `i < len()`.
    pub fn ptr<T: Element>(&self) -> *mut T {
        self.check::<T>();
        self.ptr.cast()
    }

    /// Start of the data as bytes, for copies that do not depend on the dtype (same contract as
    /// [`Tensor::ptr`]).
    pub fn byte_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Bytes of data.
    pub fn nbytes(&self) -> usize {
        self.len * self.dtype.size()
    }

    /// The elements, for a tensor no output overlaps.
    pub fn slice<T: Element>(&self) -> &[T] {
        self.check::<T>();
        assert!(self.exclusive, "slice of a tensor an output may alias");
        if self.len == 0 {
            return &[];
        }
        // SAFETY: per `new`'s contract the memory holds `len` readable, aligned elements that no
        // one writes while this shared borrow of the tensor lives.
        unsafe { std::slice::from_raw_parts(self.ptr.cast::<T>(), self.len) }
    }

    /// The elements, writable, for an output no input overlaps.
    pub fn slice_mut<T: Element>(&mut self) -> &mut [T] {
        self.check::<T>();
        assert!(self.exclusive, "slice of a tensor an input may alias");
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: per `new`'s contract the memory holds `len` writable, aligned elements that
        // nothing else reads or writes while this unique borrow of the tensor lives.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.cast::<T>(), self.len) }
    }

    fn check<T: Element>(&self) {
        assert_eq!(
            T::DTYPE,
            self.dtype,
            "kernel reads a {} tensor as {}",
            self.dtype.name(),
            T::DTYPE.name()
        );
    }
}
