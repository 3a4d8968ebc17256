//! The registry of live C handles.
//!
//! Every object handed to C is an `Arc<T>` turned into a raw pointer and recorded here with its
//! kind. Before an export touches a handle it looks it up: NULL, a freed handle, a handle of another
//! kind, or a pointer to garbage gives an error naming the argument instead of undefined behaviour.
//! A lookup clones the `Arc` while the shard is locked, so a concurrent free cannot pull the object
//! away mid-call. The map is sharded by address to keep lookups from contending.

use crate::error::{Error, Result};
use parking_lot::RwLock;
use std::collections::HashMap;
use std::ffi::c_void;
use std::hash::BuildHasherDefault;
use std::sync::Arc;

/// What a handle points to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HandleKind {
    NDArray,
    KVStore,
    EngineVar,
    EngineOperator,
    Profile,
}

impl HandleKind {
    fn name(self) -> &'static str {
        match self {
            HandleKind::NDArray => "NDArray",
            HandleKind::KVStore => "KVStore",
            HandleKind::EngineVar => "engine variable",
            HandleKind::EngineOperator => "engine operator",
            HandleKind::Profile => "profile object",
        }
    }
}

/// A type that can be handed to C as a handle.
pub(crate) trait Handle: Send + Sync + 'static {
    const KIND: HandleKind;
}

const SHARDS: usize = 16;
type Shard = RwLock<HashMap<usize, HandleKind, BuildHasherDefault<crate::util::IntHasher>>>;

static REGISTRY: [Shard; SHARDS] =
    [const { RwLock::new(HashMap::with_hasher(BuildHasherDefault::new())) }; SHARDS];

fn shard(addr: usize) -> &'static Shard {
    &REGISTRY[(addr >> 6) % SHARDS]
}

/// Hands `value` to C: returns its handle, registered as live.
pub(crate) fn into_handle<T: Handle>(value: Arc<T>) -> *mut c_void {
    let ptr = Arc::into_raw(value) as *mut c_void;
    shard(ptr as usize).write().insert(ptr as usize, T::KIND);
    ptr
}

fn check(addr: usize, found: Option<&HandleKind>, want: HandleKind, arg: &str) -> Result<()> {
    match found {
        Some(&k) if k == want => Ok(()),
        Some(&k) => Err(Error::invalid(format!(
            "{arg} is a {} handle, expected a {} handle",
            k.name(),
            want.name()
        ))),
        None if addr == 0 => Err(Error::invalid(format!("{arg} is NULL"))),
        None => Err(Error::invalid(format!(
            "{arg} ({addr:#x}) is not a live {} handle (freed, or never created by mxrt)",
            want.name()
        ))),
    }
}

/// Looks up a live handle of type `T` and returns a new reference to its object.
pub(crate) fn borrow<T: Handle>(ptr: *const c_void, arg: &str) -> Result<Arc<T>> {
    borrow_named(ptr, || arg.to_owned())
}

/// [`borrow`] for element `index` of the C array `arg`; the name is only formatted on error.
pub(crate) fn borrow_at<T: Handle>(ptr: *const c_void, arg: &str, index: usize) -> Result<Arc<T>> {
    borrow_named(ptr, || format!("{arg}[{index}]"))
}

fn borrow_named<T: Handle>(ptr: *const c_void, arg: impl FnOnce() -> String) -> Result<Arc<T>> {
    let addr = ptr as usize;
    let map = shard(addr).read();
    let found = map.get(&addr);
    if found != Some(&T::KIND) {
        return Err(check(addr, found, T::KIND, &arg()).expect_err("kind differs"));
    }
    // SAFETY: the registry holds `addr` with kind T::KIND, so it came from `Arc::<T>::into_raw`
    // and its reference is still owned by C (removal takes the write lock we are excluding).
    unsafe {
        Arc::increment_strong_count(ptr as *const T);
        Ok(Arc::from_raw(ptr as *const T))
    }
}

/// Ends a handle's life: unregisters it and returns the reference C owned. Freeing twice is an error.
pub(crate) fn take<T: Handle>(ptr: *mut c_void, arg: &str) -> Result<Arc<T>> {
    let addr = ptr as usize;
    let mut map = shard(addr).write();
    check(addr, map.get(&addr), T::KIND, arg)?;
    map.remove(&addr);
    // SAFETY: as in `borrow`; removing the entry transfers C's reference to us exactly once.
    Ok(unsafe { Arc::from_raw(ptr as *const T) })
}

/// Looks up each handle of a C array of handles.
///
/// # Safety
/// A non-NULL `ptr` must be valid for reads of `len` pointers.
pub(crate) unsafe fn borrow_all<T: Handle>(
    ptr: *const *mut c_void,
    len: usize,
    arg: &str,
) -> Result<smallvec::SmallVec<[Arc<T>; 4]>> {
    // SAFETY: forwarded contract.
    let raw = unsafe { super::args::slice(ptr, len, arg)? };
    raw.iter()
        .enumerate()
        .map(|(i, &h)| borrow_at::<T>(h, arg, i))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct A(u32);
    impl Handle for A {
        const KIND: HandleKind = HandleKind::NDArray;
    }
    struct B;
    impl Handle for B {
        const KIND: HandleKind = HandleKind::KVStore;
    }

    #[test]
    fn lifecycle_and_misuse() {
        let h = into_handle(Arc::new(A(5)));
        assert_eq!(borrow::<A>(h, "h").unwrap().0, 5);
        let e = borrow::<B>(h, "h").err().unwrap();
        assert!(
            e.message()
                .contains("is a NDArray handle, expected a KVStore"),
            "{e}"
        );
        assert!(
            borrow::<A>(std::ptr::null(), "x")
                .err()
                .unwrap()
                .message()
                .contains("x is NULL")
        );
        let a = take::<A>(h, "h").unwrap();
        assert_eq!(Arc::strong_count(&a), 1);
        let e = take::<A>(h, "h").err().unwrap();
        assert!(e.message().contains("not a live NDArray handle"), "{e}");
        let garbage = 0xdead_beef_usize as *mut c_void;
        assert!(borrow::<A>(garbage, "g").is_err());
    }
}
