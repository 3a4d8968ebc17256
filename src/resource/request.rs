//! What an op asks for ([`ResourceRequest`]) and what it gets ([`Resource`]).

use super::parallel::ParallelRandom;
use super::random::RandomGenerator;
use super::temp::TempSpace;
use crate::context::Context;
use crate::engine::Var;
use crate::error::{Error, ErrorKind, Result};
use parking_lot::{Mutex, MutexGuard};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

/// MXNet's `ResourceRequest::Type`; the codes are MXNet's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ResourceRequest {
    /// One random number generator per device (`kRandom` = 0).
    Random,
    /// Scratch memory from the storage pool, several round-robin copies per device
    /// (`kTempSpace` = 1).
    TempSpace,
    /// Generators with one stream per parallel worker, round-robin copies per device
    /// (`kParallelRandom` = 2).
    ParallelRandom,
}

impl ResourceRequest {
    pub fn code(self) -> i32 {
        match self {
            ResourceRequest::Random => 0,
            ResourceRequest::TempSpace => 1,
            ResourceRequest::ParallelRandom => 2,
        }
    }

    /// Converts MXNet's code; 3 (`kCuDNNDropoutDesc`) needs cuDNN and is not supported.
    pub fn from_code(code: i32) -> Result<Self> {
        match code {
            0 => Ok(ResourceRequest::Random),
            1 => Ok(ResourceRequest::TempSpace),
            2 => Ok(ResourceRequest::ParallelRandom),
            3 => Err(Error::not_supported(
                "resource type 3 (kCuDNNDropoutDesc) needs cuDNN, which this mxrt does not have",
            )),
            _ => Err(Error::invalid(format!(
                "unknown resource type {code} (known: 0 kRandom, 1 kTempSpace, 2 kParallelRandom)"
            ))),
        }
    }

    /// MXNet's name (`kRandom`, `kTempSpace`, `kParallelRandom`).
    pub fn name(self) -> &'static str {
        match self {
            ResourceRequest::Random => "kRandom",
            ResourceRequest::TempSpace => "kTempSpace",
            ResourceRequest::ParallelRandom => "kParallelRandom",
        }
    }
}

/// The state behind a resource. Random states are shared with the seeding ops the manager pushes.
pub(crate) enum State {
    Random(Arc<Mutex<RandomGenerator>>),
    Parallel(Arc<Mutex<ParallelRandom>>),
    Temp(Mutex<TempSpace>),
}

pub(crate) struct Inner {
    req: ResourceRequest,
    ctx: Context,
    id: usize,
    var: Var,
    /// False on NaiveEngine, whose variables do not record who holds them.
    tracked: bool,
    pub(crate) state: State,
}

/// A resource handed to ops: a generator or a temp-space buffer plus the engine variable that
/// serialises its users. Cloning gives another reference to the same resource.
///
/// An op that uses a resource lists [`var`](Self::var) among its **mutable** variables and calls
/// the accessors only from inside its body. The accessors check what they can: on the threaded
/// engines a resource whose variable no op holds or waits for is an error, and so is a resource
/// already in use by a body running at the same time.
#[derive(Clone)]
pub struct Resource {
    pub(crate) inner: Arc<Inner>,
}

/// Exclusive access to a resource's state for the duration of an op body.
pub struct ResourceGuard<'a, T>(MutexGuard<'a, T>);

impl<T> Deref for ResourceGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> DerefMut for ResourceGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

/// Temp space of a requested size, borrowed for the duration of an op body.
pub struct TempSpaceGuard<'a> {
    space: MutexGuard<'a, TempSpace>,
    len: usize,
}

impl TempSpaceGuard<'_> {
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.space.as_ptr()
    }
    /// The whole buffer's capacity (at least the requested size).
    pub fn capacity(&self) -> usize {
        self.space.capacity()
    }
}

impl Deref for TempSpaceGuard<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        let ptr = self.space.as_ptr();
        // SAFETY: the guard was made by `slice_mut(len)` on a host buffer: `len` initialised
        // bytes, which only this guard can reach while it lives.
        unsafe { std::slice::from_raw_parts(ptr, self.len) }
    }
}

impl DerefMut for TempSpaceGuard<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        let len = self.len;
        self.space.slice_mut(len).expect("already reserved")
    }
}

impl Resource {
    pub(crate) fn new(
        req: ResourceRequest,
        ctx: Context,
        id: usize,
        tracked: bool,
        state: State,
    ) -> Self {
        Resource {
            inner: Arc::new(Inner {
                req,
                ctx,
                id,
                var: Var::new(),
                tracked,
                state,
            }),
        }
    }

    pub fn req(&self) -> ResourceRequest {
        self.inner.req
    }

    /// The device the resource serves.
    pub fn ctx(&self) -> Context {
        self.inner.ctx
    }

    /// Which copy of its type on its device (0 for kRandom).
    pub fn id(&self) -> usize {
        self.inner.id
    }

    /// The engine variable ops using this resource must list as mutable.
    pub fn var(&self) -> &Var {
        &self.inner.var
    }

    pub fn same_as(&self, other: &Resource) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Identity of the resource (the C layer's handle).
    pub(crate) fn addr(&self) -> usize {
        Arc::as_ptr(&self.inner) as usize
    }

    fn wrong_kind(&self, want: ResourceRequest) -> Error {
        Error::invalid(format!("{self} is not a {} resource", want.name()))
    }

    /// Checks the variable is held or awaited by some op (threaded engines only).
    fn check_held(&self) -> Result<()> {
        if self.inner.tracked && !self.inner.var.has_pending_write() {
            return Err(Error::invalid(format!(
                "{self} was used outside an engine op holding it: push the op with the resource's \
                 variable among its mutable variables and use the resource inside the op"
            )));
        }
        Ok(())
    }

    fn lock<'a, T>(&self, m: &'a Mutex<T>) -> Result<MutexGuard<'a, T>> {
        self.check_held()?;
        m.try_lock().ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "{self} is in use by another op at the same time: every op using it must list \
                     its variable among its mutable variables"
                ),
            )
        })
    }

    /// The generator of a kRandom resource.
    pub fn random(&self) -> Result<ResourceGuard<'_, RandomGenerator>> {
        match &self.inner.state {
            State::Random(g) => Ok(ResourceGuard(self.lock(g)?)),
            _ => Err(self.wrong_kind(ResourceRequest::Random)),
        }
    }

    /// The streams of a kParallelRandom resource.
    pub fn parallel_random(&self) -> Result<ResourceGuard<'_, ParallelRandom>> {
        match &self.inner.state {
            State::Parallel(g) => Ok(ResourceGuard(self.lock(g)?)),
            _ => Err(self.wrong_kind(ResourceRequest::ParallelRandom)),
        }
    }

    /// `bytes` of a kTempSpace resource's buffer (grown if needed; contents are whatever the last
    /// user left, zeros after growing).
    pub fn temp_space(&self, bytes: usize) -> Result<TempSpaceGuard<'_>> {
        match &self.inner.state {
            State::Temp(t) => {
                let mut space = self.lock(t)?;
                space.slice_mut(bytes)?;
                Ok(TempSpaceGuard { space, len: bytes })
            }
            _ => Err(self.wrong_kind(ResourceRequest::TempSpace)),
        }
    }

    /// For callers that cannot hold a guard (the C API): grows a kTempSpace buffer to `bytes`
    /// and returns its start. The pointer stays valid until the op ends (more exactly: until the
    /// next larger request on this resource), which the engine ensures by serialising the users.
    pub fn temp_space_ptr(&self, bytes: usize) -> Result<*mut u8> {
        match &self.inner.state {
            State::Temp(t) => self.lock(t)?.reserve(bytes),
            _ => Err(self.wrong_kind(ResourceRequest::TempSpace)),
        }
    }

    /// Current capacity of a kTempSpace buffer (0 for other types). Does not check the caller.
    pub fn temp_capacity(&self) -> usize {
        match &self.inner.state {
            State::Temp(t) => t.lock().capacity(),
            _ => 0,
        }
    }

    /// Fills `out` with raw 32-bit words from a kRandom or kParallelRandom resource (parallel
    /// ones on one thread; the numbers do not depend on it).
    pub fn fill_bits(&self, out: &mut [u32]) -> Result<()> {
        match &self.inner.state {
            State::Random(g) => self.lock(g)?.fill_bits(out),
            State::Parallel(g) => self.lock(g)?.fill_bits(out, 1),
            State::Temp(_) => return Err(self.wrong_kind(ResourceRequest::Random)),
        }
        Ok(())
    }

    /// Uniform `f32`s in `[low, high)` from a kRandom or kParallelRandom resource.
    pub fn fill_uniform(&self, out: &mut [f32], low: f32, high: f32) -> Result<()> {
        match &self.inner.state {
            State::Random(g) => self.lock(g)?.uniform(out, low, high),
            State::Parallel(g) => self.lock(g)?.uniform(out, low, high, 1),
            State::Temp(_) => Err(self.wrong_kind(ResourceRequest::Random)),
        }
    }

    /// Normal `f32`s from a kRandom or kParallelRandom resource.
    pub fn fill_normal(&self, out: &mut [f32], mean: f32, std: f32) -> Result<()> {
        match &self.inner.state {
            State::Random(g) => self.lock(g)?.normal(out, mean, std),
            State::Parallel(g) => self.lock(g)?.normal(out, mean, std, 1),
            State::Temp(_) => Err(self.wrong_kind(ResourceRequest::Random)),
        }
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "resource {}#{} on {}",
            self.inner.req.name(),
            self.inner.id,
            self.inner.ctx
        )
    }
}

impl fmt::Debug for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Resource({self}, {:?})", self.inner.var)
    }
}
