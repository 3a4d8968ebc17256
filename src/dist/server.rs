//! A server process's side of a distributed store: it holds its shards of the keys and serves
//! the workers' requests in `run` (`MXKVStoreRunServer`) until every worker has freed its store
//! or a worker sends the stop command.
//!
//! A synchronous push (the push carries the mode) joins its key's round: the server keeps the
//! pushes until every worker has pushed, sums them in worker-rank order, then applies the updater
//! (or, without one, the sum becomes the value), and only then acknowledges the pushes, so a
//! worker's following pull sees the round's result. An asynchronous push is applied at once and
//! needs an updater. A round still open after `MXRT_DIST_TIMEOUT_S` fails the pushes waiting in
//! it with a message naming the key and the workers that did not push; a round that lacks the
//! push of a worker that has left (sent `Done`) fails at once, naming that worker.
//!
//! Everything runs on the thread that called `run`, including the controller and updaters, so
//! an updater installed by a command is in place before the command is acknowledged.

use super::compress;
use super::role::DistConfig;
use super::transport::{Incoming, Transport};
use super::wire::{FLAG_COMPRESSED, FLAG_ROW_SPARSE, FLAG_SYNC, Header, Kind, Msg};
use crate::context::Context;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kvstore::reduce::{self, ReduceConfig};
use crate::kvstore::updater::Updaters;
use crate::kvstore::{IntUpdater, KeyRef, StrUpdater};
use crate::ndarray::NDArray;
use crate::ndarray::format::StorageType;
use crate::ndarray::sparse::SparseValue;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Server stores of this process that have not served their workers to the end: a process that
/// exits while one has not is aborted (its workers would wait for it).
static UNFINISHED: AtomicUsize = AtomicUsize::new(0);

/// How many server stores of this process have not finished serving (`run` has not returned
/// after every worker left or a stop command).
pub fn unfinished() -> usize {
    UNFINISHED.load(Ordering::SeqCst)
}

/// The store commands a worker can send (MXNet's `CommandType`).
pub mod command {
    pub const CONTROLLER: i32 = 0;
    pub const SET_MULTI_PRECISION: i32 = 1;
    pub const STOP_SERVER: i32 = 2;
    pub const SYNC_MODE: i32 = 3;
    pub const SET_GRADIENT_COMPRESSION: i32 = 4;
    pub const SET_PROFILER_PARAMS: i32 = 5;
}

struct Round {
    /// The pushed values by worker rank.
    pushes: Vec<Option<Msg>>,
    /// The push requests to acknowledge when the round completes: (world rank, header).
    waiting: Vec<(usize, Header)>,
    started: Instant,
}

struct ShardState {
    stored: NDArray,
    dtype: DType,
    len: usize,
    round: Option<Round>,
}

#[derive(Default)]
struct State {
    shards: HashMap<(i64, u64), ShardState>,
    multi_precision: bool,
    done: Vec<bool>,
}

/// A server's store.
pub struct Server {
    t: &'static Transport,
    cfg: DistConfig,
    reduce: ReduceConfig,
    updaters: RwLock<Updaters>,
    state: Mutex<State>,
    /// `run` returned after every worker left or a stop command.
    finished: AtomicBool,
}

/// What the loop does after a request.
enum Next {
    Serve,
    Stop,
}

impl Server {
    pub fn new(t: &'static Transport, cfg: DistConfig) -> Result<Server> {
        UNFINISHED.fetch_add(1, Ordering::SeqCst);
        Ok(Server {
            t,
            cfg,
            reduce: ReduceConfig::from_env()?,
            updaters: RwLock::default(),
            state: Mutex::new(State {
                done: vec![false; t.topo.workers.len()],
                ..State::default()
            }),
            finished: AtomicBool::new(false),
        })
    }

    pub fn rank(&self) -> i32 {
        self.t.topo.rank_in_role() as i32
    }
    pub fn num_workers(&self) -> i32 {
        self.t.topo.workers.len() as i32
    }
    pub fn set_updater(&self, f: Option<IntUpdater>) {
        self.updaters.write().int = f;
    }
    pub fn set_str_updater(&self, f: Option<StrUpdater>) {
        self.updaters.write().str = f;
    }

    /// Serves requests until the workers are done. `controller` gets command 0's body.
    pub fn run(&self, controller: &mut dyn FnMut(i32, &str)) -> Result<()> {
        let tick = Duration::from_millis(100).min(self.cfg.timeout / 4);
        loop {
            if let Some(req) = self.t.next_request(tick)?
                && let Next::Stop = self.handle(req, controller)?
            {
                if !self.finished.swap(true, Ordering::SeqCst) {
                    UNFINISHED.fetch_sub(1, Ordering::SeqCst);
                }
                return Ok(());
            }
            self.expire_rounds()?;
        }
    }

    fn reply(&self, dest: usize, req: &Header, kind: Kind) -> Result<()> {
        self.t.send(dest, Header::reply(kind, req).message(0))
    }

    fn fail(&self, dest: usize, req: &Header, message: String) -> Result<()> {
        self.t
            .send(dest, Header::reply(Kind::Fail, req).message_with(message.as_bytes()))
    }

    fn handle(&self, req: Incoming, controller: &mut dyn FnMut(i32, &str)) -> Result<Next> {
        let Incoming { src, msg } = req;
        let h = msg.header;
        let result = match h.kind {
            Kind::Init => self.init(&msg).map(|()| true),
            Kind::Push => return self.push(src, msg).map(|()| Next::Serve),
            Kind::Pull => return self.pull(src, &h).map(|()| Next::Serve),
            Kind::Command => {
                let body = msg.text();
                match h.head {
                    command::CONTROLLER => {
                        controller(h.head, &body);
                        Ok(true)
                    }
                    command::SET_MULTI_PRECISION => {
                        self.state.lock().multi_precision = true;
                        Ok(true)
                    }
                    command::STOP_SERVER => {
                        self.reply(src, &h, Kind::Ack)?;
                        return Ok(Next::Stop);
                    }
                    command::SET_PROFILER_PARAMS => self.profiler(&body).map(|()| true),
                    // sync mode travels with every push, compression with every compressed push
                    command::SYNC_MODE | command::SET_GRADIENT_COMPRESSION => Ok(true),
                    other => Err(Error::invalid(format!(
                        "unknown command head {other} (MXNet's heads are 0 controller, 1 multi \
                         precision, 2 stop, 3 sync mode, 4 gradient compression, 5 profiler)"
                    ))),
                }
            }
            Kind::Done => {
                let mut st = self.state.lock();
                if let Some(r) = self.t.topo.worker_rank_of(src) {
                    st.done[r] = true;
                }
                let all = st.done.iter().all(|&d| d);
                drop(st);
                // rounds that wait for this worker's push can never complete
                self.fail_rounds_of_left_workers(None)?;
                self.reply(src, &h, Kind::Ack)?;
                return Ok(if all { Next::Stop } else { Next::Serve });
            }
            // answers, and pings (the communication thread answers those itself)
            Kind::Ack | Kind::Data | Kind::Fail | Kind::Ping | Kind::Pong | Kind::Leave => Ok(false),
        };
        match result {
            Ok(true) => self.reply(src, &h, Kind::Ack)?,
            Ok(false) => {}
            Err(e) => self.fail(src, &h, format!("server {}: {}", self.rank(), e.message()))?,
        }
        Ok(Next::Serve)
    }

    /// Runs a worker's profiler call on this server. Its trace goes to the configured file name
    /// prefixed with `rank<r>_` (r: the server's rank), so servers sharing a directory do not
    /// overwrite each other.
    fn profiler(&self, body: &str) -> Result<()> {
        use crate::kvstore::ServerProfilerCommand as C;
        match C::decode(body)? {
            C::Config(pairs) => {
                let mut pairs: Vec<(String, String)> = pairs
                    .into_iter()
                    .filter(|(k, _)| k != "profile_process")
                    .collect();
                if !pairs.iter().any(|(k, _)| k == "filename") {
                    pairs.push(("filename".into(), "profile.json".into()));
                }
                for (k, v) in pairs.iter_mut() {
                    if k == "filename" {
                        let path = std::path::Path::new(v.as_str());
                        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("profile.json");
                        let prefixed = format!("rank{}_{name}", self.rank());
                        *v = path.with_file_name(prefixed).to_string_lossy().into_owned();
                    }
                }
                let config = crate::profiler::Config::parse(
                    pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())),
                )?;
                crate::profiler::set_config(config)
            }
            C::State(on) => {
                crate::profiler::set_state(on);
                Ok(())
            }
            C::Pause(on) => {
                crate::profiler::pause(on);
                Ok(())
            }
            C::Dump(finished) => crate::profiler::dump(finished),
        }
    }

    fn dtype_of(h: &Header) -> Result<DType> {
        DType::from_code(h.dtype as i32)
    }

    fn init(&self, msg: &Msg) -> Result<()> {
        let h = &msg.header;
        let dtype = Self::dtype_of(h)?;
        let len = h.len as usize;
        if msg.payload().len() != len * dtype.size() {
            return Err(Error::format(format!(
                "init of key {}: {} payload bytes for {len} {} values",
                h.key,
                msg.payload().len(),
                dtype.name()
            )));
        }
        let stored = NDArray::new(&[len as i64], Context::cpu(0), dtype, false)?;
        stored.sync_copy_from_bytes(msg.payload())?;
        self.state.lock().shards.insert(
            (h.key, h.offset),
            ShardState {
                stored,
                dtype,
                len,
                round: None,
            },
        );
        Ok(())
    }

    /// The pushed values as plain array bytes (expanding compressed codes).
    fn values_of(&self, msg: &Msg, dtype: DType, len: usize) -> Result<Option<Vec<u8>>> {
        let h = &msg.header;
        if h.flags & FLAG_COMPRESSED != 0 {
            if dtype != DType::F32 {
                return Err(Error::invalid("compressed push of a non-float32 array"));
            }
            let mut vals = vec![0f32; len];
            compress::decompress(msg.payload(), h.threshold, &mut vals)?;
            return Ok(Some(vals.iter().flat_map(|v| v.to_le_bytes()).collect()));
        }
        if msg.payload().len() != len * dtype.size() {
            return Err(Error::invalid(format!(
                "push of key {} has {} bytes, the servers hold {len} {} values ({} bytes): \
                 the workers disagree on the key's shape",
                h.key,
                msg.payload().len(),
                dtype.name(),
                len * dtype.size()
            )));
        }
        Ok(None)
    }

    fn push(&self, src: usize, msg: Msg) -> Result<()> {
        let h = msg.header;
        let worker = self.t.topo.worker_rank_of(src);
        let checked = (|| -> Result<(DType, usize)> {
            let st = self.state.lock();
            let shard = st.shards.get(&(h.key, h.offset)).ok_or_else(|| {
                Error::invalid(format!(
                    "push to key {} which was never initialised on the servers",
                    h.key
                ))
            })?;
            let dtype = Self::dtype_of(&h)?;
            if dtype != shard.dtype || h.len as usize != shard.len {
                return Err(Error::invalid(format!(
                    "push of key {}: {} {} values, the servers hold {} {} values: the workers \
                     disagree on the key's shape or dtype",
                    h.key,
                    h.len,
                    dtype.name(),
                    shard.len,
                    shard.dtype.name()
                )));
            }
            Ok((dtype, shard.len))
        })();
        let (dtype, len) = match checked {
            Ok(v) => v,
            Err(e) => return self.fail(src, &h, format!("server {}: {}", self.rank(), e.message())),
        };
        let expanded = match self.values_of(&msg, dtype, len) {
            Ok(v) => v,
            Err(e) => return self.fail(src, &h, format!("server {}: {}", self.rank(), e.message())),
        };
        if h.flags & FLAG_SYNC == 0 {
            let values: &[u8] = match &expanded {
                Some(v) => v,
                None => msg.payload(),
            };
            // asynchronous: apply now
            let updaters = self.updaters.read().clone();
            if !updaters.applies_to(crate::kvstore::KeyKind::Int) {
                return self.fail(
                    src,
                    &h,
                    format!(
                        "server {}: a dist_async push of key {} needs an updater on the servers \
                         (kv.set_optimizer, or a controller that sets one): without one there is \
                         nothing to apply the push with",
                        self.rank(),
                        h.key
                    ),
                );
            }
            let merged = NDArray::new(&[len as i64], Context::cpu(0), dtype, false)?;
            merged.sync_copy_from_bytes(values)?;
            let stored = self.state.lock().shards[&(h.key, h.offset)].stored.clone();
            let (merged, stored) = for_updater(&h, merged, stored)?;
            updaters.call(KeyRef::Int(h.key as i32), h.key as i32, &merged, &stored);
            return self.reply(src, &h, Kind::Ack);
        }
        let Some(rank) = worker else {
            return self.fail(src, &h, format!("process {src} is not a worker"));
        };
        let nworkers = self.t.topo.workers.len();
        let complete = {
            let mut st = self.state.lock();
            let shard = st.shards.get_mut(&(h.key, h.offset)).expect("checked");
            let round = shard.round.get_or_insert_with(|| Round {
                pushes: (0..nworkers).map(|_| None).collect(),
                waiting: Vec::new(),
                started: Instant::now(),
            });
            if round.pushes[rank].is_some() {
                drop(st);
                return self.fail(
                    src,
                    &h,
                    format!(
                        "server {}: worker {rank} pushed key {} twice in one round",
                        self.rank(),
                        h.key
                    ),
                );
            }
            round.waiting.push((src, h));
            // keep the bytes: expanded values replace the compressed payload
            round.pushes[rank] = Some(match expanded {
                Some(v) => Msg::decode(Header { flags: 0, ..h }.message_with(&v))?,
                None => msg,
            });
            if round.pushes.iter().all(Option::is_some) {
                shard.round.take()
            } else {
                None
            }
        };
        match complete {
            Some(round) => self.finish_round(&h, dtype, len, round),
            // a round that lacks the push of a worker that left fails at once
            None => self.fail_rounds_of_left_workers(Some((h.key, h.offset))),
        }
    }

    /// Fails the open rounds (of the shard `only`, or all) that lack the push of a worker that
    /// has left: it sends no more pushes, so they can never complete.
    fn fail_rounds_of_left_workers(&self, only: Option<(i64, u64)>) -> Result<()> {
        let mut failed = Vec::new();
        {
            let mut st = self.state.lock();
            let State { shards, done, .. } = &mut *st;
            for (&(key, offset), shard) in shards.iter_mut() {
                if only.is_some_and(|o| o != (key, offset)) {
                    continue;
                }
                let gone: Vec<usize> = match &shard.round {
                    Some(r) => (0..r.pushes.len())
                        .filter(|&i| r.pushes[i].is_none() && done[i])
                        .collect(),
                    None => continue,
                };
                if !gone.is_empty() {
                    failed.push((key, gone, shard.round.take().expect("checked").waiting));
                }
            }
        }
        for (key, gone, waiting) in failed {
            let names: Vec<String> = gone
                .iter()
                .map(|&r| self.t.topo.describe(self.t.topo.workers[r]))
                .collect();
            let text = format!(
                "server {}: the dist_sync round of key {key} can never complete: {} has left the \
                 job (it freed its store or its process ended) without pushing it (uneven \
                 iterations, or a worker that ended early)",
                self.rank(),
                names.join(" and ")
            );
            for (dest, h) in waiting {
                self.fail(dest, &h, text.clone())?;
            }
        }
        Ok(())
    }

    /// Sums a complete round in worker order, applies it and acknowledges every push.
    fn finish_round(&self, h: &Header, dtype: DType, len: usize, round: Round) -> Result<()> {
        let start = crate::profiler::kvstore_enabled().then(crate::profiler::now_us);
        let merged = NDArray::new(&[len as i64], Context::cpu(0), dtype, false)?;
        merged.wait_to_write()?;
        let out = merged.data_ptr()?;
        // inputs must be aligned for the dtype; a payload that is not gets an aligned copy
        let mut aligned: Vec<Vec<u64>> = Vec::new();
        let mut ins: Vec<*const u8> = Vec::new();
        for m in round.pushes.iter().flatten() {
            let p = m.payload();
            if (p.as_ptr() as usize).is_multiple_of(dtype.size().max(1)) {
                ins.push(p.as_ptr());
            } else {
                let mut a = vec![0u64; p.len().div_ceil(8)];
                // SAFETY: `a` holds at least `p.len()` bytes and does not overlap `p`.
                unsafe { std::ptr::copy_nonoverlapping(p.as_ptr(), a.as_mut_ptr() as *mut u8, p.len()) };
                ins.push(a.as_ptr() as *const u8);
                aligned.push(a);
            }
        }
        // SAFETY: every input holds `len` elements of `dtype` (checked on arrival) and is aligned;
        // `merged` is a new array of `len` elements no engine op uses (waited for above) and
        // overlaps no input.
        unsafe { reduce::reduce(dtype, out, &ins, len, &self.reduce) };
        drop(aligned);
        let updaters = self.updaters.read().clone();
        if updaters.applies_to(crate::kvstore::KeyKind::Int) {
            let stored = self.state.lock().shards[&(h.key, h.offset)].stored.clone();
            let (merged, stored) = for_updater(h, merged, stored)?;
            updaters.call(KeyRef::Int(h.key as i32), h.key as i32, &merged, &stored);
        } else if let Some(shard) = self.state.lock().shards.get_mut(&(h.key, h.offset)) {
            // without an updater the round's sum becomes the value
            shard.stored = merged;
        }
        for (dest, req) in &round.waiting {
            self.reply(*dest, req, Kind::Ack)?;
        }
        if let Some(start) = start {
            let key = h.key.to_string();
            crate::profiler::record_kvstore("KVStoreServerRound", &key, start, crate::profiler::now_us());
        }
        Ok(())
    }

    fn pull(&self, src: usize, h: &Header) -> Result<()> {
        let stored = self
            .state
            .lock()
            .shards
            .get(&(h.key, h.offset))
            .map(|s| s.stored.clone());
        let Some(stored) = stored else {
            return self.fail(
                src,
                h,
                format!(
                    "server {}: pull of key {} which was never initialised (kv.init it first)",
                    self.rank(),
                    h.key
                ),
            );
        };
        match Header::reply(Kind::Data, h).message_of(&stored) {
            Ok(m) => self.t.send(src, m),
            Err(e) => self.fail(src, h, format!("server {}: {}", self.rank(), e.message())),
        }
    }

    /// Fails the rounds that waited longer than the deadline for some worker's push.
    fn expire_rounds(&self) -> Result<()> {
        let mut expired = Vec::new();
        {
            let mut st = self.state.lock();
            for (&(key, _), shard) in st.shards.iter_mut() {
                if shard
                    .round
                    .as_ref()
                    .is_some_and(|r| r.started.elapsed() >= self.cfg.timeout)
                {
                    let r = shard.round.take().expect("checked");
                    let missing: Vec<usize> = (0..r.pushes.len())
                        .filter(|&i| r.pushes[i].is_none())
                        .collect();
                    expired.push((key, missing, r.waiting));
                }
            }
        }
        for (key, missing, waiting) in expired {
            let text = format!(
                "server {}: the dist_sync round of key {key} timed out after {:.1} s \
                 (MXRT_DIST_TIMEOUT_S): worker(s) {missing:?} did not push (uneven iterations, \
                 or a worker stopped)",
                self.rank(),
                self.cfg.timeout.as_secs_f64()
            );
            for (dest, h) in waiting {
                self.fail(dest, &h, text.clone())?;
            }
        }
        Ok(())
    }
}

/// The gradient and weight the updater gets. For a row_sparse push the summed gradient becomes a
/// row_sparse array (its rows: those holding a non-zero) and the weight is viewed with the same
/// shape: rows of the key's `row_width` elements when the shard holds whole rows, else single
/// elements. A lazy optimizer then updates only the pushed rows, as MXNet's servers do.
fn for_updater(h: &Header, merged: NDArray, stored: NDArray) -> Result<(NDArray, NDArray)> {
    if h.flags & FLAG_ROW_SPARSE == 0 {
        return Ok((merged, stored));
    }
    let (len, w) = (h.len as usize, h.row_width as usize);
    let shape: Vec<i64> = if w > 0 && len.is_multiple_of(w) && (h.offset as usize).is_multiple_of(w) {
        vec![(len / w) as i64, w as i64]
    } else {
        vec![len as i64]
    };
    let value = SparseValue::from_dense(StorageType::RowSparse, &shape, merged.dtype(), &merged.to_bytes()?)?;
    let grad = NDArray::from_sparse_value(&shape, Context::cpu(0), merged.dtype(), &[DType::I64], value)?;
    Ok((grad, stored.reshape(&shape)?))
}
