//! A worker process's side of a distributed store.
//!
//! With servers, a push sums the values given for each key locally, then sends each of the key's
//! shards to its server and returns; the acknowledgement (which, in `dist_sync`, comes when the
//! round is complete) is waited for by the next call that needs the key: a pull, another push of
//! it, a barrier or freeing the store. A pull asks each shard's server for its part and writes
//! the assembled value into the outputs before it returns.
//!
//! Without servers (`DMLC_NUM_SERVER=0`), `dist_sync` sums each push over the workers with an
//! allreduce and folds the sum into a local store that every worker keeps, through the updater
//! when one is set: every worker ends with the same values a server would hold.

use super::compress;
use super::role::DistConfig;
use super::shard::{self, Shard};
use super::transport::{Pending, Transport};
use super::wire::{FLAG_COMPRESSED, FLAG_ROW_SPARSE, FLAG_SYNC, HEADER_LEN, Header, Kind};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kvstore::keys::{self, KeyTable, Keys};
use crate::kvstore::store::{check_len, check_like, check_value};
use crate::kvstore::{IntUpdater, KVStore, StrUpdater};
use crate::ndarray::NDArray;
use crate::ndarray::format::StorageType;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

struct Meta {
    shape: Vec<i64>,
    dtype: DType,
    shards: Vec<Shard>,
}

#[derive(Default)]
struct State {
    keys: KeyTable,
    meta: HashMap<i32, Meta>,
    /// Pushes sent and not yet acknowledged, by key.
    inflight: HashMap<i32, Vec<Pending>>,
    /// 2-bit compression residuals, by key.
    residual: HashMap<i32, Vec<f32>>,
    /// Without servers: where each key's allreduce lands before the updater sees it.
    merge: HashMap<i32, NDArray>,
}

/// A worker's store.
pub struct Worker {
    t: &'static Transport,
    cfg: DistConfig,
    sync: bool,
    reduce: crate::kvstore::ReduceConfig,
    /// Without servers: the values every worker keeps, updated after each allreduce.
    local: Option<KVStore>,
    state: Mutex<State>,
    barrier_before_exit: AtomicBool,
    /// 2-bit compression threshold, when on.
    compression: Mutex<Option<f32>>,
    closed: AtomicBool,
    /// Calls of this store in progress (on any thread): a process that exits while one is
    /// cannot leave the job in order.
    calls: AtomicUsize,
}

/// Counts a call of a worker's store while it lasts.
struct InCall<'a>(&'a AtomicUsize);

impl<'a> InCall<'a> {
    fn new(calls: &'a AtomicUsize) -> Self {
        calls.fetch_add(1, Ordering::SeqCst);
        InCall(calls)
    }
}

impl Drop for InCall<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The sum of `values` (all of one shape and dtype) as bytes.
fn local_sum(values: &[&NDArray]) -> Result<Vec<u8>> {
    if values.len() == 1 {
        return values[0].to_bytes();
    }
    let v0 = values[0];
    let tmp = NDArray::new(v0.shape(), crate::Context::cpu(0), v0.dtype(), false)?;
    crate::kvstore::comm::reduce_into(&tmp, values, &crate::kvstore::ReduceConfig::from_env()?, 0)?;
    tmp.to_bytes()
}

/// f16/bf16 travel through MPI as f32 (MPI has no half-precision sum).
fn widen(dtype: DType, bytes: Vec<u8>) -> (Vec<u8>, DType) {
    let conv = |f: fn([u8; 2]) -> f32| -> Vec<u8> {
        bytes
            .chunks_exact(2)
            .flat_map(|c| f([c[0], c[1]]).to_le_bytes())
            .collect()
    };
    match dtype {
        DType::F16 => (conv(|b| half::f16::from_le_bytes(b).to_f32()), DType::F32),
        DType::BF16 => (conv(|b| half::bf16::from_le_bytes(b).to_f32()), DType::F32),
        _ => (bytes, dtype),
    }
}

fn narrow(dtype: DType, bytes: Vec<u8>) -> Vec<u8> {
    let f32s = || {
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
    };
    match dtype {
        DType::F16 => f32s().flat_map(|v| half::f16::from_f32(v).to_le_bytes()).collect(),
        DType::BF16 => f32s().flat_map(|v| half::bf16::from_f32(v).to_le_bytes()).collect(),
        _ => bytes,
    }
}

impl Worker {
    pub fn new(t: &'static Transport, cfg: DistConfig, type_name: &str, sync: bool) -> Result<Worker> {
        let serverless = t.topo.servers.is_empty();
        if serverless && !sync {
            return Err(Error::invalid(format!(
                "kvstore type '{type_name}' is asynchronous, which needs server processes \
                 (launch with `mxrt-launch -n W -s S`, S >= 1); without servers only dist_sync \
                 works (as an allreduce among the workers)"
            )));
        }
        Ok(Worker {
            t,
            cfg,
            sync,
            reduce: crate::kvstore::ReduceConfig::from_env()?,
            local: if serverless {
                Some(KVStore::create("local")?)
            } else {
                None
            },
            state: Mutex::default(),
            barrier_before_exit: AtomicBool::new(true),
            compression: Mutex::new(None),
            closed: AtomicBool::new(false),
            calls: AtomicUsize::new(0),
        })
    }

    pub fn rank(&self) -> i32 {
        self.t.topo.rank_in_role() as i32
    }
    pub fn group_size(&self) -> i32 {
        self.t.topo.workers.len() as i32
    }
    pub fn has_servers(&self) -> bool {
        self.local.is_none()
    }
    fn servers(&self) -> &[usize] {
        &self.t.topo.servers
    }

    /// Whether a call of this store is in progress (a push, pull, barrier, ... on any thread).
    pub fn in_call(&self) -> bool {
        self.calls.load(Ordering::SeqCst) > 0
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::invalid("the distributed store was shut down"));
        }
        Ok(())
    }

    /// Waits for the acknowledgements of pushes already sent for `ids` (all keys when `None`).
    fn settle(&self, ids: Option<&[i32]>) -> Result<()> {
        let pending: Vec<(i32, Pending)> = {
            let mut st = self.state.lock();
            let keys: Vec<i32> = match ids {
                Some(ids) => ids.to_vec(),
                None => st.inflight.keys().copied().collect(),
            };
            keys.into_iter()
                .flat_map(|k| {
                    st.inflight
                        .remove(&k)
                        .unwrap_or_default()
                        .into_iter()
                        .map(move |p| (k, p))
                })
                .collect()
        };
        let mut first_err = None;
        for (k, p) in pending {
            if let Err(e) = self.t.wait(p, &|| format!("push of key {k}")) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    pub fn init(&self, keys: Keys<'_>, values: &[&NDArray]) -> Result<()> {
        let _call = InCall::new(&self.calls);
        self.check_open()?;
        check_len(&keys, values.len(), "values")?;
        let ids = {
            let mut st = self.state.lock();
            let State { keys: table, meta, .. } = &mut *st;
            table.plan_new_keys(&keys, |id| meta.contains_key(&id))?
        };
        for (i, v) in values.iter().enumerate() {
            check_value(v, &|| format!("value for key {}", keys.display(i)))?;
        }
        if let Some(local) = &self.local {
            // rank 0's values, given to every worker: the others add zeros
            let mut made = Vec::with_capacity(values.len());
            for (i, v) in values.iter().enumerate() {
                let bytes = if self.rank() == 0 {
                    v.to_bytes()?
                } else {
                    vec![0u8; v.nbytes()]
                };
                let summed = self.allreduce(v.dtype(), bytes, &|| {
                    format!("init of key {}", keys.display(i))
                })?;
                let a = NDArray::new(v.shape(), crate::Context::cpu(0), v.dtype(), false)?;
                a.sync_copy_from_bytes(&summed)?;
                made.push(a);
            }
            let refs: Vec<&NDArray> = made.iter().collect();
            local.init(keys, &refs)?;
        } else if self.rank() == 0 {
            let mut pending = Vec::new();
            for (i, (&id, v)) in ids.iter().zip(values).enumerate() {
                let bytes = v.to_bytes()?;
                let esize = v.dtype().size();
                for s in shard::plan(id as i64, v.size(), self.servers().len(), self.cfg.bigarray_bound) {
                    let h = Header {
                        dtype: v.dtype().code() as u8,
                        key: id as i64,
                        offset: s.offset as u64,
                        len: s.len as u64,
                        ..Header::new(Kind::Init)
                    };
                    let m = h.message_with(&bytes[s.offset * esize..(s.offset + s.len) * esize]);
                    pending.push((i, self.t.request(self.servers()[s.server], m)?));
                }
            }
            for (i, p) in pending {
                self.t.wait(p, &|| format!("init of key {}", keys.display(i)))?;
            }
        }
        {
            let mut st = self.state.lock();
            st.keys.commit_names(&keys);
            for (&id, v) in ids.iter().zip(values) {
                let shards = if self.local.is_some() {
                    Vec::new()
                } else {
                    shard::plan(id as i64, v.size(), self.servers().len(), self.cfg.bigarray_bound)
                };
                st.meta.insert(
                    id,
                    Meta {
                        shape: v.shape().to_vec(),
                        dtype: v.dtype(),
                        shards,
                    },
                );
            }
        }
        if self.local.is_none() {
            self.t.barrier()?;
        }
        Ok(())
    }

    /// The ids of `keys`, checking each array against its key's shape and dtype.
    fn look_up(&self, keys: &Keys<'_>, arrays: &[&NDArray], noun: &str, verb: &str) -> Result<Vec<i32>> {
        let mut st = self.state.lock();
        st.keys.check_kind(keys)?;
        let ids = st.keys.lookup(keys, |id| st.meta.contains_key(&id))?;
        for (i, a) in arrays.iter().enumerate() {
            let m = &st.meta[&ids[i]];
            check_like(a, &m.shape, m.dtype, &|| {
                format!("{noun} {i} {verb} key {}", keys.display(i))
            })?;
        }
        Ok(ids)
    }

    fn allreduce(&self, dtype: DType, bytes: Vec<u8>, what: &dyn Fn() -> String) -> Result<Vec<u8>> {
        let (wide, wdt) = widen(dtype, bytes);
        let out = self.t.allreduce(wide, wdt, what)?;
        Ok(narrow(dtype, out))
    }

    /// Without servers: sums `inputs` over the workers straight from the pushed array into the
    /// key's stored array (no updater) or into the key's merge buffer, which then goes through
    /// the updater.
    fn allreduce_into_store(
        &self,
        local: &KVStore,
        key: Keys<'_>,
        inputs: &[&NDArray],
        display: &str,
        priority: i32,
    ) -> Result<()> {
        let (stored, uses_updater) = local.stored_array(key)?;
        // MPI reads host memory: a GPU value is copied out first
        let send = if inputs.len() == 1 && inputs[0].ctx().is_some_and(crate::Context::is_host) {
            inputs[0].clone()
        } else {
            let v0 = inputs[0];
            let tmp = NDArray::new(v0.shape(), crate::Context::cpu(0), v0.dtype(), false)?;
            crate::kvstore::comm::reduce_into(&tmp, inputs, &self.reduce, priority)?;
            tmp
        };
        let recv = if uses_updater {
            let mut st = self.state.lock();
            let id = match key {
                Keys::Int(k) => k[0],
                Keys::Str(_) => st.keys.lookup(&key, |_| true)?[0],
            };
            match st.merge.get(&id) {
                Some(m) => m.clone(),
                None => {
                    let m = NDArray::new(stored.shape(), crate::Context::cpu(0), stored.dtype(), false)?;
                    st.merge.insert(id, m.clone());
                    m
                }
            }
        } else {
            stored.clone()
        };
        if send.shares_memory_with(&recv) {
            return Err(Error::invalid(format!(
                "push of key {display}: the pushed array is the key's own stored array"
            )));
        }
        send.wait_to_read()?;
        recv.wait_to_write()?;
        let (sp, rp) = (send.data_ptr()?, recv.data_ptr()?);
        let count = recv.size();
        // SAFETY: both arrays are host arrays of `count` elements of the key's dtype (checked by
        // look_up), distinct, with no engine op pending on them (waited for above); this thread
        // holds them for the call and, after an error, leaks them so MPI may still use them.
        let r = unsafe {
            self.t.allreduce_in_place(sp, rp, count, recv.dtype(), &|| {
                format!("push of key {display}")
            })
        };
        if r.is_err() {
            std::mem::forget((send.clone(), recv.clone()));
        }
        r?;
        if uses_updater {
            local.push(key, &[&recv], priority)?;
        }
        Ok(())
    }

    /// Pushes dense `values`; with `rows` they stand for row_sparse values (see
    /// [`FLAG_ROW_SPARSE`]): the updater gets their sum as a row_sparse array.
    pub fn push(&self, keys: Keys<'_>, values: &[&NDArray], priority: i32, rows: bool) -> Result<()> {
        let _call = InCall::new(&self.calls);
        self.check_open()?;
        check_len(&keys, values.len(), "values")?;
        let ids = self.look_up(&keys, values, "value", "pushed to")?;
        let threshold = *self.compression.lock();
        for (id, pos) in keys::group(&ids) {
            let inputs: Vec<&NDArray> = pos.iter().map(|&i| values[i]).collect();
            let display = keys.display(pos[0]);
            let dtype = inputs[0].dtype();
            if let Some(local) = &self.local {
                let name = self.state.lock().keys.name(id).map(str::to_owned);
                let name_ref = name.as_deref().unwrap_or("");
                let key = match (&keys, &name) {
                    (Keys::Str(_), Some(_)) => Keys::Str(std::slice::from_ref(&name_ref)),
                    _ => Keys::Int(std::slice::from_ref(&id)),
                };
                if !rows && !matches!(dtype, DType::F16 | DType::BF16) {
                    self.allreduce_into_store(local, key, &inputs, &display, priority)?;
                    continue;
                }
                let summed = local_sum(&inputs)?;
                let total = self.allreduce(dtype, summed, &|| format!("push of key {display}"))?;
                let mut a = NDArray::new(inputs[0].shape(), crate::Context::cpu(0), dtype, false)?;
                a.sync_copy_from_bytes(&total)?;
                if rows {
                    // the local store's updater gets the sum as row_sparse (lazy updates)
                    let r = NDArray::new_sparse(StorageType::RowSparse, a.shape(), crate::Context::cpu(0), dtype, &[DType::I64])?;
                    r.copy_storage_from(&a, priority)?;
                    a = r;
                }
                let name = self.state.lock().keys.name(id).map(str::to_owned);
                match (&keys, name) {
                    (Keys::Str(_), Some(n)) => local.push(Keys::Str(&[n.as_str()]), &[&a], priority)?,
                    _ => local.push(Keys::Int(&[id]), &[&a], priority)?,
                }
                continue;
            }
            if threshold.is_some() && rows {
                return Err(Error::not_supported(format!(
                    "gradient compression of row_sparse pushes is not supported (as in MXNet); \
                     key {display}"
                )));
            }
            if threshold.is_some() && dtype != DType::F32 {
                return Err(Error::invalid(format!(
                    "gradient compression works on float32 arrays only; key {display} is {}",
                    dtype.name()
                )));
            }
            // one push of a key at a time: the previous round must be acknowledged first
            self.settle(Some(&[id]))?;
            let shards = self.state.lock().meta[&id].shards.clone();
            let esize = dtype.size();
            let row_width = {
                let st = self.state.lock();
                st.meta[&id].shape.iter().skip(1).product::<i64>().max(0) as u32
            };
            let header = |s: &Shard| Header {
                dtype: dtype.code() as u8,
                flags: if self.sync { FLAG_SYNC } else { 0 } | if rows { FLAG_ROW_SPARSE } else { 0 },
                row_width: if rows { row_width } else { 0 },
                key: id as i64,
                offset: s.offset as u64,
                len: s.len as u64,
                ..Header::new(Kind::Push)
            };
            if inputs.len() == 1 && shards.len() == 1 && threshold.is_none() {
                // the common case: the array's bytes go straight into the message
                let m = header(&shards[0]).message_of(inputs[0])?;
                let p = self.t.request(self.servers()[shards[0].server], m)?;
                self.state.lock().inflight.entry(id).or_default().push(p);
                continue;
            }
            let summed = local_sum(&inputs)?;
            let mut sent = Vec::with_capacity(shards.len());
            for s in shards {
                let part = &summed[s.offset * esize..(s.offset + s.len) * esize];
                let mut h = header(&s);
                let m = match threshold {
                    Some(t) => {
                        h.flags |= FLAG_COMPRESSED;
                        h.threshold = t;
                        let grad: Vec<f32> = part
                            .chunks_exact(4)
                            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                            .collect();
                        let mut m = h.message(compress::packed_len(s.len));
                        let mut st = self.state.lock();
                        let total = st.meta[&id].shape.iter().product::<i64>() as usize;
                        let res = st.residual.entry(id).or_insert_with(|| vec![0.0; total]);
                        compress::compress(&grad, &mut res[s.offset..s.offset + s.len], t, &mut m[HEADER_LEN..]);
                        m
                    }
                    None => h.message_with(part),
                };
                sent.push(self.t.request(self.servers()[s.server], m)?);
            }
            self.state.lock().inflight.entry(id).or_default().extend(sent);
        }
        Ok(())
    }

    pub fn pull(&self, keys: Keys<'_>, outs: &[&NDArray], priority: i32) -> Result<()> {
        let _call = InCall::new(&self.calls);
        self.check_open()?;
        check_len(&keys, outs.len(), "outputs")?;
        if let Some(local) = &self.local {
            return local.pull(keys, outs, priority, true);
        }
        let ids = self.look_up(&keys, outs, "output", "pulled from")?;
        for (id, pos) in keys::group(&ids) {
            let display = keys.display(pos[0]);
            self.settle(Some(&[id]))?;
            let (shards, nbytes, esize) = {
                let st = self.state.lock();
                let m = &st.meta[&id];
                let n = m.shape.iter().product::<i64>() as usize;
                (m.shards.clone(), n * m.dtype.size(), m.dtype.size())
            };
            let mut pending = Vec::with_capacity(shards.len());
            for s in &shards {
                let h = Header {
                    key: id as i64,
                    offset: s.offset as u64,
                    len: s.len as u64,
                    ..Header::new(Kind::Pull)
                };
                pending.push((*s, self.t.request(self.servers()[s.server], h.message(0))?));
            }
            let mut parts = Vec::with_capacity(pending.len());
            for (s, p) in pending {
                let m = self.t.wait(p, &|| format!("pull of key {display}"))?;
                let want = s.len * esize;
                if m.payload().len() != want {
                    return Err(Error::distributed(format!(
                        "pull of key {display}: a server answered {} bytes for {want}",
                        m.payload().len()
                    )));
                }
                parts.push((s, m));
            }
            if let [(_, m)] = parts.as_slice() {
                // one shard: straight from the message into the outputs
                for &i in &pos {
                    outs[i].sync_copy_from_bytes(m.payload())?;
                }
                continue;
            }
            let mut value = vec![0u8; nbytes];
            for (s, m) in &parts {
                value[s.offset * esize..(s.offset + s.len) * esize].copy_from_slice(m.payload());
            }
            for &i in &pos {
                outs[i].sync_copy_from_bytes(&value)?;
            }
        }
        Ok(())
    }

    pub fn push_pull(
        &self,
        vkeys: Keys<'_>,
        okeys: Keys<'_>,
        values: &[&NDArray],
        outs: &[&NDArray],
        priority: i32,
    ) -> Result<()> {
        if self.compression.lock().is_some() {
            return Err(Error::not_supported(
                "pushpull with gradient compression is not supported (as in MXNet): use push \
                 and pull",
            ));
        }
        self.push(vkeys, values, priority, false)?;
        self.pull(okeys, outs, priority)
    }

    pub fn set_updater(&self, f: Option<IntUpdater>) {
        // with servers the updater runs there (MXNet keeps a worker's updater unused too)
        if let Some(local) = &self.local {
            local.set_updater(f);
        }
    }
    pub fn set_str_updater(&self, f: Option<StrUpdater>) {
        if let Some(local) = &self.local {
            local.set_str_updater(f);
        }
    }

    pub fn set_gradient_compression(&self, params: &[(&str, &str)]) -> Result<()> {
        let t = compress::parse_params(params)?;
        if t.is_some() && self.local.is_some() {
            return Err(Error::not_supported(
                "gradient compression needs server processes: a dist_sync store without servers \
                 sums pushes with an allreduce, which sends full values",
            ));
        }
        *self.compression.lock() = t;
        Ok(())
    }

    pub fn barrier(&self) -> Result<()> {
        let _call = InCall::new(&self.calls);
        self.check_open()?;
        self.settle(None)?;
        self.t.barrier()
    }

    pub fn set_barrier_before_exit(&self, on: bool) {
        self.barrier_before_exit.store(on, Ordering::Relaxed);
    }

    pub fn send_command(&self, head: i32, body: &str) -> Result<()> {
        let _call = InCall::new(&self.calls);
        self.check_open()?;
        if self.local.is_some() {
            return Err(Error::not_supported(format!(
                "command {head} needs server processes: this job has none (dist_sync without \
                 servers runs as an allreduce among the workers)"
            )));
        }
        let h = Header {
            head,
            ..Header::new(Kind::Command)
        };
        let mut pending = Vec::new();
        for &s in self.servers() {
            pending.push(self.t.request(s, h.message_with(body.as_bytes()))?);
        }
        let mut first_err = None;
        for p in pending {
            if let Err(e) = self.t.wait(p, &|| format!("command {head}")) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Whether the store was closed (freed, or left at exit).
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Closes the store to further calls; false if it already was.
    pub fn close(&self) -> bool {
        !self.closed.swap(true, Ordering::AcqRel)
    }

    /// Finishes a closed store: waits for the acknowledgements of its pushes. With `leave_job`
    /// (the process's last open worker store) the process also leaves the job: it tells every
    /// server that it pushes nothing more (`Done`) and every other worker that it leaves
    /// (`Leave`), so a wait of theirs that needs it fails at once naming it, then, unless turned
    /// off, waits for the other workers to leave too (the exit barrier). The announcements go
    /// before the waits: a worker that stays could otherwise wait for this one while this one
    /// waits for it.
    pub fn finish(&self, leave_job: bool) -> Result<()> {
        if !leave_job {
            return self.settle(None);
        }
        let mut done = Vec::new();
        for &s in self.servers() {
            done.push(self.t.request(s, Header::new(Kind::Done).message(0))?);
        }
        let exit_barrier = self.t.leave(self.barrier_before_exit.load(Ordering::Relaxed))?;
        let settled = self.settle(None);
        let mut told = Ok(());
        for p in done {
            if let Err(e) = self.t.wait(p, &|| "telling the servers this worker is done".to_owned()) {
                told = told.and(Err(e));
            }
        }
        let barrier = exit_barrier.map_or(Ok(()), |b| self.t.finish_exit_barrier(b));
        settled.and(told).and(barrier)
    }
}
