//! KVStore functions of MXNet 1.9.1's C API: local stores ("local", "device" and their aliases)
//! and, in builds with the `dist` feature, distributed ones.
//!
//! A `KVStoreHandle` is an `Arc<CKVStore>` in the handle registry. Updaters are called on the
//! thread that calls Push/PushPull, once per unique key, with two new NDArray handles (merged
//! value, stored value) that the callee owns and must free with `MXNDArrayFree`, as in MXNet.
//! Values may be dense or row_sparse; `MXKVStorePullRowSparse(Ex)` pulls the requested rows of a
//! row_sparse value.
//!
//! Type strings with "dist" create a distributed store (`crate::dist`): the process's role comes
//! from `DMLC_ROLE`; servers serve in `MXKVStoreRunServer`.
//!
//! Differences from MXNet, on purpose: a push without an updater stores a copy of the sum (MXNet
//! aliases the pushed array); `RunServer` and `SendCommmandToServers` on a local store fail with a
//! message (it has no servers), and so do the NCCL store types, which mxrt does not build.
//!
//! # Safety
//! Every export has MXNet's C contract: pointer arguments are NULL or valid for the counts given,
//! strings are NUL-terminated, handles come from mxrt. NULL and stale handles are reported (-1).
#![allow(clippy::missing_safety_doc)]

use super::args;
use super::error::api_call;
use super::handle::{self, Handle, HandleKind};
use super::types::*;
use crate::error::{Error, Result};
use crate::dist::Role;
use crate::kvstore::{IntUpdater, KeyValueStore, Keys, StrUpdater};
use crate::ndarray::NDArray;
use std::ffi::{CString, c_char, c_int, c_void};
use std::sync::Arc;

/// What a KVStoreHandle points to: the store and its type string for `MXKVStoreGetType`.
pub(crate) struct CKVStore {
    store: Box<dyn KeyValueStore>,
    type_c: CString,
}

impl Handle for CKVStore {
    const KIND: HandleKind = HandleKind::KVStore;
}

fn kv(h: KVStoreHandle) -> Result<Arc<CKVStore>> {
    handle::borrow::<CKVStore>(h, "handle")
}

/// The profiler's server variants: `command` for the servers of the store `h`.
pub(crate) fn server_profiler_command(
    h: KVStoreHandle,
    command: &crate::kvstore::ServerProfilerCommand,
) -> Result<()> {
    handle::borrow::<CKVStore>(h, "kvstoreHandle")?
        .store
        .server_profiler_command(command)
}

/// `MXKVStoreUpdater` (MXNet declares the function type; parameters decay to this pointer).
pub type KVStoreUpdaterFn = Option<
    unsafe extern "C" fn(
        key: c_int,
        recv: NDArrayHandle,
        local: NDArrayHandle,
        handle: *mut c_void,
    ),
>;
/// `MXKVStoreStrUpdater`.
pub type KVStoreStrUpdaterFn = Option<
    unsafe extern "C" fn(
        key: *const c_char,
        recv: NDArrayHandle,
        local: NDArrayHandle,
        handle: *mut c_void,
    ),
>;
/// `MXKVStoreServerController`.
pub type KVStoreServerControllerFn =
    Option<unsafe extern "C" fn(head: c_int, body: *const c_char, controller_handle: *mut c_void)>;

/// The caller's `updater_handle`, passed back to its callbacks.
#[derive(Clone, Copy)]
struct UserPtr(*mut c_void);
// SAFETY: MXNet calls updaters on the pushing thread with this pointer; mxrt does the same and
// never dereferences it. Sending it along with the store is the caller's contract, as in MXNet.
unsafe impl Send for UserPtr {}
// SAFETY: as above.
unsafe impl Sync for UserPtr {}

impl UserPtr {
    fn get(self) -> *mut c_void {
        self.0
    }
}

/// Hands a merged/stored pair to C as two new handles the callee owns.
fn handles(merged: &NDArray, stored: &NDArray) -> (NDArrayHandle, NDArrayHandle) {
    (
        super::ndarray::new_handle(merged.clone()),
        super::ndarray::new_handle(stored.clone()),
    )
}

fn make_int_updater(f: KVStoreUpdaterFn, user: *mut c_void) -> Option<IntUpdater> {
    let f = f?;
    let user = UserPtr(user);
    Some(Arc::new(
        move |key: i32, merged: &NDArray, stored: &NDArray| {
            let (recv, local) = handles(merged, stored);
            // SAFETY: `f` is the caller's updater with MXNet's signature; it owns the two handles.
            unsafe { f(key, recv, local, user.get()) }
        },
    ))
}

fn make_str_updater(f: KVStoreStrUpdaterFn, user: *mut c_void) -> Option<StrUpdater> {
    let f = f?;
    let user = UserPtr(user);
    Some(Arc::new(
        move |key: &str, merged: &NDArray, stored: &NDArray| {
            // keys came from C strings, so they hold no NUL
            let key = CString::new(key).unwrap_or_default();
            let (recv, local) = handles(merged, stored);
            // SAFETY: `f` is the caller's updater with MXNet's signature; `key` lives for the call
            // and the callee owns the two handles.
            unsafe { f(key.as_ptr(), recv, local, user.get()) }
        },
    ))
}

/// `num` string keys (also the parameter strings of gradient compression).
///
/// # Safety
/// A non-NULL `keys` must be valid for reads of `num` pointers, each NULL (refused) or a
/// NUL-terminated string that lives for `'a`.
unsafe fn str_keys<'a>(keys: *const *const c_char, num: usize, name: &str) -> Result<Vec<&'a str>> {
    // SAFETY: API contract: `keys` holds `num` C strings.
    let raw = unsafe { args::slice(keys, num, name)? };
    raw.iter()
        .enumerate()
        // SAFETY: each entry is a NUL-terminated string per the API contract.
        .map(|(i, &p)| unsafe { args::c_str_at(p, name, i) })
        .collect()
}

/// `num` NDArray handles.
///
/// # Safety
/// A non-NULL `vals` must be valid for reads of `num` handles (each handle is checked).
unsafe fn arrays(vals: *const NDArrayHandle, num: usize, name: &str) -> Result<Vec<Arc<NDArray>>> {
    // SAFETY: API contract: `vals` holds `num` handles.
    let raw = unsafe { args::slice(vals, num, name)? };
    raw.iter()
        .enumerate()
        .map(|(i, &h)| super::handle::borrow_at::<NDArray>(h, name, i))
        .collect()
}

fn refs(v: &[Arc<NDArray>]) -> Vec<&NDArray> {
    v.iter().map(|a| &**a).collect()
}

/// Keys of either kind, as parsed from C.
enum CKeys<'a> {
    Int(&'a [i32]),
    Str(Vec<&'a str>),
}

impl CKeys<'_> {
    fn keys(&self) -> Keys<'_> {
        match self {
            CKeys::Int(k) => Keys::Int(k),
            CKeys::Str(k) => Keys::Str(k),
        }
    }
}

/// A C array of keys: `const int*` (the int-key functions) or `const char**` (their `Ex` twins),
/// so that each pair of exports shares one body.
trait KeyArray: Copy {
    /// Reads `num` keys.
    ///
    /// # Safety
    /// The pointer is NULL or valid for `num` keys (strings NUL-terminated), per the API contract.
    unsafe fn read<'a>(self, num: usize, name: &str) -> Result<CKeys<'a>>;
}

impl KeyArray for *const c_int {
    /// # Safety
    /// As for [`KeyArray::read`]: NULL, or valid for reads of `num` ints.
    unsafe fn read<'a>(self, num: usize, name: &str) -> Result<CKeys<'a>> {
        // SAFETY: forwarded contract: `self` holds `num` ints.
        Ok(CKeys::Int(unsafe { args::slice(self, num, name)? }))
    }
}

impl KeyArray for *mut *const c_char {
    /// # Safety
    /// As for [`KeyArray::read`]: NULL, or valid for reads of `num` pointers to NUL-terminated
    /// strings.
    unsafe fn read<'a>(self, num: usize, name: &str) -> Result<CKeys<'a>> {
        // SAFETY: forwarded contract: `self` holds `num` C strings.
        Ok(CKeys::Str(unsafe { str_keys(self, num, name)? }))
    }
}

/// The body of the one-list calls (Init, Push, Pull and their twins): reads `num` keys and
/// arrays, then runs `call` on the store.
///
/// # Safety
/// `keys` as for [`KeyArray::read`] and `vals` as for [`arrays`], each with `num` elements.
unsafe fn with_keys<K: KeyArray>(
    handle: KVStoreHandle,
    num: u32,
    keys: K,
    vals: *mut NDArrayHandle,
    call: impl FnOnce(&dyn KeyValueStore, Keys<'_>, &[&NDArray]) -> Result<()>,
) -> Result<()> {
    let n = num as usize;
    // SAFETY: forwarded API contract: `num` keys and handles.
    let (k, v) = unsafe { (keys.read(n, "keys")?, arrays(vals, n, "vals")?) };
    call(&*kv(handle)?.store, k.keys(), &refs(&v))
}

/// Which two-list call: Broadcast (init, then pull) or PushPull (push, then pull).
#[derive(Clone, Copy)]
enum TwoPhase {
    Broadcast,
    PushPull,
}

/// The body of Broadcast and PushPull and their twins.
///
/// # Safety
/// `vkeys` and `vals` must be NULL or valid for `vnum` elements, `okeys` and `outs` for `onum`
/// (keys as for [`KeyArray::read`], arrays as for [`arrays`]).
#[allow(clippy::too_many_arguments)] // MXNet's parameter list
unsafe fn two_phase<K: KeyArray>(
    handle: KVStoreHandle,
    vnum: mx_uint,
    vkeys: K,
    onum: mx_uint,
    okeys: K,
    vals: *mut NDArrayHandle,
    outs: *mut NDArrayHandle,
    priority: c_int,
    which: TwoPhase,
) -> Result<()> {
    let (vn, on) = (vnum as usize, onum as usize);
    // SAFETY: forwarded API contract: `vnum` keys and values, `onum` keys and outputs.
    let (vk, ok, v, o) = unsafe {
        (
            vkeys.read(vn, "vkeys")?,
            okeys.read(on, "okeys")?,
            arrays(vals, vn, "vals")?,
            arrays(outs, on, "outs")?,
        )
    };
    let kv = kv(handle)?;
    let (v, o) = (refs(&v), refs(&o));
    match which {
        TwoPhase::Broadcast => kv.store.broadcast(vk.keys(), ok.keys(), &v, &o, priority),
        TwoPhase::PushPull => kv.store.push_pull(vk.keys(), ok.keys(), &v, &o, priority),
    }
}

/// The body of the row-sparse pulls: `num` keys, outputs and row-id arrays.
///
/// # Safety
/// `keys` as for [`KeyArray::read`], `vals` and `row_ids` as for [`arrays`], each with `num`
/// elements.
unsafe fn row_sparse<K: KeyArray>(
    handle: KVStoreHandle,
    num: u32,
    keys: K,
    vals: *mut NDArrayHandle,
    row_ids: *const NDArrayHandle,
    priority: c_int,
) -> Result<()> {
    let n = num as usize;
    // SAFETY: forwarded API contract: `num` keys, outputs and row-id arrays.
    let (k, v, r) = unsafe {
        (
            keys.read(n, "keys")?,
            arrays(vals, n, "vals")?,
            arrays(row_ids.cast_mut(), n, "row_ids")?,
        )
    };
    kv(handle)?
        .store
        .pull_row_sparse(k.keys(), &refs(&v), &refs(&r), priority)
}

/// Creates a store. `type` is one of MXNet's type strings (case-insensitive): "local", "device",
/// "local_update_cpu", "local_allreduce_cpu", "local_allreduce_device", ... ("local" sums GPU
/// values in page-locked host memory, "device" on a GPU; with host values both are the same).
/// "dist_sync", "dist_async", "dist_sync_device", ... create a distributed store for this
/// process's role (`DMLC_ROLE`; MPI starts here; a build without the `dist` feature fails naming
/// it). "nccl" fails: mxrt does not use NCCL. Unknown type strings fail.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXKVStoreCreate(type_: *const c_char, out: *mut KVStoreHandle) -> c_int {
    api_call("MXKVStoreCreate", || {
        // SAFETY: API contract: a C string and an out-parameter.
        let (t, out) = unsafe { (args::c_str(type_, "type")?, args::out(out, "out")?) };
        let store = crate::kvstore::create(t)?;
        let type_c =
            CString::new(store.type_name()).map_err(|_| Error::invalid("type contains NUL"))?;
        *out = handle::into_handle(Arc::new(CKVStore { store, type_c }));
        Ok(())
    })
}

/// Frees a store; NULL or a freed handle is -1. Engine ops already pushed keep the arrays they use
/// alive. A distributed worker first finishes its pushes and meets the other workers at the exit
/// barrier (unless MXKVStoreSetBarrierBeforeExit(0)); once every worker has freed its store, the
/// servers' MXKVStoreRunServer returns.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXKVStoreFree(handle: KVStoreHandle) -> c_int {
    api_call("MXKVStoreFree", || {
        let kv = handle::take::<CKVStore>(handle, "handle")?;
        // a distributed worker finishes its pushes, meets the others at the exit barrier and
        // lets the servers stop; the handle is gone either way
        kv.store.shutdown()
    })
}

/// Sets gradient compression from `num_params` key/value strings (MXNet's: `type` = `2bit` or
/// `none`, `threshold`). On the workers of a distributed store with servers, float32 pushes are
/// then sent 2-bit compressed and each worker keeps its residual. A local store fails with a
/// message, and so does `2bit` on a distributed store without servers (its allreduce sends full
/// values); servers and the scheduler only check the parameters.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXKVStoreSetGradientCompression(
    handle: KVStoreHandle,
    num_params: u32,
    keys: *mut *const c_char,
    vals: *mut *const c_char,
) -> c_int {
    api_call("MXKVStoreSetGradientCompression", || {
        let kv = kv(handle)?;
        let n = num_params as usize;
        // SAFETY: API contract: `num_params` strings each.
        let (k, v) = unsafe { (str_keys(keys, n, "keys")?, str_keys(vals, n, "vals")?) };
        let params: Vec<(&str, &str)> = k.into_iter().zip(v).collect();
        kv.store.set_gradient_compression(&params)
    })
}

/// Stores a copy of each value (dense or row_sparse) under its int key (each key once). In a
/// distributed store only worker 0's values count, as in MXNet.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXKVStoreInit(
    handle: KVStoreHandle,
    num: u32,
    keys: *const c_int,
    vals: *mut NDArrayHandle,
) -> c_int {
    api_call("MXKVStoreInit", || {
        // SAFETY: forwarded API contract.
        unsafe { with_keys(handle, num, keys, vals, |s, k, v| s.init(k, v)) }
    })
}

/// [`MXKVStoreInit`] with string keys.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXKVStoreInitEx(
    handle: KVStoreHandle,
    num: u32,
    keys: *mut *const c_char,
    vals: *mut NDArrayHandle,
) -> c_int {
    api_call("MXKVStoreInitEx", || {
        // SAFETY: forwarded API contract.
        unsafe { with_keys(handle, num, keys, vals, |s, k, v| s.init(k, v)) }
    })
}

/// Sums the values given for each key and folds the sum into the stored value (through the
/// updater if set); row_sparse values sum to a row_sparse value. Returns before the sums run. In
/// a distributed store the sum goes to the key's servers (or into an allreduce without servers).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXKVStorePush(
    handle: KVStoreHandle,
    num: u32,
    keys: *const c_int,
    vals: *mut NDArrayHandle,
    priority: c_int,
) -> c_int {
    api_call("MXKVStorePush", || {
        // SAFETY: forwarded API contract.
        unsafe { with_keys(handle, num, keys, vals, |s, k, v| s.push(k, v, priority)) }
    })
}

/// [`MXKVStorePush`] with string keys.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXKVStorePushEx(
    handle: KVStoreHandle,
    num: u32,
    keys: *mut *const c_char,
    vals: *mut NDArrayHandle,
    priority: c_int,
) -> c_int {
    api_call("MXKVStorePushEx", || {
        // SAFETY: forwarded API contract.
        unsafe { with_keys(handle, num, keys, vals, |s, k, v| s.push(k, v, priority)) }
    })
}

/// Copies each key's value into the outputs given for it (engine ops). Sparse outputs are left as
/// they are (MXNet's `ignore_sparse`; see MXKVStorePullWithSparse).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXKVStorePull(
    handle: KVStoreHandle,
    num: u32,
    keys: *const c_int,
    vals: *mut NDArrayHandle,
    priority: c_int,
) -> c_int {
    api_call("MXKVStorePull", || {
        // SAFETY: forwarded API contract.
        unsafe {
            with_keys(handle, num, keys, vals, |s, k, v| {
                s.pull(k, v, priority, true)
            })
        }
    })
}

/// [`MXKVStorePull`] with string keys.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXKVStorePullEx(
    handle: KVStoreHandle,
    num: u32,
    keys: *mut *const c_char,
    vals: *mut NDArrayHandle,
    priority: c_int,
) -> c_int {
    api_call("MXKVStorePullEx", || {
        // SAFETY: forwarded API contract.
        unsafe {
            with_keys(handle, num, keys, vals, |s, k, v| {
                s.pull(k, v, priority, true)
            })
        }
    })
}

/// [`MXKVStorePull`] with a choice for sparse outputs: with `ignore_sparse` they are left as they
/// are; without it they receive the key's value converted to their own storage type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXKVStorePullWithSparse(
    handle: KVStoreHandle,
    num: u32,
    keys: *const c_int,
    vals: *mut NDArrayHandle,
    priority: c_int,
    ignore_sparse: bool,
) -> c_int {
    api_call("MXKVStorePullWithSparse", || {
        // SAFETY: forwarded API contract.
        unsafe {
            with_keys(handle, num, keys, vals, |s, k, v| {
                s.pull(k, v, priority, ignore_sparse)
            })
        }
    })
}

/// [`MXKVStorePullWithSparse`] with string keys.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXKVStorePullWithSparseEx(
    handle: KVStoreHandle,
    num: u32,
    keys: *mut *const c_char,
    vals: *mut NDArrayHandle,
    priority: c_int,
    ignore_sparse: bool,
) -> c_int {
    api_call("MXKVStorePullWithSparseEx", || {
        // SAFETY: forwarded API contract.
        unsafe {
            with_keys(handle, num, keys, vals, |s, k, v| {
                s.pull(k, v, priority, ignore_sparse)
            })
        }
    })
}

/// Pulls the rows `row_ids[i]` (a dense array of row ids) of each key's row_sparse value into
/// the row_sparse output `vals[i]` (the other rows absent). Dense outputs are -1; so are sparse
/// row-id arrays and, on a local store, a dense stored value. A distributed store pulls the whole
/// value and keeps the requested rows.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXKVStorePullRowSparse(
    handle: KVStoreHandle,
    num: u32,
    keys: *const c_int,
    vals: *mut NDArrayHandle,
    row_ids: *const NDArrayHandle,
    priority: c_int,
) -> c_int {
    api_call("MXKVStorePullRowSparse", || {
        // SAFETY: forwarded API contract.
        unsafe { row_sparse(handle, num, keys, vals, row_ids, priority) }
    })
}

/// [`MXKVStorePullRowSparse`] with string keys.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXKVStorePullRowSparseEx(
    handle: KVStoreHandle,
    num: u32,
    keys: *mut *const c_char,
    vals: *mut NDArrayHandle,
    row_ids: *const NDArrayHandle,
    priority: c_int,
) -> c_int {
    api_call("MXKVStorePullRowSparseEx", || {
        // SAFETY: forwarded API contract.
        unsafe { row_sparse(handle, num, keys, vals, row_ids, priority) }
    })
}

/// Init(vkeys, vals) then Pull(okeys, outs).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXKVStoreBroadcast(
    handle: KVStoreHandle,
    vnum: mx_uint,
    vkeys: *const c_int,
    onum: mx_uint,
    okeys: *const c_int,
    vals: *mut NDArrayHandle,
    outs: *mut NDArrayHandle,
    priority: c_int,
) -> c_int {
    api_call("MXKVStoreBroadcast", || {
        // SAFETY: forwarded API contract.
        unsafe {
            two_phase(
                handle,
                vnum,
                vkeys,
                onum,
                okeys,
                vals,
                outs,
                priority,
                TwoPhase::Broadcast,
            )
        }
    })
}

/// [`MXKVStoreBroadcast`] with string keys.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXKVStoreBroadcastEx(
    handle: KVStoreHandle,
    vnum: mx_uint,
    vkeys: *mut *const c_char,
    onum: mx_uint,
    okeys: *mut *const c_char,
    vals: *mut NDArrayHandle,
    outs: *mut NDArrayHandle,
    priority: c_int,
) -> c_int {
    api_call("MXKVStoreBroadcastEx", || {
        // SAFETY: forwarded API contract.
        unsafe {
            two_phase(
                handle,
                vnum,
                vkeys,
                onum,
                okeys,
                vals,
                outs,
                priority,
                TwoPhase::Broadcast,
            )
        }
    })
}

/// Push(vkeys, vals) then Pull(okeys, outs).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXKVStorePushPull(
    handle: KVStoreHandle,
    vnum: mx_uint,
    vkeys: *const c_int,
    onum: mx_uint,
    okeys: *const c_int,
    vals: *mut NDArrayHandle,
    outs: *mut NDArrayHandle,
    priority: c_int,
) -> c_int {
    api_call("MXKVStorePushPull", || {
        // SAFETY: forwarded API contract.
        unsafe {
            two_phase(
                handle,
                vnum,
                vkeys,
                onum,
                okeys,
                vals,
                outs,
                priority,
                TwoPhase::PushPull,
            )
        }
    })
}

/// [`MXKVStorePushPull`] with string keys.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXKVStorePushPullEx(
    handle: KVStoreHandle,
    vnum: mx_uint,
    vkeys: *mut *const c_char,
    onum: mx_uint,
    okeys: *mut *const c_char,
    vals: *mut NDArrayHandle,
    outs: *mut NDArrayHandle,
    priority: c_int,
) -> c_int {
    api_call("MXKVStorePushPullEx", || {
        // SAFETY: forwarded API contract.
        unsafe {
            two_phase(
                handle,
                vnum,
                vkeys,
                onum,
                okeys,
                vals,
                outs,
                priority,
                TwoPhase::PushPull,
            )
        }
    })
}

/// Sets the int-key updater (NULL removes it). Called as `updater(key, recv, local, handle)` on
/// the pushing thread; the callee owns `recv` and `local` and must free them.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXKVStoreSetUpdater(
    handle: KVStoreHandle,
    updater: KVStoreUpdaterFn,
    updater_handle: *mut c_void,
) -> c_int {
    api_call("MXKVStoreSetUpdater", || {
        kv(handle)?
            .store
            .set_updater(make_int_updater(updater, updater_handle));
        Ok(())
    })
}

/// Sets both updaters with one `updater_handle` (NULL removes either). String keys go to
/// `str_updater` when set, else to `updater` with the key's id.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXKVStoreSetUpdaterEx(
    handle: KVStoreHandle,
    updater: KVStoreUpdaterFn,
    str_updater: KVStoreStrUpdaterFn,
    updater_handle: *mut c_void,
) -> c_int {
    api_call("MXKVStoreSetUpdaterEx", || {
        let kv = kv(handle)?;
        kv.store
            .set_updater(make_int_updater(updater, updater_handle));
        kv.store
            .set_str_updater(make_str_updater(str_updater, updater_handle));
        Ok(())
    })
}

/// The lower-cased type string; the pointer stays valid while the store lives.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXKVStoreGetType(
    handle: KVStoreHandle,
    type_: *mut *const c_char,
) -> c_int {
    api_call("MXKVStoreGetType", || {
        // SAFETY: API contract: out-parameter.
        let out = unsafe { args::out(type_, "type")? };
        let kv = kv(handle)?;
        // the CString lives in the store, which C keeps alive until MXKVStoreFree
        *out = kv.type_c.as_ptr();
        Ok(())
    })
}

/// This worker's rank among the workers of a distributed store (a server: its rank among the
/// servers); 0 for a local store and for the scheduler.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXKVStoreGetRank(handle: KVStoreHandle, ret: *mut c_int) -> c_int {
    api_call("MXKVStoreGetRank", || {
        // SAFETY: API contract: out-parameter.
        let out = unsafe { args::out(ret, "ret")? };
        *out = kv(handle)?.store.rank();
        Ok(())
    })
}

/// The number of workers of a distributed store (as a server or the scheduler sees it too); 1 for
/// a local store.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXKVStoreGetGroupSize(handle: KVStoreHandle, ret: *mut c_int) -> c_int {
    api_call("MXKVStoreGetGroupSize", || {
        // SAFETY: API contract: out-parameter.
        let out = unsafe { args::out(ret, "ret")? };
        *out = kv(handle)?.store.group_size();
        Ok(())
    })
}


fn role_is(ret: *mut c_int, role: Role, name: &'static str) -> c_int {
    api_call(name, || {
        // SAFETY: API contract: out-parameter.
        let out = unsafe { args::out(ret, "ret")? };
        *out = (Role::from_env()? == role) as c_int;
        Ok(())
    })
}

/// 1 unless `DMLC_ROLE` names another role (`server`, `scheduler`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXKVStoreIsWorkerNode(ret: *mut c_int) -> c_int {
    role_is(ret, Role::Worker, "MXKVStoreIsWorkerNode")
}

/// 1 when `DMLC_ROLE=server`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXKVStoreIsServerNode(ret: *mut c_int) -> c_int {
    role_is(ret, Role::Server, "MXKVStoreIsServerNode")
}

/// 1 when `DMLC_ROLE=scheduler`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXKVStoreIsSchedulerNode(ret: *mut c_int) -> c_int {
    role_is(ret, Role::Scheduler, "MXKVStoreIsSchedulerNode")
}

/// Waits until every worker of a distributed store has reached the barrier (returns at once for a
/// local store); -1 on servers and the scheduler.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXKVStoreBarrier(handle: KVStoreHandle) -> c_int {
    api_call("MXKVStoreBarrier", || kv(handle)?.store.barrier())
}

/// Records whether MXKVStoreFree waits at the exit barrier for the other workers (default 1; it
/// only matters on the workers of distributed stores).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXKVStoreSetBarrierBeforeExit(
    handle: KVStoreHandle,
    barrier_before_exit: c_int,
) -> c_int {
    api_call("MXKVStoreSetBarrierBeforeExit", || {
        kv(handle)?
            .store
            .set_barrier_before_exit(barrier_before_exit != 0);
        Ok(())
    })
}

/// On a server process of a distributed store: serves the workers until they have all freed
/// their stores (or one sent the stop command), calling `controller(head, body, controller_handle)`
/// on this thread for command 0; the controller may call the C API on this handle (e.g.
/// `MXKVStoreSetUpdaterEx`). Returns 0 at once on the scheduler; fails on workers and local
/// stores.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXKVStoreRunServer(
    handle: KVStoreHandle,
    controller: KVStoreServerControllerFn,
    controller_handle: *mut c_void,
) -> c_int {
    api_call("MXKVStoreRunServer", || {
        let kv = kv(handle)?;
        let user = UserPtr(controller_handle);
        let mut call = |head: i32, body: &str| {
            let Some(f) = controller else { return };
            // bodies come from C strings or Python's pickles (no NUL)
            let body = CString::new(body).unwrap_or_default();
            // SAFETY: `f` is the caller's controller with MXNet's signature; `body` lives for the
            // call.
            unsafe { f(head, body.as_ptr(), user.get()) }
        };
        kv.store.run_server(&mut call)
    })
}

/// Runs command `cmd_id` with `cmd_body` on every server and returns once all have run it:
/// 0 calls the servers' controller, 1 multi-precision, 2 stops the servers, 3 sync mode,
/// 4 gradient compression, 5 profiler parameters (MXNet's heads). Workers of distributed stores
/// with servers only.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXKVStoreSendCommmandToServers(
    handle: KVStoreHandle,
    cmd_id: c_int,
    cmd_body: *const c_char,
) -> c_int {
    api_call("MXKVStoreSendCommmandToServers", || {
        // NULL is an empty body, as MXNet's Python passes ''
        let body = if cmd_body.is_null() {
            ""
        } else {
            // SAFETY: API contract: a non-NULL `cmd_body` is a NUL-terminated string.
            unsafe { args::c_str(cmd_body, "cmd_body")? }
        };
        kv(handle)?.store.send_command_to_servers(cmd_id, body)
    })
}

/// How many of the processes `node_id` names did not answer within `timeout_sec` seconds
/// (ps-lite's ids: 1 scheduler, 2 servers, 4 workers, their sums, `8 + 2r` server r, `9 + 2r`
/// worker r). Distributed stores ask each process's communication thread; a local store has no
/// dead nodes. A `timeout_sec` of 0 counts none, as in MXNet; a negative one or an unknown id
/// is -1.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXKVStoreGetNumDeadNode(
    handle: KVStoreHandle,
    node_id: c_int,
    number: *mut c_int,
    timeout_sec: c_int,
) -> c_int {
    api_call("MXKVStoreGetNumDeadNode", || {
        // SAFETY: API contract: out-parameter.
        let out = unsafe { args::out(number, "number")? };
        *out = kv(handle)?.store.num_dead_nodes(node_id, timeout_sec)?;
        Ok(())
    })
}

/// Sets the job's environment for this process (MXNet's ps-lite environment): the `DMLC_*` and
/// `MXRT_DIST_*` values given here take precedence over the process environment when a
/// distributed store is created or a role is queried.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXInitPSEnv(
    num_vars: u32,
    keys: *mut *const c_char,
    vals: *mut *const c_char,
) -> c_int {
    api_call("MXInitPSEnv", || {
        let n = num_vars as usize;
        // SAFETY: API contract: `num_vars` strings each.
        let (k, v) = unsafe { (str_keys(keys, n, "keys")?, str_keys(vals, n, "vals")?) };
        crate::dist::role::set_job_env(k.into_iter().zip(v));
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::Context;
    use crate::dtype::DType;
    use std::ffi::CStr;
    use std::sync::atomic::{AtomicI32, Ordering};

    static LAST_KEY: AtomicI32 = AtomicI32::new(-100);

    /// A C updater as MXNet's front ends register one.
    ///
    /// # Safety
    /// `recv` and `local` are handles the store hands over; `user` points to an `i32` counter.
    unsafe extern "C" fn updater(
        key: c_int,
        recv: NDArrayHandle,
        local: NDArrayHandle,
        user: *mut c_void,
    ) {
        LAST_KEY.store(key, Ordering::SeqCst);
        // the callee owns both handles: taking them back must succeed exactly once
        let r = handle::take::<NDArray>(recv, "recv").unwrap();
        let l = handle::take::<NDArray>(local, "local").unwrap();
        assert_eq!(r.to_bytes().unwrap(), 7f32.to_le_bytes());
        l.sync_copy_from_bytes(&42f32.to_le_bytes()).unwrap();
        // SAFETY: the test passes a pointer to an i32 counter.
        unsafe { *(user as *mut i32) += 1 };
    }

    fn last_error() -> String {
        // SAFETY: MXGetLastError returns this thread's live message.
        unsafe { CStr::from_ptr(super::super::error::MXGetLastError()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn c_updater_owns_its_handles_and_stale_stores_are_errors() {
        let mk = |x: f32| {
            let a = NDArray::new(&[1], Context::cpu(0), DType::F32, false).unwrap();
            a.sync_copy_from_bytes(&x.to_le_bytes()).unwrap();
            super::super::ndarray::new_handle(a)
        };
        let mut kv: KVStoreHandle = std::ptr::null_mut();
        let mut calls = 0i32;
        // SAFETY: valid C strings, out-pointers and handles throughout.
        unsafe {
            assert_eq!(MXKVStoreCreate(c"LOCAL".as_ptr(), &mut kv), 0);
            let mut t: *const c_char = std::ptr::null();
            assert_eq!(MXKVStoreGetType(kv, &mut t), 0);
            assert_eq!(CStr::from_ptr(t).to_str().unwrap(), "local");
            assert_eq!(
                MXKVStoreSetUpdater(kv, Some(updater), &mut calls as *mut i32 as *mut c_void),
                0
            );
            let mut init = [mk(1.0)];
            assert_eq!(MXKVStoreInit(kv, 1, [11].as_ptr(), init.as_mut_ptr()), 0);
            let mut vals = [mk(3.0), mk(4.0)];
            assert_eq!(
                MXKVStorePush(kv, 2, [11, 11].as_ptr(), vals.as_mut_ptr(), 0),
                0
            );
            assert_eq!((LAST_KEY.load(Ordering::SeqCst), calls), (11, 1));
            let mut out = [mk(0.0)];
            assert_eq!(MXKVStorePull(kv, 1, [11].as_ptr(), out.as_mut_ptr(), 0), 0);
            assert_eq!(
                super::super::ndarray::nd(out[0], "o")
                    .unwrap()
                    .to_bytes()
                    .unwrap(),
                42f32.to_le_bytes()
            );
            let mut null = [std::ptr::null_mut()];
            assert_eq!(
                MXKVStorePull(kv, 1, [11].as_ptr(), null.as_mut_ptr(), 0),
                -1
            );
            assert_eq!(last_error(), "MXKVStorePull: vals[0] is NULL");
            assert_eq!(MXKVStoreFree(kv), 0);
            assert_eq!(MXKVStorePull(kv, 1, [11].as_ptr(), out.as_mut_ptr(), 0), -1);
            assert!(
                last_error().contains("not a live KVStore handle"),
                "{}",
                last_error()
            );
            assert_eq!(MXKVStoreFree(std::ptr::null_mut()), -1);
            for h in init.into_iter().chain(vals).chain(out) {
                drop(handle::take::<NDArray>(h, "h").unwrap());
            }
        }
    }
}
