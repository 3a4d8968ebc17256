//! The distributed key-value store ("dist_sync", "dist_async", "dist_sync_device", ...): workers
//! and servers as the processes of one MPI job.
//!
//! Each process learns its role from `DMLC_ROLE` (`role`). Workers push and pull (`worker`);
//! servers hold the keys' shards, sum the pushes and run the updater (`server`); a scheduler has
//! nothing to do. Keys are split over servers as MXNet does (`shard`), messages have a small
//! fixed header (`wire`), pushes may be 2-bit compressed (`compress`), and one thread per process
//! owns MPI (`transport`). Without server processes `dist_sync` is an allreduce among the
//! workers, each applying the updater itself.
//!
//! A job is started with `mxrt-launch -n W -s S prog args...` (or the `mpirun` line it prints).
//! A process that never creates a distributed store never starts MPI.

pub mod role;

#[cfg(feature = "dist")]
pub mod compress;
#[cfg(feature = "dist")]
mod server;
#[cfg(feature = "dist")]
pub mod shard;
#[cfg(feature = "dist")]
pub mod transport;
#[cfg(feature = "dist")]
pub mod wire;
#[cfg(feature = "dist")]
mod worker;

pub use role::{DistConfig, Role};

#[cfg(feature = "dist")]
pub use server::command;

#[cfg(feature = "dist")]
mod store {
    use super::role::{DistConfig, Role};
    use super::server::Server;
    use super::transport::Transport;
    use super::worker::Worker;
    use crate::error::{Error, Result};
    use crate::kvstore::{
        Controller, IntUpdater, KeyValueStore, Keys, ServerProfilerCommand, StrUpdater,
    };
    use crate::ndarray::NDArray;
    use crate::ndarray::format::StorageType;
    use parking_lot::Mutex;
    use std::sync::{Arc, Weak};
    use std::time::Duration;

    enum Part {
        Worker(Arc<Worker>),
        Server(Box<Server>),
        /// ps-lite's scheduler: nothing to do, no MPI.
        Scheduler,
    }

    /// A distributed store as this process sees it.
    pub struct DistStore {
        type_name: String,
        part: Part,
        /// The process's MPI connection (none for the scheduler, which never starts MPI).
        transport: Option<&'static Transport>,
    }

    /// Workers whose store was never freed: at exit they still leave the job in order (see
    /// [`leave_at_exit`]).
    static LIVE_WORKERS: Mutex<Vec<Weak<Worker>>> = Mutex::new(Vec::new());

    /// Workers whose store was freed while the process was ending (after `MXNotifyShutdown`, as
    /// MXNet's Python package calls it at interpreter exit, before the exit status is known):
    /// they leave the job in the exit hook, which knows the status.
    static LEFT_TO_EXIT: Mutex<Vec<Arc<Worker>>> = Mutex::new(Vec::new());

    /// This process's part in the job as a worker: how many of its worker stores are open, and
    /// whether it has left the job (when the last one closed; it cannot join again, as in MXNet,
    /// whose first freed store stops the servers).
    struct Membership {
        open: usize,
        left: bool,
    }

    static MEMBERSHIP: Mutex<Membership> = Mutex::new(Membership {
        open: 0,
        left: false,
    });

    /// Closes a worker's store and finishes it; the process's last open store leaves the job.
    fn close_worker(w: &Worker) -> Result<()> {
        let leave_job = {
            let mut m = MEMBERSHIP.lock();
            if !w.close() {
                return Ok(());
            }
            m.open -= 1;
            m.left |= m.open == 0;
            m.open == 0
        };
        w.finish(leave_job)
    }

    /// Whether the frontend said the process is ending (`MXNotifyShutdown`).
    fn process_ending() -> bool {
        crate::engine::Engine::global().is_ok_and(|e| e.is_shutdown())
    }

    /// At a normal exit (status 0): the workers still in the job leave it in order. An error
    /// says why the process cannot leave in order (and the job is then aborted): a store's call
    /// in progress on another thread, a server that has not served its workers to the end, or a
    /// failure while leaving.
    pub(super) fn leave_at_exit() -> std::result::Result<(), String> {
        let mut live: Vec<Arc<Worker>> =
            LIVE_WORKERS.lock().drain(..).filter_map(|w| w.upgrade()).collect();
        live.append(&mut LEFT_TO_EXIT.lock());
        if live.iter().any(|w| w.in_call()) {
            return Err("while a call of its distributed store (push, pull, barrier, ...) is in \
                        progress on another thread"
                .to_owned());
        }
        if super::server::unfinished() > 0 {
            return Err("before its server has served the workers to the end (it returns from \
                        MXKVStoreRunServer once every worker has left)"
                .to_owned());
        }
        for w in live {
            if let Err(e) = close_worker(&w) {
                return Err(format!("while leaving the job: {}", e.message()));
            }
        }
        Ok(())
    }

    /// Creates the store of this process's role for an MXNet type string containing "dist".
    pub(super) fn create_store(type_name: &str) -> Result<Box<dyn KeyValueStore>> {
        let t = type_name.to_lowercase();
        let sync = !t.contains("_async");
        let role = Role::from_env()?;
        let cfg = DistConfig::from_env()?;
        let transport = match role {
            Role::Scheduler => None,
            _ => Some(Transport::get(role, &cfg)?),
        };
        let part = match (role, transport) {
            (Role::Server, Some(tr)) => Part::Server(Box::new(Server::new(tr, cfg)?)),
            (Role::Worker, Some(tr)) => {
                let mut m = MEMBERSHIP.lock();
                if m.left {
                    return Err(Error::invalid(format!(
                        "a '{t}' store: this process left the distributed job when its last \
                         store was freed, and cannot join it again (a worker's stores are \
                         created before the first one is freed; MXNet's servers stop then too)"
                    )));
                }
                let w = Arc::new(Worker::new(tr, cfg, &t, sync)?);
                m.open += 1;
                LIVE_WORKERS.lock().push(Arc::downgrade(&w));
                Part::Worker(w)
            }
            _ => Part::Scheduler,
        };
        Ok(Box::new(DistStore {
            type_name: t,
            part,
            transport,
        }))
    }

    /// Dense copies of `arrays` when any is sparse (the wire carries dense values), and whether
    /// one was: row_sparse pushes then tell the servers to hand the updater a row_sparse sum.
    fn densified(arrays: &[&NDArray]) -> Result<Option<Vec<NDArray>>> {
        if !arrays.iter().any(|a| a.is_sparse()) {
            return Ok(None);
        }
        if let Some(a) = arrays.iter().find(|a| a.stype() == StorageType::Csr) {
            return Err(Error::not_supported(format!(
                "a csr array of shape {:?}: the distributed store takes dense and row_sparse \
                 arrays",
                a.shape()
            )));
        }
        let mut out = Vec::with_capacity(arrays.len());
        for a in arrays {
            let d = NDArray::new(a.shape(), crate::Context::cpu(0), a.dtype(), false)?;
            d.copy_storage_from(a, 0)?;
            out.push(d);
        }
        Ok(Some(out))
    }

    /// Dense stand-ins for the sparse outputs of a pull (the outputs themselves for dense ones).
    fn pull_targets(outs: &[&NDArray]) -> Result<Vec<NDArray>> {
        outs.iter()
            .map(|o| {
                if o.is_sparse() {
                    NDArray::new(o.shape(), crate::Context::cpu(0), o.dtype(), false)
                } else {
                    Ok((*o).clone())
                }
            })
            .collect()
    }

    impl DistStore {
        fn worker(&self, what: &str) -> Result<&Worker> {
            match &self.part {
                Part::Worker(w) => Ok(w),
                Part::Server(_) => Err(Error::invalid(format!(
                    "{what}: this process is a server (DMLC_ROLE=server): it serves in \
                     MXKVStoreRunServer and holds no keys of its own"
                ))),
                Part::Scheduler => Err(Error::invalid(format!(
                    "{what}: this process is the scheduler (DMLC_ROLE=scheduler), which has \
                     nothing to do in an MPI job"
                ))),
            }
        }
    }

    impl Drop for DistStore {
        /// A worker's store dropped without `shutdown` (MXKVStoreFree calls it) still leaves the
        /// job, at exit: dropping must not block on other processes.
        fn drop(&mut self) {
            if let Part::Worker(w) = &self.part
                && !w.is_closed()
            {
                LEFT_TO_EXIT.lock().push(w.clone());
            }
        }
    }

    impl KeyValueStore for DistStore {
        fn type_name(&self) -> &str {
            &self.type_name
        }
        fn init(&self, keys: Keys<'_>, values: &[&NDArray]) -> Result<()> {
            let w = self.worker("init")?;
            match densified(values)? {
                Some(d) => w.init(keys, &d.iter().collect::<Vec<_>>()),
                None => w.init(keys, values),
            }
        }
        fn push(&self, keys: Keys<'_>, values: &[&NDArray], priority: i32) -> Result<()> {
            let _trace = crate::kvstore::Traced::begin("KVStorePush", &keys);
            let w = self.worker("push")?;
            match densified(values)? {
                Some(d) => w.push(keys, &d.iter().collect::<Vec<_>>(), priority, true),
                None => w.push(keys, values, priority, false),
            }
        }
        fn pull(&self, keys: Keys<'_>, outs: &[&NDArray], priority: i32, ignore_sparse: bool) -> Result<()> {
            let _trace = crate::kvstore::Traced::begin("KVStorePull", &keys);
            let w = self.worker("pull")?;
            if !outs.iter().any(|o| o.is_sparse()) {
                return w.pull(keys, outs, priority);
            }
            // sparse outputs: skipped with ignore_sparse (as MXNet), else filled from a dense pull
            let dense = pull_targets(outs)?;
            w.pull(keys, &dense.iter().collect::<Vec<_>>(), priority)?;
            for (o, d) in outs.iter().zip(&dense) {
                if o.is_sparse() && !ignore_sparse {
                    o.copy_storage_from(d, priority)?;
                }
            }
            Ok(())
        }
        fn pull_row_sparse(
            &self,
            keys: Keys<'_>,
            outs: &[&NDArray],
            row_ids: &[&NDArray],
            priority: i32,
        ) -> Result<()> {
            let _trace = crate::kvstore::Traced::begin("KVStorePullRowSparse", &keys);
            let w = self.worker("row_sparse_pull")?;
            crate::kvstore::store::check_len(&keys, row_ids.len(), "row id arrays")?;
            if let Some(i) = outs.iter().position(|o| o.stype() != StorageType::RowSparse) {
                return Err(Error::invalid(format!(
                    "row_sparse_pull: output {i} for key {} has {} storage; it must be row_sparse",
                    keys.display(i),
                    outs[i].stype().name()
                )));
            }
            let dense = pull_targets(outs)?;
            w.pull(keys, &dense.iter().collect::<Vec<_>>(), priority)?;
            for ((o, d), ids) in outs.iter().zip(&dense).zip(row_ids) {
                let all = NDArray::new_sparse(StorageType::RowSparse, d.shape(), crate::Context::cpu(0), d.dtype(), &[crate::dtype::DType::I64])?;
                all.copy_storage_from(d, priority)?;
                o.retain_rows_from(&all, ids, priority)?;
            }
            Ok(())
        }
        fn push_pull(
            &self,
            vkeys: Keys<'_>,
            okeys: Keys<'_>,
            values: &[&NDArray],
            outs: &[&NDArray],
            priority: i32,
        ) -> Result<()> {
            if values.iter().chain(outs).any(|a| a.is_sparse()) {
                // pushpull pulls with ignore_sparse, as in MXNet
                self.push(vkeys, values, priority)?;
                return self.pull(okeys, outs, priority, true);
            }
            self.worker("pushpull")?.push_pull(vkeys, okeys, values, outs, priority)
        }
        fn set_updater(&self, updater: Option<IntUpdater>) {
            match &self.part {
                Part::Worker(w) => w.set_updater(updater),
                Part::Server(s) => s.set_updater(updater),
                Part::Scheduler => {}
            }
        }
        fn set_str_updater(&self, updater: Option<StrUpdater>) {
            match &self.part {
                Part::Worker(w) => w.set_str_updater(updater),
                Part::Server(s) => s.set_str_updater(updater),
                Part::Scheduler => {}
            }
        }
        fn set_gradient_compression(&self, params: &[(&str, &str)]) -> Result<()> {
            match &self.part {
                Part::Worker(w) => w.set_gradient_compression(params),
                // servers learn the threshold from each compressed push
                _ => super::compress::parse_params(params).map(|_| ()),
            }
        }
        fn rank(&self) -> i32 {
            match &self.part {
                Part::Worker(w) => w.rank(),
                Part::Server(s) => s.rank(),
                Part::Scheduler => 0,
            }
        }
        fn group_size(&self) -> i32 {
            match &self.part {
                Part::Worker(w) => w.group_size(),
                Part::Server(s) => s.num_workers(),
                Part::Scheduler => DistConfig::from_env()
                    .ok()
                    .and_then(|c| c.num_worker)
                    .unwrap_or(0) as i32,
            }
        }
        fn num_dead_nodes(&self, node_id: i32, timeout_sec: i32) -> Result<i32> {
            if timeout_sec < 0 {
                return Err(Error::invalid(format!(
                    "timeout_sec is {timeout_sec}: it must be 0 or more seconds"
                )));
            }
            let Some(t) = self.transport else {
                return Ok(0); // the scheduler knows of no process
            };
            let ranks = t.topo.node_group(node_id).ok_or_else(|| {
                Error::invalid(format!(
                    "node_id {node_id} names no process of this job (1 scheduler, 2 servers, \
                     4 workers or their sums; 8+2r server r of {}, 9+2r worker r of {})",
                    t.topo.servers.len(),
                    t.topo.workers.len()
                ))
            })?;
            if timeout_sec == 0 {
                return Ok(0); // as MXNet: no time to wait, no process counted dead
            }
            let silent = t.unresponsive(&ranks, Duration::from_secs(timeout_sec as u64))?;
            Ok(silent.len() as i32)
        }
        fn barrier(&self) -> Result<()> {
            self.worker("barrier")?.barrier()
        }
        fn set_barrier_before_exit(&self, on: bool) {
            if let Part::Worker(w) = &self.part {
                w.set_barrier_before_exit(on)
            }
        }
        fn run_server(&self, controller: Controller<'_>) -> Result<()> {
            match &self.part {
                Part::Server(s) => s.run(controller),
                Part::Scheduler => Ok(()),
                Part::Worker(_) => Err(Error::invalid(
                    "this process is a worker: only server processes (DMLC_ROLE=server) run \
                     MXKVStoreRunServer",
                )),
            }
        }
        fn send_command_to_servers(&self, head: i32, body: &str) -> Result<()> {
            self.worker("send a command to the servers")?.send_command(head, body)
        }
        fn server_profiler_command(&self, command: &ServerProfilerCommand) -> Result<()> {
            match &self.part {
                Part::Worker(w) if !w.has_servers() => Ok(()),
                Part::Worker(w) => {
                    w.send_command(super::command::SET_PROFILER_PARAMS, &command.encode())
                }
                _ => Err(Error::invalid(
                    "profiler commands for the servers are sent from worker processes",
                )),
            }
        }
        fn shutdown(&self) -> Result<()> {
            match &self.part {
                // freed while the process ends: leaving is left to the exit hook (see Drop),
                // which knows whether the process ends normally (a non-zero status aborts the
                // job instead)
                Part::Worker(_) if process_ending() => Ok(()),
                Part::Worker(w) => close_worker(w),
                _ => Ok(()),
            }
        }
    }
}

#[cfg(feature = "dist")]
pub use store::DistStore;

/// Registers the distributed store kinds with [`crate::kvstore::create`], which sits below this
/// module and does not know it (a build without the `dist` feature registers nothing, and
/// `kvstore::create` then says the build lacks them). Cheap after the first call; the C API runs
/// it before its first call, [`create`] on every call.
pub fn register() {
    #[cfg(feature = "dist")]
    crate::kvstore::register_distributed(store::create_store);
}

/// Creates a store from an MXNet type string as [`crate::kvstore::create`] does, with the
/// distributed kinds registered first: "dist_sync", "dist_async", "dist_sync_device", ... give
/// the store of this process's role (`DMLC_ROLE`: worker, server or scheduler), other type
/// strings a local store. The way in for Rust code that wants a distributed store.
pub fn create(type_name: &str) -> crate::error::Result<Box<dyn crate::kvstore::KeyValueStore>> {
    register();
    crate::kvstore::create(type_name)
}

/// Runs at a normal exit before MPI is finalised: the workers whose store is still alive leave
/// the job in order. An error says why the process cannot (the job is then aborted).
#[cfg(feature = "dist")]
pub(crate) fn before_finalize() -> std::result::Result<(), String> {
    store::leave_at_exit()
}
