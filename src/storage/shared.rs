//! cpu_shared memory: POSIX shared-memory segments another process can map.
//!
//! Each allocation is its own segment named like MXNet's, `/mx_<pid hex>_<id hex>` (creator's
//! pid, a random id in `[2^24, 2^31)`). The segment starts with a 64-byte header, followed by the
//! data (so data stays 64-byte aligned; MXNet used 16 bytes):
//!
//! | offset | field |
//! |---|---|
//! | 0 | `i32` reference count (atomic; shared by every process that maps it) |
//! | 4 | `u32` magic `"mxsh"` |
//! | 8 | `u64` data size in bytes |
//! | 16 | `i32` creator pid, `i32` id |
//!
//! Reference counting follows MXNet: creating sets the count to 1; handing the segment to another
//! process ([`StorageManager::share`], i.e. `MXNDArrayGetSharedMemHandle`) adds one for the
//! receiver; attaching by `(pid, id)` adds nothing; every drop, in any process, subtracts one.
//! The process whose drop brings the count to 0 unlinks the name, so the segment is gone once
//! the last mapping goes. (A handle that is shared but never attached keeps the segment alive,
//! as in MXNet.) Unlike MXNet on Linux, which unlinks at once and passes file descriptors, the
//! name stays until then, so a plain `(pid, id)` is enough to attach from any process.
//!
//! MXNet's Linux convention is supported as well: Python's DataLoader sends the *file descriptor*
//! it got as `shared_id` to the worker (`multiprocessing.reduction.DupFd`), which then passes the
//! received descriptor number as `shared_id`. So an id below `2^24` (never a generated id) is
//! taken as a descriptor of the segment handed over by the caller;
//! [`Allocation::share_fd`](super::Allocation::share_fd) is the matching export (bumps the count
//! and returns a descriptor the allocation keeps open until it is dropped, as MXNet does).

use super::manager::StorageManager;
use super::stats::{Hooks, MemoryEvent, MemoryEventKind, PoolStats};
use crate::context::Context;
use crate::error::{Error, Result};
use parking_lot::Mutex;
use std::ffi::CString;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

/// Bytes before the data in every segment.
pub const SHM_HEADER_SIZE: usize = 64;
const MAGIC: u32 = u32::from_le_bytes(*b"mxsh");
const MIN_ID: i32 = 1 << 24;

#[repr(C)]
struct Header {
    refcount: AtomicI32,
    magic: u32,
    size: u64,
    pid: i32,
    id: i32,
}
const _: () = assert!(std::mem::size_of::<Header>() <= SHM_HEADER_SIZE);

/// The name of segment `(pid, id)`.
pub fn segment_name(pid: i32, id: i32) -> String {
    format!("/mx_{pid:x}_{id:x}")
}

fn os_err(what: &str, name: &str) -> Error {
    let e = std::io::Error::last_os_error();
    Error::io(format!("{what} of shared memory {name} failed: {e}"))
}

fn random_id() -> i32 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut x = nanos
        ^ COUNTER.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
        ^ (std::process::id() as u64) << 32;
    // splitmix64 finaliser
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    MIN_ID + (x % (i32::MAX - MIN_ID) as u64) as i32
}

/// Manager of the cpu_shared device (one per storage instance, dev_id 0).
pub struct SharedMemoryManager {
    hooks: Arc<Hooks>,
    stats: Mutex<PoolStats>,
}

impl SharedMemoryManager {
    pub(crate) fn new(hooks: Arc<Hooks>) -> Self {
        SharedMemoryManager {
            hooks,
            stats: Mutex::new(PoolStats::default()),
        }
    }

    /// # Safety
    /// `data` must be the data pointer of a mapping made by this manager that stays mapped for
    /// `'a`.
    unsafe fn header<'a>(data: NonNull<u8>) -> &'a Header {
        // SAFETY: per the contract, the header sits `SHM_HEADER_SIZE` bytes before `data`, page
        // aligned, inside the same live mapping.
        unsafe { &*(data.as_ptr().sub(SHM_HEADER_SIZE) as *const Header) }
    }

    /// Maps `len` bytes of the open segment `fd` (the caller still owns `fd`).
    fn map(fd: libc::c_int, len: usize, name: &str) -> Result<NonNull<u8>> {
        // SAFETY: mapping a file descriptor we own; the result is checked for MAP_FAILED.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(os_err("mmap", name));
        }
        // SAFETY: mmap succeeded, so `base` is non-null and the mapping is at least
        // `SHM_HEADER_SIZE` bytes long.
        Ok(unsafe { NonNull::new_unchecked((base as *mut u8).add(SHM_HEADER_SIZE)) })
    }

    fn record(&self, kind: MemoryEventKind, size: usize) {
        let in_use = {
            let mut st = self.stats.lock();
            match kind {
                MemoryEventKind::Alloc => {
                    st.allocs += 1;
                    st.misses += 1;
                    st.bytes_in_use += size;
                    st.peak_in_use = st.peak_in_use.max(st.bytes_in_use);
                }
                MemoryEventKind::Free => {
                    st.frees += 1;
                    st.bytes_in_use -= size;
                }
            }
            st.bytes_in_use
        };
        let ctx = Context::cpu_shared(0);
        self.hooks.notify(|| MemoryEvent {
            ctx,
            kind,
            size,
            block_size: size,
            bytes_in_use: in_use,
        });
    }

    /// Maps an existing segment open as `fd` for `size` data bytes after checking its size and
    /// header (creator `pid`, and `id` when known).
    fn map_existing(
        fd: libc::c_int,
        pid: i32,
        id: Option<i32>,
        size: usize,
        name: &str,
    ) -> Result<NonNull<u8>> {
        // SAFETY: an all-zero `stat` is a valid value; `fstat` fills it.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `st` is writable; a bad `fd` only makes fstat fail.
        if unsafe { libc::fstat(fd, &mut st) } != 0 {
            let e = std::io::Error::last_os_error();
            return Err(Error::invalid(format!(
                "Invalid file descriptor from shared array: {name}: {e}"
            )));
        }
        let len = size
            .checked_add(SHM_HEADER_SIZE)
            .filter(|&l| (st.st_size as u64) >= l as u64);
        let Some(len) = len else {
            return Err(Error::invalid(format!(
                "shared memory {name} holds {} data bytes, fewer than the {size} requested",
                (st.st_size as usize).saturating_sub(SHM_HEADER_SIZE)
            )));
        };
        let data = Self::map(fd, len, name)?;
        // SAFETY: `data` was just mapped with at least the header's bytes before it.
        let header = unsafe { Self::header(data) };
        if header.magic != MAGIC || header.pid != pid || id.is_some_and(|id| header.id != id) {
            // SAFETY: unmapping the mapping made just above.
            unsafe { libc::munmap(data.as_ptr().sub(SHM_HEADER_SIZE).cast(), len) };
            return Err(Error::invalid(format!(
                "{name} is not an mxrt shared-memory segment of process {pid}"
            )));
        }
        Ok(data)
    }

    /// MXNet's Linux convention: `fd` is an open descriptor of the segment that the caller hands
    /// over (e.g. received from the exporting process). On success the descriptor is closed (the
    /// mapping keeps the segment); on failure it is left open, so a wrong number never closes an
    /// unrelated file.
    fn attach_fd(&self, pid: i32, fd: i32, size: usize) -> Result<NonNull<u8>> {
        if fd < 0 {
            return Err(Error::invalid(format!(
                "Invalid file descriptor from shared array: {fd}"
            )));
        }
        let data = Self::map_existing(fd, pid, None, size, &format!("file descriptor {fd}"))?;
        // SAFETY: the caller handed `fd` over and it was valid (fstat/mmap succeeded).
        unsafe { libc::close(fd) };
        self.record(MemoryEventKind::Alloc, size);
        Ok(data)
    }

    /// Opens a new descriptor of a live block's segment (for [`Allocation::share_fd`](super::Allocation::share_fd)).
    ///
    /// # Safety
    /// `ptr` must be the data pointer of a live block of this manager.
    pub unsafe fn open_fd(ptr: NonNull<u8>) -> Result<std::os::fd::OwnedFd> {
        use std::os::fd::FromRawFd;
        // SAFETY: forwarded from the caller's contract.
        let (pid, id) = unsafe { Self::ids(ptr) };
        let name = segment_name(pid, id);
        let cname = CString::new(name.clone()).expect("segment names have no NUL");
        // SAFETY: `cname` is a valid C string; the result is checked.
        let fd = unsafe { libc::shm_open(cname.as_ptr(), libc::O_RDWR, 0o600) };
        if fd < 0 {
            return Err(os_err("shm_open", &name));
        }
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
    }

    /// `(shared_pid, shared_id)` of a block, without touching its reference count.
    ///
    /// # Safety
    /// `ptr` must be the data pointer of a live block of this manager.
    pub unsafe fn ids(ptr: NonNull<u8>) -> (i32, i32) {
        // SAFETY: forwarded from the caller's contract.
        let h = unsafe { Self::header(ptr) };
        (h.pid, h.id)
    }

    /// The cross-process reference count of a block.
    ///
    /// # Safety
    /// `ptr` must be the data pointer of a live block of this manager.
    pub unsafe fn ref_count(ptr: NonNull<u8>) -> i32 {
        // SAFETY: forwarded from the caller's contract.
        unsafe { Self::header(ptr) }
            .refcount
            .load(Ordering::Acquire)
    }
}

impl StorageManager for SharedMemoryManager {
    fn context(&self) -> Context {
        Context::cpu_shared(0)
    }

    fn alloc(&self, size: usize) -> Result<NonNull<u8>> {
        let len = size
            .checked_add(SHM_HEADER_SIZE)
            .filter(|&l| l <= i64::MAX as usize)
            .ok_or_else(|| {
                Error::out_of_memory(format!("cannot allocate {size} bytes of shared memory"))
            })?;
        if self.hooks.take_failure() {
            return Err(Error::out_of_memory(format!(
                "Memory allocation failed (out of memory): simulated failure of {size} bytes of shared memory"
            )));
        }
        let pid = std::process::id() as i32;
        let mut last_err = None;
        for _ in 0..10 {
            let id = random_id();
            let name = segment_name(pid, id);
            let cname = CString::new(name.clone()).expect("segment names have no NUL");
            // SAFETY: `cname` is a valid C string; the result is checked.
            let fd = unsafe {
                libc::shm_open(
                    cname.as_ptr(),
                    libc::O_CREAT | libc::O_EXCL | libc::O_RDWR,
                    0o600,
                )
            };
            if fd < 0 {
                let e = std::io::Error::last_os_error();
                let exists = e.kind() == std::io::ErrorKind::AlreadyExists;
                last_err = Some(Error::io(format!(
                    "Failed to open shared memory. shm_open of {name} failed: {e}"
                )));
                if exists {
                    continue; // name taken: try another id
                }
                break;
            }
            // SAFETY: `fd` is the segment just created.
            if unsafe { libc::ftruncate(fd, len as libc::off_t) } != 0 {
                let e = os_err("ftruncate", &name);
                // SAFETY: `fd` is open and owned; `cname` names the segment we created.
                unsafe {
                    libc::close(fd);
                    libc::shm_unlink(cname.as_ptr());
                }
                return Err(Error::out_of_memory(e.message().to_string()));
            }
            let mapped = Self::map(fd, len, &name);
            // SAFETY: `fd` is open and owned here; the mapping does not need it.
            unsafe { libc::close(fd) };
            let data = match mapped {
                Ok(d) => d,
                Err(e) => {
                    // SAFETY: `cname` names the segment we created.
                    unsafe { libc::shm_unlink(cname.as_ptr()) };
                    return Err(Error::out_of_memory(e.message().to_string()));
                }
            };
            // SAFETY: the header area is inside the fresh mapping, page aligned and not yet
            // visible to anyone else under a known (pid, id).
            unsafe {
                (data.as_ptr().sub(SHM_HEADER_SIZE) as *mut Header).write(Header {
                    refcount: AtomicI32::new(1),
                    magic: MAGIC,
                    size: size as u64,
                    pid,
                    id,
                });
            }
            self.record(MemoryEventKind::Alloc, size);
            return Ok(data);
        }
        Err(last_err.expect("the loop runs at least once"))
    }

    unsafe fn free(&self, ptr: NonNull<u8>, size: usize) {
        // SAFETY: the caller guarantees `ptr` is a live block of this manager.
        let header = unsafe { Self::header(ptr) };
        let (pid, id) = (header.pid, header.id);
        let previous = header.refcount.fetch_sub(1, Ordering::AcqRel);
        // SAFETY: the caller guarantees `ptr`/`size` describe a live mapping of this manager,
        // which spans `SHM_HEADER_SIZE + size` bytes from the header; it is not used afterwards.
        unsafe {
            libc::munmap(
                ptr.as_ptr().sub(SHM_HEADER_SIZE).cast(),
                size + SHM_HEADER_SIZE,
            )
        };
        if previous == 1 {
            let cname = CString::new(segment_name(pid, id)).expect("segment names have no NUL");
            // SAFETY: `cname` is a valid C string. ENOENT (already unlinked) is harmless.
            unsafe { libc::shm_unlink(cname.as_ptr()) };
        }
        self.record(MemoryEventKind::Free, size);
    }

    /// Maps the existing segment `(pid, id)` for `size > 0` data bytes. The reference the caller
    /// now owns is the one the exporter added in `share`.
    fn attach(&self, pid: i32, id: i32, size: usize) -> Result<NonNull<u8>> {
        if id < MIN_ID {
            return self.attach_fd(pid, id, size);
        }
        let name = segment_name(pid, id);
        let cname = CString::new(name.clone()).expect("segment names have no NUL");
        // SAFETY: `cname` is a valid C string; the result is checked.
        let fd = unsafe { libc::shm_open(cname.as_ptr(), libc::O_RDWR, 0o600) };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            return Err(Error::invalid(format!(
                "cannot attach shared memory (pid {pid}, id {id}): {name}: {e}"
            )));
        }
        let result = Self::map_existing(fd, pid, Some(id), size, &name);
        // SAFETY: `fd` was opened above and is owned here; a mapping does not need it.
        unsafe { libc::close(fd) };
        let data = result?;
        self.record(MemoryEventKind::Alloc, size);
        Ok(data)
    }

    fn release_all(&self) {}

    fn stats(&self) -> PoolStats {
        *self.stats.lock()
    }

    unsafe fn share(&self, ptr: NonNull<u8>, _size: usize) -> Result<(i32, i32)> {
        // SAFETY: the caller guarantees `ptr` is a live block of this manager.
        let header = unsafe { Self::header(ptr) };
        header.refcount.fetch_add(1, Ordering::AcqRel);
        Ok((header.pid, header.id))
    }
}
