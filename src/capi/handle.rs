//! The table of live C handles.
//!
//! Every object handed to C is an `Arc<T>` kept in a slot of one table for all handle kinds. The
//! handle C receives is not the object's address but the slot's index and the slot's generation,
//! `TAG | (generation << 32) | (index + 1)`: never NULL, and never equal to the handle of an object
//! that lived in the slot before, because freeing a handle bumps its slot's generation. `TAG` is
//! the top bit, which no user-space address has: small integers, addresses and other common
//! garbage never decode to a handle. So a freed handle stays invalid when its memory, or its
//! slot, is reused: a double free, a stale handle, a handle of another kind or a garbage value is
//! an error naming the argument, and can never reach a live object. A generation is 31 bits per
//! slot; freed slots are reused oldest first, so a stale handle could only match again after 2^31
//! reuses of its one slot.
//!
//! The table is split into [`SHARDS`] shards by index, each behind a read-write lock: a lookup
//! read-locks one shard, checks the slot's generation and kind, and clones the `Arc` while a
//! concurrent free (which write-locks the shard) is held off. [`SharedLookup`] keeps shards
//! read-locked for a whole call so that a push can use many handles without counting a reference
//! for each. Completions of async ops (`completion.rs`) use the same index-and-generation idea
//! without locks, because a completion is taken once and never looked up while it is live.

use crate::error::{Error, Result};
use parking_lot::{RwLock, RwLockReadGuard};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::ffi::c_void;
use std::sync::Arc;

const _: () = assert!(
    usize::BITS == 64,
    "handles pack a tag bit, a 31-bit generation and a 32-bit index into a pointer"
);

/// What a handle points to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HandleKind {
    NDArray,
    KVStore,
    EngineVar,
    EngineOperator,
    Profile,
    Symbol,
    RecordIOWriter,
    RecordIOReader,
    DataIter,
    CachedOp,
    Executor,
    Predictor,
    NDList,
}

impl HandleKind {
    fn name(self) -> &'static str {
        match self {
            HandleKind::NDArray => "NDArray",
            HandleKind::KVStore => "KVStore",
            HandleKind::EngineVar => "engine variable",
            HandleKind::EngineOperator => "engine operator",
            HandleKind::Profile => "profile object",
            HandleKind::Symbol => "Symbol",
            HandleKind::RecordIOWriter => "RecordIO writer",
            HandleKind::RecordIOReader => "RecordIO reader",
            HandleKind::DataIter => "data iterator",
            HandleKind::CachedOp => "CachedOp",
            HandleKind::Executor => "Executor",
            HandleKind::Predictor => "Predictor",
            HandleKind::NDList => "NDList",
        }
    }
}

/// A type that can be handed to C as a handle.
pub(crate) trait Handle: Send + Sync + 'static {
    const KIND: HandleKind;
}

/// One slot of the table: a live object (`Arc::into_raw` of the kind's type) or nothing.
struct Slot {
    generation: u32,
    live: Option<(HandleKind, *const ())>,
}

/// One shard: the slots whose index is `shard + SHARDS * position`, and its free positions,
/// oldest first.
struct Shard {
    slots: Vec<Slot>,
    free: VecDeque<u32>,
}

// SAFETY: the raw pointers are `Arc`s of `Send + Sync` objects (`Handle: Send + Sync`), owned by
// the table; the shard's lock orders every access to them.
unsafe impl Send for Shard {}
// SAFETY: as above.
unsafe impl Sync for Shard {}

/// Free slots are reused only once this many are free in a shard, so that a handle freed and a
/// handle created right after do not share a slot (the generation tells them apart anyway; this
/// only makes reuse of a slot rarer).
const MIN_FREE_BEFORE_REUSE: usize = 64;

const SHARDS: usize = 16;
type ShardLock = RwLock<Shard>;

static TABLE: [ShardLock; SHARDS] = [const {
    RwLock::new(Shard {
        slots: Vec::new(),
        free: VecDeque::new(),
    })
}; SHARDS];

/// A handle's parts: its shard, its position in the shard and its generation. `None` for values
/// no handle can have (without the tag, or index 0).
#[derive(Clone, Copy)]
struct Decoded {
    shard: usize,
    position: usize,
    generation: u32,
}

/// The bit every handle has (see the module docs).
const TAG: usize = 1 << 63;
/// Generations use the 31 bits between the tag and the index.
const GENERATION_MASK: u32 = 0x7fff_ffff;

fn decode(handle: usize) -> Option<Decoded> {
    if handle & TAG == 0 {
        return None;
    }
    let index = (handle & 0xffff_ffff).checked_sub(1)?;
    Some(Decoded {
        shard: index % SHARDS,
        position: index / SHARDS,
        generation: (handle >> 32) as u32 & GENERATION_MASK,
    })
}

fn encode(shard: usize, position: usize, generation: u32) -> usize {
    let index = position * SHARDS + shard;
    assert!(index < 0xffff_ffff, "more than 2^32 - 1 live handles");
    TAG | ((generation & GENERATION_MASK) as usize) << 32 | (index + 1)
}

fn shard_index(handle: usize) -> usize {
    decode(handle).map_or(0, |d| d.shard)
}

/// The kind of the live object `handle` names in `shard`, with its pointer, if it names one.
fn find(shard: &Shard, handle: usize) -> Option<(HandleKind, *const ())> {
    let d = decode(handle)?;
    let slot = shard.slots.get(d.position)?;
    if slot.generation != d.generation {
        return None;
    }
    slot.live
}

thread_local! {
    /// Spreads the handles a thread creates over the shards.
    static NEXT_SHARD: Cell<usize> = Cell::new({
        let local = 0u8;
        (&local as *const u8 as usize >> 12) % SHARDS
    });
}

/// Hands `value` to C: returns its handle, registered as live.
pub(crate) fn into_handle<T: Handle>(value: Arc<T>) -> *mut c_void {
    let shard_no = NEXT_SHARD.with(|n| {
        let s = n.get();
        n.set((s + 1) % SHARDS);
        s
    });
    let ptr = Arc::into_raw(value) as *const ();
    let mut shard = TABLE[shard_no].write();
    let position = if shard.free.len() >= MIN_FREE_BEFORE_REUSE {
        shard.free.pop_front().expect("not empty") as usize
    } else {
        shard.slots.push(Slot {
            generation: 0,
            live: None,
        });
        shard.slots.len() - 1
    };
    let slot = &mut shard.slots[position];
    slot.live = Some((T::KIND, ptr));
    encode(shard_no, position, slot.generation) as *mut c_void
}

/// The object `handle` names, if it is a live handle of kind `want`; otherwise the error for
/// argument `arg`.
fn check(
    found: Option<(HandleKind, *const ())>,
    handle: usize,
    want: HandleKind,
    arg: &str,
) -> Result<*const ()> {
    match found {
        Some((k, ptr)) if k == want => Ok(ptr),
        Some((k, _)) => Err(Error::invalid(format!(
            "{arg} is a {} handle, expected a {} handle",
            k.name(),
            want.name()
        ))),
        None if handle == 0 => Err(Error::invalid(format!("{arg} is NULL"))),
        None => Err(Error::invalid(format!(
            "{arg} ({handle:#x}) is not a live {} handle (freed, or never created by mxrt)",
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
    let handle = ptr as usize;
    let shard = TABLE[shard_index(handle)].read();
    let found = find(&shard, handle);
    let object = match found {
        Some((k, object)) if k == T::KIND => object as *const T,
        _ => return Err(check(found, handle, T::KIND, &arg()).expect_err("not live")),
    };
    // SAFETY: the slot holds `object` with kind T::KIND, so it came from `Arc::<T>::into_raw`
    // and its reference is still owned by the table (removal takes the write lock we exclude).
    unsafe {
        Arc::increment_strong_count(object);
        Ok(Arc::from_raw(object))
    }
}

/// Ends a handle's life: empties its slot, bumps the slot's generation and returns the reference
/// the table held. Freeing twice, or a stale handle, is an error.
pub(crate) fn take<T: Handle>(ptr: *mut c_void, arg: &str) -> Result<Arc<T>> {
    let handle = ptr as usize;
    let mut shard = TABLE[shard_index(handle)].write();
    let object = check(find(&shard, handle), handle, T::KIND, arg)? as *const T;
    let d = decode(handle).expect("a live handle decodes");
    let slot = &mut shard.slots[d.position];
    slot.live = None;
    slot.generation = slot.generation.wrapping_add(1) & GENERATION_MASK;
    shard.free.push_back(d.position as u32);
    // SAFETY: the slot held `object` with kind T::KIND (from `Arc::<T>::into_raw`); emptying the
    // slot transfers the table's reference to us exactly once.
    Ok(unsafe { Arc::from_raw(object) })
}

/// Read access to the table shards of the handles a call looks up, held until [`release`]:
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
    guards: RefCell<[Option<RwLockReadGuard<'static, Shard>>; SHARDS]>,
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
                *g = Some(TABLE[i].read());
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
        let handle = ptr as usize;
        let guards = self.guards.borrow();
        let shard = guards[shard_index(handle)]
            .as_ref()
            .expect("the shards of every handle looked up are locked first");
        let found = find(shard, handle);
        let object = match found {
            Some((k, object)) if k == T::KIND => object as *const T,
            _ => {
                let name = format!("{arg}[{index}]");
                return Err(check(found, handle, T::KIND, &name).expect_err("not live"));
            }
        };
        // SAFETY: the slot holds `object` with kind T::KIND, so it came from `Arc::<T>::into_raw`
        // and the table's reference keeps the object alive; emptying the slot takes this shard's
        // write lock, which the read lock held here excludes until `release`, and the caller
        // does not use the reference after that.
        Ok(unsafe { &*object })
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

    #[test]
    fn small_integers_and_addresses_are_never_handles() {
        let n = if cfg!(miri) { 100 } else { 1000 };
        let live: Vec<_> = (0..n).map(|i| into_handle(Arc::new(A(i)))).collect();
        let local = 0u8;
        let addresses = [&local as *const u8 as usize, live.as_ptr() as usize];
        for garbage in (1..=4 * n as usize).chain(addresses) {
            assert!(
                borrow::<A>(garbage as *const c_void, "h").is_err(),
                "{garbage:#x} passed as a handle"
            );
        }
        for h in live {
            take::<A>(h, "h").unwrap();
        }
    }

    #[test]
    fn a_stale_handle_never_reaches_the_object_now_in_its_slot() {
        let n = if cfg!(miri) { 200 } else { 2000 };
        let old: Vec<_> = (0..n).map(|i| into_handle(Arc::new(A(i)))).collect();
        for &h in &old {
            take::<A>(h, "h").unwrap();
        }
        let new: Vec<_> = (0..2000)
            .map(|i| into_handle(Arc::new(A(10_000 + i))))
            .collect();
        for &h in &old {
            let e = take::<A>(h, "h").err().expect("stale free refused");
            assert!(e.message().contains("not a live NDArray handle"), "{e}");
            assert!(borrow::<A>(h, "h").is_err());
        }
        for (i, &h) in new.iter().enumerate() {
            assert_eq!(borrow::<A>(h, "h").unwrap().0, 10_000 + i as u32);
            take::<A>(h, "h").unwrap();
        }
    }

    #[test]
    fn concurrent_creates_frees_and_lookups_keep_every_handle_to_its_object() {
        let threads: Vec<_> = (0..4u32)
            .map(|t| {
                std::thread::spawn(move || {
                    let n = if cfg!(miri) { 50 } else { 5_000 };
                    let mut held = Vec::new();
                    for i in 0..n {
                        let v = t * 1_000_000 + i;
                        held.push((into_handle(Arc::new(A(v))), v));
                        if held.len() > 8 {
                            let (h, v) = held.remove((i as usize) % 8);
                            assert_eq!(borrow::<A>(h, "h").unwrap().0, v);
                            assert_eq!(take::<A>(h, "h").unwrap().0, v);
                            assert!(borrow::<A>(h, "h").is_err());
                        }
                    }
                    for (h, v) in held {
                        assert_eq!(take::<A>(h, "h").unwrap().0, v);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }
}
