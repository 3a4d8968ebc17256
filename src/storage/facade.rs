//! The [`Storage`] facade: one lazily created manager per device, and the owned [`Allocation`].

use super::backend::{DeviceMemory, HostMemory};
use super::config::{EnvPrefix, EnvSource, PoolConfig, process_env};
use super::manager::StorageManager;
use super::pool::PooledManager;
use super::shared::SharedMemoryManager;
use super::stats::{Hooks, MemoryHook, PoolStats};
use crate::context::{Context, DeviceType};
use crate::error::{Error, Result};
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::{Arc, OnceLock};

/// Creates the raw-memory backend of device `dev_id` (a CUDA backend registers one for gpu and,
/// optionally, one for cpu_pinned).
pub type BackendFactory = dyn Fn(i32) -> Result<Arc<dyn DeviceMemory>> + Send + Sync;
/// The factory type of [`Storage::set_gpu_backend`].
pub type GpuBackendFactory = BackendFactory;

/// Message for gpu storage when no GPU backend is registered (MXNet's CPU-build wording first).
pub const NO_GPU_MESSAGE: &str = "Compile with USE_CUDA=1 to enable GPU usage (this mxrt build has no CUDA backend for gpu storage)";
/// MXNet's message for `MXStorageEmptyCache` on a gpu that never allocated.
pub const NOT_ALLOCATED_MESSAGE: &str = "Cannot Free space to a device you have not allocated";

/// Device ids below this use a lock-free slot; larger ones go through a small locked map.
const FAST_IDS: usize = 17;

type ManagerRef = Arc<dyn StorageManager>;

struct DeviceSlots {
    fast: [OnceLock<ManagerRef>; FAST_IDS],
    overflow: Mutex<HashMap<i32, ManagerRef>>,
}

impl DeviceSlots {
    fn new() -> Self {
        DeviceSlots {
            fast: std::array::from_fn(|_| OnceLock::new()),
            overflow: Mutex::new(HashMap::new()),
        }
    }
}

/// Maps contexts to managers, created on first use. [`Storage::global`] is the process-wide
/// instance the C API uses; tests build their own with [`Storage::with_env`].
pub struct Storage {
    env: Box<EnvSource>,
    hooks: Arc<Hooks>,
    gpu_backend: RwLock<Option<Arc<BackendFactory>>>,
    pinned_backend: RwLock<Option<Arc<BackendFactory>>>,
    /// Indexed cpu, gpu, cpu_pinned, cpu_shared.
    devices: [DeviceSlots; 4],
    create: Mutex<()>,
}

fn slot_index(t: DeviceType) -> usize {
    match t {
        DeviceType::Cpu => 0,
        DeviceType::Gpu => 1,
        DeviceType::CpuPinned => 2,
        DeviceType::CpuShared => 3,
    }
}

/// The manager key of a context: MXNet's `real_dev_id()` (cpu and cpu_shared share dev_id 0).
fn manager_context(ctx: Context) -> Result<Context> {
    match ctx.dev_type {
        DeviceType::Cpu | DeviceType::CpuShared => Ok(Context {
            dev_type: ctx.dev_type,
            dev_id: 0,
        }),
        DeviceType::Gpu | DeviceType::CpuPinned if ctx.dev_id < 0 => Err(Error::invalid(format!(
            "invalid device id {} for {}",
            ctx.dev_id,
            ctx.dev_type.name()
        ))),
        _ => Ok(ctx),
    }
}

impl Default for Storage {
    fn default() -> Self {
        Self::new()
    }
}

impl Storage {
    /// A storage that reads the process environment.
    pub fn new() -> Self {
        Self::with_env(process_env)
    }

    /// A storage that reads its configuration variables from `env` (tests).
    pub fn with_env(env: impl Fn(&str) -> Option<String> + Send + Sync + 'static) -> Self {
        Storage {
            env: Box::new(env),
            hooks: Arc::new(Hooks::default()),
            gpu_backend: RwLock::new(None),
            pinned_backend: RwLock::new(None),
            devices: std::array::from_fn(|_| DeviceSlots::new()),
            create: Mutex::new(()),
        }
    }

    /// The process-wide storage (reads the process environment). Storage knows no device
    /// driver: its gpu managers use the backend registered with [`set_gpu_backend`] and
    /// cpu_pinned the one registered with [`set_pinned_backend`]. The GPU module registers the
    /// CUDA driver's (`crate::gpu::storage()`, which the modules above both use instead of this
    /// function: NDArray creation, the resource manager, the C API); a caller that only uses host
    /// memory may call this directly.
    ///
    /// [`set_gpu_backend`]: Self::set_gpu_backend
    /// [`set_pinned_backend`]: Self::set_pinned_backend
    pub fn global() -> &'static Storage {
        static GLOBAL: OnceLock<Storage> = OnceLock::new();
        GLOBAL.get_or_init(Storage::new)
    }

    /// Registers the backend used for gpu managers created from now on.
    pub fn set_gpu_backend(&self, factory: Option<Arc<BackendFactory>>) {
        *self.gpu_backend.write() = factory;
    }

    /// Registers the page-locked host memory backend for cpu_pinned managers created from now on
    /// (`cudaHostAlloc`); without one, cpu_pinned is ordinary host memory.
    pub fn set_pinned_backend(&self, factory: Option<Arc<BackendFactory>>) {
        *self.pinned_backend.write() = factory;
    }

    /// Sets the memory-event hook (the profiler's slot); `None` removes it.
    pub fn set_memory_hook(&self, hook: Option<MemoryHook>) {
        self.hooks.set_hook(hook);
    }

    /// Test hook: the next `n` device allocations of this storage fail (cache hits still
    /// succeed). `0` cancels pending failures.
    pub fn fail_next_allocations(&self, n: usize) {
        self.hooks.fail_next(n);
    }

    fn existing(&self, key: Context) -> Option<ManagerRef> {
        let slots = &self.devices[slot_index(key.dev_type)];
        match usize::try_from(key.dev_id) {
            Ok(i) if i < FAST_IDS => slots.fast[i].get().cloned(),
            _ => slots.overflow.lock().get(&key.dev_id).cloned(),
        }
    }

    fn manager(&self, ctx: Context) -> Result<ManagerRef> {
        let key = manager_context(ctx)?;
        if let Some(m) = self.existing(key) {
            return Ok(m);
        }
        let _creating = self.create.lock();
        if let Some(m) = self.existing(key) {
            return Ok(m);
        }
        // Not cached on failure: a later call (e.g. after the environment is fixed) tries again.
        let manager = self.create_manager(key)?;
        let slots = &self.devices[slot_index(key.dev_type)];
        match usize::try_from(key.dev_id) {
            Ok(i) if i < FAST_IDS => {
                let _ = slots.fast[i].set(manager.clone());
            }
            _ => {
                slots.overflow.lock().insert(key.dev_id, manager.clone());
            }
        }
        Ok(manager)
    }

    fn create_manager(&self, key: Context) -> Result<ManagerRef> {
        let hooks = self.hooks.clone();
        Ok(match key.dev_type {
            DeviceType::Cpu | DeviceType::CpuPinned => {
                let pinned = match key.dev_type {
                    DeviceType::CpuPinned => self.pinned_backend.read().clone(),
                    _ => None,
                };
                let backend: Arc<dyn DeviceMemory> = match pinned {
                    Some(factory) => factory(key.dev_id)?,
                    None => Arc::new(HostMemory::new()),
                };
                let config = PoolConfig::from_env(EnvPrefix::Cpu, &*self.env)?;
                Arc::new(PooledManager::new(key, config, backend, hooks))
            }
            DeviceType::CpuShared => Arc::new(SharedMemoryManager::new(hooks)),
            DeviceType::Gpu => {
                let factory = self.gpu_backend.read().clone();
                let factory = factory.ok_or_else(|| Error::not_supported(NO_GPU_MESSAGE))?;
                let backend = factory(key.dev_id)?;
                let config = PoolConfig::from_env(EnvPrefix::Gpu, &*self.env)?;
                Arc::new(PooledManager::new(key, config, backend, hooks))
            }
        })
    }

    /// Allocates `size` bytes on `ctx`. Size 0 gives an empty allocation with a null pointer (the
    /// device's manager is still created, as in MXNet). Errors: bad configuration
    /// (`InvalidArgument`, at the first allocation on the device), no GPU backend
    /// (`NotSupported`), `OutOfMemory`.
    pub fn alloc(&self, ctx: Context, size: usize) -> Result<Allocation> {
        let manager = self.manager(ctx)?;
        if size == 0 {
            return Ok(Allocation::empty(ctx));
        }
        let ptr = manager.alloc(size)?;
        Ok(Allocation::owned(ptr, size, ctx, manager))
    }

    /// Maps the cpu_shared block `(shared_pid, shared_id)` made by this or another process
    /// (`MXNDArrayCreateFromSharedMem`). `size` is the data size the caller expects; the segment
    /// must hold at least that much. The allocation owns the reference added by the exporter.
    /// A `shared_id` below `2^24` is a file descriptor of the segment handed over by the caller
    /// (MXNet's Linux convention, see [`Allocation::share_fd`]); it is closed on success.
    pub fn attach_shared(
        &self,
        shared_pid: i32,
        shared_id: i32,
        size: usize,
    ) -> Result<Allocation> {
        let ctx = Context::cpu_shared(0);
        let manager = self.manager(ctx)?;
        if size == 0 {
            return Ok(Allocation::empty(ctx));
        }
        let ptr = manager.attach(shared_pid, shared_id, size)?;
        Ok(Allocation::owned(ptr, size, ctx, manager))
    }

    /// Releases the cached blocks of `ctx`'s manager (`MXStorageEmptyCache`). A gpu that never
    /// allocated is an error with MXNet's message; for host types there is nothing to release.
    pub fn empty_cache(&self, ctx: Context) -> Result<()> {
        let key = manager_context(ctx)?;
        match self.existing(key) {
            Some(m) => {
                m.release_all();
                Ok(())
            }
            None if key.dev_type == DeviceType::Gpu => Err(Error::invalid(NOT_ALLOCATED_MESSAGE)),
            None => Ok(()),
        }
    }

    /// Counters of `ctx`'s manager, or `None` if it was never created.
    pub fn stats(&self, ctx: Context) -> Option<PoolStats> {
        self.existing(manager_context(ctx).ok()?).map(|m| m.stats())
    }
}

/// An owned block of device memory. Frees back to its manager on drop. Size 0 is a valid empty
/// allocation whose pointer is null.
pub struct Allocation {
    ptr: *mut u8,
    len: usize,
    ctx: Context,
    manager: Option<ManagerRef>,
    /// cpu_shared only: the descriptor handed out by `share_fd`, closed on drop.
    shared_fd: OnceLock<OwnedFd>,
}

// SAFETY: an `Allocation` exclusively owns its block; the pointer is only handed out raw (callers
// need `unsafe` to use it) and the manager is `Send + Sync`.
unsafe impl Send for Allocation {}
// SAFETY: `&Allocation` only exposes the address, length and context, `share`, which does an
// atomic update in the segment header, and `share_fd`, which sets a `OnceLock`.
unsafe impl Sync for Allocation {}

impl Allocation {
    /// An empty allocation on `ctx` (null pointer, length 0).
    pub fn empty(ctx: Context) -> Self {
        Allocation {
            ptr: std::ptr::null_mut(),
            len: 0,
            ctx,
            manager: None,
            shared_fd: OnceLock::new(),
        }
    }

    fn owned(ptr: NonNull<u8>, len: usize, ctx: Context, manager: ManagerRef) -> Self {
        Allocation {
            ptr: ptr.as_ptr(),
            len,
            ctx,
            manager: Some(manager),
            shared_fd: OnceLock::new(),
        }
    }

    /// Start of the block (null when empty). Host blocks are 64-byte aligned. The memory is not
    /// initialised.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Requested size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The context the block was requested on.
    pub fn ctx(&self) -> Context {
        self.ctx
    }

    /// For cpu_shared blocks: adds a cross-process reference for a receiver and returns
    /// `(shared_pid, shared_id)` (`MXNDArrayGetSharedMemHandle`). The receiver's
    /// [`Storage::attach_shared`] takes over that reference. Other blocks are an error.
    pub fn share(&self) -> Result<(i32, i32)> {
        match (&self.manager, NonNull::new(self.ptr)) {
            // SAFETY: `ptr`/`len` are this live allocation's block from `manager`.
            (Some(m), Some(p)) => unsafe { m.share(p, self.len) },
            _ => Err(Error::invalid(format!(
                "an empty allocation on {} has no shared-memory handle",
                self.ctx
            ))),
        }
    }

    /// MXNet's Linux form of [`share`](Self::share): adds a cross-process reference and returns
    /// `(shared_pid, fd)`, where `fd` is a descriptor of the segment that this allocation keeps
    /// open until it is dropped (the same one on every call). The receiver gets its own copy
    /// of the descriptor (fork, `SCM_RIGHTS`) and passes that number to
    /// [`Storage::attach_shared`], which takes it over.
    pub fn share_fd(&self) -> Result<(i32, RawFd)> {
        let ptr = NonNull::new(self.ptr).filter(|_| self.ctx.dev_type == DeviceType::CpuShared);
        let Some(ptr) = ptr else {
            return Err(Error::invalid(format!(
                "only non-empty cpu_shared memory has a shared-memory handle, this block is on {}",
                self.ctx
            )));
        };
        if self.shared_fd.get().is_none() {
            // SAFETY: `ptr` is this live cpu_shared block.
            let fd = unsafe { SharedMemoryManager::open_fd(ptr) }?;
            // A concurrent caller may have set it first; then `fd` is simply closed.
            let _ = self.shared_fd.set(fd);
        }
        let fd = self.shared_fd.get().expect("set above").as_raw_fd();
        let (pid, _id) = self.share()?;
        Ok((pid, fd))
    }
}

impl std::fmt::Debug for Allocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Allocation")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .field("ctx", &self.ctx)
            .finish()
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        if let (Some(m), Some(p)) = (self.manager.take(), NonNull::new(self.ptr)) {
            // SAFETY: `p`/`len` came from `m.alloc(len)` (or the shared attach) and are freed
            // once, here.
            unsafe { m.free(p, self.len) };
        }
    }
}
