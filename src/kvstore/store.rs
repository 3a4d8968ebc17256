//! The local key-value store (MXNet's `KVStoreLocal`).

use super::comm::{self, CommKind};
use super::keys::{self, KeyKind, KeyRef, KeyTable, Keys};
use super::reduce::ReduceConfig;
use super::updater::{IntUpdater, StrUpdater, Updaters};
use crate::context::Context;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ndarray::NDArray;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

/// Where every stored value lives (MXNet's `pinned_ctx_`).
pub const STORE_CTX: Context = Context::cpu_pinned(0);

/// What a type string asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    /// A local store reducing on the CPU ("local", "local_allreduce_cpu", ...).
    Local,
    /// A local store reducing where the values live ("device", "local_allreduce_device", ...).
    Device,
}

impl StoreKind {
    /// Parses a type string (case-insensitive). MXNet's local spellings are accepted: "local",
    /// "local_update_cpu", "local_allreduce_cpu" (reduce on the CPU) and "device",
    /// "local_allreduce_device" (reduce where the values live). "dist*" stores are created by
    /// [`kvstore::create`](super::create); "nccl" stores are not built and give an error naming
    /// what is missing. Unlike MXNet, which turns any other string
    /// into a local store, an unknown name is an error listing the accepted ones.
    pub fn parse(type_name: &str) -> Result<StoreKind> {
        let t = type_name.to_lowercase();
        const LOCAL: [&str; 3] = ["local", "local_update_cpu", "local_allreduce_cpu"];
        const DEVICE: [&str; 2] = ["device", "local_allreduce_device"];
        if t.contains("dist") {
            return Err(Error::invalid(format!(
                "kvstore type '{type_name}' is a distributed store: create it with \
                 kvstore::create, not as a local store"
            )));
        }
        if t.contains("nccl") {
            return Err(Error::not_supported(format!(
                "kvstore type '{type_name}' needs NCCL (KVStoreNCCL), which mxrt does not use: \
                 use 'local' or 'device' (both take values on GPUs)"
            )));
        }
        if LOCAL.contains(&t.as_str()) {
            Ok(StoreKind::Local)
        } else if DEVICE.contains(&t.as_str()) {
            Ok(StoreKind::Device)
        } else {
            Err(Error::invalid(format!(
                "unknown kvstore type '{type_name}' (accepted: local, local_update_cpu, \
                 local_allreduce_cpu, device, local_allreduce_device)"
            )))
        }
    }
}

struct Entry {
    /// The key's value: its own array, never an alias of a caller's array.
    stored: NDArray,
    /// Where several pushed values are summed before the updater sees them (allocated on first
    /// need).
    merge: Option<NDArray>,
}

#[derive(Default)]
struct State {
    keys: KeyTable,
    entries: HashMap<i32, Entry>,
}

impl State {
    /// The ids of `keys`, which must be of this store's key kind (the first keys used fix it) and
    /// initialised, after checking that each array has its key's shape and dtype (errors name
    /// "`noun` i `verb` key k").
    fn look_up_like(
        &mut self,
        keys: &Keys<'_>,
        arrays: &[&NDArray],
        noun: &str,
        verb: &str,
    ) -> Result<Vec<i32>> {
        self.keys.check_kind(keys)?;
        let ids = self
            .keys
            .lookup(keys, |id| self.entries.contains_key(&id))?;
        for (i, a) in arrays.iter().enumerate() {
            let stored = &self.entries[&ids[i]].stored;
            check_like(a, stored.shape(), stored.dtype(), &|| {
                format!("{noun} {i} {verb} key {}", keys.display(i))
            })?;
        }
        Ok(ids)
    }
}

/// A local store: values are kept per key in host memory, pushes are summed and folded in, pulls
/// copy the stored values out. Every data movement is an engine op, so calls return at once and
/// ops on different keys overlap; the engine's variable order makes a pull see the pushes before
/// it.
///
/// Unlike MXNet, a push without an updater *copies* the sum into the key's own array: writes to
/// the pushed arrays after the push never change what a pull returns (MXNet aliases the stored
/// value to the pushed array or its merge buffer).
pub struct KVStore {
    type_name: String,
    comm: CommKind,
    cfg: ReduceConfig,
    state: Mutex<State>,
    updaters: RwLock<Updaters>,
    barrier_before_exit: AtomicBool,
}

impl std::fmt::Debug for KVStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KVStore")
            .field("type", &self.type_name)
            .field("comm", &self.comm)
            .field("reduce", &self.cfg)
            .finish_non_exhaustive()
    }
}

pub(crate) fn check_value(v: &NDArray, what: &dyn Fn() -> String) -> Result<()> {
    if v.is_none() {
        return Err(Error::invalid(format!(
            "{} is a none array (no shape, no data)",
            what()
        )));
    }
    Ok(())
}

pub(crate) fn check_like(v: &NDArray, shape: &[i64], dtype: DType, what: &dyn Fn() -> String) -> Result<()> {
    check_value(v, what)?;
    if v.shape() != shape {
        return Err(Error::invalid(format!(
            "{}: operands shape mismatch: the array has shape {:?}, the key holds {:?}",
            what(),
            v.shape(),
            shape
        )));
    }
    if v.dtype() != dtype {
        return Err(Error::invalid(format!(
            "{}: dtype mismatch: the array is {}, the key holds {}",
            what(),
            v.dtype().name(),
            dtype.name()
        )));
    }
    Ok(())
}

pub(crate) fn check_len(keys: &Keys<'_>, n: usize, what: &str) -> Result<()> {
    if keys.len() != n {
        return Err(Error::invalid(format!(
            "{} keys but {n} {what}: give one array per key",
            keys.len()
        )));
    }
    Ok(())
}

impl KVStore {
    /// Creates a store from an MXNet type string ("local", "device", "local_allreduce_cpu", ...;
    /// see [`StoreKind::parse`]), reading the reduction settings from the environment.
    pub fn create(type_name: &str) -> Result<KVStore> {
        let cfg = ReduceConfig::from_env()?;
        Self::with_config(type_name, cfg)
    }

    /// Creates a store with explicit reduction settings.
    pub fn with_config(type_name: &str, cfg: ReduceConfig) -> Result<KVStore> {
        let comm = match StoreKind::parse(type_name)? {
            StoreKind::Local => CommKind::Cpu,
            StoreKind::Device => CommKind::Device,
        };
        Ok(KVStore {
            type_name: type_name.to_lowercase(),
            comm,
            cfg,
            state: Mutex::new(State::default()),
            updaters: RwLock::new(Updaters::default()),
            barrier_before_exit: AtomicBool::new(true),
        })
    }

    /// The lower-cased type string the store was created with.
    pub fn type_name(&self) -> &str {
        &self.type_name
    }
    pub fn comm(&self) -> CommKind {
        self.comm
    }
    pub fn reduce_config(&self) -> ReduceConfig {
        self.cfg
    }
    /// The kind of keys the store uses, once a call fixed it.
    pub fn key_kind(&self) -> Option<KeyKind> {
        self.state.lock().keys.kind()
    }
    /// Rank of this worker: 0 for a local store.
    pub fn rank(&self) -> i32 {
        0
    }
    /// Number of workers: 1 for a local store.
    pub fn group_size(&self) -> i32 {
        1
    }
    /// A barrier across workers: a local store has one worker, so it returns at once.
    pub fn barrier(&self) {}
    /// Whether a barrier runs before exit (only meaningful for distributed stores).
    pub fn set_barrier_before_exit(&self, on: bool) {
        self.barrier_before_exit.store(on, Ordering::Relaxed);
    }
    pub fn barrier_before_exit(&self) -> bool {
        self.barrier_before_exit.load(Ordering::Relaxed)
    }

    /// Sets (or with `None` removes) the int-key updater.
    pub fn set_updater(&self, updater: Option<IntUpdater>) {
        self.updaters.write().int = updater;
    }
    /// Sets (or with `None` removes) the string-key updater.
    pub fn set_str_updater(&self, updater: Option<StrUpdater>) {
        self.updaters.write().str = updater;
    }

    /// Stores a copy of each value under its key. A key may be initialised once; values must be
    /// dense host arrays. Nothing is stored if any key or value is bad.
    pub fn init(&self, keys: Keys<'_>, values: &[&NDArray]) -> Result<()> {
        check_len(&keys, values.len(), "values")?;
        let mut st = self.state.lock();
        let State { keys: table, entries } = &mut *st;
        let ids = table.plan_new_keys(&keys, |id| entries.contains_key(&id))?;
        for (i, v) in values.iter().enumerate() {
            check_value(v, &|| format!("value for key {}", keys.display(i)))?;
        }
        let mut made = Vec::with_capacity(ids.len());
        for v in values {
            let stored = if v.is_sparse() {
                let s = NDArray::new_sparse(v.stype(), v.shape(), STORE_CTX, v.dtype(), &aux_types(v)?)?;
                s.copy_storage_from(v, 0)?;
                s
            } else {
                let s = NDArray::new(v.shape(), STORE_CTX, v.dtype(), false)?;
                s.copy_from(v, 0, crate::engine::FnProperty::CpuPrioritized)?;
                s
            };
            made.push(stored);
        }
        st.keys.commit_names(&keys);
        for (id, stored) in ids.into_iter().zip(made) {
            st.entries.insert(
                id,
                Entry {
                    stored,
                    merge: None,
                },
            );
        }
        Ok(())
    }

    /// The array a key's value is stored in (shared, not a copy), and whether a push of `keys`
    /// would go through an updater. For stores that fill values themselves (the distributed
    /// store without servers writes allreduce results straight into it).
    #[cfg(feature = "dist")]
    pub(crate) fn stored_array(&self, keys: Keys<'_>) -> Result<(NDArray, bool)> {
        let mut st = self.state.lock();
        let ids = st.look_up_like(&keys, &[], "value", "stored in")?;
        let uses_updater = self.updaters.read().applies_to(keys.kind());
        Ok((st.entries[&ids[0]].stored.clone(), uses_updater))
    }

    /// Sums the values given for each key and folds the sum into the stored value: through the
    /// updater when one applies (called on this thread, once per unique key, in key order, with
    /// the merged and the stored value), else by storing the sum. Returns before the sums run.
    pub fn push(&self, keys: Keys<'_>, values: &[&NDArray], priority: i32) -> Result<()> {
        let _trace = super::trace::Traced::begin("KVStorePush", &keys);
        check_len(&keys, values.len(), "values")?;
        // the pushing thread's MXSetNumOMPThreads cap applies to the reductions it starts
        let mut cfg = self.cfg;
        cfg.nthreads = crate::util::thread_cap::limit(cfg.nthreads);
        let updaters = self.updaters.read().clone();
        let use_updater = updaters.applies_to(keys.kind());
        let mut calls: Vec<(i32, Option<String>, NDArray, NDArray)> = Vec::new();
        {
            let mut st = self.state.lock();
            let ids = st.look_up_like(&keys, values, "value", "pushed to")?;
            let State {
                keys: table,
                entries,
            } = &mut *st;
            for (id, pos) in keys::group(&ids) {
                let entry = entries.get_mut(&id).expect("looked up");
                let inputs: Vec<&NDArray> = pos.iter().map(|&i| values[i]).collect();
                if entry.stored.is_sparse() || inputs.iter().any(|a| a.is_sparse()) {
                    // sparse values are summed by the add_n operator (MXNet's ElementwiseSum),
                    // which keeps row_sparse storage when every value has it
                    let merged = if inputs.len() == 1 {
                        inputs[0].clone()
                    } else {
                        sum_values(&inputs)?
                    };
                    if use_updater {
                        calls.push((id, table.name(id).map(str::to_owned), merged, entry.stored.clone()));
                    } else {
                        entry.stored.copy_storage_from(&merged, priority)?;
                    }
                    continue;
                }
                let aliased = inputs.iter().any(|a| a.shares_memory_with(&entry.stored));
                // the device store sums GPU values on a GPU, then stores the sum
                let on_gpu = self.comm == CommKind::Device
                    && inputs.iter().any(|a| a.ctx().is_some_and(|c| !c.is_host()));
                if use_updater && inputs.len() == 1 {
                    // as in MXNet, a single value is the merged value itself
                    calls.push((
                        id,
                        table.name(id).map(str::to_owned),
                        inputs[0].clone(),
                        entry.stored.clone(),
                    ));
                } else if use_updater || aliased || on_gpu {
                    let merge = match &entry.merge {
                        Some(m) => m.clone(),
                        None => {
                            let s = &entry.stored;
                            let ctx = self.comm.merge_ctx(inputs[0].ctx().unwrap_or(STORE_CTX));
                            let m = NDArray::new(s.shape(), ctx, s.dtype(), false)?;
                            entry.merge = Some(m.clone());
                            m
                        }
                    };
                    comm::reduce_into(&merge, &inputs, &cfg, priority)?;
                    if use_updater {
                        calls.push((
                            id,
                            table.name(id).map(str::to_owned),
                            merge,
                            entry.stored.clone(),
                        ));
                    } else {
                        comm::reduce_into(&entry.stored, &[&merge], &cfg, priority)?;
                    }
                } else {
                    comm::reduce_into(&entry.stored, &inputs, &cfg, priority)?;
                }
            }
        }
        for (id, name, merged, stored) in calls {
            // the updater (an optimizer on the CPU) gets a host copy of a sum made on a GPU
            let merged = match merged.ctx() {
                Some(c) if !c.is_host() => {
                    let host = NDArray::new(merged.shape(), STORE_CTX, merged.dtype(), false)?;
                    host.copy_from(&merged, priority, crate::engine::FnProperty::CpuPrioritized)?;
                    host
                }
                _ => merged,
            };
            let key = match (&name, keys.kind()) {
                (Some(s), KeyKind::Str) => KeyRef::Str(s),
                _ => KeyRef::Int(id),
            };
            updaters.call(key, id, &merged, &stored);
        }
        Ok(())
    }

    /// Copies each key's stored value into every output given for it (engine ops; a following
    /// wait on an output sees the value). Outputs must have the key's shape and dtype. With
    /// `ignore_sparse` (what `MXKVStorePull` passes) sparse outputs are left as they are, as in
    /// MXNet; otherwise they receive the value in their storage.
    pub fn pull(
        &self,
        keys: Keys<'_>,
        outs: &[&NDArray],
        priority: i32,
        ignore_sparse: bool,
    ) -> Result<()> {
        let _trace = super::trace::Traced::begin("KVStorePull", &keys);
        check_len(&keys, outs.len(), "outputs")?;
        let mut st = self.state.lock();
        let ids = st.look_up_like(&keys, outs, "output", "pulled from")?;
        for (id, pos) in keys::group(&ids) {
            let stored = &st.entries[&id].stored;
            let outputs: Vec<&NDArray> = pos
                .iter()
                .map(|&i| outs[i])
                .filter(|o| !(ignore_sparse && o.is_sparse()))
                .collect();
            if stored.is_sparse() || outputs.iter().any(|o| o.is_sparse()) {
                for o in outputs {
                    o.copy_storage_from(stored, priority)?;
                }
            } else {
                comm::broadcast(stored, &outputs, &self.cfg, priority)?;
            }
        }
        Ok(())
    }

    /// Copies the rows `row_ids[i]` lists of each key's row_sparse value into the row_sparse
    /// output `outs[i]` (MXNet's `row_sparse_pull`; the other rows are absent from the output).
    pub fn pull_row_sparse(
        &self,
        keys: Keys<'_>,
        outs: &[&NDArray],
        row_ids: &[&NDArray],
        priority: i32,
    ) -> Result<()> {
        let _trace = super::trace::Traced::begin("KVStorePullRowSparse", &keys);
        check_len(&keys, outs.len(), "outputs")?;
        check_len(&keys, row_ids.len(), "row id arrays")?;
        let mut st = self.state.lock();
        let ids = st.look_up_like(&keys, outs, "output", "pulled from")?;
        for (i, o) in outs.iter().enumerate() {
            if o.stype() != crate::ndarray::format::StorageType::RowSparse {
                return Err(Error::invalid(format!(
                    "row_sparse_pull: output {i} for key {} has {} storage; it must be row_sparse",
                    keys.display(i),
                    o.stype().name()
                )));
            }
            let stored = &st.entries[&ids[i]].stored;
            if stored.stype() != crate::ndarray::format::StorageType::RowSparse {
                return Err(Error::invalid(format!(
                    "row_sparse_pull: key {} holds a {} value; PullRowSparse expects row_sparse \
                     src NDArray",
                    keys.display(i),
                    stored.stype().name()
                )));
            }
            check_value(row_ids[i], &|| format!("row ids {i}"))?;
            if row_ids[i].is_sparse() {
                return Err(Error::invalid(format!("row_sparse_pull: row ids {i} must be dense")));
            }
        }
        for (i, o) in outs.iter().enumerate() {
            o.retain_rows_from(&st.entries[&ids[i]].stored, row_ids[i], priority)?;
        }
        Ok(())
    }

    /// A local store does not compress (distributed stores with servers do).
    pub fn set_gradient_compression(&self, params: &[(&str, &str)]) -> Result<()> {
        let _ = params;
        Err(Error::not_supported(format!(
            "gradient compression works on distributed stores with servers ('dist_sync', \
             'dist_async'); the '{}' store does not compress",
            self.type_name
        )))
    }
}

/// The aux dtypes of a sparse array (for a stored copy of it).
fn aux_types(v: &NDArray) -> Result<Vec<DType>> {
    (0..v.stype().num_aux()).map(|i| v.aux_type(i)).collect()
}

/// The sum of several values of one key, any of them sparse: MXNet's ElementwiseSum (`add_n`),
/// whose result is row_sparse when every value is.
fn sum_values(values: &[&NDArray]) -> Result<NDArray> {
    let inputs: Vec<NDArray> = values.iter().map(|&a| a.clone()).collect();
    let n = inputs.len().to_string();
    let out = crate::operator::imperative::invoke(crate::operator::imperative::Invoke {
        op: "add_n",
        called_as: "add_n",
        inputs: &inputs,
        params: vec![("num_args", n.as_str())],
        outputs: None,
        state: None,
    })?;
    Ok(out.into_iter().next().expect("add_n has one output"))
}
