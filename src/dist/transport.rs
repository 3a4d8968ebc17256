//! The communication thread: the one thread that owns MPI.
//!
//! MPI is started the first time a process creates a distributed store, on a thread of its own
//! that keeps it to the end: it initialises MPI, learns every process's role, splits off the
//! workers' communicator, then loops, posting the sends and collectives other threads ask for,
//! testing the ones in flight and receiving what arrives. Replies go to the request that waits
//! for them (by request id); requests go to the server's inbox.
//!
//! How a process leaves the job is decided by an exit hook (glibc's `on_exit`, which receives the
//! exit status; `atexit` elsewhere). A non-zero status, or an exit while a store of the process is
//! still in a call or a round, aborts the whole job at once with a message naming the process. A
//! normal end first lets the process's stores leave in order: a worker tells the servers (`Done`)
//! and the other workers (`Leave`, with the number of collectives it started) that it leaves, so
//! a wait of theirs that needed it fails at once naming it, instead of waiting for the deadline.
//! Then MPI is finalised on the communication thread, as MPI requires, or the job is aborted if a
//! wait of this process failed (a survivor of a broken job must not sit in `MPI_Finalize` waiting
//! for the dead).
//!
//! Callers never block inside MPI: they wait on a channel with a deadline
//! (`MXRT_DIST_TIMEOUT_S`) and get an error naming what they waited for when it passes.
//!
//! Sends and collectives in flight hold owned buffers across loop turns, which rsmpi's scoped
//! requests (tied to a lexical scope) cannot express, so those few calls (`MPI_Isend`,
//! `MPI_Iallreduce`, `MPI_Ibarrier`, `MPI_Test`) go through `mpi::ffi` directly; everything else
//! uses rsmpi's safe API.

use super::role::{DistConfig, Role};
use super::wire::{Header, Kind, Msg};
use crate::dtype::DType;
use crate::error::{Error, Result};
use mpi::ffi;
use mpi::raw::AsRaw;
use mpi::topology::{Color, Communicator, SimpleCommunicator};
use mpi::traits::*;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Who is who in the job.
#[derive(Clone, Debug)]
pub struct Topology {
    pub world_rank: usize,
    pub world_size: usize,
    pub role: Role,
    /// World ranks of the workers, in worker-rank order.
    pub workers: Vec<usize>,
    /// World ranks of the servers, in server-rank order.
    pub servers: Vec<usize>,
}

impl Topology {
    /// This process's rank among the processes of its role.
    pub fn rank_in_role(&self) -> usize {
        let list = match self.role {
            Role::Server => &self.servers,
            _ => &self.workers,
        };
        list.iter().position(|&r| r == self.world_rank).unwrap_or(0)
    }
    /// The worker rank of a world rank, if it is a worker.
    pub fn worker_rank_of(&self, world_rank: usize) -> Option<usize> {
        self.workers.iter().position(|&r| r == world_rank)
    }

    /// A process of the job as messages name it: "worker 1 (process 2 of 3)".
    pub fn describe(&self, world_rank: usize) -> String {
        let (role, rank) = match self.worker_rank_of(world_rank) {
            Some(r) => ("worker", r),
            None => match self.servers.iter().position(|&r| r == world_rank) {
                Some(r) => ("server", r),
                None => ("process", world_rank),
            },
        };
        format!("{role} {rank} (process {world_rank} of {})", self.world_size)
    }

    /// This process as messages name it.
    pub fn me(&self) -> String {
        self.describe(self.world_rank)
    }

    /// The world ranks a ps-lite node id names: the groups 1 (scheduler: none in an MPI job),
    /// 2 (servers) and 4 (workers) and their sums, or one process, `8 + 2r` for server r and
    /// `9 + 2r` for worker r. `None` for an id that names nothing of this job.
    pub fn node_group(&self, node_id: i32) -> Option<Vec<usize>> {
        match node_id {
            1..=7 => {
                let mut ranks = Vec::new();
                if node_id & 2 != 0 {
                    ranks.extend(&self.servers);
                }
                if node_id & 4 != 0 {
                    ranks.extend(&self.workers);
                }
                Some(ranks)
            }
            8.. => {
                let r = ((node_id - 8) / 2) as usize;
                let group = if node_id % 2 == 0 { &self.servers } else { &self.workers };
                group.get(r).map(|&w| vec![w])
            }
            _ => None,
        }
    }
}

/// A message from another process that is not a reply: a request for this process's server.
pub struct Incoming {
    /// World rank of the sender.
    pub src: usize,
    pub msg: Msg,
}

/// What a collective's waiter gets: its result, or why it can never complete.
type Reply<T> = mpsc::Sender<std::result::Result<T, String>>;

enum Cmd {
    Send {
        dest: usize,
        buf: Vec<u8>,
    },
    Allreduce {
        buf: Vec<u8>,
        dtype: DType,
        reply: Reply<Vec<u8>>,
    },
    /// An allreduce between caller-owned buffers (see [`Transport::allreduce_in_place`]).
    AllreduceInPlace {
        send: crate::util::SendPtr,
        recv: crate::util::SendPtr,
        count: usize,
        dtype: DType,
        reply: Reply<Vec<u8>>,
    },
    Barrier {
        reply: Reply<()>,
    },
    /// Tells every other worker that this one leaves (see [`Transport::leave`]); with a reply,
    /// that reply comes once every other worker has left too (the exit barrier).
    Leave {
        exit_barrier: Option<Reply<()>>,
    },
    Finalize {
        abort: bool,
        done: mpsc::Sender<()>,
    },
}

type Waiters = Arc<Mutex<HashMap<u64, mpsc::Sender<Msg>>>>;

/// The process's connection to the job (one per process, for its whole life).
pub struct Transport {
    pub topo: Topology,
    cmds: Mutex<mpsc::Sender<Cmd>>,
    waiters: Waiters,
    next_id: AtomicU64,
    inbox: Mutex<mpsc::Receiver<Incoming>>,
    /// A wait of this process failed: at exit the job is aborted rather than finalised.
    broken: Arc<AtomicBool>,
    thread: std::thread::Thread,
    pub timeout: Duration,
    /// The process that started MPI (a forked child inherits the exit hook, not the job).
    pid: u32,
}

/// The exit barrier entered with [`Transport::leave`].
pub struct BarrierWait(mpsc::Receiver<std::result::Result<(), String>>);

/// A request on its way: [`Transport::wait`] gives its reply.
pub struct Pending {
    id: u64,
    rx: mpsc::Receiver<Msg>,
    /// World rank of the process that answers.
    pub dest: usize,
}

static TRANSPORT: OnceLock<std::result::Result<Transport, Error>> = OnceLock::new();

impl Transport {
    /// The process's transport, starting MPI on first use. `role` must be this process's role;
    /// the job's counts are checked against `cfg`.
    pub fn get(role: Role, cfg: &DistConfig) -> Result<&'static Transport> {
        let t = TRANSPORT.get_or_init(|| Transport::start(role, cfg));
        let t = t.as_ref().map_err(Clone::clone)?;
        if let Some(w) = cfg.num_worker
            && w != t.topo.workers.len()
        {
            return Err(Error::invalid(format!(
                "DMLC_NUM_WORKER={w}, but the MPI job has {} worker process(es) (of {} in all): \
                 launch W workers with `mxrt-launch -n W -s S prog` or set DMLC_NUM_WORKER to match",
                t.topo.workers.len(),
                t.topo.world_size
            )));
        }
        if let Some(s) = cfg.num_server
            && s != t.topo.servers.len()
        {
            return Err(Error::invalid(format!(
                "DMLC_NUM_SERVER={s}, but the MPI job has {} server process(es) (of {} in all): \
                 launch S servers with `mxrt-launch -n W -s S prog` or set DMLC_NUM_SERVER to match",
                t.topo.servers.len(),
                t.topo.world_size
            )));
        }
        Ok(t)
    }

    fn start(role: Role, cfg: &DistConfig) -> Result<Transport> {
        let (cmd_tx, cmd_rx) = mpsc::channel::<Cmd>();
        let (inbox_tx, inbox_rx) = mpsc::channel::<Incoming>();
        let (ready_tx, ready_rx) = mpsc::channel::<Result<Topology>>();
        let waiters: Waiters = Arc::default();
        let broken = Arc::new(AtomicBool::new(false));
        let w = waiters.clone();
        let b = broken.clone();
        let handle = std::thread::Builder::new()
            .name("mxrt-dist-comm".into())
            .spawn(move || comm_thread(role, cmd_rx, inbox_tx, w, b, ready_tx))
            .map_err(|e| Error::internal(format!("cannot start the MPI thread: {e}")))?;
        let topo = ready_rx
            .recv()
            .map_err(|_| Error::internal("the MPI thread ended while starting MPI"))??;
        register_exit_hook()?;
        install_abort_on_panic();
        Ok(Transport {
            topo,
            cmds: Mutex::new(cmd_tx),
            waiters,
            next_id: AtomicU64::new(1),
            inbox: Mutex::new(inbox_rx),
            broken,
            thread: handle.thread().clone(),
            timeout: cfg.timeout,
            pid: std::process::id(),
        })
    }

    fn post(&self, cmd: Cmd) -> Result<()> {
        self.cmds
            .lock()
            .send(cmd)
            .map_err(|_| Error::distributed("the MPI thread has stopped"))?;
        self.thread.unpark();
        Ok(())
    }

    /// Sends a message that needs no answer (a server's reply).
    pub fn send(&self, dest: usize, buf: Vec<u8>) -> Result<()> {
        self.post(Cmd::Send { dest, buf })
    }

    /// Sends a request; its reply is waited for with [`wait`](Self::wait).
    pub fn request(&self, dest: usize, mut buf: Vec<u8>) -> Result<Pending> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        Header::set_id(&mut buf, id);
        let (tx, rx) = mpsc::channel();
        self.waiters.lock().insert(id, tx);
        if let Err(e) = self.post(Cmd::Send { dest, buf }) {
            self.waiters.lock().remove(&id);
            return Err(e);
        }
        Ok(Pending { id, rx, dest })
    }

    /// The deadline of a worker's wait: a little longer than the servers' own, so that a server
    /// that gives up on a round can say why first.
    pub fn worker_deadline(&self) -> Duration {
        self.timeout + (self.timeout / 4).max(Duration::from_secs(1))
    }

    /// Waits for the reply to `p`. A `Fail` reply is an error with the server's message; no
    /// reply within the deadline is an error naming `what` (and marks the job broken).
    pub fn wait(&self, p: Pending, what: &dyn Fn() -> String) -> Result<Msg> {
        let deadline = self.worker_deadline();
        match p.rx.recv_timeout(deadline) {
            Ok(m) if m.header.kind == Kind::Fail => Err(Error::distributed(m.text())),
            Ok(m) => Ok(m),
            Err(_) => {
                self.waiters.lock().remove(&p.id);
                self.mark_broken();
                Err(Error::distributed(format!(
                    "{}: no answer from process {} within {:.1} s (MXRT_DIST_TIMEOUT_S); the job \
                     is broken and will be aborted at exit",
                    what(),
                    p.dest,
                    deadline.as_secs_f64()
                )))
            }
        }
    }

    /// Waits for a collective's result: an error when the communication thread says it can never
    /// complete (a worker left) or when the deadline passes. Either marks the job broken: the
    /// collective may stay in flight, so the process must not finalise MPI.
    fn collective<T>(
        &self,
        rx: mpsc::Receiver<std::result::Result<T, String>>,
        what: &dyn Fn() -> String,
        timed_out: &dyn Fn() -> String,
    ) -> Result<T> {
        match rx.recv_timeout(self.worker_deadline()) {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(why)) => {
                self.mark_broken();
                Err(Error::distributed(format!(
                    "{}: {why}; the job is broken and will be aborted at exit",
                    what()
                )))
            }
            Err(_) => {
                self.mark_broken();
                Err(Error::distributed(format!(
                    "{}: {}; the job is broken and will be aborted at exit",
                    what(),
                    timed_out()
                )))
            }
        }
    }

    fn allreduce_timed_out(&self) -> String {
        format!(
            "the other {} worker(s) did not join the allreduce within {:.1} s \
             (MXRT_DIST_TIMEOUT_S): uneven iterations, or a worker stopped",
            self.topo.workers.len() - 1,
            self.worker_deadline().as_secs_f64()
        )
    }

    /// Sums `buf` (elements of `dtype`) over all workers; every worker must call it for the same
    /// keys in the same order.
    pub fn allreduce(&self, buf: Vec<u8>, dtype: DType, what: &dyn Fn() -> String) -> Result<Vec<u8>> {
        let (tx, rx) = mpsc::channel();
        self.post(Cmd::Allreduce {
            buf,
            dtype,
            reply: tx,
        })?;
        self.collective(rx, what, &|| self.allreduce_timed_out())
    }

    /// Sums `count` elements of `dtype` at `send` over all workers into `recv`, without copying
    /// them. Returns once MPI is done with both buffers, or with an error after the deadline (or
    /// when a worker left), in which case MPI may still use them: the caller must then keep them
    /// alive for the rest of the process (the job is aborted at exit).
    ///
    /// # Safety
    /// `send` must be valid for reads and `recv` for writes of `count` elements of `dtype`
    /// (`send == recv` is not allowed), nothing else may write either while the call lasts, and
    /// after an error both must stay valid until the process ends.
    pub unsafe fn allreduce_in_place(
        &self,
        send: *const u8,
        recv: *mut u8,
        count: usize,
        dtype: DType,
        what: &dyn Fn() -> String,
    ) -> Result<()> {
        let (tx, rx) = mpsc::channel();
        self.post(Cmd::AllreduceInPlace {
            send: crate::util::SendPtr(send as *mut u8),
            recv: crate::util::SendPtr(recv),
            count,
            dtype,
            reply: tx,
        })?;
        self.collective(rx, what, &|| self.allreduce_timed_out()).map(drop)
    }

    /// The processes among `ranks` (world ranks) whose communication thread did not answer a
    /// ping within `within`. This process always counts as alive.
    pub fn unresponsive(&self, ranks: &[usize], within: Duration) -> Result<Vec<usize>> {
        let ping = Header::new(Kind::Ping);
        let mut pending = Vec::new();
        for &r in ranks.iter().filter(|&&r| r != self.topo.world_rank) {
            pending.push(self.request(r, ping.message(0))?);
        }
        let until = Instant::now() + within;
        let mut silent = Vec::new();
        for p in pending {
            let left = until.saturating_duration_since(Instant::now());
            if p.rx.recv_timeout(left).is_err() {
                self.waiters.lock().remove(&p.id);
                silent.push(p.dest);
            }
        }
        Ok(silent)
    }

    /// Waits until every worker has called it.
    pub fn barrier(&self) -> Result<()> {
        let (tx, rx) = mpsc::channel();
        self.post(Cmd::Barrier { reply: tx })?;
        self.collective(rx, &|| "barrier".to_owned(), &|| {
            format!(
                "not every one of the {} workers reached it within {:.1} s (MXRT_DIST_TIMEOUT_S)",
                self.topo.workers.len(),
                self.worker_deadline().as_secs_f64()
            )
        })
    }

    /// Tells every other worker that this one leaves: it starts no collective after those it
    /// started so far, so a collective of theirs that needs it fails at once with a message
    /// naming it. With `exit_barrier`, the returned wait ends once every other worker has left
    /// too: the exit barrier is these messages, not an MPI collective, so a leaving worker never
    /// starts a collective the others might not match.
    pub fn leave(&self, exit_barrier: bool) -> Result<Option<BarrierWait>> {
        let (tx, rx) = mpsc::channel();
        self.post(Cmd::Leave {
            exit_barrier: exit_barrier.then_some(tx),
        })?;
        Ok(exit_barrier.then_some(BarrierWait(rx)))
    }

    /// Waits until every other worker has left (see [`leave`](Self::leave)). After the deadline
    /// the job is broken: a worker that never leaves would keep `MPI_Finalize` waiting.
    pub fn finish_exit_barrier(&self, b: BarrierWait) -> Result<()> {
        b.0.recv_timeout(self.worker_deadline()).map_err(|_| {
            self.mark_broken();
            Error::distributed(format!(
                "exit barrier: not every one of the {} workers left the job within {:.1} s \
                 (MXRT_DIST_TIMEOUT_S); the job is broken and will be aborted at exit",
                self.topo.workers.len(),
                self.worker_deadline().as_secs_f64()
            ))
        })?
        .map_err(Error::distributed)
    }

    /// The next request for this process's server, waiting up to `timeout`.
    pub fn next_request(&self, timeout: Duration) -> Result<Option<Incoming>> {
        match self.inbox.lock().recv_timeout(timeout) {
            Ok(m) => Ok(Some(m)),
            Err(mpsc::RecvTimeoutError::Timeout) => Ok(None),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                Err(Error::distributed("the MPI thread has stopped"))
            }
        }
    }

    /// Records that a wait failed: at exit the job is aborted instead of finalised.
    pub fn mark_broken(&self) {
        self.broken.store(true, Ordering::SeqCst);
    }

    fn finalize(&self) {
        let (tx, rx) = mpsc::channel();
        let abort = self.broken.load(Ordering::SeqCst);
        if self.post(Cmd::Finalize { abort, done: tx }).is_ok() {
            // bounded: a finalisation stuck on a dead peer must not keep the process alive
            let _ = rx.recv_timeout(self.timeout.min(Duration::from_secs(60)));
        }
    }
}

/// glibc's exit hook that gets the exit status (not part of mxrt's C API, so kept out of the
/// generated header):
/// cbindgen:ignore
#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod glibc {
    unsafe extern "C" {
        /// `on_exit(3)`: like `atexit`, but the handler gets the status given to `exit` (or
        /// returned from `main`). The libc crate does not declare it.
        pub fn on_exit(
            func: extern "C" fn(libc::c_int, *mut libc::c_void),
            arg: *mut libc::c_void,
        ) -> libc::c_int;
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
extern "C" fn end_at_exit_with_status(status: libc::c_int, _arg: *mut libc::c_void) {
    end_at_exit(Some(status));
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
extern "C" fn end_at_exit_without_status() {
    end_at_exit(None);
}

/// Registers [`end_at_exit`] to run when the process exits, with the exit status where the C
/// library passes it on (glibc's `on_exit`).
fn register_exit_hook() -> Result<()> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: registering a plain `extern "C"` handler with glibc's on_exit has no
    // preconditions; its argument is unused (NULL).
    let rc = unsafe { glibc::on_exit(end_at_exit_with_status, std::ptr::null_mut()) };
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    // SAFETY: registering a plain `extern "C" fn()` with libc's atexit has no preconditions.
    let rc = unsafe { libc::atexit(end_at_exit_without_status) };
    if rc != 0 {
        return Err(Error::internal("cannot register MPI's finalisation at exit"));
    }
    Ok(())
}

/// How a process of a job leaves it, run at exit (`status`: the exit status, when known). A
/// non-zero status aborts the job at once: its other processes may be waiting for this one, and
/// `MPI_Finalize` would make this one wait for them. A zero status lets the process's stores
/// leave in order ([`super::before_finalize`]), then finalises MPI, unless a store could not
/// leave cleanly (a call or round still in progress, an error while leaving), which aborts too.
fn end_at_exit(status: Option<i32>) {
    let Some(Ok(t)) = TRANSPORT.get() else {
        return;
    };
    if std::process::id() != t.pid {
        return; // a child forked from a process of the job is no process of it
    }
    if let Some(status) = status.filter(|&s| s != 0) {
        eprintln!(
            "mxrt: {} exits with status {status}: aborting the distributed job (its other \
             processes would wait for this one)",
            t.topo.me()
        );
        abort_job(status);
    }
    if let Err(why) = super::before_finalize() {
        eprintln!("mxrt: {} exits {why}: aborting the distributed job", t.topo.me());
        abort_job(1);
    }
    t.finalize();
}

/// Ends the whole job at once: every process of it is killed by the MPI launcher, which exits
/// with a non-zero status (`code`'s low byte, or 1 where that is 0).
pub fn abort_job(code: i32) -> ! {
    let code = if code & 0xff == 0 { 1 } else { code & 0xff };
    // SAFETY: MPI is initialised (the hook is installed after MPI_Init_thread returned) and
    // MPI_Abort may be called from any thread of a process initialised with MPI_THREAD_MULTIPLE.
    unsafe { ffi::MPI_Abort(ffi::RSMPI_COMM_WORLD, code) };
    std::process::abort()
}

/// A panic on any thread of a process in a job aborts the job: unwinding into MPI's
/// finalisation while peers wait would hang every process.
fn install_abort_on_panic() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        previous(info);
        eprintln!("mxrt: a panic in a distributed job: aborting the job");
        abort_job(70);
    }));
}

/// A send or collective in flight with the buffers it uses.
struct InFlight {
    req: ffi::MPI_Request,
    _send: Box<[u8]>,
    done: Done,
}

enum Done {
    Send,
    /// The collective numbered `seq` (from 1, in the order this worker started them); its reply
    /// is taken when the waiter is told it can never complete (the buffers stay until the end).
    Allreduce {
        seq: u64,
        recv: Box<[u8]>,
        reply: Option<Reply<Vec<u8>>>,
    },
    Barrier {
        seq: u64,
        reply: Option<Reply<()>>,
    },
}

impl Done {
    /// The collective's number and whether it is a barrier (`None` for a send).
    fn collective(&self) -> Option<(u64, bool)> {
        match self {
            Done::Send => None,
            Done::Allreduce { seq, .. } => Some((*seq, false)),
            Done::Barrier { seq, .. } => Some((*seq, true)),
        }
    }

    /// Tells the waiter that the collective can never complete.
    fn fail(&mut self, why: &str) {
        match self {
            Done::Send => {}
            Done::Allreduce { reply, .. } => {
                if let Some(r) = reply.take() {
                    let _ = r.send(Err(why.to_owned()));
                }
            }
            Done::Barrier { reply, .. } => {
                if let Some(r) = reply.take() {
                    let _ = r.send(Err(why.to_owned()));
                }
            }
        }
    }
}

/// A worker that left the job ([`Kind::Leave`]): its world rank and how many collectives it
/// started.
struct Left {
    rank: usize,
    started: u64,
}

/// Why this worker's collective number `seq` can never complete, if a worker that left did not
/// start it.
fn never_completes(left: &[Left], seq: u64, barrier: bool, topo: &Topology) -> Option<String> {
    let l = left.iter().find(|l| l.started < seq)?;
    Some(format!(
        "{} has left the job (it freed its store or its process ended) after {} collective \
         operation(s) among the workers, so this worker's collective number {seq} ({}) can never \
         complete (uneven iterations, or a worker that ended early)",
        topo.describe(l.rank),
        l.started,
        if barrier { "a barrier" } else { "an allreduce" }
    ))
}

fn mpi_datatype(dtype: DType) -> Option<ffi::MPI_Datatype> {
    // SAFETY: reading rsmpi's exported constant handles, which MPI_Init set up.
    unsafe {
        Some(match dtype {
            DType::F32 => ffi::RSMPI_FLOAT,
            DType::F64 => ffi::RSMPI_DOUBLE,
            DType::I8 => ffi::RSMPI_INT8_T,
            DType::I16 => ffi::RSMPI_INT16_T,
            DType::I32 => ffi::RSMPI_INT32_T,
            DType::I64 => ffi::RSMPI_INT64_T,
            DType::U8 | DType::Bool => ffi::RSMPI_UINT8_T,
            DType::U16 => ffi::RSMPI_UINT16_T,
            DType::U32 => ffi::RSMPI_UINT32_T,
            DType::U64 => ffi::RSMPI_UINT64_T,
            DType::F16 | DType::BF16 => return None,
        })
    }
}

/// Starts a sum over the workers of `count` elements of `dtype` from `send` into `recv`.
///
/// # Safety
/// Both buffers must hold `count` elements and stay valid, and `recv` unused by anything else,
/// until `MPI_Test` reports the returned request complete.
unsafe fn start_allreduce(
    send: *const u8,
    recv: *mut u8,
    count: usize,
    dtype: DType,
    workers: &SimpleCommunicator,
) -> ffi::MPI_Request {
    // half-precision values are widened by the worker before they get here
    let dt = mpi_datatype(dtype).expect("allreduce of a dtype MPI cannot sum");
    // booleans sum as the local stores sum them: any true makes true (a byte stays 0 or 1)
    // SAFETY: reading rsmpi's exported constant handles, which MPI_Init set up.
    let op = unsafe { if dtype == DType::Bool { ffi::RSMPI_MAX } else { ffi::RSMPI_SUM } };
    let mut req = std::mem::MaybeUninit::<ffi::MPI_Request>::uninit();
    // SAFETY: per the contract; `workers` is a live communicator every worker joins with the same
    // sequence of collectives.
    unsafe {
        ffi::MPI_Iallreduce(
            send as *const _,
            recv as *mut _,
            count as i32,
            dt,
            op,
            workers.as_raw(),
            req.as_mut_ptr(),
        );
        // MPI_Iallreduce wrote the request handle
        req.assume_init()
    }
}

/// Starts sending `buf` to the world rank `dest`; the returned entry owns the buffer until the
/// send completes.
fn start_send(world: &SimpleCommunicator, dest: usize, buf: Vec<u8>) -> InFlight {
    let buf = buf.into_boxed_slice();
    let mut req = std::mem::MaybeUninit::<ffi::MPI_Request>::uninit();
    // SAFETY: `buf` is an owned heap buffer that the returned entry keeps (its address does not
    // move) until MPI_Test reports the send complete; `dest` is a rank of `world`.
    unsafe {
        ffi::MPI_Isend(
            buf.as_ptr() as *const _,
            buf.len() as i32,
            ffi::RSMPI_UINT8_T,
            dest as i32,
            0,
            world.as_raw(),
            req.as_mut_ptr(),
        )
    };
    // SAFETY: MPI_Isend wrote the request handle.
    let req = unsafe { req.assume_init() };
    InFlight {
        req,
        _send: buf,
        done: Done::Send,
    }
}

fn comm_thread(
    role: Role,
    cmds: mpsc::Receiver<Cmd>,
    inbox: mpsc::Sender<Incoming>,
    waiters: Waiters,
    broken: Arc<AtomicBool>,
    ready: mpsc::Sender<Result<Topology>>,
) {
    let Some((universe, _level)) = mpi::initialize_with_threading(mpi::Threading::Multiple) else {
        let _ = ready.send(Err(Error::invalid(
            "MPI was already initialised by this process outside mxrt",
        )));
        return;
    };
    let world = universe.world();
    let size = world.size() as usize;
    let mut roles = vec![0i32; size];
    world.all_gather_into(&role.code(), &mut roles[..]);
    let of = |r: Role| -> Vec<usize> {
        (0..size).filter(|&i| roles[i] == r.code()).collect()
    };
    let topo = Topology {
        world_rank: world.rank() as usize,
        world_size: size,
        role,
        workers: of(Role::Worker),
        servers: of(Role::Server),
    };
    let workers_comm: Option<SimpleCommunicator> =
        world.split_by_color(Color::with_value(role.code()));
    let Some(workers_comm) = workers_comm else {
        let _ = ready.send(Err(Error::internal("MPI_Comm_split gave no communicator")));
        return;
    };
    if topo.workers.is_empty() {
        let _ = ready.send(Err(Error::invalid(
            "the MPI job has no worker process (DMLC_ROLE unset or 'worker')",
        )));
        return;
    }
    if ready.send(Ok(topo.clone())).is_err() {
        return;
    }

    let mut inflight: Vec<InFlight> = Vec::new();
    // collectives this worker started, and the workers that left (with theirs)
    let mut started: u64 = 0;
    let mut left: Vec<Left> = Vec::new();
    let mut exit_barrier: Option<Reply<()>> = None;
    let others = topo.workers.len().saturating_sub(1);
    let mut last_activity = Instant::now();
    let finish: Option<(bool, mpsc::Sender<()>)> = loop {
        let mut busy = false;
        // 1. what other threads ask for
        let idle_for = last_activity.elapsed();
        let next = if !inflight.is_empty() || idle_for < Duration::from_millis(2) {
            cmds.try_recv().map_err(|e| matches!(e, mpsc::TryRecvError::Disconnected))
        } else {
            // nothing in flight for a while: nap briefly (a posted command unparks the thread)
            std::thread::park_timeout(Duration::from_micros(if idle_for < Duration::from_millis(50) { 20 } else { 200 }));
            cmds.try_recv().map_err(|e| matches!(e, mpsc::TryRecvError::Disconnected))
        };
        // a collective that a worker that left will not join is refused before it reaches MPI
        match next {
            Ok(Cmd::Send { dest, buf }) => {
                busy = true;
                inflight.push(start_send(&world, dest, buf));
            }
            Ok(Cmd::Allreduce { buf, dtype, reply }) => {
                busy = true;
                if let Some(why) = never_completes(&left, started + 1, false, &topo) {
                    let _ = reply.send(Err(why));
                } else {
                    started += 1;
                    let send = buf.into_boxed_slice();
                    let mut recv = vec![0u8; send.len()].into_boxed_slice();
                    let count = send.len() / dtype.size();
                    // SAFETY: both buffers are owned heap buffers of `count` elements, kept in
                    // `inflight` (their addresses do not move) until MPI_Test reports completion.
                    let req = unsafe {
                        start_allreduce(send.as_ptr(), recv.as_mut_ptr(), count, dtype, &workers_comm)
                    };
                    inflight.push(InFlight {
                        req,
                        _send: send,
                        done: Done::Allreduce {
                            seq: started,
                            recv,
                            reply: Some(reply),
                        },
                    });
                }
            }
            Ok(Cmd::AllreduceInPlace {
                send,
                recv,
                count,
                dtype,
                reply,
            }) => {
                busy = true;
                if let Some(why) = never_completes(&left, started + 1, false, &topo) {
                    let _ = reply.send(Err(why));
                } else {
                    started += 1;
                    // SAFETY: the caller of `allreduce_in_place` keeps both buffers valid for
                    // `count` elements until the reply (or, after an error, for good).
                    let req = unsafe { start_allreduce(send.0, recv.0, count, dtype, &workers_comm) };
                    inflight.push(InFlight {
                        req,
                        _send: Box::new([]),
                        done: Done::Allreduce {
                            seq: started,
                            recv: Box::new([]),
                            reply: Some(reply),
                        },
                    });
                }
            }
            Ok(Cmd::Barrier { reply }) => {
                busy = true;
                if let Some(why) = never_completes(&left, started + 1, true, &topo) {
                    let _ = reply.send(Err(why));
                } else {
                    started += 1;
                    let mut req = std::mem::MaybeUninit::<ffi::MPI_Request>::uninit();
                    // SAFETY: `workers_comm` is a live communicator; the request is tested below.
                    unsafe { ffi::MPI_Ibarrier(workers_comm.as_raw(), req.as_mut_ptr()) };
                    // SAFETY: MPI_Ibarrier wrote the request handle.
                    let req = unsafe { req.assume_init() };
                    inflight.push(InFlight {
                        req,
                        _send: Box::new([]),
                        done: Done::Barrier {
                            seq: started,
                            reply: Some(reply),
                        },
                    });
                }
            }
            Ok(Cmd::Leave { exit_barrier: reply }) => {
                busy = true;
                let h = Header {
                    key: started as i64,
                    ..Header::new(Kind::Leave)
                };
                for &w in topo.workers.iter().filter(|&&w| w != topo.world_rank) {
                    inflight.push(start_send(&world, w, h.message(0)));
                }
                exit_barrier = reply;
            }
            Ok(Cmd::Finalize { abort, done }) => break Some((abort, done)),
            Err(true) => break None,
            Err(false) => {}
        }
        // 2. sends and collectives that completed (a collective whose waiter was told it can
        // never complete is left alone: testing it could only report the peers' mismatch)
        let mut i = 0;
        while i < inflight.len() {
            let orphaned = match &inflight[i].done {
                Done::Allreduce { reply, .. } => reply.is_none(),
                Done::Barrier { reply, .. } => reply.is_none(),
                Done::Send => false,
            };
            let mut flag = 0;
            if !orphaned {
                // SAFETY: the request is an active request of this thread's MPI calls.
                unsafe { ffi::MPI_Test(&mut inflight[i].req, &mut flag, ffi::RSMPI_STATUS_IGNORE) };
            }
            if flag != 0 {
                busy = true;
                match inflight.swap_remove(i).done {
                    Done::Send => {}
                    Done::Allreduce { recv, reply, .. } => {
                        if let Some(r) = reply {
                            let _ = r.send(Ok(recv.into_vec()));
                        }
                    }
                    Done::Barrier { reply, .. } => {
                        if let Some(r) = reply {
                            let _ = r.send(Ok(()));
                        }
                    }
                }
            } else {
                i += 1;
            }
        }
        // 3. what arrived
        while let Some(probed) = world.any_process().immediate_matched_probe() {
            busy = true;
            let (buf, status) = probed.matched_receive_vec::<u8>();
            let src = status.source_rank() as usize;
            match Msg::decode(buf) {
                Ok(msg) if msg.header.kind == Kind::Ping => {
                    // answered here, so a process whose other threads are busy still counts
                    // as alive; only one that stopped or hangs as a whole does not
                    let pong = Header::reply(Kind::Pong, &msg.header).message(0);
                    inflight.push(start_send(&world, src, pong));
                }
                Ok(msg) if msg.header.kind == Kind::Leave => {
                    if !left.iter().any(|l| l.rank == src) {
                        left.push(Left {
                            rank: src,
                            started: msg.header.key.max(0) as u64,
                        });
                    }
                    // collectives in flight that the leaver did not start can never complete
                    for f in &mut inflight {
                        if let Some((seq, barrier)) = f.done.collective()
                            && let Some(why) = never_completes(&left, seq, barrier, &topo)
                        {
                            f.done.fail(&why);
                            // the request stays in MPI: the process must not finalise
                            broken.store(true, Ordering::SeqCst);
                        }
                    }
                }
                Ok(msg) if msg.header.kind.is_reply() => {
                    if let Some(tx) = waiters.lock().remove(&msg.header.id) {
                        let _ = tx.send(msg);
                    }
                }
                Ok(msg) => {
                    let _ = inbox.send(Incoming { src, msg });
                }
                Err(e) => eprintln!("mxrt: dropped a message from process {src}: {e}"),
            }
        }
        if left.len() >= others
            && let Some(r) = exit_barrier.take()
        {
            let _ = r.send(Ok(()));
        }
        if busy {
            last_activity = Instant::now();
        } else if last_activity.elapsed() < Duration::from_millis(2) {
            std::thread::yield_now();
        }
    };
    let Some((abort, done)) = finish else {
        return; // the transport is gone without finalising: the process is exiting anyway
    };
    if abort || broken.load(Ordering::SeqCst) {
        eprintln!("mxrt: a wait of this process failed: aborting the MPI job");
        abort_job(1);
    }
    // let the last sends (Done and Leave messages, replies) complete before finalising
    let until = Instant::now() + Duration::from_secs(10);
    while !inflight.is_empty() && Instant::now() < until {
        inflight.retain_mut(|f| {
            let mut flag = 0;
            // SAFETY: as above.
            unsafe { ffi::MPI_Test(&mut f.req, &mut flag, ffi::RSMPI_STATUS_IGNORE) };
            flag == 0
        });
        // keep receiving so that peers' sends to this process complete too
        while let Some(probed) = world.any_process().immediate_matched_probe() {
            let _ = probed.matched_receive_vec::<u8>();
        }
        std::thread::yield_now();
    }
    if !inflight.is_empty() {
        eprintln!("mxrt: sends to other processes did not complete: aborting the MPI job");
        abort_job(1);
    }
    drop(workers_comm);
    drop(universe); // MPI_Finalize, on the thread that initialised MPI
    let _ = done.send(());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topo() -> Topology {
        // one server first, as mxrt-launch starts them, then two workers
        Topology {
            world_rank: 1,
            world_size: 3,
            role: Role::Worker,
            workers: vec![1, 2],
            servers: vec![0],
        }
    }

    #[test]
    fn processes_are_named_by_role_and_rank() {
        let t = topo();
        assert_eq!(t.describe(0), "server 0 (process 0 of 3)");
        assert_eq!(t.describe(2), "worker 1 (process 2 of 3)");
        assert_eq!(t.me(), "worker 0 (process 1 of 3)");
    }

    #[test]
    fn a_collective_the_leaver_did_not_start_never_completes() {
        let t = topo();
        assert!(never_completes(&[], 1, false, &t).is_none());
        let left = [Left { rank: 2, started: 3 }];
        // the leaver started collectives 1..=3: those complete
        for seq in 1..=3 {
            assert!(never_completes(&left, seq, false, &t).is_none(), "{seq}");
        }
        let why = never_completes(&left, 4, false, &t).expect("the 4th never completes");
        assert!(why.contains("worker 1 (process 2 of 3) has left the job"), "{why}");
        assert!(why.contains("after 3 collective operation(s)"), "{why}");
        assert!(why.contains("collective number 4 (an allreduce)"), "{why}");
        // a barrier after the leaver's last collective does not complete either: its exit
        // barrier is messages, not a collective
        let why = never_completes(&left, 4, true, &t).expect("a barrier never completes");
        assert!(why.contains("(a barrier)"), "{why}");
    }
}
