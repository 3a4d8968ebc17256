//! The registry of live C handles.
//!
//! Every object handed to C is an `Arc<T>` turned into a raw pointer and recorded here with its
//! kind. Before an export touches a handle it looks it up: NULL, a freed handle, a handle of another
//! kind, or a pointer to garbage gives an error naming the argument instead of undefined behaviour.
//! A lookup clones the `Arc` while the shard is locked, so a concurrent free cannot pull the object
//! away mid-call. The map is sharded by address to keep lookups from contending.

use crate::error::{Error, Result};
use parking_lot::{RwLock, RwLockReadGuard};
use std::cell::{Cell, RefCell};
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
type ShardMap = HashMap<usize, HandleKind, BuildHasherDefault<crate::util::IntHasher>>;
type Shard = RwLock<ShardMap>;

static REGISTRY: [Shard; SHARDS] =
    [const { RwLock::new(HashMap::with_hasher(BuildHasherDefault::new())) }; SHARDS];

fn shard_index(addr: usize) -> usize {
    (addr >> 6) % SHARDS
}

fn shard(addr: usize) -> &'static Shard {
    &REGISTRY[shard_index(addr)]
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

/// Read access to the registry shards of the handles a call looks up, held until [`release`]:
/// while it is held, no handle in those shards can be freed, so their objects can be used
/// without taking a reference each (two atomic operations per handle, 6–8% of an ND push with
/// 11 arrays: `make bench-floor`). Each shard is read-locked once, however many of the handles it
/// holds.
///
/// [`lock`](Self::lock) takes all the shards a call needs at once, in ascending order, with
/// fair read locks: a waiting writer (a create or free) holds back later readers, so pushes from
/// several threads cannot starve it, and the fixed order keeps two readers that each wait behind
/// a writer on the other's shard from deadlocking (writers hold one shard and wait for nothing
/// while they do). A thread must not free or create a handle while it holds them: an op body that
/// could run on this thread must not start before [`release`], and C code that runs meanwhile
/// anyway (the deleter of a push that failed) is put off until then (see [`run_c`]).
///
/// [`release`]: SharedLookup::release
pub(crate) struct SharedLookup {
    guards: RefCell<[Option<RwLockReadGuard<'static, ShardMap>>; SHARDS]>,
    held: Cell<bool>,
}

thread_local! {
    /// How many [`SharedLookup`]s this thread holds; C callbacks are put off while any is.
    static HELD: Cell<u32> = const { Cell::new(0) };
    static DEFERRED: RefCell<Vec<Box<dyn FnOnce()>>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f`, a call into C code that may create or free handles, now, or, while the calling
/// thread holds a [`SharedLookup`], once it is released (the code would otherwise wait forever for
/// the shard locks its own thread holds).
pub(crate) fn run_c(f: impl FnOnce() + 'static) {
    if HELD.try_with(Cell::get).unwrap_or(0) > 0 {
        DEFERRED.with(|d| d.borrow_mut().push(Box::new(f)));
    } else {
        f();
    }
}

impl SharedLookup {
    pub(crate) fn new() -> Self {
        HELD.with(|h| h.set(h.get() + 1));
        SharedLookup {
            guards: RefCell::new([const { None }; SHARDS]),
            held: Cell::new(true),
        }
    }

    /// Read-locks the shards of all of `ptrs` (once per call: a second call could take shards out
    /// of order).
    pub(crate) fn lock(&self, ptrs: impl Iterator<Item = *const c_void>) {
        let mask = ptrs.fold(0u32, |m, p| m | 1 << shard_index(p as usize));
        let mut guards = self.guards.borrow_mut();
        debug_assert!(guards.iter().all(Option::is_none), "locked twice");
        for (i, g) in guards.iter_mut().enumerate() {
            if mask & 1 << i != 0 {
                *g = Some(REGISTRY[i].read());
            }
        }
    }

    /// The object of `ptr`, element `index` of the C array `arg`, which must be a live handle of
    /// type `T` in a shard [`lock`](Self::lock) took.
    ///
    /// # Safety
    /// The reference must not be used after [`release`](Self::release) (nor after `self` drops,
    /// which the borrow enforces).
    pub(crate) unsafe fn get<T: Handle>(
        &self,
        ptr: *const c_void,
        arg: &str,
        index: usize,
    ) -> Result<&T> {
        let addr = ptr as usize;
        let guards = self.guards.borrow();
        let map = guards[shard_index(addr)]
            .as_ref()
            .expect("the shards of every handle looked up are locked first");
        let found = map.get(&addr);
        if found != Some(&T::KIND) {
            let name = format!("{arg}[{index}]");
            return Err(check(addr, found, T::KIND, &name).expect_err("kind differs"));
        }
        // SAFETY: the registry holds `addr` with kind T::KIND, so it came from
        // `Arc::<T>::into_raw` and C's reference keeps the object alive; removing it takes this
        // shard's write lock, which the read lock held here excludes until `release`, and the
        // caller does not use the reference after that.
        Ok(unsafe { &*(ptr as *const T) })
    }

    /// Releases the read locks (references from [`get`](Self::get) must not be used any more),
    /// then runs the C code put off meanwhile.
    pub(crate) fn release(&self) {
        *self.guards.borrow_mut() = [const { None }; SHARDS];
        if !self.held.replace(false) {
            return;
        }
        let left = HELD.with(|h| {
            h.set(h.get() - 1);
            h.get()
        });
        if left == 0 {
            let deferred = DEFERRED.with(|d| std::mem::take(&mut *d.borrow_mut()));
            deferred.into_iter().for_each(|f| f());
        }
    }
}

impl Drop for SharedLookup {
    fn drop(&mut self) {
        self.release();
    }
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
