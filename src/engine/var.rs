//! Engine variables: the per-variable FIFO of pending reads and writes.
//!
//! Each variable grants access in push order. Adjacent reads run together; a write waits until
//! every earlier read and write has finished; reads queued behind a write wait for it. Completing a
//! write bumps the version and releases the run of reads behind it (or the next write).
//!
//! The queue logic is `var_queue::VarQueue` (model-checked with loom); here it is guarded by a
//! small mutex per variable, held only to queue or release, never while an operation runs.
//!
//! Lifetime: ops do not count references to their variables (a worker dropping one reference per
//! variable per op would pull each variable's cache line back from the pushing thread once more).
//! Instead a variable holds one reference to itself while it is busy, i.e. while any access is
//! granted or queued: taken when an access arrives at an idle variable, given back when the last
//! one finishes. The pusher's own reference covers the op until it is queued, so a variable
//! outlives every op queued on it, and the reference count changes only on the line the queue
//! operation holds anyway, and not at all while the variable stays busy.

use super::exception::ExceptionRef;
use super::opr::{INPUT_ERROR_HINT, OprRef, QueuedOp};
use super::var_queue::VarQueue;
use parking_lot::Mutex;
use smallvec::SmallVec;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A dependency variable. Cloning gives another reference to the same variable.
#[derive(Clone)]
pub struct Var(pub(crate) Arc<VarInner>);

pub(crate) struct VarInner {
    state: Mutex<VarState>,
    /// Set while `state.exception` may hold an unreported error: lets ops skip the lock.
    has_exception: AtomicBool,
}

#[derive(Default)]
struct VarState {
    /// The queue of pending accesses (the state machine itself, shared with the loom model).
    queue: VarQueue<QueuedOp>,
    /// The error of the last failed write, until a wait reports it.
    exception: Option<ExceptionRef>,
}

/// Up to this many variables, [`has_repeats`] compares every pair instead of sorting.
const PAIRWISE_REPEATS: usize = 16;

/// True if a variable appears twice among an op's reads and writes (as two reads, two writes, or
/// a read and a write).
pub(crate) fn has_repeats(const_vars: &[Var], mutable_vars: &[Var]) -> bool {
    let n = const_vars.len() + mutable_vars.len();
    if n <= 1 {
        return false;
    }
    let all = || const_vars.iter().chain(mutable_vars).map(Var::addr);
    if n <= PAIRWISE_REPEATS {
        let addrs: SmallVec<[usize; PAIRWISE_REPEATS]> = all().collect();
        return (1..n).any(|i| addrs[..i].contains(&addrs[i]));
    }
    let mut addrs: Vec<usize> = all().collect();
    addrs.sort_unstable();
    addrs.windows(2).any(|w| w[0] == w[1])
}

/// Queues `op`'s reads of `const_vars` and writes of `mutable_vars` (distinct variables) and
/// returns how many were granted at once. The caller's references keep the variables alive until
/// then; from then on each holds itself while the op is queued on it.
///
/// An op with several variables queues on all of them while holding `push_lock`, the engine's
/// lock for such pushes, so that two ops pushed concurrently from different threads queue in the
/// same order on every variable they share. Appending variable by variable without it lets them
/// queue in opposite orders on two variables, and each would wait for the other forever (found by
/// the loom model in `var_queue.rs`; MXNet's engine has that race for pushes from several
/// threads). An op with one variable cannot take part in such a cycle and skips the lock. (Locking
/// all of an op's variables at once in address order would avoid the cycle too, but its sort and
/// held locks cost more than one lock per push.)
///
/// # Safety
/// `op` waits for exactly these accesses: its `wait` count holds one per variable (plus the
/// caller's), the caller's reference goes to that count afterwards, and `op` is not queued on
/// them already (see [`QueuedOp::of`]).
pub(crate) unsafe fn append_all(
    op: &OprRef,
    const_vars: &[Var],
    mutable_vars: &[Var],
    push_lock: &Mutex<()>,
) -> usize {
    match (const_vars, mutable_vars) {
        ([], []) => 0,
        // SAFETY (each `queue_locked` below): one access of `op`'s, queued once (this fn's
        // contract)
        ([v], []) => usize::from(unsafe { queue_locked(&mut v.0.lock(), v, false, op) }),
        ([], [v]) => usize::from(unsafe { queue_locked(&mut v.0.lock(), v, true, op) }),
        _ => {
            // each lock below waits for its line in turn: start fetching them all first
            for v in const_vars.iter().chain(mutable_vars) {
                v.prefetch();
            }
            let _push = push_lock.lock();
            let reads = const_vars.iter().map(|v| (v, false));
            let writes = mutable_vars.iter().map(|v| (v, true));
            reads
                .chain(writes)
                .map(|(v, write)| {
                    usize::from(unsafe { queue_locked(&mut v.0.lock(), v, write, op) })
                })
                .sum()
        }
    }
}

/// Queues one access of `op` on `var`, whose locked state is `state`; true if granted at once.
///
/// # Safety
/// As [`append_all`], for this one access.
unsafe fn queue_locked(state: &mut VarState, var: &Var, write: bool, op: &OprRef) -> bool {
    if state.queue.is_idle() {
        var.pin();
    }
    // SAFETY: `op` waits for this access (this fn's contract); the queue makes one entry for it.
    let entry = || unsafe { QueuedOp::of(op) };
    let granted = if write {
        state.queue.append_write(entry)
    } else {
        state.queue.append_read(entry)
    };
    if granted && var.0.has_exception.load(Ordering::Relaxed) {
        op.set_error_flag(INPUT_ERROR_HINT);
    }
    granted
}

impl VarInner {
    /// Locks the state. A variable is locked for a few dozen instructions at a time, but a pusher
    /// and a worker busy on the same variable lock it for every op, and when both poll the lock
    /// they pass its cache line back and forth on every step. So on contention the caller backs
    /// off without touching the lock ([`idle::VAR_LOCK_SPIN`](super::idle::VAR_LOCK_SPIN)),
    /// which lets the holder run several ops in a row with the line in its cache, and only then
    /// waits in parking_lot's usual way (polling the lock instead keeps pulling the line away;
    /// see docs/performance.md).
    fn lock(&self) -> parking_lot::MutexGuard<'_, VarState> {
        if let Some(g) = self.state.try_lock() {
            return g;
        }
        let mut backoff = super::idle::VAR_LOCK_SPIN.backoff();
        while backoff.snooze() {
            if let Some(g) = self.state.try_lock() {
                return g;
            }
        }
        self.state.lock()
    }
}

/// Ops granted an access by a release (each may wait for others); usually none or one.
pub(crate) type Ready = SmallVec<[QueuedOp; 4]>;

impl Var {
    pub fn new() -> Self {
        Var(Arc::new(VarInner {
            state: Mutex::new(VarState::default()),
            has_exception: AtomicBool::new(false),
        }))
    }

    /// The shared state, for handing the variable to C as a handle.
    pub(crate) fn into_inner(self) -> Arc<VarInner> {
        self.0
    }
    /// The shared state, borrowed (to recognise a handle as this variable's).
    pub(crate) fn inner(&self) -> &Arc<VarInner> {
        &self.0
    }
    pub(crate) fn from_inner(inner: Arc<VarInner>) -> Self {
        Var(inner)
    }

    /// Number of completed writes to this variable.
    pub fn version(&self) -> u64 {
        self.0.lock().queue.version()
    }

    /// Identity of the variable (for deduplication and ordering).
    pub(crate) fn addr(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }

    pub fn same_as(&self, other: &Var) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Starts bringing the variable's line (reference counts, lock and queue state) into this
    /// core's cache for writing. Each lock is a locked instruction, which waits for its line
    /// before the next one can start; prefetching the lines of all of an op's variables first lets
    /// their transfers overlap.
    #[inline]
    pub(crate) fn prefetch(&self) {
        // the allocation starts with Arc's two counters, 16 bytes before the value
        crate::util::prefetch_write(Arc::as_ptr(&self.0).cast::<u8>().wrapping_sub(16));
    }

    /// Takes the reference a busy variable holds to itself (see the module docs).
    fn pin(&self) {
        std::mem::forget(self.clone());
    }

    /// Gives back the reference taken when the variable became busy: the variable may be freed
    /// now, so the caller must not touch it afterwards, and must not hold its lock.
    ///
    /// # Safety
    /// `inner` is a variable whose queue became idle under the lock just released.
    unsafe fn unpin(inner: *const VarInner) {
        // SAFETY: per the contract the hold's reference is still counted; this gives it back.
        unsafe { Arc::decrement_strong_count(inner) };
    }

    /// Grants a read or write at once if nothing is running or queued that it would have to wait
    /// for; never queues.
    pub(crate) fn try_grant_now(&self, write: bool) -> bool {
        let mut s = self.0.lock();
        let idle = s.queue.is_idle();
        let granted = s.queue.try_grant_now(write);
        if granted && idle {
            self.pin();
        }
        granted
    }

    /// True if no other reference to the variable exists (so no op can be queued on it).
    pub(crate) fn is_unshared(&self) -> bool {
        Arc::strong_count(&self.0) == 1
    }

    /// A granted read finished; the next write may start. The variable may be freed by this
    /// call (when the caller holds no reference of its own).
    ///
    /// # Safety
    /// A read of this variable was granted (queued and granted, or `try_grant_now`) and this ends
    /// it, once: the variable gives back its hold on itself when it becomes idle, and an
    /// unbalanced call would give back a reference it never took.
    pub(crate) unsafe fn complete_read(&self, ready: &mut Ready) {
        self.release(None, ready, VarQueue::complete_read);
    }

    /// A granted write finished: bump the version, record its error (if any), and release the
    /// reads behind it or the next write. The variable may be freed by this call (when the
    /// caller holds no reference of its own).
    ///
    /// # Safety
    /// As [`complete_read`](Self::complete_read), for a granted write.
    pub(crate) unsafe fn complete_write(
        &self,
        exception: Option<&ExceptionRef>,
        ready: &mut Ready,
    ) {
        self.release(exception, ready, VarQueue::complete_write);
    }

    /// Ends a granted access with `step` under the lock (recording `exception` first), flags the
    /// ops it grants if the variable carries an error, and gives back the variable's hold on
    /// itself if nothing is left queued.
    fn release(
        &self,
        exception: Option<&ExceptionRef>,
        ready: &mut Ready,
        step: impl FnOnce(&mut VarQueue<QueuedOp>, &mut Ready),
    ) {
        let inner = Arc::as_ptr(&self.0);
        let mut s = self.0.lock();
        if let Some(e) = exception {
            s.exception = Some(e.clone());
            self.0.has_exception.store(true, Ordering::Release);
        }
        let before = ready.len();
        step(&mut s.queue, ready);
        self.hint_input_error(&ready[before..]);
        let idle = s.queue.is_idle();
        drop(s);
        if idle {
            // SAFETY: the variable was busy (the access ending was granted), so pinned, and is
            // idle now.
            unsafe { Self::unpin(inner) };
        }
    }

    /// Tells the ops just granted an access (under the lock) whether this variable carries an
    /// error, which they must then look at when they start.
    fn hint_input_error(&self, granted: &[QueuedOp]) {
        if !granted.is_empty() && self.0.has_exception.load(Ordering::Relaxed) {
            granted.iter().for_each(QueuedOp::hint_input_error);
        }
    }

    /// True if a write is running or queued (a WaitForVar has something to wait for).
    pub(crate) fn has_pending_write(&self) -> bool {
        self.0.lock().queue.has_pending_write()
    }

    /// The variable's unreported error, if any.
    pub(crate) fn pending_exception(&self) -> Option<ExceptionRef> {
        if !self.0.has_exception.load(Ordering::Acquire) {
            return None;
        }
        let mut s = self.0.lock();
        match &s.exception {
            Some(e) if e.is_pending() => Some(e.clone()),
            _ => {
                // reported since: forget it so later ops skip the lock again
                s.exception = None;
                self.0.has_exception.store(false, Ordering::Release);
                None
            }
        }
    }

    /// Reports the variable's unreported error once, as a wait on it does: for an op that waits
    /// on variables itself (the custom operator's wait op reads the errors of the ops its
    /// callback pushed).
    pub fn take_error(&self) -> Option<String> {
        self.pending_exception()
            .and_then(|e| e.take())
            .map(|m| m.to_string())
    }

    /// Bumps the version without queueing (NaiveEngine runs ops without dependency tracking).
    pub(crate) fn bump_version(&self) {
        self.0.lock().queue.bump_version();
    }
}

impl Default for Var {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Var {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Var({:#x})", self.addr())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_variable_fits_one_cache_line() {
        // the queue lock, queue state and Arc's two counts move between threads as one line
        let inner = std::mem::size_of::<super::VarInner>();
        assert!(inner + 16 <= 64, "VarInner grew to {inner} bytes");
    }
}
